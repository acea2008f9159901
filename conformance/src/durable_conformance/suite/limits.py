"""Queue limits: a scheduler that limits each queue (``durable.interfaces.Limited``, the
``limits`` capability) counts slots and hand-outs in the store, so every taker on every
handle shares one limit, and a dead taker's slot comes back by itself.

Each test names queues of its own and removes its limits at the end, so that nothing it
leaves behind limits another test's workflows.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from durable.interfaces import Delivery, Limited, QueueLimit

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._lifecycle import lifecycle
from durable_conformance.suite._support import PATIENCE
from durable_conformance.suite.lifecycle import INPUT, unique_kind
from durable_conformance.suite.queues import unique_queue

SHORT = timedelta(milliseconds=100)

SLOT_LEASE = timedelta(seconds=1)
"""The lease the suite opens a scheduler with where it must watch a slot lapse."""
CLOCK_SLACK = 0.01
"""Seconds a store's clock may lag the event loop's over a second: its resolution (whole
milliseconds) and the two clocks' drift, far below a hand-out too many."""


def limited(handle: Any) -> Limited:
    scheduler = handle.scheduler
    assert isinstance(scheduler, Limited), f"{handle!r} declares 'limits' but is not Limited"
    return scheduler


async def _ready(handle: Any, queue: str, labels: list[str], store: StoreUnderTest) -> list[str]:
    """Admit one workflow a label in ``queue`` and make each ready, in order."""
    lc = lifecycle(store) if handle is store.durable else handle.checkpointer
    kind = unique_kind()
    made = []
    for label in labels:
        wf = store.workflow(label)
        await lc.admit(wf, kind, INPUT, queue=queue)
        await handle.scheduler.make_ready(wf)
        made.append(wf)
    return made


@asynccontextmanager
async def _limit(handle: Any, queue: str, limit: QueueLimit) -> AsyncIterator[Limited]:
    scheduler = limited(handle)
    await scheduler.set_limit(queue, limit)
    try:
        yield scheduler
    finally:
        await scheduler.set_limit(queue, None)


async def _take(handle: Any, queue: str, within: timedelta = SHORT) -> Delivery | None:
    limited(handle)
    delivery: Delivery | None = await handle.scheduler.next_ready_in(frozenset({queue}), within)
    return delivery


@requirement("limits.never-more-than-the-limit", capability="limits")
async def test_limits_racing_takers_on_every_handle_share_one_concurrency_limit(
    store: StoreUnderTest,
) -> None:
    """Eight workflows of a queue limited to 3 at once are ready; twelve takes race on three
    handles. Exactly three are handed out, each holding a slot, and every handle counts 3
    held; a workflow of an unlimited queue is handed out beside them without a slot."""
    queue, free = unique_queue("limited"), unique_queue("free")
    async with store.handles(3) as handles, _limit(handles[0], queue, QueueLimit(3)):
        await _ready(store.durable, queue, [f"l{i}" for i in range(8)], store)
        results = await asyncio.gather(
            *(_take(handle, queue) for handle in handles for _ in range(4))
        )
        taken = [d for d in results if d is not None]
        assert len(taken) == 3, (
            f"takers of a queue limited to 3 were handed {len(taken)}: "
            f"{sorted(d.workflow for d in taken)}"
        )
        assert len({d.workflow for d in taken}) == 3, taken
        assert all(d.slot for d in taken), f"a hand-out of a limited queue took no slot: {taken}"
        for handle in handles:
            assert await limited(handle).held(queue) == 3, handle
        assert await _take(handles[1], queue) is None, "a fourth was handed out"
        (other,) = await _ready(store.durable, free, ["free"], store)
        unlimited = await _take(handles[2], free)
        assert unlimited is not None, unlimited
        assert unlimited.workflow == other, unlimited
        assert unlimited.slot is False, f"an unlimited queue's hand-out took a slot: {unlimited}"
        assert await limited(handles[0]).held(free) == 0
        await handles[2].scheduler.done(unlimited)
        for delivery in taken:
            await store.scheduler.done(delivery)


