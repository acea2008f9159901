"""MemoryScheduler against every behaviour the Scheduler contract names.

Visibility is measured by an injected ManualClock, so a lease runs out when a test
advances the clock. ``next_ready``'s ``within`` is a real wait, kept short.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest
from durable.clock import ManualClock
from durable.interfaces import Delivery, Scheduler
from durable.memory import MemoryScheduler

LEASE = timedelta(seconds=30)
BRIEFLY = timedelta(milliseconds=30)


def memory_scheduler() -> tuple[MemoryScheduler, ManualClock]:
    clock = ManualClock(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    scheduler = MemoryScheduler(lease=LEASE, clock=clock)
    return scheduler, clock


async def taken(scheduler: Scheduler) -> Delivery:
    delivery = await scheduler.next_ready(BRIEFLY)
    assert delivery is not None, "a workflow should have been ready"
    return delivery


async def taken_again(scheduler: Scheduler) -> Delivery | None:
    """What a worker does for a dead peer's work: reclaim first, then read."""
    return await scheduler.reclaim(scheduler.lease) or await scheduler.next_ready(BRIEFLY)


def test_the_memory_scheduler_is_a_scheduler() -> None:
    scheduler, _ = memory_scheduler()
    assert isinstance(scheduler, Scheduler)
    assert scheduler.lease == LEASE


@pytest.mark.parametrize("lease", [timedelta(0), timedelta(seconds=-1)], ids=["zero", "negative"])
def test_a_lease_must_be_positive(lease: timedelta) -> None:
    with pytest.raises(ValueError, match="lease must be positive"):
        MemoryScheduler(lease=lease)


async def test_next_ready_refuses_a_non_positive_wait() -> None:
    scheduler, _ = memory_scheduler()
    with pytest.raises(ValueError, match="within must be positive"):
        await scheduler.next_ready(timedelta(0))


async def test_prepare_is_idempotent() -> None:
    scheduler, _ = memory_scheduler()
    await scheduler.prepare()
    await scheduler.prepare()
    await scheduler.make_ready("wf")
    assert (await taken(scheduler)).workflow == "wf"


async def test_a_workflow_made_ready_is_delivered() -> None:
    scheduler, _ = memory_scheduler()
    await scheduler.make_ready("wf")
    delivery = await taken(scheduler)
    assert delivery.workflow == "wf"
    assert await scheduler.next_ready(BRIEFLY) is None, "one make_ready, one delivery"


async def test_next_ready_waits_for_a_workflow_made_ready_meanwhile() -> None:
    scheduler, _ = memory_scheduler()

    async def later() -> None:
        await asyncio.sleep(0.01)
        await scheduler.make_ready("wf")

    delivery, _ = await asyncio.gather(scheduler.next_ready(timedelta(seconds=5)), later())
    assert delivery is not None
    assert delivery.workflow == "wf"


async def test_nothing_ready_means_no_delivery() -> None:
    scheduler, _ = memory_scheduler()
    assert await scheduler.next_ready(BRIEFLY) is None


async def test_a_dead_takers_workflow_is_delivered_again_once_its_lease_runs_out() -> None:
    scheduler, clock = memory_scheduler()
    await scheduler.make_ready("wf")
    dead = await taken(scheduler)  # its taker dies without answering

    clock.advance(LEASE / 2)
    assert await taken_again(scheduler) is None, "hidden while the lease runs"
    clock.advance(LEASE / 2)
    revived = await taken_again(scheduler)

    assert revived is not None
    assert revived.workflow == "wf"
    assert revived.receipt != dead.receipt


async def test_a_dead_takers_late_answers_do_not_drop_the_redelivery() -> None:
    scheduler, clock = memory_scheduler()
    await scheduler.make_ready("wf")
    dead = await taken(scheduler)
    clock.advance(LEASE)
    revived = await taken_again(scheduler)
    assert revived is not None

    # The stalled taker wakes up and answers for the delivery it no longer holds.
    await scheduler.wake_at(dead, clock.now() + timedelta(days=1))
    await scheduler.done(dead)

    clock.advance(LEASE)
    again = await taken_again(scheduler)
    assert again is not None, "the live delivery was undone by a stale answer"
    assert again.workflow == "wf"


