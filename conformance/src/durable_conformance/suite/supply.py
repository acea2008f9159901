"""supply: writes from outside a pass, first-writer-wins, never blocked by one.

An approval, a webhook, a resubmitted order: values arriving from outside a pass must not
fail because a worker happens to be mid-pass, and nothing races them to write, so supply
takes no claim. It shares first-writer-wins with record, which is what makes a
resubmission harmless and lets a pass and a handler agree on what a key holds.
"""

from __future__ import annotations

import asyncio

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._support import LONG, claimed


@requirement("supply.first-writer-wins")
async def test_supply_keeps_the_first_value_and_returns_it(store: StoreUnderTest) -> None:
    """supply returns the value the key holds: its own on the first write, the first
    writer's on every later one, and decoded (a tuple comes back a list)."""
    cp = store.checkpointer
    wf = store.workflow()
    assert await cp.supply(wf, "approval", ("yes", 1)) == ["yes", 1]
    assert await cp.supply(wf, "approval", ("no", 2)) == ["yes", 1]
    assert await cp.load(wf) == {"approval": ["yes", 1]}


@requirement("supply.needs-no-claim")
async def test_supply_works_without_a_claim_and_does_not_take_one(store: StoreUnderTest) -> None:
    """supply needs no claim, and leaves the workflow claimable."""
    cp = store.checkpointer
    wf = store.workflow()
    await cp.supply(wf, "order", {"sku": "piano"})
    holder = await claimed(cp, wf)
    assert (await cp.record(holder, "charged", True)).first


@requirement("supply.never-blocked-by-a-pass")
async def test_supply_is_never_blocked_or_refused_by_a_live_pass(store: StoreUnderTest) -> None:
    """While a pass holds the workflow, supply from another handle completes promptly, and
    neither fences nor frees the pass."""
    wf = store.workflow()
    async with store.handles(2) as handles:
        holder = await claimed(handles[0].checkpointer, wf)
        other = handles[-1].checkpointer
        stored = await asyncio.wait_for(other.supply(wf, "approved", True), 5)
        assert stored is True
        assert await other.claim(wf, liveness=LONG, budget=LONG) is None, (
            "supply freed the claim of the pass holding the workflow"
        )
        assert (await handles[0].checkpointer.record(holder, "charged", 1)).first
        await handles[0].checkpointer.renew(holder)


@requirement("supply.shares-first-writer-wins-with-record")
async def test_supply_and_record_share_one_first_writer_per_key(store: StoreUnderTest) -> None:
    """A key supplied first loses nothing to a later record (first=False), and a key
    recorded first is what a later supply returns."""
    cp = store.checkpointer
    wf = store.workflow()
    holder = await claimed(cp, wf)
    await cp.supply(wf, "from-outside", "supplied")
    written = await cp.record(holder, "from-outside", "recorded")
    assert (written.value, written.first) == ("supplied", False)
    await cp.record(holder, "from-the-pass", "recorded")
    assert await cp.supply(wf, "from-the-pass", "supplied") == "recorded"


@requirement("supply.one-winner-under-concurrency")
async def test_supply_of_one_key_from_many_tasks_agrees_on_one_value(
    store: StoreUnderTest,
) -> None:
    """Many concurrent supplies of one key, from several handles, all return one value,
    and it is the value stored."""
    wf = store.workflow()
    async with store.handles(3) as handles:
        results = await asyncio.gather(
            *(
                handles[i % len(handles)].checkpointer.supply(wf, "webhook", f"delivery {i}")
                for i in range(40)
            )
        )
    assert len(set(results)) == 1, (
        f"concurrent supplies disagreed: {sorted(map(str, set(results)))}"
    )
    assert await store.checkpointer.load(wf) == {"webhook": results[0]}
