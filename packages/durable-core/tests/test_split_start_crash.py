"""A process killed between ``start``'s two writes on a split store.

``SplitDurable.start`` writes the lifecycle row and then queues the workflow: two stores, two
writes, no commit joining them. What it promises for a crash between them is the safe order:
the workflow is fully started, not started at all, or started and not yet queued, and the
last is repaired by starting it again (idempotent for the same kind and input), after which a
worker runs it to the end. These tests kill a real process (SIGKILL, from inside ``start``)
at each of those moments, with the checkpointer on every store another process can open and
the scheduler in an SQLite file of its own, and then look.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import durable
import pytest
from durable.durable import SplitDurable
from durable.interfaces import Status, UnknownWorkflow
from durable.run import Run
from durable.worker import work
from durable.workflows import Workflows

HERE = Path(__file__).parent
PATIENCE = 60.0
BRIEFLY = timedelta(milliseconds=50)

registry = Workflows()


@registry.kind("greet")
async def greet(run: Run[Any], name: object) -> str:
    return f"hello {name}"


def crash(checkpoints: str, queue: str, workflow: str, mode: str) -> None:
    """Start ``workflow`` in a child process that SIGKILLs itself at ``mode``."""
    finished = subprocess.run(
        [sys.executable, str(HERE / "split_start_child.py"), checkpoints, queue, workflow, mode],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=PATIENCE,
        check=False,
    )
    assert finished.returncode == -9, (
        f"the child was meant to die of SIGKILL at {mode!r}, it exited {finished.returncode}: "
        f"{finished.stderr.decode(errors='replace')}"
    )


async def run_to_the_end(split: SplitDurable[Any], workflow: str) -> object:
    """Serve the split store with a real worker until ``workflow`` finishes."""
    stop = asyncio.Event()
    worker = asyncio.create_task(
        work(split, registry, stop=stop, poll=BRIEFLY, tick=BRIEFLY, schedules=False)
    )
    try:
        return await split.handle(workflow).result(timeout=PATIENCE)
    finally:
        stop.set()
        async with asyncio.timeout(PATIENCE):
            await worker


@pytest.mark.parametrize("mode", ["before", "between", "after"])
async def test_a_start_killed_between_its_writes_is_whole_absent_or_repaired_by_a_repeat(
    shared_url: str, tmp_path: Path, mode: str
) -> None:
    queue_url = f"sqlite:///{tmp_path / 'queue.db'}"
    workflow = f"greeting-{mode}"
    crash(shared_url, queue_url, workflow, mode)

    async with durable.open(shared_url) as held, durable.open(queue_url) as queued:
        split = SplitDurable(held.checkpointer, queued.scheduler)
        scheduler: Any = queued.scheduler
        if mode == "before":
            with pytest.raises(UnknownWorkflow):
                await split.handle(workflow).status()
            assert await scheduler.scheduled(workflow) is None
        elif mode == "between":
            # Started and not queued: the one state the order allows, and nothing runs it...
            assert (await split.handle(workflow).status()).status == Status.READY
            assert await scheduler.scheduled(workflow) is None
        else:
            assert (await split.handle(workflow).status()).status == Status.READY
            assert await scheduler.scheduled(workflow) is not None
        # ...until the caller, who never heard back, starts it again: the repair.
        await split.start("greet", workflow, "ada")
        assert await scheduler.scheduled(workflow) is not None
        assert await run_to_the_end(split, workflow) == "hello ada"
        assert (await split.handle(workflow).status()).status == Status.FINISHED
