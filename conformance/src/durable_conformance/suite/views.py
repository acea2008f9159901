"""What operators read: who holds a workflow, when it runs next, which workflows there are.

``Inspectable``, ``Observable`` and ``Enumerable`` decide nothing (no pass and no worker
reads them), but ``durable show`` and ``durable list`` print what they say, and an operator
acts on it: a workflow shown as held is left alone, one shown as never running again is
restarted. So a store implementing them owes the truth. ``Inspectable`` and ``Observable``
have no capability name: a store whose checkpointer or scheduler implements the protocol is
held to it, and one that does not is reported not offered.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from durable.interfaces import Inspectable, Observable

from durable_conformance import requirement
from durable_conformance.subject import DeclaredButUnimplemented, NotOffered, StoreUnderTest
from durable_conformance.suite._lifecycle import lifecycle
from durable_conformance.suite._support import (
    LONG,
    PATIENCE,
    SHORT,
    TICK,
    claimed,
    next_delivery,
    now,
    raised,
)

CLOCKS_AGREE = timedelta(seconds=5)
"""How far the store's clock may be from this machine's (as the history tests allow)."""


@requirement("inspect.claimed-is-the-live-pass")
async def test_inspect_claimed_names_the_live_pass_and_nothing_else(store: StoreUnderTest) -> None:
    """claimed names the live pass (its token, liveness and budget) on every handle, and
    says None for a workflow nobody holds: never claimed, released, or past its liveness."""
    cp = store.checkpointer
    if not isinstance(cp, Inspectable):
        raise NotOffered(f"store {store.name!r}'s checkpointer does not implement Inspectable")
    wf = store.workflow()
    assert await cp.claimed(wf) is None, "a workflow never claimed is shown as held"
    holder = await claimed(cp, wf, liveness=LONG, budget=LONG)
    async with store.handles(2) as handles:
        for handle in handles:
            inspect = handle.checkpointer
            assert isinstance(inspect, Inspectable)
            shown = await inspect.claimed(wf)
            assert shown is not None, f"{holder} is live, and claimed says no pass holds it"
            assert shown.token == holder.token, f"claimed shows token {shown.token}, not {holder}"
            for name, moment in (
                ("live_until", shown.live_until),
                ("budget_until", shown.budget_until),
            ):
                assert moment.tzinfo is not None, f"{name} is naive: {moment!r}"
                assert abs(moment - (now() + LONG)) < CLOCKS_AGREE, (
                    f"{name} is {moment.isoformat()}, not ten minutes from now"
                )
    await cp.release(holder)
    assert await cp.claimed(wf) is None, f"{holder} was released and is still shown as held"
    quiet = store.workflow("lapsing")
    lapsing = await claimed(cp, quiet, liveness=SHORT, budget=LONG)
    loop = asyncio.get_running_loop()
    give_up = loop.time() + PATIENCE
    while await cp.claimed(quiet) is not None:
        assert loop.time() < give_up, (
            f"{lapsing} is past its liveness of {SHORT.total_seconds()} s and still shown as "
            f"holding {quiet!r} {PATIENCE:.0f} s later"
        )
        await asyncio.sleep(TICK)


@requirement("observe.scheduled-says-when")
async def test_observe_scheduled_says_when_the_workflow_runs_next(store: StoreUnderTest) -> None:
    """scheduled says None for a workflow not queued, a moment not after now for one made
    ready, the deadline for one put to sleep with wake_at, and None once cancelled or once
    its delivery is answered with done."""
    scheduler = store.scheduler
    if not isinstance(scheduler, Observable):
        raise NotOffered(f"store {store.name!r}'s scheduler does not implement Observable")
    wf = store.workflow()
    assert await scheduler.scheduled(wf) is None, "a workflow never queued is shown scheduled"
    await scheduler.make_ready(wf)
    ready = await scheduler.scheduled(wf)
    assert ready is not None, "a workflow made ready is shown as not scheduled"
    assert ready.tzinfo is not None, f"scheduled is naive: {ready!r}"
    assert ready <= now() + CLOCKS_AGREE, f"a ready workflow is shown as runnable at {ready}"
    delivery = await next_delivery(scheduler, workflow=wf)
    assert delivery is not None
    later = now() + timedelta(hours=1)
    await scheduler.wake_at(delivery, later)
    asleep = await scheduler.scheduled(wf)
    assert asleep is not None, "a workflow asleep until a deadline is shown as not scheduled"
    assert abs(asleep - later) < timedelta(seconds=1), (
        f"a workflow asleep until {later.isoformat()} is shown as runnable at {asleep.isoformat()}"
    )
    await scheduler.cancel(wf)
    assert await scheduler.scheduled(wf) is None, "a cancelled workflow is shown as scheduled"
    answered = store.workflow("answered")
    await scheduler.make_ready(answered)
    taken = await next_delivery(scheduler, workflow=answered)
    assert taken is not None
    await scheduler.done(taken)
    assert await scheduler.scheduled(answered) is None, (
        "a workflow whose delivery was answered with done is shown as scheduled"
    )


@requirement("enumerate.sorted-and-limited", capability="enumerate")
async def test_enumerate_lists_sorted_and_the_limit_takes_the_first(store: StoreUnderTest) -> None:
    """workflows lists ids sorted, and with a limit the first that many of that order."""
    cp = store.checkpointer
    lister = getattr(cp, "workflows", None)
    if lister is None:
        raise DeclaredButUnimplemented(
            f"store {store.name!r} declares 'enumerate' but its checkpointer has no workflows()"
        )
    tag = store.workflow("listed")
    ours = [f"{tag}-{letter}" for letter in "qbxamc"]
    for wf in ours:
        await cp.supply(wf, "k", 1)
    everything = list(await lister())
    assert set(ours) <= set(everything), f"listed {everything}, missing some of {ours}"
    assert everything == sorted(everything), f"workflows() is not sorted: {everything[:8]}"
    first = list(await lister(limit=3))
    assert first == everything[:3], f"workflows(limit=3) is {first}, not {everything[:3]}"


@requirement("lifecycle.list-refuses-what-it-cannot-mean", capability="lifecycle")
async def test_lifecycle_list_refuses_a_foreign_cursor_a_limit_below_one_and_a_bad_kind(
    store: StoreUnderTest,
) -> None:
    """statuses refuses, with ValueError, a cursor the store never handed out, a limit below
    1 and a kind name check_kind refuses, rather than answering a page that means nothing."""
    lc = lifecycle(store)
    await lc.admit(store.workflow(), "listed-kind", None)
    for what, call in (
        ("a cursor this store never handed out", lambda: lc.statuses(cursor="not a cursor!")),
        ("limit=0", lambda: lc.statuses(limit=0)),
        ("limit=-1", lambda: lc.statuses(limit=-1)),
        ("kind='no spaces allowed'", lambda: lc.statuses(kind="no spaces allowed")),
    ):
        await raised(call, f"statuses with {what}", ValueError)
