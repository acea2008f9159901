"""A worker whose Redis server is killed under it: the outage is a few lines, not a thousand.

The server is a throwaway one started here (append-only file, synced on every write, so a
SIGKILL loses nothing), killed by its PID and started again on the same port; the shared
server is never touched.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from datetime import timedelta
from typing import Any

import pytest
from durable.interfaces import StoreUnavailable
from durable.parsers import exactly
from durable.run import Run
from durable.worker import work
from durable_redis import RedisDurable, RedisUnavailable
from durable_redis.plugin import open_redis
from durable_redis.scripts import translate
from durable_redis.servers import LocalServer, binaries_available, start_server
from redis.exceptions import (
    BusyLoadingError,
    ClusterCrossSlotError,
    ClusterDownError,
    MasterDownError,
    ReadOnlyError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

needs_binaries = pytest.mark.skipif(
    not binaries_available(), reason="needs redis-server and redis-cli on PATH"
)

WORKFLOWS = [f"wf-outage-{i}" for i in range(4)]
STEPS = 30
POLL = timedelta(milliseconds=100)
DOWN = 3.0  # seconds the server stays dead


async def body(run: Run[Any]) -> int:
    total = 0
    for i in range(STEPS):
        total += await run.step(f"step-{i}", lambda i=i: i, exactly(int))
        await asyncio.sleep(0.02)
    return await run.step("total", lambda: total, exactly(int))


async def progress(store: RedisDurable) -> int:
    return sum([len(await store.checkpointer.load(workflow)) for workflow in WORKFLOWS])


async def all_finished(store: RedisDurable) -> bool:
    for workflow in WORKFLOWS:
        if "total" not in await store.checkpointer.load(workflow):
            return False
    return True


def kill(server: LocalServer) -> None:
    process = server.process
    assert process is not None
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=5)
    server.process = None  # so that start() starts a new one on the same port


@needs_binaries
async def test_a_worker_waits_out_a_killed_server_in_a_few_lines_and_every_workflow_finishes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with start_server(persistent=True) as server:
        async with open_redis(server.url, lease=timedelta(seconds=1)) as store:
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
                    killed_at = len(caplog.records)
                    kill(server)
                    await asyncio.sleep(DOWN)
                    server.start()
                    async with asyncio.timeout(30):
                        while not await all_finished(store):  # noqa: ASYNC110 (polls the store)
                            await asyncio.sleep(0.1)
                finally:
                    worker.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await worker

    during = caplog.records[killed_at:]
    assert not [r for r in during if "body failed" in r.getMessage()]
    tracebacks = [r for r in during if r.exc_info]
    assert len(tracebacks) == 1, [r.getMessage() for r in tracebacks]
    assert tracebacks[0].exc_info is not None
    error = tracebacks[0].exc_info[1]
    assert isinstance(error, RedisUnavailable)
    assert isinstance(error, StoreUnavailable)
    outage = [r for r in during if r.getMessage().startswith("store outage:")]
    # One line per backoff step (100 ms, doubling): about eight fit in the outage and the
    # seconds redis-py spends retrying the last call; the worker used to write ~1,200.
    assert 2 <= len(outage) <= 10, [r.getMessage() for r in outage]
    assert all("RedisDurable" in r.getMessage() for r in outage)
    assert all("\n" not in r.getMessage() for r in outage)
    again = [r for r in during if "reachable again" in r.getMessage()]
    assert len(again) == 1


@pytest.mark.parametrize(
    "error",
    [
        RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused."),
        RedisTimeoutError("Timeout reading from socket"),
        BusyLoadingError("Redis is loading the dataset in memory"),
        ClusterDownError("The cluster is down"),
        MasterDownError("Link with MASTER is down and replica-serve-stale-data is set to 'no'."),
        TryAgainError("Multiple keys request during rehashing of slot"),
        SlotNotCoveredError("Slot 1234 is not covered by the cluster."),
        ReadOnlyError("You can't write against a read only replica."),
    ],
    ids=lambda error: type(error).__name__,
)
def test_every_way_redis_py_says_the_server_is_away_is_an_outage(error: Exception) -> None:
    translated = translate(error, where="Redis at 127.0.0.1:6379/0", doing="record of 'k'")
    assert isinstance(translated, RedisUnavailable)
    assert isinstance(translated, StoreUnavailable)
    assert "record of 'k'" in str(translated)
    assert ".." not in str(translated)


@pytest.mark.parametrize(
    "error",
    [ResponseError("WRONGTYPE Operation against a key"), ClusterCrossSlotError("CROSSSLOT")],
    ids=lambda error: type(error).__name__,
)
def test_a_refusal_is_not_an_outage(error: Exception) -> None:
    translated = translate(error, where="Redis at 127.0.0.1:6379/0", doing="record of 'k'")
    assert not isinstance(translated, StoreUnavailable)
