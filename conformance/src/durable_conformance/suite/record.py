"""record: first writer wins, never overwrite, and the store says who won.

Two passes that both ran an effect must agree on its result instead of diverging, so a
key keeps the first value written to it, forever. Whether this write is the one that put
it there is the store's to say, by comparing encodings: the caller cannot work it out from
the value, because a value that crosses the codec can come back unequal to what went in
(a tuple comes back a list) on the very pass that won.
"""

from __future__ import annotations

import asyncio

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._support import claimed

VALUES: list[object] = [
    None,
    True,
    False,
    0,
    -(2**53),
    2**53,
    1.5,
    "",
    "text",
    "ünïcødé ✓ 工作流",
    [],
    [1, "two", None, [3.5]],
    {},
    {"nested": {"list": [1, 2, {"deep": True}]}, "n": 1},
]


@requirement("record.first-writer-wins")
async def test_record_the_first_value_written_to_a_key_is_kept(store: StoreUnderTest) -> None:
    """The first record of a key wins (first=True); a later one with another value gets
    the stored value back with first=False and changes nothing."""
    cp = store.checkpointer
    wf = store.workflow()
    holder = await claimed(cp, wf)
    first = await cp.record(holder, "charged", {"amount": 10})
    assert (first.value, first.first) == ({"amount": 10}, True)
    second = await cp.record(holder, "charged", {"amount": 99})
    assert (second.value, second.first) == ({"amount": 10}, False), (
        f"a second record of 'charged' returned {second}"
    )
    assert await cp.load(wf) == {"charged": {"amount": 10}}


@requirement("record.never-overwrites")
async def test_record_a_later_pass_cannot_overwrite_an_earlier_passs_record(
    store: StoreUnderTest,
) -> None:
    """A record made by one pass stands through every later pass, whatever they write."""
    cp = store.checkpointer
    wf = store.workflow()
    for attempt in range(5):
        holder = await claimed(cp, wf)
        written = await cp.record(holder, "result", f"pass {attempt}")
        assert written.value == "pass 0"
        assert written.first is (attempt == 0), f"pass {attempt} got {written}"
        await cp.release(holder)
    assert await cp.load(wf) == {"result": "pass 0"}


@requirement("record.first-by-encoding")
async def test_record_first_is_decided_by_encoding_not_by_equality(
    store: StoreUnderTest,
) -> None:
    """``first`` is right even when the decoded value differs from what went in: a tuple
    that wins comes back a list with first=True, and a write whose encoding equals the
    stored one (a tie) counts as first."""
    cp = store.checkpointer
    wf = store.workflow()
    holder = await claimed(cp, wf)
    won = await cp.record(holder, "pair", (1, 2))
    assert won.value == [1, 2], f"record returned {won.value!r}, not the decoded [1, 2]"
    assert won.first is True, "a tuple that won outright was reported as not first"
    tie = await cp.record(holder, "pair", (1, 2))
    assert (tie.value, tie.first) == ([1, 2], True), f"replaying the same tuple gave {tie}"
    same_encoding = await cp.record(holder, "pair", [1, 2])
    assert same_encoding.first is True, "a write with the stored encoding was not a tie"
    lost = await cp.record(holder, "pair", (1, 3))
    assert (lost.value, lost.first) == ([1, 2], False)
    mapping = await cp.record(holder, "mapping", {"b": 1, "a": 2})
    reordered = await cp.record(holder, "mapping", {"a": 2, "b": 1})
    assert mapping.first
    assert reordered.first, "equal mappings did not encode alike"


@requirement("record.one-winner-under-concurrency")
async def test_record_of_one_key_from_many_tasks_has_exactly_one_winner(
    store: StoreUnderTest,
) -> None:
    """Many concurrent records of one key with different values, from several handles:
    exactly one is first, and every one is handed back the winner's value."""
    wf = store.workflow()
    async with store.handles(3) as handles:
        holder = await claimed(handles[0].checkpointer, wf)
        results = await asyncio.gather(
            *(
                handles[i % len(handles)].checkpointer.record(holder, "winner", f"task {i}")
                for i in range(40)
            )
        )
    winners = [r for r in results if r.first]
    assert len(winners) == 1, f"{len(winners)} concurrent records of one key were first"
    assert {r.value for r in results} == {winners[0].value}
    assert await store.checkpointer.load(wf) == {"winner": winners[0].value}


@requirement("record.returns-the-stored-value")
async def test_record_returns_every_codec_value_as_stored(store: StoreUnderTest) -> None:
    """What record returns is the stored value decoded, equal to what went in for every
    value the default codec round-trips exactly."""
    cp = store.checkpointer
    wf = store.workflow()
    holder = await claimed(cp, wf)
    for i, value in enumerate(VALUES):
        written = await cp.record(holder, f"value-{i}", value)
        assert written.first
        assert written.value == value, f"recorded {value!r}, got back {written.value!r}"
        assert type(written.value) is type(value)
    loaded = await cp.load(wf)
    assert list(loaded.values()) == VALUES
