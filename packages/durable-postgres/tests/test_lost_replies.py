"""A send whose reply is lost: the write landed, and the caller was told the connection went.

The loss is produced on the wire, not by terminating a backend: a loopback proxy between the
pool and the server forwards the request, lets the server's whole reply arrive (so the
transaction has committed) and then closes the client's side without passing it on. That is
the case a message id exists for, and the one a backend terminated mid-statement cannot show,
since there the write never lands.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import pytest
from durable_postgres import ConnectionLost, PostgresDurable
from durable_postgres.plugin import open_postgres

if TYPE_CHECKING:
    from durable.plugins import Testbed
    from durable_postgres import PostgresEffect

pytestmark = pytest.mark.timeout(60)


class ReplyCutter:
    """A loopback TCP proxy to Postgres that can swallow the reply to a chosen request.

    ``cut(times, trigger)`` arms it: each of the next ``times`` requests whose bytes contain
    ``trigger`` is forwarded, and the server's reply to it is held back until the server
    reports itself idle (a ReadyForQuery whose status is ``I``, sent only once the
    transaction has committed or rolled back); the proxy then closes both sides of that
    connection, reply unsent. A ReadyForQuery inside a transaction (status ``T``) passes
    through, so a transaction of several round trips is cut only at its end.
    """

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.cuts_left = 0
        self.cut_count = 0
        self.trigger = b""
        self.server: asyncio.Server | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    def cut(self, times: int, trigger: bytes) -> None:
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
            server_w.close()

        async def replies() -> None:
            held = b""
            while data := await server_r.read(65536):
                if not armed.is_set():
                    client_w.write(data)
                    await client_w.drain()
                    continue
                held += data
                complete, idle = _ready_for_query(held)
                if idle:
                    self.cut_count += 1
                    return  # the write has committed; its reply goes nowhere
                if complete:
                    client_w.write(held)
                    await client_w.drain()
                    held = b""

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


def _ready_for_query(buffer: bytes) -> tuple[bool, bool]:
    """Whether ``buffer`` ends a reply (a ReadyForQuery), and whether that says idle."""
    i, found = 0, None
    while i + 5 <= len(buffer):
        length = int.from_bytes(buffer[i + 1 : i + 5], "big")
        if i + 1 + length > len(buffer):
            break
        if buffer[i : i + 1] == b"Z":
            found = buffer[i + 5 : i + 6]
        i += 1 + length
    return found is not None, found == b"I"


@asynccontextmanager
async def through_a_cutter(
    bed: Testbed[PostgresEffect],
) -> AsyncIterator[tuple[PostgresDurable, ReplyCutter]]:
    assert bed.url is not None
    parts = urlsplit(bed.url)
    assert parts.hostname is not None
    cutter = ReplyCutter(parts.hostname, parts.port or 5432)
    port = await cutter.start()
    user = f"{parts.username}@" if parts.username else ""
    url = urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{port}"))
    try:
        async with open_postgres(url, min_size=1, max_size=2) as store:
            yield store, cutter
    finally:
        await cutter.stop()


@pytest.mark.parametrize("through", ["send", "append"])
async def test_an_id_send_whose_replies_are_all_lost_raises_and_its_retry_returns_the_key(
    bed: Testbed[PostgresEffect], through: str
) -> None:
    """The brief's case, word for word: the first call raises, the repeat answers the key."""
    async with through_a_cutter(bed) as (store, cutter):
        send = store.send if through == "send" else store.checkpointer.append
        await send("warm-up", "prepares the statements", message_id="w")
        cutter.cut(2, b"order-1")  # the call, and the store's own retry of it
        with pytest.raises(ConnectionLost, match="retried on a fresh connection"):
            await send("order-1", {"total": 5}, message_id="payment-7")
        assert cutter.cut_count == 2, "the proxy never cut a reply"
        key = await send("order-1", {"total": 5}, message_id="payment-7")
        assert await store.checkpointer.load("order-1") == {key: {"total": 5}}


async def test_an_id_send_whose_reply_is_lost_once_is_retried_by_the_store_and_lands_once(
    bed: Testbed[PostgresEffect],
) -> None:
    async with through_a_cutter(bed) as (store, cutter):
        cutter.cut(1, b"order-1")
        key = await store.send("order-1", {"total": 5}, message_id="payment-7")
        assert cutter.cut_count == 1, "the proxy never cut a reply"
        assert await store.checkpointer.load("order-1") == {key: {"total": 5}}
        assert await store.send("order-1", {"total": 5}, message_id="payment-7") == key


async def test_a_send_without_an_id_whose_reply_is_lost_landed_and_a_repeat_appends_again(
    bed: Testbed[PostgresEffect],
) -> None:
    """Why the id exists: the store cannot tell a repeat from a new message."""
    async with through_a_cutter(bed) as (store, cutter):
        cutter.cut(1, b"order-1")
        with pytest.raises(ConnectionLost, match="not retried"):
            await store.send("order-1", {"total": 5})
        assert cutter.cut_count == 1
        assert list((await store.checkpointer.load("order-1")).values()) == [{"total": 5}]
        await store.send("order-1", {"total": 5})
        assert list((await store.checkpointer.load("order-1")).values()) == [{"total": 5}] * 2
