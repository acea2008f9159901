"""discard: forget every record and raise the fence, keeping the claim's ordering.

That is the whole difference between a delete a caller could write for itself and one
that is safe. A pass in flight holds a token and is about to write; deleting the claim
would hand the next claim a token that restarts low, the pass in flight would outrank it,
and it would fill the deleted workflow back up one step at a time. Raising the fence
instead refuses that pass at its next write and leaves the id claimable at once.
"""

from __future__ import annotations

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._support import LONG, claimed, fenced


@requirement("discard.forgets-records")
async def test_discard_forgets_every_record(store: StoreUnderTest) -> None:
    """After discard, load is {} and history is [], on every handle, and a key may be
    written afresh (its first writer wins again)."""
    cp = store.checkpointer
    wf = store.workflow()
    holder = await claimed(cp, wf)
    await cp.record(holder, "charged", 10)
    await cp.supply(wf, "approval", "yes")
    await cp.append(wf, "message")
    await cp.discard(wf)
    async with store.handles(2) as handles:
        for handle in handles:
            assert await handle.checkpointer.load(wf) == {}
            assert await handle.checkpointer.history(wf) == []
    assert await cp.supply(wf, "approval", "no") == "no"


@requirement("discard.refuses-the-pass-in-flight")
async def test_discard_refuses_the_pass_in_flight_at_its_next_write(
    store: StoreUnderTest,
) -> None:
    """A pass holding the workflow when it is discarded is refused with Fenced at its next
    record and renew, and writes nothing back into it."""
    cp = store.checkpointer
    wf = store.workflow()
    in_flight = await claimed(cp, wf)
    await cp.record(in_flight, "step-1", 1)
    await cp.discard(wf)
    await fenced(cp.record(in_flight, "step-2", 2), f"record by {in_flight} after discard")
    await fenced(cp.renew(in_flight), f"renew by {in_flight} after discard")
    assert await cp.load(wf) == {}, "the discarded workflow's pass wrote into it again"


@requirement("discard.claimable-at-once-outranking")
async def test_discard_leaves_the_id_claimable_at_once_with_a_higher_token(
    store: StoreUnderTest,
) -> None:
    """A workflow discarded while a pass holds it is claimable immediately, and the new
    pass's token outranks every token issued before, however many that was."""
    cp = store.checkpointer
    wf = store.workflow()
    holder = await claimed(cp, wf)
    for _ in range(5):
        await cp.release(holder)
        holder = await claimed(cp, wf)
    await cp.discard(wf)
    successor = await cp.claim(wf, liveness=LONG, budget=LONG)
    assert successor is not None, "a discarded workflow was not claimable at once"
    assert successor.token > holder.token, (
        f"after discard the next claim got token {successor.token}, which {holder} outranks: "
        "the pass in flight would fill the discarded workflow back up"
    )
    await fenced(cp.record(holder, "k", "stale"), f"record by {holder}")
    assert (await cp.record(successor, "k", "new")).first


@requirement("discard.unknown-workflow")
async def test_discard_of_a_workflow_never_written_is_harmless(store: StoreUnderTest) -> None:
    """Discarding an id nothing was written to succeeds, and the id is claimable after."""
    cp = store.checkpointer
    wf = store.workflow("never-written")
    await cp.discard(wf)
    await cp.discard(wf)
    holder = await claimed(cp, wf)
    assert (await cp.record(holder, "k", 1)).first


@requirement("discard.leaves-other-workflows-alone")
async def test_discard_of_one_workflow_leaves_its_neighbours_intact(
    store: StoreUnderTest,
) -> None:
    """Discard touches only its own workflow: another's records and claim stand."""
    cp = store.checkpointer
    gone, kept = store.workflow("gone"), store.workflow("kept")
    kept_pass = await claimed(cp, kept)
    await cp.record(kept_pass, "k", "kept")
    await cp.supply(gone, "k", "gone")
    await cp.discard(gone)
    assert await cp.load(kept) == {"k": "kept"}
    assert (await cp.record(kept_pass, "j", "still held")).first
    assert await cp.claim(kept, liveness=LONG, budget=LONG) is None