@requirement("limits.slot-returns-on-answer", capability="limits")
async def test_limits_answering_for_a_delivery_gives_its_slot_back_at_once(
    store: StoreUnderTest,
) -> None:
    """A queue limited to 1 with three ready: after the first hand-out no other is handed
    out; ``done`` on it lets the next take (on another handle) hand out the second at
    once, and ``wake_at`` on that one the third."""
    queue = unique_queue("one")
    async with store.handles(2) as handles, _limit(handles[0], queue, QueueLimit(1)):
        await _ready(store.durable, queue, ["a", "b", "c"], store)
        first = await _take(handles[0], queue)
        assert first is not None, first
        assert first.slot, first
        assert await _take(handles[1], queue) is None, "a second was handed out beside the first"
        await handles[0].scheduler.done(first)
        second = await _take(handles[1], queue, timedelta(seconds=PATIENCE))
        assert second is not None, "done did not give the slot back"
        assert second.workflow != first.workflow, (first, second)
        assert second.slot, second
        assert await _take(handles[0], queue) is None, "a slot was handed out twice"
        await handles[1].scheduler.wake_at(second, datetime.now(UTC) + timedelta(hours=1))
        third = await _take(handles[0], queue, timedelta(seconds=PATIENCE))
        assert third is not None, "wake_at did not give the slot back"
        assert third.workflow not in (first.workflow, second.workflow), third
        assert await limited(handles[1]).held(queue) == 1
        await store.scheduler.done(third)
        assert await limited(handles[1]).held(queue) == 0
        await store.scheduler.cancel(second.workflow)


@requirement("limits.slot-returns-after-liveness", capability="limits")
async def test_limits_a_slot_never_answered_comes_back_when_its_liveness_runs_out(
    store: StoreUnderTest,
) -> None:
    """A queue limited to 1, a scheduler with a 1 s lease. A taker takes a slot and dies
    (never answers, never holds). For most of the lease no take is handed anything; once
    the lease has run out a take is handed a workflow again, with a slot, and at no moment
    are two slots held."""
    queue = unique_queue("lapse")
    async with store.with_options(lease=SLOT_LEASE) as opened:
        await _ready_on(opened, queue, ["a", "b"], store)
        async with _limit(opened, queue, QueueLimit(1)) as scheduler:
            loop = asyncio.get_running_loop()
            dead = await _take(opened, queue)
            taken_at = loop.time()
            assert dead is not None, dead
            assert dead.slot, dead
            lease = opened.scheduler.lease.total_seconds()
            while loop.time() - taken_at < lease * 0.6:
                early = await _take(opened, queue)
                assert early is None, (
                    f"a take was handed {early} {loop.time() - taken_at:.2f} s into a "
                    f"{lease:.1f} s slot that nobody gave back"
                )
            again = None
            give_up = taken_at + lease + PATIENCE
            while again is None and loop.time() < give_up:
                assert await scheduler.held(queue) <= 1
                again = await _take(opened, queue)
            assert again is not None, (
                f"the slot of a taker that died was not given back {lease + PATIENCE:.0f} s "
                "after it was taken: a killed worker's slot is leaked"
            )
            assert again.slot, again
            assert await scheduler.held(queue) == 1
            await opened.scheduler.done(again)
            for wf in (dead.workflow, again.workflow):
                await opened.scheduler.cancel(wf)


async def _ready_on(handle: Any, queue: str, labels: list[str], store: StoreUnderTest) -> None:
    kind = unique_kind()
    for label in labels:
        wf = store.workflow(label)
        await handle.checkpointer.admit(wf, kind, INPUT, queue=queue)
        await handle.scheduler.make_ready(wf)


@requirement("limits.hold-keeps-the-slot", capability="limits")
async def test_limits_a_held_slot_stays_taken_past_the_lease(store: StoreUnderTest) -> None:
    """A queue limited to 1, a 1 s lease: a slot held every 0.3 s for 2.5 s stays taken all
    that while (no take is handed anything, ``held`` is 1); once its delivery is answered,
    ``hold`` is refused and the slot is free."""
    queue = unique_queue("held")
    async with store.with_options(lease=SLOT_LEASE) as opened:
        await _ready_on(opened, queue, ["a", "b"], store)
        async with _limit(opened, queue, QueueLimit(1)) as scheduler:
            loop = asyncio.get_running_loop()
            holder = await _take(opened, queue)
            assert holder is not None, holder
            assert holder.slot, holder
            until = loop.time() + 2.5
            while loop.time() < until:
                assert await scheduler.hold(holder, SLOT_LEASE), "a live slot's hold was refused"
                assert await scheduler.held(queue) == 1
                stolen = await _take(opened, queue, timedelta(milliseconds=300))
                assert stolen is None, f"a held slot was handed out again: {stolen}"
            await opened.scheduler.done(holder)
            assert not await scheduler.hold(holder, SLOT_LEASE), "hold revived an answered slot"
            assert await scheduler.held(queue) == 0
            nxt = await _take(opened, queue, timedelta(seconds=PATIENCE))
            assert nxt is not None, "the slot was not free after done"
            await opened.scheduler.done(nxt)
            await opened.scheduler.cancel(holder.workflow)


