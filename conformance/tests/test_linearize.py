"""The history checker: it accepts what the memory reference does, refuses what no store
could have done, and shrinks a failure to the few calls that show it."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace

import pytest
from durable.memory import MemoryCheckpointer, MemoryProbe
from durable_conformance.linearize import Call, check, describe, shrink
from durable_conformance.suite.histories import _Jitter, concurrent_calls

WF = "wf"


def call(task: str, name: str, start: int, end: int, result: object, *args: object) -> Call:
    return Call(task, WF, name, args, start, end, result)


def claimed(task: str, token: int, start: int, end: int) -> Call:
    return call(task, "claim", start, end, ("pass", token))


def recorded(value: object, first: bool = True) -> tuple[str, object, bool]:
    return ("recorded", value, first)


async def memory_history(seed: int, *, jitter: bool = True) -> list[Call]:
    """What six tasks did to the memory reference; without ``jitter`` no move waits at its
    gap, so the same seed makes the same history (up to the clock readings)."""
    cp = MemoryCheckpointer(gap=_Jitter(random.Random(seed)) if jitter else None)
    return await concurrent_calls(
        [cp, cp, cp], MemoryProbe(cp), ["w1", "w2", "w3"], random.Random(seed)
    )


@pytest.mark.parametrize("seed", range(40))
def test_the_memory_references_histories_are_accepted(seed: int) -> None:
    calls = asyncio.run(memory_history(seed))
    assert len(calls) == 180
    assert check(calls) == [], describe(calls)


def test_a_sequential_history_of_every_call_is_accepted() -> None:
    calls = [
        claimed("a", 1, 0, 1),
        call("a", "record", 2, 3, recorded("x"), 1, "k", "x"),
        call("b", "supply", 4, 5, "x", "k", "y"),
        call("b", "append", 6, 7, "durable.inbox:1", "m", "id"),
        call("b", "append", 8, 9, "durable.inbox:1", "again", "id"),
        call("a", "transact", 10, 11, recorded(1), 1, "t"),
        call("a", "transact", 12, 13, recorded(1, False), 1, "t"),
        call("b", "count", 14, 15, 1),
        call("a", "renew", 16, 17, ("pass", 1), 1),
        call("b", "load", 18, 19, (("k", "x"), ("durable.inbox:1", "m"), ("t", 1))),
        call("b", "discard", 20, 21, None),
        call("a", "record", 22, 23, ("raised", "Fenced"), 1, "k", "x"),
        call("b", "history", 24, 25, ()),
        claimed("b", 5, 26, 27),
        call("b", "release", 28, 29, None, 5),
        call("b", "renew", 30, 31, ("raised", "Fenced"), 5),
        claimed("a", 6, 32, 33),
    ]
    assert check(calls) == []


def test_concurrent_calls_may_land_in_either_order() -> None:
    """A load overlapping a record may see it or not; which, the order decides."""
    calls = [
        claimed("a", 1, 0, 1),
        call("a", "record", 2, 10, recorded("x"), 1, "k", "x"),
        call("b", "load", 3, 9, ()),
        call("c", "load", 4, 8, (("k", "x"),)),
    ]
    assert check(calls) == []


def test_two_overlapping_claims_that_both_got_a_pass_are_refused() -> None:
    calls = [claimed("a", 1, 0, 10), claimed("b", 2, 5, 15)]
    [verdict] = check(calls)
    assert not verdict.linearizable
    assert any("while pass" in why for _, why in verdict.stuck)


def test_two_claims_are_refused_even_far_apart_without_a_release() -> None:
    calls = [claimed("a", 1, 0, 1), call("b", "load", 2, 3, ()), claimed("b", 2, 4, 5)]
    assert check(calls)
    released = [*calls[:2], call("a", "release", 2, 3, None, 1), calls[2]]
    assert check(released) == []


def test_a_stale_record_landing_after_a_newer_claims_load_is_refused() -> None:
    """The newer pass loaded after it claimed and saw no record; the stale pass's record
    then succeeded. No order explains both: before the claim it would be in the load,
    after it the stale token must be fenced."""
    calls = [
        claimed("old", 1, 0, 1),
        call("old", "release", 2, 3, None, 1),
        claimed("new", 2, 4, 5),
        call("new", "load", 6, 7, ()),
        call("old", "record", 8, 9, recorded("late"), 1, "k", "late"),
    ]
    assert check(calls)
    fenced = [*calls[:4], call("old", "record", 8, 9, ("raised", "Fenced"), 1, "k", "late")]
    assert check(fenced) == []


def test_two_different_first_writers_of_one_key_are_refused() -> None:
    calls = [
        call("a", "supply", 0, 10, "x", "k", "x"),
        call("b", "supply", 1, 11, "y", "k", "y"),
    ]
    assert check(calls)
    assert check([calls[0], call("b", "supply", 1, 11, "x", "k", "y")]) == []


def test_a_load_missing_a_completed_record_is_refused() -> None:
    calls = [
        claimed("a", 1, 0, 1),
        call("a", "record", 2, 3, recorded("x"), 1, "k", "x"),
        call("b", "load", 4, 5, ()),
    ]
    assert check(calls)


def test_an_entry_appearing_before_one_already_seen_is_refused() -> None:
    """Load order is the order first recorded: a record cannot turn up in front of one a
    finished load already showed it without."""
    calls = [
        call("a", "supply", 0, 1, "x", "k", "x"),
        call("b", "append", 0, 9, "durable.inbox:1", "m", None),
        call("c", "load", 2, 3, (("k", "x"),)),
        call("c", "load", 10, 11, (("durable.inbox:1", "m"), ("k", "x"))),
    ]
    assert check(calls)


def test_tokens_must_rise_and_append_keys_must_sort_in_append_order() -> None:
    tokens = [claimed("a", 3, 0, 1), call("a", "release", 2, 3, None, 3), claimed("b", 2, 4, 5)]
    assert check(tokens)
    keys = [
        call("a", "append", 0, 1, "durable.inbox:2", "m", None),
        call("b", "append", 2, 3, "durable.inbox:1", "n", None),
    ]
    assert check(keys)


def test_each_workflow_is_checked_on_its_own() -> None:
    good = [claimed("a", 1, 0, 1)]
    bad = [
        Call("a", "other", "claim", (), 0, 10, ("pass", 1)),
        Call("b", "other", "claim", (), 5, 15, ("pass", 2)),
    ]
    [verdict] = check(good + bad)
    assert verdict.workflow == "other"


@pytest.mark.parametrize("seed", range(5))
def test_the_shrinker_returns_the_few_calls_that_show_the_violation(seed: int) -> None:
    """A long history from the memory reference with one impossible answer planted in it
    (a load that lost a record written long before) shrinks to a handful of calls."""
    calls = asyncio.run(memory_history(seed, jitter=False))
    planted = [
        [c if c is not load else replace(load, result=()) for c in calls]
        for load in reversed(calls)
        if load.name == "load" and isinstance(load.result, tuple) and len(load.result) > 1
    ]
    # A load that overlapped a discard may rightly have seen nothing; the latest that
    # could not is the one planted.
    broken = next(history for history in planted if check(history))
    small = shrink(broken)
    assert "no call can come next" in describe(small), "the shrunk history must still fail"
    assert len(small.calls) <= 6, describe(small)
    assert all(c in broken for c in small.calls)


def test_the_shrinker_keeps_two_winners_to_the_two_claims() -> None:
    calls = [
        call("c", "supply", 0, 1, "x", "k", "x"),
        claimed("a", 1, 2, 10),
        call("c", "load", 3, 4, (("k", "x"),)),
        claimed("b", 2, 5, 15),
        call("a", "record", 16, 17, recorded("y"), 1, "j", "y"),
    ]
    small = shrink(calls)
    assert [c.name for c in small.calls] == ["claim", "claim"]
    assert small.earlier == []


def test_shrinking_a_linearizable_history_is_an_error() -> None:
    with pytest.raises(ValueError, match="linearizable"):
        shrink([claimed("a", 1, 0, 1)])
