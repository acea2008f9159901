"""Child workflows on a real Redis Cluster, where a parent and its child live in two slots.

The child's outcome (its ``settle``, in the child's slot) and the parent's wake-up (the
``arrive``, in the parent's slot) cannot be one script there. What makes it safe is their
order, and this test kills a worker (SIGKILL, a real subprocess) between the two: the
child's delivery is still out, so the next worker to take it finds the child finished and
arrives its outcome again, and the parent finishes with it.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import durable
import pytest
from durable import Status, Workflows
from durable.children import OUTCOME_PREFIX
from durable.run import Run
from durable.worker import work
from durable.workflows import LifecycleDurable
from durable_redis.keys import tag_for
from durable_redis.servers import LocalCluster

SCRIPT = Path(__file__).resolve().parents[2] / "durable-core" / "tests" / "children_child.py"
PATIENCE = 60.0


def spawn(script: Path, url: str, workflow: str) -> subprocess.Popen[bytes]:
    """The worker that dies between a child's two writes, in a process of its own."""
    return subprocess.Popen(
        [sys.executable, str(script), url, workflow],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


async def test_a_worker_killed_between_a_childs_outcome_and_its_parents_wake_up(
    cluster: LocalCluster,
) -> None:
    key_slot = pytest.importorskip("redis.crc").key_slot
    parent_id = next(
        f"pk-{n}"
        for n in range(100)
        if key_slot(tag_for(f"pk-{n}").encode()) != key_slot(tag_for(f"pk-{n}/c").encode())
    )
    url = f"{cluster.url}?prefix=children-{uuid.uuid4().hex[:10]}&lease=1"
    process = spawn(SCRIPT, url, parent_id)
    try:
        code = await asyncio.to_thread(process.wait, PATIENCE)
    finally:
        if process.poll() is None:
            process.kill()
    assert code == -9, process.stderr.read().decode() if process.stderr else code

    workflows = Workflows()

    @workflows.kind("child")
    async def child(run: Run[Any], _: object) -> int:
        raise AssertionError("the child finished already; it never runs again")

    @workflows.kind("parent")
    async def parent(run: Run[Any], _: object) -> object:
        return await run.child("child", "c")

    async with durable.open(url) as store:
        assert isinstance(store, LifecycleDurable)
        found = await store.status(f"{parent_id}/c")
        assert found is not None
        assert found.status is Status.FINISHED, "the first write landed"
        blocked = await store.status(parent_id)
        assert blocked is not None
        assert blocked.status is Status.BLOCKED
        records = await store.checkpointer.load(parent_id)
        assert OUTCOME_PREFIX + "c" not in records, "the second write never happened"
        stop = asyncio.Event()
        worker = asyncio.create_task(
            work(
                store,
                workflows,
                poll=timedelta(milliseconds=20),
                idle=timedelta(seconds=1),
                stop=stop,
            )
        )
        try:
            assert await store.handle(parent_id).result(timeout=PATIENCE) == 42
        finally:
            stop.set()
            await asyncio.wait_for(worker, PATIENCE)