@requirement("limits.rate-bounds-hand-outs", capability="limits")
async def test_limits_no_second_holds_more_hand_outs_than_the_rate(store: StoreUnderTest) -> None:
    """A queue with a rate of 3 a second and twelve ready: two handles take and answer as
    fast as they can for 2.2 s. Each hand-out happened at a store moment between the call
    and its return, so four whose calls all began and returned within one second are four in
    one second: there are none. The first three go at once."""
    queue = unique_queue("rate")
    rate = 3
    async with store.handles(2) as handles, _limit(handles[0], queue, QueueLimit(rate=rate)):
        await _ready(store.durable, queue, [f"r{i}" for i in range(12)], store)
        loop = asyncio.get_running_loop()
        began = loop.time()
        spans: list[tuple[float, float]] = []

        async def taker(handle: Any) -> None:
            while loop.time() - began < 2.2:
                called = loop.time()
                delivery = await _take(handle, queue, timedelta(milliseconds=50))
                if delivery is not None:
                    spans.append((called, loop.time()))
                    assert delivery.slot is False, "a rate alone took a slot"
                    await handle.scheduler.done(delivery)

        await asyncio.gather(*(taker(handle) for handle in handles))
    assert len(spans) >= rate, f"only {len(spans)} handed out in 2.2 s at a rate of {rate}"
    spans.sort()
    for i, (first_called, _) in enumerate(spans):
        # The rate + 1 hand-outs from this call on that returned soonest: the tightest
        # group that starts here.
        returns = sorted(returned for _, returned in spans[i:])
        # The store times its rate by its own clock, which may keep whole milliseconds
        # and is not the event loop's: a second by the store may be a few milliseconds
        # short of one by the loop (seen: 0.999 s on SQLite's clock).
        if len(returns) > rate and returns[rate] - first_called < 1.0 - CLOCK_SLACK:
            shown = [(round(a - began, 3), round(b - began, 3)) for a, b in spans]
            raise AssertionError(
                f"{rate + 1} hand-outs within {returns[rate] - first_called:.3f} s at a rate "
                f"of {rate} a second (call, return): {shown}"
            )
    assert spans[rate - 1][1] - began < 0.9, "the first hand-outs at a rate were held back"


@requirement("limits.priority-first", capability="limits")
async def test_limits_a_higher_priority_is_handed_out_first_within_a_queue(
    store: StoreUnderTest,
) -> None:
    """Three workflows of priority 0 made ready first, then one of 2 and one of 5: the
    takes hand out 5, then 2, then the three in the order they became ready."""
    queue = unique_queue("prio")
    scheduler = limited(store.durable)
    lc = lifecycle(store)
    kind = unique_kind()
    order = [(store.workflow(label), p) for label, p in (("l0", 0), ("l1", 0), ("l2", 0))]
    order += [(store.workflow("mid"), 2), (store.workflow("high"), 5)]
    for wf, priority in order:
        await lc.admit(wf, kind, INPUT, queue=queue)
        if priority:
            await scheduler.prioritize(wf, priority)
        await store.scheduler.make_ready(wf)
        await asyncio.sleep(0.005)  # ready in this order by any store's clock
    taken: list[str] = []
    for _ in range(5):
        delivery = await _take(store.durable, queue)
        assert delivery is not None, f"only {taken} handed out"
        taken.append(delivery.workflow)
        await store.scheduler.done(delivery)
    expected = [order[4][0], order[3][0], order[0][0], order[1][0], order[2][0]]
    assert taken == expected, f"handed out {taken}, not by priority then ready order"
    with pytest.raises(TypeError):
        await scheduler.prioritize(order[0][0], "high")  # type: ignore[arg-type]


