"""Queue limits across worker processes: four OS processes serve one queue limited to 3.

Each pass writes its start and end, with the wall clock and its process id, to a log file
(one ``O_APPEND`` write a line, so lines from four processes never interleave). A pass runs
inside its slot (taken before the pass begins, given back after it settles), so the passes
overlapping in the log are never more than the slots held: the highest overlap must be 3,
never more. A worker killed with SIGKILL while it holds the queue's only slot gives it back
when the slot's liveness runs out, and another process's worker then runs a pass.

Runs on SQLite, Postgres and Redis (``shared_url``): the stores whose scheduler offers
``limits`` and that two processes can share.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import durable
import pytest
from durable.interfaces import Limited, QueueLimit, Status
from durable.run import Run

log = logging.getLogger(__name__)

pytestmark = pytest.mark.timeout(90)

LEASE = timedelta(seconds=2)
LIVENESS = timedelta(seconds=2)

WORKER = textwrap.dedent(
    """
    import asyncio, os, sys, time
    from datetime import timedelta
    import durable
    from durable.worker import work

    URL, QUEUE, LOG = sys.argv[1:4]
    registry = durable.Workflows()

    def write(what, workflow):
        line = f"{time.time():.6f} {os.getpid()} {what} {workflow}\\n".encode()
        fd = os.open(LOG, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    @registry.kind("charge", queue=QUEUE)
    async def charge(run, seconds):
        write("start", run.workflow)
        await asyncio.sleep(seconds)
        write("end", run.workflow)
        return "charged"

    async def main():
        async with durable.open(URL, lease=timedelta(seconds=2)) as store:
            print("ready", flush=True)
            await work(
                store,
                registry,
                queues=[QUEUE],
                liveness=timedelta(seconds=2),
                poll=timedelta(milliseconds=20),
                limit=2,  # three at once takes two processes at least
            )

    asyncio.run(main())
    """
)


def charge_kind(queue: str) -> durable.Kind[Any, Any]:
    registry = durable.Workflows()

    @registry.kind("charge", queue=queue)
    async def charge(run: Run[Any], seconds: float) -> str:
        raise AssertionError("the test process never runs a pass")

    return charge


@asynccontextmanager
async def workers(url: str, queue: str, log_path: Path, count: int) -> AsyncIterator[list[Any]]:
    """``count`` worker processes, each ready (its store open) before this yields; every one
    still alive is killed on the way out."""
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            WORKER,
            url,
            queue,
            str(log_path),
            stdout=asyncio.subprocess.PIPE,
        )
        for _ in range(count)
    ]
    try:
        async with asyncio.timeout(30):
            for child in children:
                assert child.stdout is not None
                line = await child.stdout.readline()
                assert line.strip() == b"ready", f"a worker did not start: {line!r}"
        yield children
    finally:
        for child in children:
            if child.returncode is None:
                child.kill()
            await child.wait()


def read_log(path: Path) -> list[tuple[float, int, str, str]]:
    if not path.exists():
        return []
    found = []
    for line in path.read_text().splitlines():
        at, pid, what, workflow = line.split()
        found.append((float(at), int(pid), what, workflow))
    return found


def highest_overlap(events: list[tuple[float, int, str, str]]) -> int:
    """The most passes running at one moment (an end at the same instant as a start first)."""
    running = highest = 0
    for _, _, what, _ in sorted(events, key=lambda e: (e[0], e[2] == "start")):
        running += 1 if what == "start" else -1
        highest = max(highest, running)
    return highest


async def test_four_worker_processes_never_run_more_than_the_limit_and_reach_it(
    shared_url: str, tmp_path: Path
) -> None:
    """Eighteen charges of 0.3 s each, four worker processes, the queue limited to 3 at once:
    the log never shows more than three passes at one moment, and it does show three. Each
    worker runs at most two passes itself, so three at once are passes of several processes
    counted against one limit."""
    queue = "payments"
    log_path = tmp_path / "passes.log"
    async with durable.open(shared_url, lease=LEASE) as opened:
        store = cast(Any, opened)
        limits = cast(Limited, store.scheduler)
        await limits.set_limit(queue, QueueLimit(concurrent=3))
        kind = charge_kind(queue)
        handles = [await store.start(kind, f"charge-{i}", 0.3) for i in range(18)]
        held: list[int] = []
        async with workers(shared_url, queue, log_path, 4):
            async with asyncio.timeout(40):
                for handle in handles:
                    while (await handle.status()).status is not Status.FINISHED:
                        held.append(await limits.held(queue))
                        await asyncio.sleep(0.02)
        events = read_log(log_path)
    starts = [e for e in events if e[2] == "start"]
    assert len(starts) >= 18, f"{len(starts)} passes started for 18 charges"
    highest = highest_overlap(events)
    log.info(
        "4 processes, limit 3: highest overlap %d, highest held %d, %d passes in %.2f s",
        highest,
        max(held, default=0),
        len(starts),
        max(e[0] for e in events) - min(e[0] for e in events),
    )
    assert highest <= 3, f"{highest} passes ran at once in a queue limited to 3"
    assert max(held, default=0) <= 3, f"the store counted {max(held)} slots held"
    assert highest == 3, f"the passes never reached the limit of 3 (at most {highest})"
    assert len({e[1] for e in starts}) >= 2, "every pass ran in one process"


async def test_a_killed_worker_gives_its_slot_back_within_the_liveness(
    shared_url: str, tmp_path: Path
) -> None:
    """The queue limited to 1; two worker processes; a long charge and a short one. The
    process running the long one is SIGKILLed while it holds the slot: until then the short
    one never starts, the store still counts the slot held just after the kill, and a pass
    starts in the other process once the slot's liveness has run out."""
    queue = "payments"
    log_path = tmp_path / "passes.log"
    async with durable.open(shared_url, lease=LEASE) as opened:
        store = cast(Any, opened)
        limits = cast(Limited, store.scheduler)
        await limits.set_limit(queue, QueueLimit(concurrent=1))
        kind = charge_kind(queue)
        await store.start(kind, "long", 60)
        await asyncio.sleep(0.01)
        await store.start(kind, "short", 0.1)
        async with workers(shared_url, queue, log_path, 2) as children:
            async with asyncio.timeout(20):
                while True:
                    started = [e for e in read_log(log_path) if e[2] == "start"]
                    if started:
                        break
                    await asyncio.sleep(0.02)
            (first,) = started
            assert first[3] == "long", first
            holder = next(c for c in children if c.pid == first[1])
            os.kill(holder.pid, signal.SIGKILL)
            await holder.wait()
            killed_at = time.time()
            assert await limits.held(queue) == 1, "the slot came back at the kill itself"
            async with asyncio.timeout(20):
                while True:
                    after = [e for e in read_log(log_path) if e[2] == "start" and e[1] != first[1]]
                    if after:
                        break
                    assert await limits.held(queue) <= 1
                    await asyncio.sleep(0.02)
        before_kill = [e for e in read_log(log_path) if e[2] == "start" and e[0] < killed_at]
        assert [e[3] for e in before_kill] == ["long"], before_kill
    waited = after[0][0] - killed_at
    log.info(
        "slot back %.2f s after the kill (liveness %gs, lease %gs)",
        waited,
        LIVENESS.total_seconds(),
        LEASE.total_seconds(),
    )
