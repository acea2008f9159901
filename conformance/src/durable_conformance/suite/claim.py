"""The claim: one live pass per workflow, two deadlines, and tokens that only go up.

A lease alone is not exclusion: a process that stalls past its lease still believes it
holds the workflow, and only the store knows better. So the store mints a token with
every claim and fences writes by it (see ``fencing``); what these tests hold the claim
itself to is that exactly one contender wins, that it is free again exactly when it
should be, and that no later pass is ever issued a token that does not outrank the last.
"""

from __future__ import annotations

import asyncio
import itertools

from durable.interfaces import Fenced

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._support import (
    LONG,
    SHORT,
    TICK,
    claim_when_free,
    claimed,
    fenced,
    seconds,
)

CONTENDERS = 64


@requirement("claim.one-winner")
async def test_claim_exactly_one_of_many_concurrent_claims_wins(store: StoreUnderTest) -> None:
    """Of many concurrent claims on one workflow, from several tasks on several handles,
    exactly one returns a pass and every other returns None."""
    workflows = [store.workflow("race") for _ in range(8)]
    async with store.handles(4) as handles:
        contenders = [
            handles[i % len(handles)].checkpointer.claim(wf, liveness=LONG, budget=LONG)
            for wf in workflows
            for i in range(CONTENDERS)
        ]
        results = await asyncio.gather(*contenders)
    for wf in workflows:
        won = [p for p in results if p is not None and p.workflow == wf]
        assert len(won) == 1, f"{len(won)} of {CONTENDERS} concurrent claims on {wf!r} won: {won}"
    assert sum(p is not None for p in results) == len(workflows)


@requirement("claim.held-while-live")
async def test_claim_a_live_pass_holds_the_workflow_against_every_handle(
    store: StoreUnderTest,
) -> None:
    """While a pass is live, claim returns None, on this handle and on another."""
    wf = store.workflow()
    await claimed(store.checkpointer, wf)
    async with store.handles(2) as handles:
        for handle in handles:
            assert await handle.checkpointer.claim(wf, liveness=LONG, budget=LONG) is None


@requirement("claim.free-after-release")
async def test_claim_a_released_workflow_is_claimable_at_once(store: StoreUnderTest) -> None:
    """Release frees the workflow now: the next claim succeeds immediately, outranking."""
    cp = store.checkpointer
    wf = store.workflow()
    first = await claimed(cp, wf)
    await cp.release(first)
    second = await cp.claim(wf, liveness=LONG, budget=LONG)
    assert second is not None, "the workflow was not claimable right after its pass released it"
    assert second.token > first.token


@requirement("claim.free-after-liveness")
async def test_claim_a_pass_that_stops_renewing_loses_the_workflow(store: StoreUnderTest) -> None:
    """A holder that stops renewing loses the claim once its liveness runs out, and not
    before: how fast a death is noticed is the liveness window."""
    cp = store.checkpointer
    wf = store.workflow()
    first = await claimed(cp, wf, liveness=seconds(1.5))
    await asyncio.sleep(0.3)
    assert await cp.claim(wf, liveness=LONG, budget=LONG) is None, (
        "the claim was free before its liveness ran out"
    )
    second = await claim_when_free(cp, wf)
    assert second.token > first.token


@requirement("claim.free-after-budget")
async def test_claim_the_budget_frees_the_workflow_whatever_the_liveness(
    store: StoreUnderTest,
) -> None:
    """A claim is free once its budget has passed, even with a liveness far longer."""
    cp = store.checkpointer
    wf = store.workflow()
    first = await claimed(cp, wf, liveness=LONG, budget=SHORT)
    second = await claim_when_free(cp, wf)
    assert second.token > first.token