@requirement("limits.kept-in-the-store", capability="limits")
async def test_limits_a_limit_set_on_one_handle_is_every_handles(store: StoreUnderTest) -> None:
    """A limit set through one handle is read by another and enforced by it; removing it
    through the second removes it for the first; a bad queue name is refused with nothing
    kept."""
    queue = unique_queue("kept")
    async with store.handles(2) as handles:
        first, second = limited(handles[0]), limited(handles[1])
        await first.set_limit(queue, QueueLimit(concurrent=2, rate=50))
        try:
            assert (await second.limits()).get(queue) == QueueLimit(2, 50)
            await _ready(store.durable, queue, ["a", "b", "c"], store)
            taken = [await _take(handles[1], queue), await _take(handles[1], queue)]
            assert all(d is not None and d.slot for d in taken), taken
            assert await _take(handles[0], queue) is None, "the first handle ignored the limit"
            await second.set_limit(queue, None)
            assert queue not in await first.limits()
            third = await _take(handles[0], queue, timedelta(seconds=PATIENCE))
            assert third is not None, "removing the limit did not free the queue"
            assert third.slot is False, third
            for delivery in [*taken, third]:
                assert delivery is not None
                await store.scheduler.done(delivery)
        finally:
            await first.set_limit(queue, None)
        with pytest.raises(ValueError, match="not allowed"):
            await first.set_limit("a b", QueueLimit(1))
        assert "a b" not in await second.limits()


