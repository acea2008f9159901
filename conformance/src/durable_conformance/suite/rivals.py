"""Rival moves: two moves on one workflow, one held half way while the other lands.

The seed's third note says each script is a script because it is only correct as one
step: checking whether a workflow is free and taking it, testing whether a key is recorded
and reading back the winner. Split one into two round trips and the gap between them is
where the guarantee leaks, but only on the schedule that puts a rival move exactly there,
which a test racing by timing alone almost never finds. So each test here stops one move
at the store's gap (``durable.plugins.Gap``: after what the move reads to decide, before
what it commits), runs the rival on another handle while it is stopped, lets it go, and
checks from outside that the two landed in some order a correct store could have put them
in. A store whose move holds a lock at its gap makes the rival wait, which is correct; one
that offers no gap for the move is raced by timing, over several trials.

The pairs: ``claim`` against ``discard``, ``supply`` against ``record`` on one key,
``append`` against ``append`` (with and without a message id), ``admit`` against ``admit``,
and the scheduler's hand-out against ``cancel`` and against a stale delivery's ``wake_at``.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from durable.interfaces import INBOX_PREFIX, Delivery, Fenced, Recorded, StartConflict

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._gaps import Gaps
from durable_conformance.suite._lifecycle import lifecycle
from durable_conformance.suite._rivals import (
    gapped_testbed,
    hold_while,
    outcome,
    trials,
    two_handles,
)
from durable_conformance.suite._support import (
    LONG,
    claimed,
    delivered_during,
    fenced,
    next_delivery,
    now,
    seconds,
)

PROMPTLY = 3.0
"""Seconds within which a workflow that is runnable now must be delivered."""


# -- claim against discard ---------------------------------------------------------------


@requirement("claim.races-discard")
async def test_claim_racing_a_discard_never_outlives_the_discards_fence(
    store: StoreUnderTest,
) -> None:
    """A claim racing a discard, from two handles, gets a pass that either was claimed
    before the discard (and is refused at its next write once discard has returned) or
    after it (and outranks the fence, and holds the workflow): never a pass that writes
    into the discarded workflow while another claim may take it. A claim that returned
    while the discard was held half way came before it, and is refused."""
    async with gapped_testbed(store) as (testbed, gaps), two_handles(testbed) as (one, two):
        cp, other = one.checkpointer, two.checkpointer

        async def trial(gaps: Gaps | None) -> bool:
            wf = store.workflow("discarded")
            earlier = await claimed(cp, wf)
            await cp.record(earlier, "before", 1)
            await cp.release(earlier)
            raced = await hold_while(
                gaps,
                [("Checkpointer.discard", wf)],
                lambda: cp.discard(wf),
                lambda: other.claim(wf, liveness=LONG, budget=LONG),
            )
            outcome(raced.held)
            holder = outcome(raced.rival)
            assert holder is not None, f"a claim of {wf!r}, free and racing a discard, got None"
            assert holder.token > earlier.token, f"{holder} does not outrank {earlier}"
            try:
                await other.record(holder, "after", 2)
                landed = True
            except Fenced:
                landed = False
            if raced.rival_first:
                assert not landed, (
                    f"{holder} was claimed while discard({wf!r}) was held half way, and "
                    "still wrote after the discard returned: the discard's fence does not "
                    "outrank a pass claimed before it"
                )
            if landed:
                assert await cp.claim(wf, liveness=LONG, budget=LONG) is None, (
                    f"{holder}, claimed racing discard({wf!r}), wrote after the discard "
                    "returned while the workflow was free for another claim: the discard "
                    "fenced at the token the racing claim was given"
                )
                assert await cp.load(wf) == {"after": 2}
            else:
                assert await cp.load(wf) == {}, "a record from before the discard survived it"
            await fenced(cp.record(earlier, "stale", 3), f"record by {earlier} after discard")
            return raced.reached

        await trials(gaps, trial)


# -- supply against record ---------------------------------------------------------------


@requirement("supply.races-record")
async def test_supply_racing_a_record_of_one_key_agrees_on_one_winner(
    store: StoreUnderTest,
) -> None:
    """supply and record of one key racing from two handles, each in turn held half way:
    exactly one value is stored, supply returns it, record returns it with ``first`` true
    only when it is the record's own, and load shows it. A move that returned while the
    other was held is the first writer."""
    async with gapped_testbed(store) as (testbed, gaps), two_handles(testbed) as (one, two):

        async def trial(gaps: Gaps | None, hold_supply: bool) -> bool:
            wf = store.workflow("one-key")
            holder = await claimed(one.checkpointer, wf)

            def supply() -> Any:
                return two.checkpointer.supply(wf, "approval", "supplied")

            def record() -> Any:
                return one.checkpointer.record(holder, "approval", "recorded")

            if hold_supply:
                raced = await hold_while(gaps, [("Checkpointer.supply", wf)], supply, record)
                supplied, recorded = outcome(raced.held), outcome(raced.rival)
            else:
                raced = await hold_while(gaps, [("Checkpointer.record", wf)], record, supply)
                recorded, supplied = outcome(raced.held), outcome(raced.rival)
            assert isinstance(recorded, Recorded), recorded
            stored = (await one.checkpointer.load(wf)).get("approval")
            told = f"supply returned {supplied!r}, record {recorded}, load holds {stored!r}"
            assert stored in ("supplied", "recorded"), told
            assert supplied == stored, f"supply and the store disagree on the winner: {told}"
            assert recorded.value == stored, f"record and the store disagree: {told}"
            assert recorded.first == (stored == "recorded"), f"record's first is wrong: {told}"
            if raced.rival_first:
                rival = "recorded" if hold_supply else "supplied"
                assert stored == rival, (
                    f"the {'record' if hold_supply else 'supply'} landed while the other was "
                    f"held half way, and lost to it: {told}"
                )
            return raced.reached

        async def both(gaps: Gaps | None) -> bool:
            held = [await trial(gaps, hold_supply) for hold_supply in (True, False)]
            return all(held)

        await trials(gaps, both)


# -- append against append ---------------------------------------------------------------


@requirement("append.concurrent-appends-all-land")
async def test_append_held_half_way_and_a_rival_append_both_land(store: StoreUnderTest) -> None:
    """An append held half way while another append to the workflow lands: both land under
    distinct keys, each holding its own value, and the inbox keys in load order are the
    keys sorted, the rival's first."""
    async with gapped_testbed(store) as (testbed, gaps), two_handles(testbed) as (one, two):

        async def trial(gaps: Gaps | None) -> bool:
            wf = store.workflow("inbox")
            await one.checkpointer.append(wf, "already there")
            raced = await hold_while(
                gaps,
                [("Checkpointer.append", wf)],
                lambda: one.checkpointer.append(wf, "held"),
                lambda: two.checkpointer.append(wf, "rival"),
            )
            held, rival = outcome(raced.held), outcome(raced.rival)
            assert held != rival, f"two racing appends were both given the key {held!r}"
            loaded = await one.checkpointer.load(wf)
            assert (loaded.get(held), loaded.get(rival)) == ("held", "rival"), (
                f"an append racing another was lost: load holds {loaded!r}"
            )
            inbox = [key for key in loaded if key.startswith(INBOX_PREFIX)]
            assert inbox == sorted(inbox), f"load order and key order are two orders: {inbox}"
            if raced.rival_first:
                assert rival < held, (
                    f"the append that landed first got {rival!r}, which sorts after the "
                    f"held one's {held!r}"
                )
            return raced.reached

        await trials(gaps, trial)


