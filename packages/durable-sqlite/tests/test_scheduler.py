"""Every Scheduler requirement of the contract, against the visibility-scored table."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from durable import Delivery, Scheduler
from durable.clock import ManualClock
from durable.interfaces import Observable
from durable_sqlite import SqliteDurable, SqliteScheduler, connect

LEASE = timedelta(seconds=30)  # what the store fixtures are built with
SOON = timedelta(milliseconds=50)
NOW = timedelta(0)


async def take(scheduler: SqliteScheduler) -> Delivery:
    delivery = await scheduler.next_ready(SOON)
    assert delivery is not None
    return delivery


def test_the_scheduler_meets_the_protocols_it_claims(store: SqliteDurable) -> None:
    assert isinstance(store.scheduler, Scheduler)
    assert isinstance(store.scheduler, Observable)
    assert store.scheduler.lease == LEASE


async def test_a_workflow_made_ready_is_delivered(store: SqliteDurable) -> None:
    await store.scheduler.make_ready("wf")
    assert (await take(store.scheduler)).workflow == "wf"
    assert await store.scheduler.next_ready(SOON) is None


async def test_next_ready_with_nothing_ready_gives_up_after_within(store: SqliteDurable) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await store.scheduler.next_ready(timedelta(milliseconds=120)) is None
    assert loop.time() - started >= 0.1


async def test_next_ready_wakes_for_a_make_ready_while_it_waits(store: SqliteDurable) -> None:
    waiting = asyncio.create_task(store.scheduler.next_ready(timedelta(seconds=5)))
    await asyncio.sleep(0.05)
    await store.scheduler.make_ready("wf")
    delivery = await asyncio.wait_for(waiting, timeout=1)
    assert delivery is not None
    assert delivery.workflow == "wf"


async def test_next_ready_sees_a_make_ready_from_another_connection(
    store: SqliteDurable, path: Path
) -> None:
    waiting = asyncio.create_task(store.scheduler.next_ready(timedelta(seconds=5)))
    async with connect(path) as other:
        await SqliteScheduler(other).make_ready("wf")
    delivery = await asyncio.wait_for(waiting, timeout=2)
    assert delivery is not None
    assert delivery.workflow == "wf"


async def test_the_earliest_visible_workflow_is_delivered_first(
    clocked: SqliteDurable, clock: ManualClock
) -> None:
    scheduler = clocked.scheduler
    for workflow in ("c", "a", "b"):
        await scheduler.make_ready(workflow)
        clock.advance(timedelta(seconds=1))
    assert [(await take(scheduler)).workflow for _ in range(3)] == ["c", "a", "b"]


async def test_make_ready_keeps_a_waiting_workflow_in_its_place(
    clocked: SqliteDurable, clock: ManualClock
) -> None:
    scheduler = clocked.scheduler
    await scheduler.make_ready("first")
    clock.advance(timedelta(seconds=1))
    await scheduler.make_ready("second")
    clock.advance(timedelta(seconds=1))
    await scheduler.make_ready("first")
    assert (await take(scheduler)).workflow == "first"


async def test_a_workflow_whose_taker_dies_is_delivered_again_after_the_lease(
    clocked: SqliteDurable, clock: ManualClock
) -> None:
    scheduler = clocked.scheduler
    await scheduler.make_ready("wf")
    lost = await take(scheduler)
    clock.advance(LEASE - timedelta(microseconds=1))
    assert await scheduler.next_ready(SOON) is None
    clock.advance(timedelta(microseconds=1))
    again = await take(scheduler)
    assert again.workflow == "wf"
    assert again.receipt != lost.receipt
    await scheduler.done(lost)  # the dead taker's late answer is for a delivery now gone
    assert await scheduler.scheduled("wf") is not None


async def test_a_make_ready_while_a_delivery_is_out_is_not_undone_by_its_wake_at(
    clocked: SqliteDurable, clock: ManualClock
) -> None:
    scheduler = clocked.scheduler
    await scheduler.make_ready("wf")
    delivery = await take(scheduler)
    await scheduler.make_ready("wf")  # a value arrived while the pass ran
    await scheduler.wake_at(delivery, clock.now() + timedelta(hours=1))
    assert (await take(scheduler)).workflow == "wf"


async def test_a_make_ready_while_a_delivery_is_out_is_not_undone_by_its_done(
    store: SqliteDurable,
) -> None:
    scheduler = store.scheduler
    await scheduler.make_ready("wf")
    delivery = await take(scheduler)
    await scheduler.make_ready("wf")
    await scheduler.done(delivery)
    assert (await take(scheduler)).workflow == "wf"


async def test_wake_at_schedules_the_workflow_and_answers_for_the_delivery(
    clocked: SqliteDurable, clock: ManualClock
) -> None:
    scheduler = clocked.scheduler
    await scheduler.make_ready("wf")
    delivery = await take(scheduler)
    when = clock.now() + timedelta(minutes=5)
    await scheduler.wake_at(delivery, when)
    assert await scheduler.scheduled("wf") == when
    clock.advance(timedelta(minutes=5) - timedelta(microseconds=1))
    assert await scheduler.next_ready(SOON) is None
    clock.advance(timedelta(microseconds=1))
    assert (await take(scheduler)).workflow == "wf"
    assert await scheduler.wake_due(clock.now()) == ()


async def test_wake_at_never_reinstates_a_workflow_cancelled_since_its_delivery(
    clocked: SqliteDurable, clock: ManualClock
) -> None:
    scheduler = clocked.scheduler
    await scheduler.make_ready("wf")
    delivery = await take(scheduler)
    await scheduler.cancel("wf")
    await scheduler.wake_at(delivery, clock.now())
    assert await scheduler.scheduled("wf") is None
    assert await scheduler.next_ready(SOON) is None


async def test_an_answer_for_a_cancelled_delivery_does_not_touch_a_new_one(
    store: SqliteDurable,
) -> None:
    scheduler = store.scheduler
    await scheduler.make_ready("wf")
    old = await take(scheduler)
    await scheduler.cancel("wf")
    await scheduler.make_ready("wf")
    new = await take(scheduler)
    await scheduler.done(old)
    await scheduler.wake_at(old, datetime.now(UTC))
    assert await scheduler.scheduled("wf") is not None
    await scheduler.done(new)
    assert await scheduler.scheduled("wf") is None


async def test_done_forgets_the_workflow(store: SqliteDurable) -> None:
    await store.scheduler.make_ready("wf")
    await store.scheduler.done(await take(store.scheduler))
    assert await store.scheduler.scheduled("wf") is None
    assert await store.scheduler.next_ready(SOON) is None


async def test_cancel_forgets_pending_and_scheduled_runs(
    clocked: SqliteDurable, clock: ManualClock
) -> None:
    scheduler = clocked.scheduler
    await scheduler.make_ready("pending")
    await scheduler.make_ready("sleeping")
    sleeping = await take(scheduler)
    assert sleeping.workflow == "pending"
    await scheduler.wake_at(sleeping, clock.now() + timedelta(hours=1))
    await scheduler.cancel("pending")
    await scheduler.cancel("sleeping")
    clock.advance(timedelta(hours=2))
    assert await scheduler.next_ready(SOON) is None


async def test_many_concurrent_takers_each_get_a_different_workflow(
    store: SqliteDurable,
) -> None:
    scheduler = store.scheduler
    workflows = [f"wf-{i:03d}" for i in range(100)]
    await asyncio.gather(*(scheduler.make_ready(w) for w in workflows))
    taken = await asyncio.gather(*(scheduler.next_ready(SOON) for _ in range(120)))
    delivered = [d.workflow for d in taken if d is not None]
    assert sorted(delivered) == workflows


async def test_reclaim_and_wake_due_have_nothing_to_do_on_a_scored_table(
    store: SqliteDurable,
) -> None:
    await store.scheduler.make_ready("wf")
    await take(store.scheduler)
    assert await store.scheduler.reclaim(timedelta(seconds=1)) is None
    assert await store.scheduler.wake_due(datetime.now(UTC)) == ()
    with pytest.raises(ValueError, match="idle must be positive"):
        await store.scheduler.reclaim(timedelta(0))


async def test_prepare_is_idempotent(store: SqliteDurable) -> None:
    await store.scheduler.make_ready("wf")
    await store.scheduler.prepare()
    await store.scheduler.prepare()
    assert (await take(store.scheduler)).workflow == "wf"


async def test_bad_arguments_are_refused(store: SqliteDurable) -> None:
    scheduler = store.scheduler
    with pytest.raises(ValueError, match="within must be positive"):
        await scheduler.next_ready(NOW)
    with pytest.raises(TypeError, match="aware datetime"):
        await scheduler.wake_at(Delivery("wf", "r"), datetime(2026, 1, 1))
    with pytest.raises(ValueError, match="lease must be positive"):
        SqliteScheduler(store.connection, lease=NOW)


async def test_a_waiting_next_ready_cancelled_as_work_arrives_is_cancelled(
    store: SqliteDurable,
) -> None:
    # The race is one turn of the loop wide, so give it several chances.
    for i in range(5):
        waiting = asyncio.create_task(store.scheduler.next_ready(timedelta(seconds=5)))
        await asyncio.sleep(0.03)
        await store.scheduler.make_ready(f"wf-{i}")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await store.scheduler.cancel(f"wf-{i}")  # so that the next round waits again