async def _take_any(
    handle: Any, mine: set[str], within: float = 0.3, *, reclaim: timedelta | None = None
) -> Delivery | None:
    """One delivery of ``mine`` through the takes that name no queue (``next_ready``, or
    ``reclaim`` with ``reclaim`` as its ``idle``) within ``within`` seconds, or ``None``.
    Another test's workflow handed out on the way is answered with ``done``."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + within
    while (remaining := give_up - loop.time()) > 0:
        wait = timedelta(seconds=min(0.1, max(remaining, 0.001)))
        if reclaim is None:
            delivery: Delivery | None = await handle.scheduler.next_ready(wait)
        else:
            delivery = await handle.scheduler.reclaim(reclaim)
            if delivery is None:
                await asyncio.sleep(min(0.05, max(remaining, 0.001)))
        if delivery is None:
            continue
        if delivery.workflow in mine:
            return delivery
        await handle.scheduler.done(delivery)
    return None


@requirement("limits.every-take-honours-the-limits", capability="limits")
async def test_limits_next_ready_and_reclaim_honour_the_limits_too(store: StoreUnderTest) -> None:
    """A worker of an older release takes with ``next_ready`` and ``reclaim``, naming no
    queue: those takes count slots as ``next_ready_in`` does. A queue limited to 1 (1 s
    lease): ``next_ready`` hands out one of two ready with a slot and not the other. A
    third, taken before the limit was set by a taker that died, lapses and is ready again;
    until the first slot comes back neither ``next_ready`` nor ``reclaim`` hands it (or the
    second) out, and once ``done`` gives the slot back a take hands out one of them."""
    queue = unique_queue("older")
    async with store.with_options(lease=SLOT_LEASE) as opened:
        scheduler = limited(opened)
        loop = asyncio.get_running_loop()
        await _ready_on(opened, queue, ["dead"], store)
        dead = await _take(opened, queue, timedelta(seconds=PATIENCE))
        died_at = loop.time()
        assert dead is not None, dead
        async with _limit(opened, queue, QueueLimit(1)):
            made = await _ready_list(opened, queue, ["a", "b"], store)
            mine = {dead.workflow, *made}
            holder = await _take_any(opened, mine, PATIENCE)
            assert holder is not None, "next_ready handed out nothing of a queue with a free slot"
            assert holder.slot, (
                f"next_ready handed out a limited queue's workflow without a slot: {holder}"
            )
            assert await scheduler.hold(holder, timedelta(seconds=60))
            assert await scheduler.held(queue) == 1
            other = await _take_any(opened, mine - {holder.workflow})
            assert other is None, f"next_ready handed out {other} beside a queue's only slot"
            # The dead taker's delivery lapses after the lease and is ready again: still no
            # take hands it out while the slot is held.
            while loop.time() < died_at + 2 * SLOT_LEASE.total_seconds():
                for idle in (None, timedelta(milliseconds=200)):
                    extra = await _take_any(opened, mine, 0.1, reclaim=idle)
                    how = "next_ready" if idle is None else "reclaim"
                    if extra is not None and extra.workflow == holder.workflow:
                        # Handing the holder's workflow out again replaces its slot.
                        assert extra.slot, f"{how} handed out {extra} without a slot"
                        holder = extra
                        assert await scheduler.hold(holder, timedelta(seconds=60))
                        continue
                    assert extra is None, (
                        f"{how} handed out {extra} of a queue limited to 1 whose slot "
                        f"{holder.workflow} holds"
                    )
                assert await scheduler.held(queue) == 1
            await opened.scheduler.done(holder)
            nxt = await _take_any(opened, mine - {holder.workflow}, PATIENCE)
            assert nxt is not None, "next_ready handed nothing out once the slot came back"
            assert nxt.slot, nxt
            await opened.scheduler.done(nxt)
            for wf in mine:
                await opened.scheduler.cancel(wf)


async def _ready_list(
    handle: Any, queue: str, labels: list[str], store: StoreUnderTest
) -> list[str]:
    kind = unique_kind()
    made = []
    for label in labels:
        wf = store.workflow(label)
        await handle.checkpointer.admit(wf, kind, INPUT, queue=queue)
        await handle.scheduler.make_ready(wf)
        made.append(wf)
    return made


@requirement("limits.slot-returns-on-cancel", capability="limits")
async def test_limits_cancelling_a_workflow_gives_its_slot_back_at_once(
    store: StoreUnderTest,
) -> None:
    """A queue limited to 1 with two ready: the first hand-out holds the slot; cancelling
    its workflow (on another handle) frees the slot at once (``held`` is 0 right after) and
    the next take hands out the second, with a slot."""
    queue = unique_queue("cancel")
    async with store.handles(2) as handles, _limit(handles[0], queue, QueueLimit(1)):
        await _ready(store.durable, queue, ["a", "b"], store)
        first = await _take(handles[0], queue)
        assert first is not None, first
        assert first.slot, first
        assert await _take(handles[1], queue) is None, "a second was handed out beside the first"
        await handles[1].scheduler.cancel(first.workflow)
        assert await limited(handles[0]).held(queue) == 0, (
            "the slot of a cancelled workflow was still held after cancel returned"
        )
        second = await _take(handles[0], queue, timedelta(seconds=PATIENCE))
        assert second is not None, "cancel did not give the slot back"
        assert second.workflow != first.workflow, (first, second)
        assert second.slot, second
        assert not await limited(handles[1]).hold(first, SLOT_LEASE), (
            "hold revived the slot of a cancelled workflow"
        )
        assert await limited(handles[1]).held(queue) == 1
        await store.scheduler.done(second)


@requirement("limits.lowering-takes-nothing-back", capability="limits")
async def test_limits_lowering_a_limit_below_the_slots_held_takes_nothing_back(
    store: StoreUnderTest,
) -> None:
    """A queue limited to 2 with four ready hands out two; the limit lowered to 1 (on
    another handle) takes neither slot back (``held`` is 2, each ``hold`` is kept) and
    hands out nothing; one slot coming back still leaves the queue at its new limit, and
    only the second coming back lets the next take hand one out."""
    queue = unique_queue("lower")
    async with store.handles(2) as handles, _limit(handles[0], queue, QueueLimit(2)):
        await _ready(store.durable, queue, ["a", "b", "c", "d"], store)
        taken = [await _take(handles[0], queue), await _take(handles[0], queue)]
        first, second = taken
        assert first is not None, taken
        assert second is not None, taken
        assert first.slot, taken
        assert second.slot, taken
        await limited(handles[1]).set_limit(queue, QueueLimit(1))
        assert await limited(handles[0]).held(queue) == 2, "lowering the limit took a slot back"
        for delivery in (first, second):
            assert await limited(handles[0]).hold(delivery, timedelta(seconds=60)), (
                f"lowering the limit took back the slot of {delivery}"
            )
        assert await _take(handles[0], queue) is None, "a take went past a lowered limit"
        await handles[0].scheduler.done(first)
        assert await limited(handles[1]).held(queue) == 1
        stray = await _take(handles[1], queue)
        assert stray is None, f"{stray} was handed out with the queue at its lowered limit of 1"
        await handles[0].scheduler.done(second)
        third = await _take(handles[1], queue, timedelta(seconds=PATIENCE))
        assert third is not None, "the queue stayed shut once its slots came back"
        assert third.slot, third
        assert await _take(handles[0], queue) is None, "a second was handed out at a limit of 1"
        await store.scheduler.done(third)


@requirement("limits.hold-refused-once-lapsed-or-handed-anew", capability="limits")
async def test_limits_hold_is_refused_for_a_lapsed_slot_and_a_delivery_handed_out_anew(
    store: StoreUnderTest,
) -> None:
    """A queue limited to 1, a 1 s lease. A taker stalls past its slot's liveness: once the
    slot has lapsed (``held`` 0), its ``hold`` is ``False`` and revives nothing (``held``
    stays 0). The workflow is handed out anew; the stalled taker's ``hold`` is still
    ``False``, the new taker's is ``True``, and one slot is held."""
    queue = unique_queue("stall")
    async with store.with_options(lease=SLOT_LEASE) as opened:
        (wf,) = await _ready_list(opened, queue, ["a"], store)
        async with _limit(opened, queue, QueueLimit(1)) as scheduler:
            loop = asyncio.get_running_loop()
            stalled = await _take(opened, queue, timedelta(seconds=PATIENCE))
            assert stalled is not None, stalled
            assert stalled.slot, stalled
            give_up = loop.time() + SLOT_LEASE.total_seconds() + PATIENCE
            while await scheduler.held(queue):
                if loop.time() > give_up:
                    break
                await asyncio.sleep(0.05)
            assert await scheduler.held(queue) == 0, "the slot never lapsed"
            assert not await scheduler.hold(stalled, SLOT_LEASE), "hold revived a lapsed slot"
            assert await scheduler.held(queue) == 0, "a refused hold wrote the slot back"
            anew = await _take(opened, queue, timedelta(seconds=PATIENCE))
            assert anew is not None, "the lapsed delivery was not handed out anew"
            assert anew.workflow == wf, anew
            assert anew.slot, anew
            assert not await scheduler.hold(stalled, SLOT_LEASE), (
                "hold kept a slot for a delivery that was handed out anew"
            )
            assert await scheduler.hold(anew, SLOT_LEASE), "the new taker's hold was refused"
            assert await scheduler.held(queue) == 1
            await opened.scheduler.done(anew)
            assert await scheduler.held(queue) == 0
            await opened.scheduler.cancel(wf)


