"""Child workflows: a parent replayed after its child ended starts the child once.

``run.child`` writes three things in order: the child's link to its parent (``supply``),
the child's start, the parent's link to the child (a record of the parent's pass). A pass
of the parent that dies between the start and its link is replayed, and the replay starts
the child again; nothing but the store's ``admit`` keeps that second start from running the
child a second time, and by then the child may have ended (finished, or failed). So the
store must write nothing over an ended workflow of the same kind and input.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from durable.children import PARENT_KEY, ChildFailed, child_id
from durable.parsers import exactly
from durable.policy import RetryPolicy
from durable.run import Run
from durable.workflows import Workflows

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._lifecycle import lifecycle, lifecycle_durable
from durable_conformance.suite._support import PATIENCE
from durable_conformance.suite.lifecycle import unique_kind
from durable_conformance.suite.worker import working

ONCE = RetryPolicy(max_attempts=1)


@requirement("children.started-once-on-replay", capability="lifecycle")
async def test_children_a_replayed_parent_starts_its_ended_child_once(
    store: StoreUnderTest,
) -> None:
    """Two parents, each waiting for a go-ahead, whose earlier pass (as if it had died after
    starting its child and before recording the link) started a child: one that finishes and
    one that fails. Once each child has ended, the parent goes ahead, and its replay starts
    the child again: the start finds it ended, so each child's body ran once, and each parent
    gets its child's outcome (the failure as ``ChildFailed``)."""
    durable = lifecycle_durable(store)
    runs: Counter[str] = Counter()
    registry = Workflows()

    async def fine(run: Run[Any], which: str) -> str:
        runs[run.workflow] += 1
        return f"{which} shipped"

    async def broken(run: Run[Any], which: str) -> str:
        runs[run.workflow] += 1
        raise LookupError(f"{which}: no such parcel")

    kinds = {
        "fine": registry.kind(unique_kind("fine"), input=exactly(str))(fine),
        "broken": registry.kind(unique_kind("broken"), input=exactly(str), policy=ONCE)(broken),
    }

    async def parent(run: Run[Any], which: str) -> str:
        await run.awaiting("go", exactly(bool))
        try:
            return str(await run.child(kinds[which], "c", which))
        except ChildFailed as failed:
            return f"failed: {failed.failure.message}"

    parent_kind = registry.kind(unique_kind("parent"), input=exactly(str))(parent)
    lc = lifecycle(store)
    loop = asyncio.get_running_loop()

    async def ended(workflow: str) -> None:
        give_up = loop.time() + PATIENCE
        while True:
            status = await lc.status(workflow)
            if status is not None and status.status.terminal:
                return
            assert loop.time() < give_up, f"{workflow} never ended: {status}"
            await asyncio.sleep(0.02)

    parents = {which: store.workflow(f"parent-{which}") for which in kinds}
    async with working(durable, registry, schedules=False):
        for which, workflow in parents.items():
            handle = await durable.start(parent_kind, workflow, which)
            child = child_id(handle.workflow, "c")
            # The parent's first pass, up to its death: the same writes run.child makes
            # before the link it never recorded.
            link = {"workflow": workflow, "key": "c"}
            assert await durable.checkpointer.supply(child, PARENT_KEY, link) == link
            await durable.start(kinds[which], child, which)
            await ended(child)
            await durable.arrive(workflow, "go", True)
        results = {
            which: await durable.handle(workflow).result(timeout=PATIENCE)
            for which, workflow in parents.items()
        }
        children = [child_id(workflow, "c") for workflow in parents.values()]
        for child in children:
            await ended(child)  # a store that started it afresh: wait for that run's end
    assert results == {"fine": "fine shipped", "broken": "failed: broken: no such parcel"}
    assert {child: runs[child] for child in children} == dict.fromkeys(children, 1), (
        f"a child's body ran more than once: {dict(runs)}"
    )
