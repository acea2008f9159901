"""What the lifecycle tests share: the store as a ``Lifecycle``, passes begun and lost.

A pass that is *lost* was begun and never settled: its process died, or went silent past
its liveness. The suite makes one in another process where the store has a url (the child
begins and exits, which is exactly a death), and otherwise on a second handle that is
dropped, which is as close as a store living in one process can come.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any

from durable.interfaces import Began, Durable, Lifecycle, Pass, Status, WorkflowStatus
from durable.workflows import LifecycleDurable

from durable_conformance.subject import DeclaredButUnimplemented, StoreUnderTest
from durable_conformance.suite._support import LONG, PATIENCE, SHORT, TICK, now

OWNER = "suite-worker:1"
"""The owner the suite's own passes are begun as."""


def lifecycle(store: StoreUnderTest, handle: Durable[Any] | None = None) -> Lifecycle:
    """The checkpointer of ``handle`` (default the store's) as a ``Lifecycle``."""
    checkpointer = (handle if handle is not None else store.durable).checkpointer
    if not isinstance(checkpointer, Lifecycle):
        raise DeclaredButUnimplemented(
            f"store {store.name!r} declares 'lifecycle' but its checkpointer "
            f"{type(checkpointer).__name__} does not implement Lifecycle (admit, begin, beat, "
            "settle, withdraw, readmit, status, statuses)"
        )
    return checkpointer


def lifecycle_durable(store: StoreUnderTest) -> LifecycleDurable[Any]:
    durable = store.durable
    if not isinstance(durable, LifecycleDurable):
        raise DeclaredButUnimplemented(
            f"store {store.name!r} declares 'lifecycle' but its Durable "
            f"{type(durable).__name__} has no start, cancel, retry, status, list and handle"
        )
    return durable


async def begun(
    lc: Lifecycle,
    workflow: str,
    *,
    liveness: timedelta = LONG,
    budget: timedelta = LONG,
    owner: str = OWNER,
) -> tuple[Pass, Began]:
    """Begin a pass on ``workflow``, which the test knows to be free and not terminal."""
    began = await lc.begin(workflow, liveness=liveness, budget=budget, owner=owner)
    assert began is not None, f"begin({workflow!r}) returned None although nothing holds it"
    assert began.holder is not None, (
        f"begin({workflow!r}) claimed nothing although the workflow is {began.status}"
    )
    assert began.holder.workflow == workflow, f"begin({workflow!r}) returned {began.holder!r}"
    return began.holder, began


async def begun_when_free(
    lc: Lifecycle, workflow: str, *, owner: str = OWNER, within: float = PATIENCE
) -> tuple[Pass, Began]:
    """Begin a pass on ``workflow`` as soon as its current claim has run out."""
    give_up = asyncio.get_running_loop().time() + within
    while True:
        began = await lc.begin(workflow, liveness=LONG, budget=LONG, owner=owner)
        if began is not None:
            assert began.holder is not None, f"{workflow!r} is {began.status}, not runnable"
            return began.holder, began
        if asyncio.get_running_loop().time() > give_up:
            raise AssertionError(
                f"{workflow!r} was still held {within:.0f} s after its pass should have lapsed"
            )
        await asyncio.sleep(TICK)


async def lost_pass(store: StoreUnderTest, workflow: str, owner: str) -> int:
    """Begin a pass on ``workflow`` with a short liveness and never settle it, in another
    process where the store has a url, else on a second handle that is then dropped.
    Waits for any earlier pass's claim to lapse first. Returns the attempts its begin
    reported."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + PATIENCE
    while True:
        attempts = await _lose_one(store, workflow, owner)
        if attempts is not None:
            return attempts
        if loop.time() > give_up:
            raise AssertionError(
                f"{workflow!r} was still held {PATIENCE:.0f} s after its pass should have lapsed"
            )
        await asyncio.sleep(TICK)


async def _lose_one(store: StoreUnderTest, workflow: str, owner: str) -> int | None:
    if store.testbed.url is not None:
        (attempts,) = await store.in_another_process(
            [
                {
                    "op": "begin",
                    "workflow": workflow,
                    "liveness": SHORT.total_seconds(),
                    "budget": 600,
                    "owner": owner,
                    "as": "lost",
                }
            ]
        )
        assert attempts is None or isinstance(attempts, int), (
            f"the other process's begin answered {attempts!r}"
        )
        return attempts
    async with store.second_handle() as second:
        began = await lifecycle(store, second).begin(
            workflow, liveness=SHORT, budget=LONG, owner=owner
        )
        if began is None:
            return None
        assert began.holder is not None, f"{workflow!r} is {began.status}, not runnable"
        return began.attempts


def assert_recent(moment: datetime | None, what: str) -> None:
    """``moment`` is an aware time within a minute of this machine's clock (the store's
    clock may differ from it a little, never by an hour)."""
    assert moment is not None, f"{what} is None"
    assert moment.tzinfo is not None, f"{what} is naive: {moment!r}"
    assert moment.utcoffset() is not None, f"{what} is naive: {moment!r}"
    assert abs(moment - now()) < timedelta(minutes=1), (
        f"{what} is {moment.isoformat()}, far from now ({now().isoformat()})"
    )


async def listed(
    lc: Lifecycle, *, status: Status | None = None, kind: str | None = None, limit: int = 100
) -> list[WorkflowStatus]:
    """Every row matching the filters, all pages followed (the suite keeps kinds unique to
    a test, so a kind filter bounds what is read)."""
    found: list[WorkflowStatus] = []
    cursor: str | None = None
    for _ in range(10_000):
        page = await lc.statuses(status=status, kind=kind, limit=limit, cursor=cursor)
        assert len(page.statuses) <= limit, (
            f"statuses(limit={limit}) returned {len(page.statuses)} rows"
        )
        found.extend(page.statuses)
        if page.cursor is None:
            return found
        cursor = page.cursor
    raise AssertionError("statuses never returned a last page (cursor None)")


async def first_page(lc: Lifecycle, *, status: Status | None = None, limit: int = 100) -> list[str]:
    """The workflow ids on the first page of a status listing: the newest there, which is
    where a workflow that has just moved must be."""
    page = await lc.statuses(status=status, limit=limit)
    return [row.workflow for row in page.statuses]
