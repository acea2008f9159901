"""Durability: what a write returned is there for anyone else who looks.

"Durable before it returns" cannot be observed from the handle that wrote (it may be
reading its own cache), so these tests look from a second, independent handle on the same
backing store and, where the store can be reached from another process, from there.
"""

from __future__ import annotations

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._support import LONG, SHORT, claim_when_free, claimed


@requirement("durability.visible-to-a-second-handle")
async def test_durability_what_was_returned_is_visible_to_a_second_handle(
    store: StoreUnderTest,
) -> None:
    """Once record, supply and append return, a second handle loads the same records in
    the same order with the same stamps, and sees the claim as held."""
    cp = store.checkpointer
    wf = store.workflow()
    holder = await claimed(cp, wf)
    await cp.record(holder, "charged", {"amount": 10})
    await cp.supply(wf, "approval", "yes")
    key = await cp.append(wf, "message")
    async with store.second_handle() as second:
        assert await second.checkpointer.load(wf) == await cp.load(wf)
        assert list(await second.checkpointer.load(wf)) == ["charged", "approval", key]
        assert await second.checkpointer.history(wf) == await cp.history(wf)
        assert await second.checkpointer.claim(wf, liveness=LONG, budget=LONG) is None
        written = await second.checkpointer.record(holder, "shipped", True)
        assert written.first, "a pass could not write through another handle on its store"
    assert (await cp.load(wf))["shipped"] is True


@requirement("durability.visible-to-another-process")
async def test_durability_another_process_sees_and_fences_what_this_one_wrote(
    store: StoreUnderTest,
) -> None:
    """Another process that opens the store by URL loads what this one wrote, its writes
    are seen here, and the fence holds between the two: a pass this process lost is
    refused after the other process claims."""
    cp = store.checkpointer
    wf = store.workflow()
    stale = await claimed(cp, wf, liveness=SHORT)
    await cp.record(stale, "charged", 10)
    await cp.supply(wf, "approval", "yes")
    newer = await claim_when_free(cp, wf)
    other = store.workflow("other")
    results = await store.in_another_process(
        [
            {"op": "load", "workflow": wf},
            {"op": "supply", "workflow": wf, "key": "approval", "value": "no"},
            {"op": "claim", "workflow": other, "liveness": 600, "budget": 600, "as": "p"},
            {"op": "record", "as": "p", "key": "from-the-child", "value": [1, 2]},
            {"op": "record", "workflow": wf, "token": stale.token, "key": "late", "value": 1},
            {"op": "record", "workflow": wf, "token": newer.token, "key": "shipped", "value": 1},
        ]
    )
    loaded, supplied, token, written, refused, accepted = results
    assert loaded == {"charged": 10, "approval": "yes"}, f"the other process loaded {loaded}"
    assert supplied == "yes"
    assert isinstance(token, int)
    assert written == {"value": [1, 2], "first": True}
    assert isinstance(refused, dict), f"a stale pass's write from another process: {refused}"
    assert "fenced" in refused, (
        f"a stale pass writing from another process was not fenced: {refused}"
    )
    assert accepted == {"value": 1, "first": True}, (
        f"the live pass could not write from another process: {accepted}"
    )
    assert await cp.load(other) == {"from-the-child": [1, 2]}
    assert await cp.claim(other, liveness=LONG, budget=LONG) is None, (
        "a claim taken in another process is not held here"
    )
    assert await cp.load(wf) == {"charged": 10, "approval": "yes", "shipped": 1}
