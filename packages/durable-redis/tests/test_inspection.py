"""What an operator reads (``durable show`` and ``durable list``), on one node and a cluster."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from durable.interfaces import Enumerable, Inspectable, Observable
from durable.plugins import Testbed
from durable_redis import RedisCheckpointer

Bed = Testbed[Any]


async def test_claimed_reports_only_a_live_claim_by_the_servers_clock(bed: Bed) -> None:
    checkpointer = bed.durable.checkpointer
    assert isinstance(checkpointer, RedisCheckpointer)
    assert isinstance(checkpointer, Inspectable)
    assert await checkpointer.claimed("wf-inspect") is None

    holder = await checkpointer.claim(
        "wf-inspect", liveness=timedelta(seconds=30), budget=timedelta(minutes=5)
    )
    assert holder is not None
    held = await checkpointer.claimed("wf-inspect")
    assert held is not None
    assert held.token == holder.token
    assert held.live_until < held.budget_until

    await checkpointer.release(holder)
    assert await checkpointer.claimed("wf-inspect") is None


async def test_workflows_are_listed_sorted_and_limited(bed: Bed) -> None:
    checkpointer = bed.durable.checkpointer
    assert isinstance(checkpointer, Enumerable)
    for workflow in ("wf-c", "wf-a", "wf-{b}"):
        await checkpointer.supply(workflow, "k", 1)
    assert await checkpointer.workflows() == ["wf-a", "wf-c", "wf-{b}"]
    assert await checkpointer.workflows(2) == ["wf-a", "wf-c"]


async def test_the_scheduler_reports_when_a_workflow_is_next_runnable(bed: Bed) -> None:
    scheduler = bed.durable.scheduler
    assert isinstance(scheduler, Observable)
    assert await scheduler.scheduled("wf-when") is None
    await scheduler.make_ready("wf-when")
    assert await scheduler.scheduled("wf-when") is not None