@requirement("append.message-id-once-under-concurrency")
async def test_append_held_half_way_and_a_rival_with_one_message_id_write_one_entry(
    store: StoreUnderTest,
) -> None:
    """An append with a message id held half way while another with the same id lands:
    exactly one entry is written and both return its key."""
    async with gapped_testbed(store) as (testbed, gaps), two_handles(testbed) as (one, two):

        async def trial(gaps: Gaps | None) -> bool:
            wf = store.workflow("inbox")
            raced = await hold_while(
                gaps,
                [("Checkpointer.append", wf)],
                lambda: one.checkpointer.append(wf, {"copy": "held"}, message_id="m-1"),
                lambda: two.checkpointer.append(wf, {"copy": "rival"}, message_id="m-1"),
            )
            held, rival = outcome(raced.held), outcome(raced.rival)
            loaded = await one.checkpointer.load(wf)
            assert len(loaded) == 1, f"two appends with one message id wrote {loaded!r}"
            assert held == rival, f"two appends with one message id returned {held!r}, {rival!r}"
            if raced.rival_first:
                assert loaded == {rival: {"copy": "rival"}}, loaded
            return raced.reached

        await trials(gaps, trial)


# -- admit against admit -----------------------------------------------------------------


@requirement("lifecycle.admit-one-winner-under-concurrency", capability="lifecycle")
async def test_lifecycle_admit_held_half_way_and_a_rival_admit_have_one_winner(
    store: StoreUnderTest,
) -> None:
    """An admit held half way while another admit of the workflow lands: with one kind and
    input it is created once; with two inputs one is stored, the other admit is refused
    with StartConflict, and nothing of it is written. An admit that returned while the
    other was held is the winner."""
    kind = f"kind-{secrets.token_hex(4)}"
    async with gapped_testbed(store) as (testbed, gaps), two_handles(testbed) as (one, two):
        lc, rival_lc = lifecycle(store, one), lifecycle(store, two)

        async def same(gaps: Gaps | None) -> bool:
            wf = store.workflow("started")
            raced = await hold_while(
                gaps,
                [("Lifecycle.admit", wf)],
                lambda: lc.admit(wf, kind, {"order": 1}),
                lambda: rival_lc.admit(wf, kind, {"order": 1}),
            )
            created = [outcome(raced.held).created, outcome(raced.rival).created]
            assert created.count(True) == 1, (
                f"two admits of {wf!r} with one kind and input created it {created.count(True)}"
                " times"
            )
            return raced.reached

        async def conflicting(gaps: Gaps | None) -> bool:
            wf = store.workflow("contested")
            raced = await hold_while(
                gaps,
                [("Lifecycle.admit", wf)],
                lambda: lc.admit(wf, kind, {"side": "held"}),
                lambda: rival_lc.admit(wf, kind, {"side": "rival"}),
            )
            st = await lc.status(wf)
            assert st is not None, f"neither of two racing admits wrote {wf!r}"
            outcomes = {"held": raced.held, "rival": raced.rival}
            won = [side for side, o in outcomes.items() if not isinstance(o, BaseException)]
            told = f"the admits were answered {outcomes!r}; the store holds {st.input!r}"
            assert len(won) == 1, f"two admits with different inputs: {told}"
            lost = "rival" if won == ["held"] else "held"
            assert isinstance(outcomes[lost], StartConflict), told
            assert st.input == {"side": won[0]}, f"the refused admit wrote its input: {told}"
            if raced.rival_first:
                assert won == ["rival"], f"the admit that landed first lost: {told}"
            return raced.reached

        async def both(gaps: Gaps | None) -> bool:
            return all([await same(gaps), await conflicting(gaps)])

        await trials(gaps, both)


