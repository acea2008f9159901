"""transact: the effect and its record in one commit, so the step is exactly-once.

step performs an effect and then records it, so a crash in between repeats the effect on
the next pass. transact hands the store an effect it can perform itself, and the store does
the work and writes the record in one commit. The store's probe supplies the effects, in
the store's own language: one that moves a counter living in the store, one that moves it
and then fails, and a way to read the counter back independently.
"""

from __future__ import annotations

import asyncio

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._support import claimed, raised

PASSES = 10


@requirement("transact.once-across-passes", capability="transact")
async def test_transact_ten_passes_move_the_counter_once(store: StoreUnderTest) -> None:
    """Ten passes, one after another, each transact the same step: the counter moves once,
    the first pass is first, and every later one is handed the first's result."""
    cp = store.checkpointer
    probe = store.probe
    wf = store.workflow()
    for attempt in range(PASSES):
        holder = await claimed(cp, wf)
        written = await cp.transact(holder, "reserved", probe.bump(wf, "stock"))
        assert written.value == 1, f"pass {attempt} was handed {written.value!r}"
        assert written.first is (attempt == 0), f"pass {attempt} got {written}"
        await cp.release(holder)
    assert await probe.count(wf, "stock") == 1, "the effect ran more than once"
    assert await cp.load(wf) == {"reserved": 1}


@requirement("transact.once-under-concurrency", capability="transact")
async def test_transact_of_one_step_from_many_tasks_moves_the_counter_once(
    store: StoreUnderTest,
) -> None:
    """Concurrent transacts of one key, from several handles, move the counter once;
    concurrent transacts of distinct keys each move it."""
    probe = store.probe
    wf = store.workflow()
    async with store.handles(3) as handles:
        holder = await claimed(handles[0].checkpointer, wf)
        same = await asyncio.gather(
            *(
                handles[i % len(handles)].checkpointer.transact(
                    holder, "reserved", probe.bump(wf, "stock")
                )
                for i in range(PASSES)
            )
        )
        assert sum(r.first for r in same) == 1, f"{sum(r.first for r in same)} were first"
        assert await probe.count(wf, "stock") == 1
        distinct = await asyncio.gather(
            *(
                handles[i % len(handles)].checkpointer.transact(
                    holder, f"line-{i}", probe.bump(wf, "lines")
                )
                for i in range(PASSES)
            )
        )
    assert all(r.first for r in distinct)
    assert sorted(r.value for r in distinct) == list(range(1, PASSES + 1))  # type: ignore[type-var]
    assert await probe.count(wf, "lines") == PASSES


@requirement("transact.failing-effect-leaves-neither", capability="transact")
async def test_transact_an_effect_that_fails_leaves_neither_its_move_nor_a_record(
    store: StoreUnderTest,
) -> None:
    """An effect that moves the counter and then fails raises, leaves the counter where it
    was and records nothing; the step can then be transacted for real."""
    cp = store.checkpointer
    probe = store.probe
    wf = store.workflow()
    holder = await claimed(cp, wf)
    await raised(
        cp.transact(holder, "reserved", probe.bump_then_fail(wf, "stock")),
        "a transact whose effect fails",
        Exception,
    )
    assert await probe.count(wf, "stock") == 0, "half a failed commit was left: the move"
    assert "reserved" not in await cp.load(wf), "half a failed commit was left: the record"
    written = await cp.transact(holder, "reserved", probe.bump(wf, "stock"))
    assert (written.value, written.first) == (1, True)
    assert await probe.count(wf, "stock") == 1


@requirement("transact.records-the-effects-result", capability="transact")
async def test_transact_records_what_the_effect_returned(store: StoreUnderTest) -> None:
    """A transacted step is an ordinary record: load and history hold the effect's result
    in its place among the other records."""
    cp = store.checkpointer
    probe = store.probe
    wf = store.workflow()
    holder = await claimed(cp, wf)
    await cp.record(holder, "before", True)
    await cp.transact(holder, "reserved", probe.bump(wf, "stock"))
    await cp.supply(wf, "after", True)
    assert list((await cp.load(wf)).items()) == [("before", True), ("reserved", 1), ("after", True)]
    assert [e.key for e in await cp.history(wf)] == ["before", "reserved", "after"]