async def test_done_answers_for_the_delivery() -> None:
    scheduler, clock = memory_scheduler()
    await scheduler.make_ready("wf")
    await scheduler.done(await taken(scheduler))
    clock.advance(LEASE * 3)
    assert await taken_again(scheduler) is None


async def test_wake_at_schedules_the_workflow_and_answers_for_the_delivery() -> None:
    scheduler, clock = memory_scheduler()
    await scheduler.make_ready("wf")
    delivery = await taken(scheduler)
    deadline = clock.now() + timedelta(minutes=5)

    await scheduler.wake_at(delivery, deadline)

    clock.advance(LEASE)  # past the old lease: wake_at answered for the delivery
    assert await taken_again(scheduler) is None
    clock.advance(timedelta(minutes=5) - LEASE)
    woken = await taken(scheduler)
    assert woken.workflow == "wf"
    assert woken.receipt != delivery.receipt


async def test_an_answer_for_a_delivery_already_answered_by_wake_at_changes_nothing() -> None:
    scheduler, clock = memory_scheduler()
    await scheduler.make_ready("wf")
    delivery = await taken(scheduler)
    await scheduler.wake_at(delivery, clock.now() + timedelta(minutes=5))

    await scheduler.done(delivery)  # a retried answer for the same delivery
    await scheduler.wake_at(delivery, clock.now() + timedelta(days=1))

    clock.advance(timedelta(minutes=5))
    woken = await taken_again(scheduler)
    assert woken is not None, "the deadline wake_at set was undone by a second answer"
    assert woken.workflow == "wf"


async def test_wake_at_needs_an_aware_moment() -> None:
    scheduler, _ = memory_scheduler()
    await scheduler.make_ready("wf")
    delivery = await taken(scheduler)
    with pytest.raises(TypeError, match=r"'wf'.*aware datetime"):
        await scheduler.wake_at(delivery, datetime(2026, 3, 1, 12, 5))


async def test_make_ready_during_a_delivery_is_not_undone_by_its_wake_at() -> None:
    scheduler, clock = memory_scheduler()
    await scheduler.make_ready("wf")
    delivery = await taken(scheduler)

    await scheduler.make_ready("wf")  # an approval lands while the pass runs
    await scheduler.wake_at(delivery, clock.now() + timedelta(days=1))

    woken = await scheduler.next_ready(BRIEFLY)
    assert woken is not None, "the pass's deadline swallowed the wakeup that landed mid-pass"
    assert woken.workflow == "wf"


async def test_make_ready_during_a_delivery_is_not_undone_by_its_done() -> None:
    scheduler, _ = memory_scheduler()
    await scheduler.make_ready("wf")
    delivery = await taken(scheduler)

    await scheduler.make_ready("wf")
    await scheduler.done(delivery)

    woken = await scheduler.next_ready(BRIEFLY)
    assert woken is not None, "the pass's done swallowed the wakeup that landed mid-pass"
    assert woken.workflow == "wf"


async def test_make_ready_wakes_a_sleeping_workflow_early() -> None:
    scheduler, clock = memory_scheduler()
    await scheduler.make_ready("wf")
    await scheduler.wake_at(await taken(scheduler), clock.now() + timedelta(days=1))
    await scheduler.make_ready("wf")
    assert (await taken(scheduler)).workflow == "wf"


async def test_wake_at_does_not_reinstate_a_cancelled_workflow() -> None:
    scheduler, clock = memory_scheduler()
    await scheduler.make_ready("wf")
    delivery = await taken(scheduler)

    await scheduler.cancel("wf")  # discarded while its pass runs
    await scheduler.wake_at(delivery, clock.now())

    clock.advance(LEASE * 3)
    assert await taken_again(scheduler) is None


async def test_cancel_forgets_pending_and_scheduled_runs() -> None:
    scheduler, clock = memory_scheduler()
    await scheduler.make_ready("sleeping")
    await scheduler.wake_at(await taken(scheduler), clock.now() + timedelta(minutes=1))
    await scheduler.make_ready("pending")

    await scheduler.cancel("pending")
    await scheduler.cancel("sleeping")

    clock.advance(timedelta(hours=1))
    assert await taken_again(scheduler) is None