# -- the scheduler's hand-out against cancel and a stale answer --------------------------


@requirement("scheduler.cancel-beats-a-racing-hand-out")
async def test_scheduler_a_hand_out_racing_cancel_never_brings_the_workflow_back(
    store: StoreUnderTest,
) -> None:
    """A next_ready racing a cancel of the workflow it would take, from two handles: either
    it took the delivery before the cancel (and answering for it with wake_at reinstates
    nothing) or it finds nothing. Once cancel has returned, the workflow is not delivered
    again."""
    async with gapped_testbed(store) as (testbed, gaps), two_handles(testbed) as (one, two):

        async def trial(gaps: Gaps | None) -> bool:
            tag = store.workflow("cancelled")
            ids = [f"{tag}-{i}" for i in range(1 if gaps is not None else 8)]
            for wf in ids:
                await one.scheduler.make_ready(wf)

            def cancel(wf: str) -> Callable[[], Awaitable[None]]:
                return lambda: two.scheduler.cancel(wf)

            raced = await asyncio.gather(
                *(
                    hold_while(
                        gaps,
                        [("Scheduler.next_ready", ""), ("Scheduler.next_ready", wf)],
                        lambda: one.scheduler.next_ready(seconds(0.2)),
                        cancel(wf),
                    )
                    for wf in ids
                )
            )
            handed: list[Delivery] = []
            for each in raced:
                outcome(each.rival)
                delivery = outcome(each.held)
                if delivery is not None:
                    handed.append(delivery)
            for delivery in handed:
                await one.scheduler.wake_at(delivery, now())
            seen = [d.workflow for d in await delivered_during(two.scheduler, 0.5)]
            again = sorted(set(seen) & set(ids))
            assert again == [], (
                f"{again[:3]} cancelled while a next_ready was taking them were delivered "
                f"again after cancel returned (taken by the racing hand-out: "
                f"{sorted(d.workflow for d in handed)[:3]})"
            )
            return all(each.reached for each in raced)

        if gaps is not None and await trial(gaps):
            return
        await trial(None)


@requirement("scheduler.stale-wake-at-spares-a-newer-hand-out")
async def test_scheduler_a_stale_wake_at_racing_a_newer_hand_out_does_not_undo_it(
    store: StoreUnderTest,
) -> None:
    """A delivery's wake_at held half way while the workflow is made ready again and handed
    out anew: whichever lands first, the newer delivery's own answer decides when the
    workflow runs next (here: in an hour, so it is not delivered again)."""
    async with gapped_testbed(store) as (testbed, gaps), two_handles(testbed) as (one, two):

        async def trial(gaps: Gaps | None) -> bool:
            wf = store.workflow("woken")
            await one.scheduler.make_ready(wf)
            older = await next_delivery(one.scheduler, workflow=wf)
            assert older is not None, f"{wf!r} was made ready and never delivered"

            async def wakeup_and_hand_out() -> Delivery | None:
                await two.scheduler.make_ready(wf)
                return await next_delivery(two.scheduler, within=0.5, workflow=wf)

            raced = await hold_while(
                gaps,
                [("Scheduler.wake_at", wf)],
                lambda: one.scheduler.wake_at(older, now() + seconds(0.2)),
                wakeup_and_hand_out,
            )
            outcome(raced.held)
            newer = outcome(raced.rival)
            if newer is None:
                # This store defers a wakeup that lands during a pass until the pass answers.
                newer = await next_delivery(two.scheduler, within=PROMPTLY, workflow=wf)
                assert newer is not None, "a wakeup that landed during a pass was lost"
            assert newer.receipt != older.receipt
            await two.scheduler.wake_at(newer, now() + timedelta(hours=1))
            seen = [d for d in await delivered_during(one.scheduler, 0.6) if d.workflow == wf]
            assert seen == [], (
                f"{wf!r}, handed out anew and answered for an hour from now, was delivered "
                "again at once: the older delivery's wake_at, racing the hand-out, "
                "rescheduled it over the newer delivery"
            )
            return raced.reached

        if gaps is not None and await trial(gaps):
            return
        await trial(None)