@requirement("limits.priority-kept-across-passes", capability="limits")
async def test_limits_a_priority_is_kept_across_wake_ups_and_passes(
    store: StoreUnderTest,
) -> None:
    """A workflow of priority 5 made ready after two of priority 0 is handed out first; put
    to sleep with ``wake_at`` (a moment after the others became ready) it is handed out
    first again, and made ready anew after ``done`` (a second pass), first once more."""
    queue = unique_queue("kept-prio")
    scheduler = limited(store.durable)
    lc = lifecycle(store)
    kind = unique_kind()
    low = [store.workflow("l0"), store.workflow("l1")]
    high = store.workflow("high")
    for wf in [*low, high]:
        await lc.admit(wf, kind, INPUT, queue=queue)
    await scheduler.prioritize(high, 5)
    for wf in [*low, high]:
        await store.scheduler.make_ready(wf)
        await asyncio.sleep(0.005)  # ready in this order by any store's clock

    async def take() -> Delivery:
        loop = asyncio.get_running_loop()
        give_up = loop.time() + PATIENCE
        while loop.time() < give_up:
            await store.scheduler.wake_due(datetime.now(UTC))
            delivery = await _take(store.durable, queue)
            if delivery is not None:
                return delivery
        raise AssertionError("nothing of the queue was handed out")

    first = await take()
    assert first.workflow == high, f"handed out {first.workflow} before the priority 5"
    await asyncio.sleep(0.01)
    # Due already by a store clock that reads whole milliseconds (SQLite's), and still after
    # the others became ready (15 ms and more before this), so that a forgotten priority
    # would hand them out first.
    await store.scheduler.wake_at(first, datetime.now(UTC) - timedelta(milliseconds=5))
    woken = await take()
    assert woken.workflow == high, (
        f"after a wake-up {woken.workflow} was handed out before the priority 5: the "
        "priority was not kept"
    )
    await store.scheduler.done(woken)
    await store.scheduler.make_ready(high)
    again = await take()
    assert again.workflow == high, (
        f"on its next pass {again.workflow} was handed out before the priority 5: the "
        "priority was not kept"
    )
    await store.scheduler.done(again)
    rest = [await take(), await take()]
    assert [d.workflow for d in rest] == low, rest
    for delivery in rest:
        await store.scheduler.done(delivery)
