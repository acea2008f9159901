"""A worker that prunes ended workflows on a schedule of its own (issue 17):
``work(..., prune=PrunePolicy(...))`` and ``durable worker --prune-finished-before AGE``,
on memory and SQLite."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import durable
import pytest
from durable import ManualClock, Status, Workflows
from durable.parsers import exactly
from durable.run import Run
from durable.transfer import PrunePolicy
from durable.worker import work
from durable.workflows import LifecycleDurable

HERE = Path(__file__).parent
PATIENCE = 30.0

workflows = Workflows()


@workflows.kind("quick")
async def quick(run: Run[Any], n: object) -> object:
    return await run.step("echo", lambda: n, exactly(int))


@workflows.kind("waits")
async def waits(run: Run[Any], _: object) -> bool:
    return await run.awaiting("go", exactly(bool))


@pytest.fixture(params=["memory", "sqlite"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "memory":
        yield "memory://"
    else:
        pytest.importorskip("durable_sqlite")
        yield f"sqlite:///{tmp_path / 'store.db'}"


async def until(check: Any, what: str) -> None:
    give_up = time.monotonic() + PATIENCE
    while not await check():
        assert time.monotonic() < give_up, f"never: {what}"
        await asyncio.sleep(0.02)


async def test_workers_prune_only_workflows_ended_before_their_policy_and_never_unfinished(
    url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="durable.worker")
    # The workers' clock is frozen at the start: nothing they see has ended an hour before
    # it, until the clock is moved on by two hours.
    clock = ManualClock(datetime.now(UTC))
    policy = PrunePolicy(timedelta(hours=1), every=timedelta(milliseconds=50), batch=2)
    async with durable.open(url) as store:
        assert isinstance(store, LifecycleDurable)
        stop = asyncio.Event()
        running = [
            asyncio.create_task(
                work(
                    store,
                    workflows,
                    poll=timedelta(milliseconds=20),
                    tick=timedelta(milliseconds=50),
                    clock=clock,
                    stop=stop,
                    prune=policy,
                )
            )
            for _ in range(2)  # two workers pruning at once, as a deployment has
        ]
        try:
            for i in range(5):
                assert await (await store.start(quick, f"q-{i}", i)).result(timeout=PATIENCE) == i
            await store.start(waits, "w-1")

            async def blocked() -> bool:
                found = await store.status("w-1")
                return found is not None and found.status is Status.BLOCKED

            await until(blocked, "w-1 blocked")
            await asyncio.sleep(0.3)  # several rounds of pruning: all too young
            for i in range(5):
                assert await store.status(f"q-{i}") is not None, f"q-{i} pruned too soon"

            clock.advance(timedelta(hours=2))

            async def pruned() -> bool:
                return all([await store.status(f"q-{i}") is None for i in range(5)])

            await until(pruned, "the ended workflows pruned")
            await asyncio.sleep(0.2)  # more rounds: the unfinished one is never touched
            kept = await store.status("w-1")
            assert kept is not None
            assert kept.status is Status.BLOCKED
            assert (await store.checkpointer.load("w-1")) is not None
        finally:
            stop.set()
            await asyncio.wait_for(asyncio.gather(*running), PATIENCE)
    said = [r for r in caplog.records if r.name == "durable.worker"]
    assert not [r.getMessage() for r in said if r.levelno >= logging.ERROR]
    discarded = [r.getMessage() for r in said if r.getMessage().startswith("prune: discarded")]
    assert discarded, "no prune was logged"


def test_a_prune_policy_refuses_what_prune_refuses() -> None:
    with pytest.raises(ValueError, match="finished_before"):
        PrunePolicy(timedelta(0))
    with pytest.raises(ValueError, match="every"):
        PrunePolicy(timedelta(days=30), every=timedelta(seconds=-1))
    with pytest.raises(ValueError, match="not ready"):
        PrunePolicy(timedelta(days=30), statuses=(Status.READY,))
    with pytest.raises(ValueError, match="batch"):
        PrunePolicy(timedelta(days=30), batch=0)
    assert PrunePolicy(timedelta(days=30)).every == timedelta(hours=1)


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DURABLE_STORE"}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _durable(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable.cli", *args],
        capture_output=True,
        text=True,
        env=_environment(),
        timeout=PATIENCE,
        check=False,
    )


def test_durable_worker_prunes_with_prune_finished_before(tmp_path: Path) -> None:
    pytest.importorskip("durable_sqlite")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    assert _durable("send", url, "wf-1", '"ana"', "--create").returncode == 0
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "durable.cli",
            "worker",
            url,
            "cli_bodies:greet",
            "--prune-finished-before",
            "1s",
            "--prune-every",
            "1s",
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=_environment(),
    )
    log: list[str] = []
    try:
        assert worker.stderr is not None
        deadline = time.monotonic() + PATIENCE
        while time.monotonic() < deadline:
            line = worker.stderr.readline()
            if not line:
                break
            log.append(line)
            if "prune: discarded 1 ended workflow(s)" in line:
                break
        else:
            raise AssertionError("".join(log))
        assert any("prune: discarded 1" in line for line in log), "".join(log)
        worker.terminate()
        assert worker.wait(timeout=PATIENCE) == 0, "".join(log)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert _durable("show", url, "wf-1").returncode == 3


def test_durable_worker_refuses_an_age_that_is_not_one() -> None:
    done = _durable("worker", "memory://", "cli_bodies:greet", "--prune-finished-before", "0d")
    assert done.returncode == 2
    assert "positive" in done.stderr
    done = _durable("worker", "memory://", "cli_bodies:greet", "--prune-finished-before", "soon")
    assert done.returncode == 2
    assert "not an age" in done.stderr
