"""A send whose reply is lost: the script ran, and the caller was told the connection went.

The loss is produced on the wire: a loopback proxy between the client and the shared node
forwards the request, lets the script's reply arrive (a script runs whole before Redis
answers, so the append has happened) and then closes the client's side without passing it
on. redis-py answers a dropped connection by sending the command again (three times, see
``durable_redis.plugin.connect``); every one of those resends finds the marker of the first,
whether the id was the caller's or the one the store gives a call without one.

One node only: a cluster client follows each node's own address past any proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import urlsplit, urlunsplit

import pytest
from durable_redis import RedisDurable, RedisUnavailable
from durable_redis.plugin import open_redis

pytestmark = pytest.mark.timeout(60)

ATTEMPTS = 4
"""redis-py's first try and the three retries the store's client is built with."""


class ReplyCutter:
    """A loopback TCP proxy to Redis that can swallow the reply to a chosen request.

    ``cut(times, trigger)`` arms it: each of the next ``times`` requests whose bytes contain
    ``trigger`` is forwarded, and as soon as the server's reply to it starts arriving the
    proxy closes both sides of that connection, reply unsent. A script answers only once it
    has run, so the first byte of its reply means its writes are done.
    """

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.cuts_left = 0
        self.cut_count = 0
        self.trigger = b""
        self.server: asyncio.Server | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    def cut(self, times: int, trigger: bytes = b"") -> None:
        self.cuts_left, self.trigger = times, trigger

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port: int = self.server.sockets[0].getsockname()[1]
        return port

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        server_r, server_w = await asyncio.open_connection(self.host, self.port)
        armed = asyncio.Event()

        async def requests() -> None:
            while data := await client_r.read(65536):
                if self.cuts_left > 0 and self.trigger in data:
                    self.cuts_left -= 1
                    armed.set()
                server_w.write(data)
                await server_w.drain()

        async def replies() -> None:
            while data := await server_r.read(65536):
                if armed.is_set():
                    self.cut_count += 1
                    return  # the script has run; its reply goes nowhere
                client_w.write(data)
                await client_w.drain()

        try:
            going = [asyncio.create_task(requests()), asyncio.create_task(replies())]
            await asyncio.wait(going, return_when=asyncio.FIRST_COMPLETED)
            for side in going:
                side.cancel()
        finally:
            for writer in (client_w, server_w):
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
            self.tasks.discard(task)


@asynccontextmanager
async def through_a_cutter(node_url: str) -> AsyncIterator[tuple[RedisDurable, ReplyCutter]]:
    parts = urlsplit(node_url)
    assert parts.hostname is not None
    cutter = ReplyCutter(parts.hostname, parts.port or 6379)
    port = await cutter.start()
    auth = parts.netloc.rpartition("@")[0]
    netloc = f"{auth}@127.0.0.1:{port}" if auth else f"127.0.0.1:{port}"
    url = urlunsplit(parts._replace(netloc=netloc, query=f"prefix=lost-{uuid.uuid4().hex[:10]}"))
    try:
        async with open_redis(url) as store:
            try:
                yield store, cutter
            finally:
                cutter.cut(0)
                for workflow in ("order-1",):
                    await store.discard(workflow)
    finally:
        await cutter.stop()


@pytest.mark.parametrize("through", ["send", "append"])
async def test_an_id_send_whose_replies_are_all_lost_raises_and_its_retry_returns_the_key(
    node_url: str, through: str
) -> None:
    async with through_a_cutter(node_url) as (store, cutter):
        send = store.send if through == "send" else store.checkpointer.append
        cutter.cut(ATTEMPTS, b"order-1")
        with pytest.raises(RedisUnavailable, match="could not reach"):
            await send("order-1", {"total": 5}, message_id="payment-7")
        assert cutter.cut_count == ATTEMPTS, "the client did not retry as expected"
        key = await send("order-1", {"total": 5}, message_id="payment-7")
        assert await store.checkpointer.load("order-1") == {key: {"total": 5}}


async def test_an_id_send_whose_reply_is_lost_once_is_retried_by_the_client_and_lands_once(
    node_url: str,
) -> None:
    async with through_a_cutter(node_url) as (store, cutter):
        cutter.cut(1, b"order-1")
        key = await store.send("order-1", {"total": 5}, message_id="payment-7")
        assert cutter.cut_count == 1, "the proxy never cut a reply"
        assert await store.checkpointer.load("order-1") == {key: {"total": 5}}


async def test_a_send_without_an_id_whose_replies_are_lost_appends_once_per_call(
    node_url: str,
) -> None:
    """The client's resends of one call find that call's own marker; the caller's repeat is
    a new call, and appends a second copy: that is what a message id is for."""
    async with through_a_cutter(node_url) as (store, cutter):
        cutter.cut(1, b"order-1")
        await store.send("order-1", {"total": 1})
        assert cutter.cut_count == 1, "the proxy never cut a reply"
        assert list((await store.checkpointer.load("order-1")).values()) == [{"total": 1}]

        cutter.cut(ATTEMPTS, b"order-1")
        with pytest.raises(RedisUnavailable, match="without a message id, which appends again"):
            await store.send("order-1", {"total": 2})
        assert cutter.cut_count == 1 + ATTEMPTS
        cutter.cut(0)
        await store.send("order-1", {"total": 2})
        loaded = list((await store.checkpointer.load("order-1")).values())
        assert loaded == [{"total": 1}, {"total": 2}, {"total": 2}]
