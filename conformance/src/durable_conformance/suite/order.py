"""Load order: every record in the order it was first recorded, whoever wrote it.

A workflow's records have two writers that cannot order themselves against each other
(the pass through record, anything outside it through supply), so the store is the only
party that can say what came first. The order is the guarantee; no number behind it is.
What breaks naive stores is what these tests lean on: keys that do not sort in write
order, a losing write to an existing key, more than a few hundred keys, large values
(a Redis hash stops preserving insertion order once it converts from a listpack), and a
conflict that rewrites a row.
"""

from __future__ import annotations

import random

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._support import claimed

MANY_KEYS = 600
"""More than a few hundred, past every small-hash encoding limit."""

LARGE = 100_000
"""Characters in a large value: far past any inline-value limit."""


@requirement("order.unknown-workflow-is-empty")
async def test_order_an_unknown_workflow_loads_empty(store: StoreUnderTest) -> None:
    """load of a workflow nothing was written to is {}, and its history is []."""
    wf = store.workflow("never-written")
    assert await store.checkpointer.load(wf) == {}
    assert await store.checkpointer.history(wf) == []


@requirement("order.first-recorded")
async def test_order_load_is_first_recorded_order_across_record_and_supply(
    store: StoreUnderTest,
) -> None:
    """Interleaved record and supply of keys that sort every which way load in the order
    they were first written."""
    cp = store.checkpointer
    wf = store.workflow()
    holder = await claimed(cp, wf)
    keys = ["zeta", "alpha", "10", "9", "Mid", "é", "a", "B", "_", "0"]
    for i, key in enumerate(keys):
        if i % 2:
            await cp.supply(wf, key, i)
        else:
            await cp.record(holder, key, i)
    loaded = await cp.load(wf)
    assert list(loaded) == keys, f"load order {list(loaded)} is not write order {keys}"
    assert list(loaded.values()) == list(range(len(keys)))


@requirement("order.losing-write-moves-nothing")
async def test_order_a_losing_write_moves_nothing(store: StoreUnderTest) -> None:
    """A write to a key that already holds a value, by record or supply, with the same or
    another value, leaves the key where it was first recorded."""
    cp = store.checkpointer
    wf = store.workflow()
    holder = await claimed(cp, wf)
    for key in ("a", "b", "c"):
        await cp.record(holder, key, key)
    await cp.record(holder, "a", "conflict")
    await cp.supply(wf, "b", "b")
    await cp.supply(wf, "a", "another conflict")
    await cp.record(holder, "b", "b")
    await cp.record(holder, "d", "d")
    assert list((await cp.load(wf)).items()) == [("a", "a"), ("b", "b"), ("c", "c"), ("d", "d")]
    assert [e.key for e in await cp.history(wf)] == ["a", "b", "c", "d"]


@requirement("order.survives-what-breaks-naive-stores")
async def test_order_survives_many_keys_large_values_and_conflicts(
    store: StoreUnderTest,
) -> None:
    """Hundreds of shuffled keys, some values large, with conflicting rewrites of earlier
    keys sprinkled in: load, on this handle and a second, gives first-written order."""
    cp = store.checkpointer
    wf = store.workflow()
    holder = await claimed(cp, wf)
    shuffle = random.Random(7)
    keys = [f"key-{n:04d}" for n in range(MANY_KEYS)]
    shuffle.shuffle(keys)
    expected: dict[str, object] = {}
    for i, key in enumerate(keys):
        value: object = {"i": i, "pad": "x" * LARGE} if i % 50 == 7 else i
        if i % 3:
            await cp.record(holder, key, value)
        else:
            await cp.supply(wf, key, value)
        expected[key] = value
        if i % 5 == 4:
            earlier = keys[shuffle.randrange(i + 1)]
            await cp.record(holder, earlier, "conflicting rewrite")
            await cp.supply(wf, earlier, "conflicting supply")
    async with store.handles(2) as handles:
        for handle in handles:
            loaded = await handle.checkpointer.load(wf)
            assert list(loaded) == list(expected), _first_difference(list(loaded), keys)
            assert loaded == expected


def _first_difference(got: list[str], want: list[str]) -> str:
    for i, (a, b) in enumerate(zip(got, want, strict=False)):
        if a != b:
            return f"load order departs from write order at position {i}: {a!r} for {b!r}"
    return f"load holds {len(got)} keys, {len(want)} were written"