async def test_a_cancelled_workflow_made_ready_again_is_delivered() -> None:
    scheduler, _ = memory_scheduler()
    await scheduler.make_ready("wf")
    await scheduler.cancel("wf")
    await scheduler.make_ready("wf")
    assert (await taken(scheduler)).workflow == "wf"


async def test_wake_due_and_reclaim_lose_nothing_on_a_scored_queue() -> None:
    """The score is the timer here: a due deadline is already runnable without wake_due,
    and wake_due must not deliver or drop anything by itself."""
    scheduler, clock = memory_scheduler()
    await scheduler.make_ready("wf")
    await scheduler.wake_at(await taken(scheduler), clock.now() + timedelta(minutes=1))
    later = clock.advance(timedelta(minutes=1))
    await scheduler.wake_due(later)
    await scheduler.wake_due(later)
    assert (await taken_again(scheduler)) is not None
    assert await taken_again(scheduler) is None


async def test_several_consumers_never_hold_one_workflow_twice_at_once() -> None:
    scheduler, clock = memory_scheduler()
    workflows = [f"wf-{i}" for i in range(40)]
    runs_each = 3
    rng = random.Random(23)
    out: set[str] = set()
    runs: Counter[str] = Counter()
    overlaps: list[str] = []

    await asyncio.gather(*(scheduler.make_ready(wf) for wf in workflows))

    async def consumer() -> None:
        for _ in range(10_000):
            if sum(runs.values()) == len(workflows) * runs_each:
                return
            delivery = await scheduler.next_ready(BRIEFLY)
            if delivery is None:
                continue
            if delivery.workflow in out:
                overlaps.append(delivery.workflow)
            out.add(delivery.workflow)
            for _ in range(rng.randrange(6)):
                await asyncio.sleep(0)
            runs[delivery.workflow] += 1
            if runs[delivery.workflow] < runs_each:
                await scheduler.wake_at(delivery, clock.now())  # run again at once
            else:
                await scheduler.done(delivery)
            out.discard(delivery.workflow)

    await asyncio.wait_for(asyncio.gather(*(consumer() for _ in range(8))), timeout=30)

    assert overlaps == []
    assert runs == dict.fromkeys(workflows, runs_each)


async def test_a_few_thousand_workflows_are_all_delivered() -> None:
    scheduler, clock = memory_scheduler()
    workflows = [f"order-{i}" for i in range(3000)]
    delivered: list[str] = []

    await asyncio.gather(*(scheduler.make_ready(wf) for wf in workflows))

    async def consumer() -> None:
        while (delivery := await scheduler.next_ready(BRIEFLY)) is not None:
            delivered.append(delivery.workflow)
            await scheduler.done(delivery)

    await asyncio.wait_for(asyncio.gather(*(consumer() for _ in range(6))), timeout=60)

    assert sorted(delivered) == sorted(workflows)
    clock.advance(LEASE * 2)
    assert await taken_again(scheduler) is None


async def test_deliveries_come_earliest_first_however_often_each_was_rescheduled() -> None:
    """The scheduler keeps a time-ordered index beside its entries (so that taking the
    next workflow does not scan every scheduled one); each rescheduling writes a new time
    and leaves the old one behind. Whatever the history, what is handed out is the
    earliest visible entry by (time, id), as a scan would find it, and nothing twice."""
    scheduler, clock = memory_scheduler()
    start = clock.now()
    chooser = random.Random(7)
    expected: dict[str, datetime] = {}
    for _ in range(5):
        for i in range(200):
            workflow = f"wf-{i}"
            await scheduler.make_ready(workflow)
            out = await taken(scheduler)
            when = start + timedelta(seconds=chooser.randrange(1, 1000))
            await scheduler.wake_at(out, when)
            expected[out.workflow] = when
        for i in chooser.sample(range(200), 20):  # cancelled ones are never handed out
            await scheduler.cancel(f"wf-{i}")
            expected.pop(f"wf-{i}", None)
    clock.advance(timedelta(seconds=2000))
    handed = []
    while (delivery := await scheduler.next_ready(BRIEFLY)) is not None:
        handed.append(delivery.workflow)
        await scheduler.done(delivery)
    assert handed == sorted(expected, key=lambda wf: (expected[wf], wf))
