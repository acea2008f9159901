"""The scheduler: when a workflow may run, and that nothing made ready is ever lost.

A workflow made ready is eventually delivered, even if its taker dies mid-pass and even if
the wakeup lands while a pass on it runs. Answering for a delivery (wake_at or done) never
undoes a make_ready that landed since it was taken, which is what the receipt is for, and
never reinstates a workflow cancelled since. wake_at schedules and answers in one call
because, as two calls, a deadline chosen by an ending pass overwrote a wakeup that had
just arrived, and a workflow that should have run at once waited out a settlement window.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import timedelta

from durable.interfaces import Delivery, Scheduler

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._support import (
    PATIENCE,
    delivered_during,
    next_delivery,
    now,
    seconds,
)

SHORT_LEASE = timedelta(seconds=1)
"""The lease the suite opens a scheduler with where it must watch one run out."""

WATCHED_LEASE = timedelta(seconds=2)
"""The lease the suite opens a scheduler with where it must watch one being honoured."""

PROMPTLY = 3.0
"""Seconds within which a workflow that is runnable now must be delivered."""

WORKFLOWS = 2000
"""A few thousand workflows for the tests of scale."""


async def _taken(scheduler: Scheduler, workflow: str) -> Delivery:
    await scheduler.make_ready(workflow)
    delivery = await next_delivery(scheduler, workflow=workflow)
    assert delivery is not None, f"{workflow!r} was made ready and never delivered"
    assert delivery.workflow == workflow
    return delivery


@requirement("scheduler.lease-is-positive")
async def test_scheduler_lease_is_a_positive_duration(store: StoreUnderTest) -> None:
    """The scheduler's lease is a positive timedelta."""
    lease = store.scheduler.lease
    assert isinstance(lease, timedelta), f"lease is {lease!r}, not a timedelta"
    assert lease > timedelta(0)


@requirement("scheduler.prepare-is-idempotent")
async def test_scheduler_prepare_may_be_called_again_from_any_handle(
    store: StoreUnderTest,
) -> None:
    """prepare is idempotent: calling it again, from several handles, leaves a working
    scheduler."""
    async with store.handles(2) as handles:
        for handle in handles:
            await handle.scheduler.prepare()
            await handle.scheduler.prepare()
    await _taken(store.scheduler, store.workflow())


@requirement("scheduler.made-ready-is-delivered")
async def test_scheduler_a_workflow_made_ready_is_delivered(store: StoreUnderTest) -> None:
    """make_ready is followed by a delivery of that workflow, carrying a receipt."""
    wf = store.workflow()
    delivery = await _taken(store.scheduler, wf)
    assert isinstance(delivery.receipt, str)
    assert delivery.receipt


