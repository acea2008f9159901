"""A worker whose Postgres goes away under it: the outage is a few lines, not a thousand.

The server is never touched: the store reaches it through a loopback TCP proxy started
here, and the "outage" is the proxy dropping every connection it carries and refusing new
ones, which is what a client sees of a server that died. Recovery is the proxy accepting
again on the same port.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from durable.interfaces import StoreUnavailable
from durable.parsers import exactly
from durable.run import Run
from durable.worker import work
from durable_postgres import PostgresDurable
from durable_postgres.testing import testbed as fresh_store

WORKFLOWS = [f"wf-outage-{i}" for i in range(4)]
STEPS = 30
POLL = timedelta(milliseconds=100)
DOWN = 3.0  # seconds the proxy refuses


class CuttableProxy:
    """Forwards loopback connections to ``host:port`` until :meth:`cut`, which drops every
    connection it carries and stops listening; :meth:`restore` listens on the same port."""

    def __init__(self, host: str, port: int) -> None:
        self.host = host
        self.port = port
        self.listening_on = 0
        self._server: asyncio.Server | None = None
        self._links: set[asyncio.StreamWriter] = set()
        self._pumps: set[asyncio.Task[None]] = set()

    async def restore(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.listening_on)
        self.listening_on = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        assert self._server is not None
        self._server.close()
        self._server = None
        for writer in list(self._links):
            writer.transport.abort()
        self._links.clear()

    async def close(self) -> None:
        if self._server is not None:
            await self.cut()
        for pump in list(self._pumps):
            pump.cancel()
        await asyncio.gather(*self._pumps, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._links.add(writer)
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            writer.transport.abort()
            return
        if writer not in self._links:  # cut while the upstream connection was being made
            upstream_writer.transport.abort()
            return
        self._links.add(upstream_writer)
        pumps = [
            asyncio.ensure_future(self._pump(reader, upstream_writer)),
            asyncio.ensure_future(self._pump(upstream_reader, writer)),
        ]
        self._pumps.update(pumps)
        await asyncio.gather(*pumps, return_exceptions=True)
        self._pumps.difference_update(pumps)
        for end in (writer, upstream_writer):
            self._links.discard(end)
            end.transport.abort()

    @staticmethod
    async def _pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        try:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
        finally:
            sink.transport.abort()


@pytest.fixture
async def proxy(server: str) -> AsyncIterator[CuttableProxy]:
    parts = urlsplit(server)
    started = CuttableProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    await started.restore()
    try:
        yield started
    finally:
        await started.close()


def through(server: str, proxy: CuttableProxy) -> str:
    parts = urlsplit(server)
    userinfo = parts.netloc.rpartition("@")[0]
    netloc = (
        f"{userinfo}@127.0.0.1:{proxy.listening_on}"
        if userinfo
        else f"127.0.0.1:{proxy.listening_on}"
    )
    return urlunsplit(parts._replace(netloc=netloc))


async def body(run: Run[Any]) -> int:
    total = 0
    for i in range(STEPS):
        total += await run.step(f"step-{i}", lambda i=i: i, exactly(int))
        await asyncio.sleep(0.02)
    return await run.step("total", lambda: total, exactly(int))


async def progress(store: PostgresDurable) -> int:
    return sum([len(await store.checkpointer.load(workflow)) for workflow in WORKFLOWS])


async def all_finished(store: PostgresDurable) -> bool:
    for workflow in WORKFLOWS:
        if "total" not in await store.checkpointer.load(workflow):
            return False
    return True


async def test_a_worker_waits_out_a_lost_server_in_a_few_lines_and_every_workflow_finishes(
    server: str, proxy: CuttableProxy, caplog: pytest.LogCaptureFixture
) -> None:
    # A pool wait of 1 s, so that each call made during the outage gives up in a second.
    async with fresh_store(through(server, proxy), timeout=1.0, lease=timedelta(seconds=1)) as bed:
        store = bed.durable
        assert isinstance(store, PostgresDurable)
        for workflow in WORKFLOWS:
            await store.scheduler.make_ready(workflow)
        with caplog.at_level(logging.INFO):
            worker = asyncio.ensure_future(
                work(
                    store,
                    body,
                    poll=POLL,
                    tick=POLL,
                    retry=timedelta(milliseconds=200),
                    liveness=timedelta(seconds=1),
                )
            )
            try:
                async with asyncio.timeout(10):
                    while await progress(store) < 2 * len(WORKFLOWS):  # noqa: ASYNC110 (polls the store)
                        await asyncio.sleep(0.02)
                cut_at = len(caplog.records)
                await proxy.cut()
                await asyncio.sleep(DOWN)
                await proxy.restore()
                async with asyncio.timeout(60):
                    while True:
                        with contextlib.suppress(StoreUnavailable):
                            if await all_finished(store):
                                break
                        await asyncio.sleep(0.1)
            finally:
                worker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await worker

    during = caplog.records[cut_at:]
    assert not [r for r in during if "body failed" in r.getMessage()]
    tracebacks = [r for r in during if r.exc_info]
    assert len(tracebacks) == 1, [r.getMessage() for r in tracebacks]
    assert tracebacks[0].exc_info is not None
    assert isinstance(tracebacks[0].exc_info[1], StoreUnavailable)
    outage = [
        r
        for r in during
        if r.name == "durable.worker" and r.getMessage().startswith("store outage:")
    ]
    # One line per backoff step (100 ms, doubling), however many calls failed: a handful fit
    # in the outage and the second each call waits for the pool before giving up.
    assert 2 <= len(outage) <= 10, [r.getMessage() for r in outage]
    assert all("PostgresDurable" in r.getMessage() for r in outage)
    assert all("\n" not in r.getMessage() for r in outage)
    again = [r for r in during if "reachable again" in r.getMessage()]
    assert len(again) == 1