@requirement("tokens.strictly-increase")
async def test_tokens_strictly_increase_across_release_expiry_and_discard(
    store: StoreUnderTest,
) -> None:
    """Tokens strictly increase per workflow forever: across release, expiry and discard,
    and whichever handle claims."""
    cp = store.checkpointer
    wf = store.workflow()
    tokens: list[tuple[str, int]] = []
    async with store.handles(2) as handles:
        holder = await claimed(cp, wf)
        tokens.append(("first claim", holder.token))
        await cp.release(holder)
        holder = await claimed(handles[-1].checkpointer, wf, liveness=SHORT)
        tokens.append(("after release", holder.token))
        holder = await claim_when_free(cp, wf)
        tokens.append(("after expiry", holder.token))
        await cp.discard(wf)
        holder = await claimed(cp, wf)
        tokens.append(("after discard of a held workflow", holder.token))
        await cp.release(holder)
        await cp.discard(wf)
        holder = await claimed(handles[-1].checkpointer, wf)
        tokens.append(("after discard of a free workflow", holder.token))
    for (was, before), (now, after) in itertools.pairwise(tokens):
        assert after > before, f"token {after} ({now}) does not outrank {before} ({was}): {tokens}"


@requirement("tokens.per-workflow")
async def test_tokens_a_claim_on_one_workflow_does_not_fence_another(
    store: StoreUnderTest,
) -> None:
    """Claims on different workflows are independent: each holds its own pass at once."""
    cp = store.checkpointer
    workflows = [store.workflow("many") for _ in range(20)]
    holders = await asyncio.gather(*(claimed(cp, wf) for wf in workflows))
    for holder in holders:
        written = await cp.record(holder, "k", holder.workflow)
        assert written.first
        assert written.value == holder.workflow


@requirement("renew.extends-liveness")
async def test_renew_keeps_a_running_pass_live_past_its_liveness(store: StoreUnderTest) -> None:
    """Renewing pushes liveness forward: a pass renewed often enough is never free, long
    past its liveness window, and renew hands back the same pass."""
    cp = store.checkpointer
    wf = store.workflow()
    holder = await claimed(cp, wf, liveness=seconds(0.6))
    loop = asyncio.get_running_loop()
    until = loop.time() + 1.5
    while loop.time() < until:
        renewed = await cp.renew(holder)
        assert (renewed.workflow, renewed.token) == (holder.workflow, holder.token)
        assert await cp.claim(wf, liveness=LONG, budget=LONG) is None, (
            "a pass renewed within its liveness window lost the workflow"
        )
        await asyncio.sleep(0.1)
    assert (await cp.record(holder, "still-mine", True)).first


@requirement("renew.never-lifts-budget")
async def test_renew_never_lifts_the_budget(store: StoreUnderTest) -> None:
    """However often a pass renews, its claim ends at its budget: renew then raises
    Fenced, and another claim succeeds."""
    cp = store.checkpointer
    wf = store.workflow()
    holder = await claimed(cp, wf, liveness=seconds(0.3), budget=seconds(1.0))
    loop = asyncio.get_running_loop()
    started = loop.time()
    while True:
        try:
            await cp.renew(holder)
        except Fenced:
            break
        assert loop.time() - started < 5, "renew kept a pass alive 4 s past its 1 s budget"
        await asyncio.sleep(0.05)
    assert loop.time() - started >= 0.5, "renew raised Fenced long before the budget ran out"
    successor = await claim_when_free(cp, wf, within=5)
    assert successor.token > holder.token


@requirement("release.stale-frees-nothing")
async def test_release_by_a_stale_holder_frees_nothing(store: StoreUnderTest) -> None:
    """A superseded pass's release leaves the newer pass holding the workflow, able to
    renew and write."""
    cp = store.checkpointer
    wf = store.workflow()
    stale = await claimed(cp, wf, liveness=SHORT)
    newer = await claim_when_free(cp, wf)
    await cp.release(stale)
    await asyncio.sleep(TICK)
    assert await cp.claim(wf, liveness=LONG, budget=LONG) is None, (
        f"{stale}'s release freed the workflow that {newer} holds"
    )
    await cp.renew(newer)
    assert (await cp.record(newer, "k", "newer")).first


@requirement("release.refuses-the-released-pass")
async def test_release_the_released_pass_cannot_write_or_renew(store: StoreUnderTest) -> None:
    """Once a pass releases, its own later record and renew are refused with Fenced."""
    cp = store.checkpointer
    wf = store.workflow()
    holder = await claimed(cp, wf)
    await cp.release(holder)
    await fenced(cp.record(holder, "late", 1), f"a record by {holder} after its release")
    await fenced(cp.renew(holder), f"a renew by {holder} after its release")
    assert await cp.load(wf) == {}