@requirement("scheduler.next-ready-waits-for-work")
async def test_scheduler_next_ready_waits_up_to_within_and_wakes_for_work(
    store: StoreUnderTest,
) -> None:
    """next_ready on an empty scheduler returns None after waiting up to ``within``; one
    that is waiting returns promptly once another handle makes a workflow ready."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await store.scheduler.next_ready(seconds(0.3)) is None
    assert loop.time() - started < 0.3 + PROMPTLY, "next_ready waited far past its within"
    wf = store.workflow()
    async with store.handles(2) as handles:
        waiting = asyncio.create_task(handles[0].scheduler.next_ready(seconds(PATIENCE)))
        await asyncio.sleep(0.2)
        ready_at = loop.time()
        await handles[-1].scheduler.make_ready(wf)
        delivery = await waiting
    assert delivery is not None
    assert delivery.workflow == wf
    assert loop.time() - ready_at < PROMPTLY, "a waiting next_ready did not wake for new work"


@requirement("scheduler.taken-delivery-is-hidden")
async def test_scheduler_a_taken_delivery_is_hidden_from_other_consumers(
    store: StoreUnderTest,
) -> None:
    """While a delivery is out (within its lease), no other consumer is handed it."""
    wf = store.workflow()
    await _taken(store.scheduler, wf)
    window = min(0.5, store.scheduler.lease.total_seconds() / 2)
    async with store.handles(2) as handles:
        seen = await delivered_during(handles[-1].scheduler, window)
    assert [d.workflow for d in seen] == [], "a delivery still out was handed to another consumer"


@requirement("scheduler.lease-hides-a-taken-delivery")
async def test_scheduler_a_taken_delivery_stays_hidden_for_its_whole_lease(
    store: StoreUnderTest,
) -> None:
    """A taken delivery, unanswered, is handed to no other consumer until its lease has run
    out: not at a tenth of it, not past half of it."""
    async with store.with_options(lease=WATCHED_LEASE) as opened:
        wf = store.workflow()
        loop = asyncio.get_running_loop()
        taken_at = loop.time()
        await _taken(opened.scheduler, wf)
        lease = opened.scheduler.lease.total_seconds()
        window = lease * 0.6 - (loop.time() - taken_at)
        seen = await delivered_during(opened.scheduler, window)
    assert [d.workflow for d in seen] == [], (
        f"{wf!r}, taken and unanswered, was handed out again within "
        f"{lease * 0.6:.1f} s of a {lease:.1f} s lease"
    )


@requirement("scheduler.reclaim-spares-a-live-taker")
async def test_scheduler_reclaim_never_takes_a_delivery_taken_less_than_idle_ago(
    store: StoreUnderTest,
) -> None:
    """reclaim takes over only a delivery whose taker has not answered for ``idle``: one
    taken moments ago is left with its taker, on every handle."""
    wf = store.workflow()
    idle = min(5.0, store.scheduler.lease.total_seconds())
    loop = asyncio.get_running_loop()
    taken_at = loop.time()
    await _taken(store.scheduler, wf)
    taken_over: list[Delivery] = []
    async with store.handles(2) as handles:
        while loop.time() - taken_at < idle / 2:
            for handle in handles:
                delivery = await handle.scheduler.reclaim(seconds(idle))
                if delivery is not None:
                    taken_over.append(delivery)
            await asyncio.sleep(0.05)
    assert [d.workflow for d in taken_over] == [], (
        f"reclaim({idle:.1f} s) took over {wf!r}, taken less than {idle / 2:.1f} s ago"
    )


@requirement("scheduler.one-delivery-one-taker")
async def test_scheduler_concurrent_takers_are_each_handed_a_different_delivery(
    store: StoreUnderTest,
) -> None:
    """Many takers on several handles racing next_ready, none answering: each workflow made
    ready once is handed to exactly one of them."""
    tag = store.workflow("race")
    ids = [f"{tag}-{i}" for i in range(60)]
    handed: Counter[str] = Counter()
    loop = asyncio.get_running_loop()
    async with store.handles(4) as handles:
        for wf in ids:
            await store.scheduler.make_ready(wf)
        give_up = loop.time() + PATIENCE

        async def take(scheduler: Scheduler) -> None:
            while sum(handed.values()) < len(ids) and loop.time() < give_up:
                delivery = await scheduler.next_ready(seconds(0.1))
                if delivery is not None:
                    handed[delivery.workflow] += 1

        await asyncio.gather(*(take(h.scheduler) for h in handles for _ in range(4)))
    twice = sorted(wf for wf, n in handed.items() if n > 1)
    assert twice == [], f"{len(twice)} deliveries were handed to two takers, e.g. {twice[:3]}"
    never = sorted(set(ids) - set(handed))
    assert never == [], f"{len(never)} workflows made ready were never delivered"


@requirement("scheduler.dead-taker-redelivered")
async def test_scheduler_a_delivery_whose_taker_died_is_delivered_again(
    store: StoreUnderTest,
) -> None:
    """A taker that dies mid-pass, never answering, does not lose the workflow: it is
    delivered again (by next_ready once the lease runs out, or by reclaim) with a new
    receipt."""
    async with store.with_options(lease=SHORT_LEASE) as opened:
        scheduler = opened.scheduler
        wf = store.workflow()
        abandoned = await _taken(scheduler, wf)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + scheduler.lease.total_seconds() + PATIENCE
        again = None
        while again is None and loop.time() < give_up:
            again = await scheduler.reclaim(seconds(0.5))
            if again is None:
                again = await next_delivery(scheduler, within=0.2)
        assert again is not None, "a delivery whose taker died was never delivered again"
        assert again.workflow == wf
        assert again.receipt != abandoned.receipt


@requirement("scheduler.done-answers-for-the-delivery")
async def test_scheduler_done_answers_for_a_delivery_for_good(store: StoreUnderTest) -> None:
    """A delivery answered with done is not handed out again, not after its lease and not
    by reclaim."""
    async with store.with_options(lease=SHORT_LEASE) as opened:
        scheduler = opened.scheduler
        delivery = await _taken(scheduler, store.workflow())
        await scheduler.done(delivery)
        window = scheduler.lease.total_seconds() * 2 + 0.5
        assert await delivered_during(scheduler, window) == []
        assert await scheduler.reclaim(seconds(0.2)) is None


@requirement("scheduler.make-ready-during-a-pass-survives")
async def test_scheduler_a_wakeup_during_a_pass_survives_done(store: StoreUnderTest) -> None:
    """A make_ready that lands while a delivery is out is not undone by that delivery's
    done: the workflow is delivered again, promptly."""
    wf = store.workflow()
    async with store.handles(2) as handles:
        first = await _taken(handles[0].scheduler, wf)
        await handles[-1].scheduler.make_ready(wf)
        await handles[0].scheduler.done(first)
    again = await next_delivery(store.scheduler, within=PROMPTLY, workflow=wf)
    assert again is not None, "a wakeup that arrived during a pass was undone by its done"


@requirement("scheduler.make-ready-during-a-pass-survives")
async def test_scheduler_a_wakeup_during_a_pass_survives_wake_at(store: StoreUnderTest) -> None:
    """A make_ready that lands while a delivery is out beats the deadline that delivery's
    wake_at then chooses: the workflow runs now, not in an hour."""
    wf = store.workflow()
    async with store.handles(2) as handles:
        first = await _taken(handles[0].scheduler, wf)
        await handles[-1].scheduler.make_ready(wf)
        await handles[0].scheduler.wake_at(first, now() + timedelta(hours=1))
    again = await next_delivery(store.scheduler, within=PROMPTLY, workflow=wf)
    assert again is not None, "a wakeup that arrived during a pass was undone by its wake_at"


@requirement("scheduler.receipts-tell-deliveries-apart")
async def test_scheduler_a_stale_receipt_answers_for_nothing_newer(store: StoreUnderTest) -> None:
    """Two deliveries of one workflow carry different receipts, and answering for the
    older one does not undo what the newer one then schedules."""
    scheduler = store.scheduler
    wf = store.workflow()
    first = await _taken(scheduler, wf)
    await scheduler.make_ready(wf)
    second = await next_delivery(scheduler, within=1.0, workflow=wf)
    if second is None:
        # This store defers a wakeup that lands during a pass until the pass answers.
        await scheduler.done(first)
        second = await next_delivery(scheduler, within=PROMPTLY, workflow=wf)
        assert second is not None, "a wakeup that arrived during a pass was lost"
    assert second.receipt != first.receipt, "two deliveries of one workflow share a receipt"
    await scheduler.wake_at(second, now() + seconds(0.3))
    await scheduler.done(first)
    third = await next_delivery(scheduler, workflow=wf)
    assert third is not None, "an answer for a stale receipt undid the newer delivery's wake_at"


@requirement("scheduler.wake-at-schedules-and-answers")
async def test_scheduler_wake_at_runs_the_workflow_at_its_moment_and_not_before(
    store: StoreUnderTest,
) -> None:
    """wake_at answers for the delivery and schedules the workflow: nothing is delivered
    before the moment, and it is delivered after it."""
    scheduler = store.scheduler
    wf = store.workflow()
    delivery = await _taken(scheduler, wf)
    loop = asyncio.get_running_loop()
    asked = loop.time()
    await scheduler.wake_at(delivery, now() + seconds(1.0))
    assert await delivered_during(scheduler, 0.5) == [], "woken before its moment"
    again = await next_delivery(scheduler, workflow=wf)
    assert again is not None, "a workflow scheduled for a moment past was never delivered"
    assert loop.time() - asked >= 0.9, "woken before its moment"


@requirement("scheduler.wake-at-schedules-and-answers")
async def test_scheduler_wake_at_in_the_past_is_due_at_once(store: StoreUnderTest) -> None:
    """A moment already past makes the workflow due at once."""
    scheduler = store.scheduler
    wf = store.workflow()
    delivery = await _taken(scheduler, wf)
    await scheduler.wake_at(delivery, now() - timedelta(seconds=5))
    assert await next_delivery(scheduler, within=PROMPTLY, workflow=wf) is not None


@requirement("scheduler.wake-at-schedules-and-answers")
async def test_scheduler_wake_at_answers_so_the_lease_does_not_redeliver(
    store: StoreUnderTest,
) -> None:
    """A delivery answered by wake_at for a far moment is not handed out again when its
    lease runs out, nor by reclaim."""
    async with store.with_options(lease=SHORT_LEASE) as opened:
        scheduler = opened.scheduler
        delivery = await _taken(scheduler, store.workflow())
        await scheduler.wake_at(delivery, now() + timedelta(hours=1))
        window = scheduler.lease.total_seconds() * 2 + 0.5
        assert await delivered_during(scheduler, window) == []
        assert await scheduler.reclaim(seconds(0.2)) is None


@requirement("scheduler.cancel-forgets")
async def test_scheduler_cancel_forgets_pending_and_scheduled_runs(store: StoreUnderTest) -> None:
    """cancel forgets a workflow made ready and one scheduled for later alike."""
    scheduler = store.scheduler
    pending, scheduled = store.workflow("pending"), store.workflow("scheduled")
    delivery = await _taken(scheduler, scheduled)
    await scheduler.wake_at(delivery, now() + seconds(0.3))
    await scheduler.make_ready(pending)
    await scheduler.cancel(pending)
    await scheduler.cancel(scheduled)
    seen = await delivered_during(scheduler, 1.0)
    assert [d.workflow for d in seen] == [], "a cancelled workflow was delivered"


@requirement("scheduler.cancelled-is-not-reinstated")
async def test_scheduler_wake_at_does_not_reinstate_a_cancelled_workflow(
    store: StoreUnderTest,
) -> None:
    """A workflow cancelled while its delivery is out stays cancelled: the delivery's
    wake_at, for now or later, schedules nothing."""
    wf, later = store.workflow(), store.workflow("later")
    async with store.handles(2) as handles:
        scheduler, other = handles[0].scheduler, handles[-1].scheduler
        out = await _taken(scheduler, wf)
        out_later = await _taken(scheduler, later)
        await other.cancel(wf)
        await other.cancel(later)
        await scheduler.wake_at(out, now())
        await scheduler.wake_at(out_later, now() + seconds(0.3))
    seen = await delivered_during(store.scheduler, 1.0)
    assert [d.workflow for d in seen] == [], "wake_at reinstated a cancelled workflow"


@requirement("scheduler.cancelled-is-not-reinstated")
async def test_scheduler_a_cancelled_delivery_is_not_redelivered_by_its_lease(
    store: StoreUnderTest,
) -> None:
    """A workflow cancelled while its delivery is out is not handed out again when the
    lease runs out, nor by reclaim, and done for it changes nothing."""
    async with store.with_options(lease=SHORT_LEASE) as opened:
        scheduler = opened.scheduler
        wf = store.workflow()
        out = await _taken(scheduler, wf)
        await scheduler.cancel(wf)
        window = scheduler.lease.total_seconds() * 2 + 0.5
        assert await scheduler.reclaim(seconds(0.2)) is None
        assert await delivered_during(scheduler, window) == []
        await scheduler.done(out)
        assert await delivered_during(scheduler, 0.3) == []


@requirement("scheduler.honours-cancellation")
async def test_scheduler_a_cancelled_wait_for_work_ends_cancelled(store: StoreUnderTest) -> None:
    """next_ready and reclaim, cancelled before they start or while they wait, end with
    CancelledError promptly: a worker that is cancelled must stop, not take more work."""
    scheduler = store.scheduler
    calls: dict[str, Callable[[], Awaitable[Delivery | None]]] = {
        "next_ready": lambda: scheduler.next_ready(seconds(PATIENCE)),
        "reclaim": lambda: scheduler.reclaim(seconds(PATIENCE)),
    }
    for name, call in calls.items():
        for delay in (None, 0.0, 0.01, 0.1):
            waiting = asyncio.ensure_future(call())
            if delay is not None:
                await asyncio.sleep(delay)
            if not waiting.cancel():
                await waiting  # it had already answered: nothing to cancel
                continue
            when = "before it started" if delay is None else f"after {delay} s"
            try:
                result = await asyncio.wait_for(asyncio.shield(waiting), PROMPTLY)
            except asyncio.CancelledError:
                continue
            except TimeoutError:
                waiting.cancel()
                raise AssertionError(
                    f"{name}, cancelled {when}, was still running {PROMPTLY:.0f} s later"
                ) from None
            raise AssertionError(
                f"{name}, cancelled {when}, swallowed the cancellation and returned {result!r}"
            )


@requirement("scheduler.wake-due-moves-each-once")
async def test_scheduler_wake_due_moves_each_due_workflow_once_under_concurrent_timers(
    store: StoreUnderTest,
) -> None:
    """Many timers on several handles calling wake_due at once move each due workflow at
    most once between them, move nothing not yet due, and every due workflow is then
    delivered."""
    scheduler = store.scheduler
    tag = store.workflow("timer")
    due = {f"{tag}-due-{i}" for i in range(200)}
    later = {f"{tag}-later-{i}" for i in range(50)}
    for wf in sorted(due | later):
        await scheduler.make_ready(wf)
    taken: dict[str, Delivery] = {}
    loop = asyncio.get_running_loop()
    give_up = loop.time() + PATIENCE * 3
    while len(taken) < len(due | later) and loop.time() < give_up:
        delivery = await scheduler.next_ready(seconds(0.1))
        if delivery is not None:
            taken[delivery.workflow] = delivery
    assert set(taken) == due | later, f"{len(due | later) - len(taken)} were never delivered"
    soon, far = now() + seconds(0.3), now() + timedelta(hours=1)
    for wf, delivery in taken.items():
        await scheduler.wake_at(delivery, soon if wf in due else far)
    await asyncio.sleep(0.5)
    moment = now()
    async with store.handles(4) as handles:
        timers = [h.scheduler.wake_due(moment) for h in handles for _ in range(3)]
        moved = [wf for result in await asyncio.gather(*timers) for wf in result]
    twice = [wf for wf, n in Counter(moved).items() if n > 1]
    assert twice == [], f"concurrent timers moved {len(twice)} workflows more than once"
    assert set(moved) <= due, f"wake_due moved {sorted(set(moved) - due)[:3]}, not yet due"
    delivered: set[str] = set()
    give_up = loop.time() + PATIENCE * 3
    while delivered != due and loop.time() < give_up:
        delivery = await next_delivery(scheduler, within=1.0)
        if delivery is not None:
            delivered.add(delivery.workflow)
            await scheduler.done(delivery)
    assert delivered == due, (
        f"{len(due - delivered)} due workflows were never delivered; "
        f"{len(delivered - due)} not due were"
    )


@requirement("scheduler.nothing-made-ready-is-lost")
async def test_scheduler_thousands_of_workflows_reach_several_consumers_none_lost(
    store: StoreUnderTest,
) -> None:
    """A few thousand workflows made ready from several handles, taken by several consumers
    on several handles, one in ten woken again while its pass runs: every workflow is
    delivered, and every one woken during its pass is delivered again."""
    tag = store.workflow("scale")
    ids = [f"{tag}-{i}" for i in range(WORKFLOWS)]
    woken_during_pass = set(ids[::10])
    seen: Counter[str] = Counter()
    finished = asyncio.Event()
    loop = asyncio.get_running_loop()
    progress = [loop.time()]

    def complete() -> bool:
        return len(seen) == len(ids) and all(seen[wf] >= 2 for wf in woken_during_pass)

    async with store.handles(4) as handles:
        gate = asyncio.Semaphore(64)

        async def make_ready(i: int, wf: str) -> None:
            async with gate:
                await handles[i % len(handles)].scheduler.make_ready(wf)

        async def consume(i: int) -> None:
            scheduler = handles[i % len(handles)].scheduler
            waker = handles[(i + 1) % len(handles)].scheduler
            while not finished.is_set():
                await scheduler.wake_due(now())
                delivery = await scheduler.next_ready(seconds(0.1))
                if delivery is None:
                    continue
                progress[0] = loop.time()
                seen[delivery.workflow] += 1
                if delivery.workflow in woken_during_pass and seen[delivery.workflow] == 1:
                    await waker.make_ready(delivery.workflow)
                await scheduler.done(delivery)
                if complete():
                    finished.set()

        consumers = [asyncio.create_task(consume(i)) for i in range(8)]
        try:
            await asyncio.gather(*(make_ready(i, wf) for i, wf in enumerate(ids)))
            # Wait while deliveries keep coming; a store that has lost some stops delivering,
            # and is failed once nothing has arrived for a while.
            while loop.time() - progress[0] < PATIENCE:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(finished.wait(), 0.1)
                if finished.is_set():
                    break
        finally:
            finished.set()
            await asyncio.gather(*consumers)
    lost = [wf for wf in ids if seen[wf] == 0]
    undone = [wf for wf in woken_during_pass if seen[wf] < 2]
    assert lost == [], f"{len(lost)} of {WORKFLOWS} workflows made ready were never delivered"
    assert undone == [], f"{len(undone)} wakeups that arrived during a pass were lost"
