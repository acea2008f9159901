"""record: first writer wins, never overwrite, and the store says who won.

Two passes that both ran an effect must agree on its result instead of diverging, so a
key keeps the first value written to it, forever. Whether this write is the one that put
it there is the store's to say, by comparing encodings: the caller cannot work it out from
the value, because a value that crosses the codec can come back unequal to what went in
(a tuple comes back a list) on the very pass that won.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from durable.interfaces import Fenced, Recorded

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._support import PATIENCE, claimed, superseded

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


BATCHED_WORKFLOWS = 32
"""Workflows in the batched-verdicts test, each with a stale pass and a fresh one: 64 passes."""


@requirement("record.batched-verdicts-are-each-their-own")
async def test_record_concurrent_writes_through_one_handle_each_get_their_own_verdict(
    store: StoreUnderTest,
) -> None:
    """Writes of 64 passes sent through one handle at once, stale tokens interleaved with
    fresh ones, each get their own verdict: a stale record or renew is refused with Fenced
    and writes nothing, a fresh one lands, and of two fresh writes of one key the first
    wins, however a store groups them into round trips or commits.

    A store that batches concurrent writes (group commit) must fence and decide each write
    on its own: one stale write must neither fail the fresh ones it shares a commit with
    nor ride along with them, and a caller is answered with its own write's outcome.
    """
    cp = store.checkpointer
    workflows = [store.workflow(f"batch{i}") for i in range(BATCHED_WORKFLOWS)]
    pairs = await asyncio.gather(*(superseded(cp, wf) for wf in workflows))

    async def verdict(call: Awaitable[object]) -> object:
        try:
            return await call
        except Fenced as refused:
            return refused

    calls: list[tuple[str, int, Awaitable[object]]] = []
    for i, (stale, fresh) in enumerate(pairs):
        # Interleaved, so a store that groups writes as they arrive puts stale and fresh
        # ones in the same batch.
        calls += [
            ("stale", i, cp.record(stale, "own-stale", i)),
            ("fresh", i, cp.record(fresh, "own", i)),
            ("stale", i, cp.record(stale, "shared", "stale")),
            ("shared-a", i, cp.record(fresh, "shared", f"a{i}")),
            ("shared-b", i, cp.record(fresh, "shared", f"b{i}")),
            ("stale", i, cp.renew(stale)),
            ("fresh-renew", i, cp.renew(fresh)),
        ]
    async with asyncio.timeout(PATIENCE * 3):
        outcomes = await asyncio.gather(*(verdict(call) for _, _, call in calls))

    shared: dict[int, dict[str, object]] = {}
    for (kind, i, _), outcome in zip(calls, outcomes, strict=True):
        wf = workflows[i]
        if kind == "stale":
            assert isinstance(outcome, Fenced), (
                f"workflow {wf!r}: a write of the superseded pass {pairs[i][0]} sent with "
                f"others got {outcome!r}, not Fenced"
            )
            continue
        assert not isinstance(outcome, BaseException), (
            f"workflow {wf!r}: a {kind} write of the current pass {pairs[i][1]} was refused "
            f"({outcome!r}); a stale write in the same batch must not refuse it"
        )
        if kind == "fresh":
            assert isinstance(outcome, Recorded), f"workflow {wf!r}: 'own' got {outcome!r}"
            assert (outcome.value, outcome.first) == (i, True), (
                f"workflow {wf!r}: the current pass's record of 'own' answered {outcome!r}"
            )
        elif kind.startswith("shared"):
            assert isinstance(outcome, Recorded), f"workflow {wf!r}: {kind} got {outcome!r}"
            shared.setdefault(i, {})[kind] = outcome
    for i, wf in enumerate(workflows):
        a, b = shared[i]["shared-a"], shared[i]["shared-b"]
        assert isinstance(a, Recorded)
        assert isinstance(b, Recorded)
        assert [a.first, b.first].count(True) == 1, (
            f"workflow {wf!r}: two records of 'shared' with different values answered "
            f"first={a.first} and first={b.first}; exactly one is the first writer"
        )
        winner = f"a{i}" if a.first else f"b{i}"
        assert a.value == b.value == winner, (
            f"workflow {wf!r}: the records of 'shared' answered {a.value!r} and {b.value!r}, "
            f"not both the winner's {winner!r}"
        )
        loaded = await cp.load(wf)
        assert loaded == {"own": i, "shared": winner}, (
            f"workflow {wf!r}: after the batch the store holds {loaded!r}; the superseded "
            "pass's writes must have left nothing"
        )
        await cp.renew(pairs[i][1])
