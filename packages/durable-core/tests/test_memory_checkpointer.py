"""MemoryCheckpointer against every row of the Checkpointer contract.

The clock is a ManualClock, so leases expire when a test says so and never by sleeping.
Races are real asyncio tasks on one store. Each memory operation yields to the loop once
and then acts without yielding again, so the order in which the awaits return is the
order in which the store saw the writes: the tests below lean on that to know which
write came first without trusting the store to say.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

import pytest
from durable.clock import ManualClock
from durable.codec import UnencodableValue
from durable.interfaces import INBOX_PREFIX, Checkpointer, Fenced, Pass, Recorded, inbox_key
from durable.memory import MemoryCheckpointer, MemoryEffect

LIVENESS = timedelta(seconds=10)
BUDGET = timedelta(minutes=5)


def memory_store() -> tuple[MemoryCheckpointer, ManualClock]:
    clock = ManualClock(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    return MemoryCheckpointer(clock=clock), clock


async def claimed(store: MemoryCheckpointer, workflow: str) -> Pass:
    holder = await store.claim(workflow, liveness=LIVENESS, budget=BUDGET)
    assert holder is not None, f"{workflow!r} should have been free to claim"
    return holder


async def jitter(rng: random.Random) -> None:
    """Yield a random number of times, so that racing tasks reach the store scrambled."""
    for _ in range(rng.randrange(6)):
        await asyncio.sleep(0)


def bump(counter: str) -> MemoryEffect:
    def effect(data: dict[str, object]) -> object:
        moved = data.get(counter, 0)
        assert isinstance(moved, int)
        data[counter] = moved + 1
        return moved + 1

    return effect


def test_the_memory_checkpointer_is_a_checkpointer() -> None:
    assert isinstance(MemoryCheckpointer(), Checkpointer)


# -- load and history ---------------------------------------------------------------


async def test_an_unknown_workflow_loads_empty_and_has_no_history() -> None:
    store, _ = memory_store()
    assert await store.load("nobody") == {}
    assert await store.history("nobody") == []


async def test_load_returns_records_in_the_order_first_recorded_across_record_and_supply() -> None:
    store, _ = memory_store()
    holder = await claimed(store, "wf")
    await store.record(holder, "zebra", 1)
    await store.supply("wf", "apple", 2)
    await store.record(holder, "mango", 3)
    await store.supply("wf", "banana", 4)
    assert list(await store.load("wf")) == ["zebra", "apple", "mango", "banana"]
    assert await store.load("wf") == {"zebra": 1, "apple": 2, "mango": 3, "banana": 4}


async def test_load_order_is_the_order_the_store_saw_racing_record_and_supply() -> None:
    store, _ = memory_store()
    holder = await claimed(store, "wf")
    rng = random.Random(7)
    seen: list[str] = []

    async def write(i: int) -> None:
        key = f"k{rng.randrange(10**9):09d}-{i}"
        await jitter(rng)
        if i % 2:
            await store.record(holder, key, i)
        else:
            await store.supply("wf", key, i)
        seen.append(key)

    await asyncio.gather(*(write(i) for i in range(120)))
    assert list(await store.load("wf")) == seen
    assert seen != sorted(seen), "the keys should not arrive sorted, or order proves nothing"


async def test_a_losing_write_moves_nothing() -> None:
    store, clock = memory_store()
    holder = await claimed(store, "wf")
    await store.record(holder, "first", "a")
    await store.supply("wf", "second", "b")
    before = await store.history("wf")
    clock.advance(timedelta(seconds=5))

    lost_record = await store.record(holder, "first", "changed")
    lost_supply = await store.supply("wf", "first", "changed again")

    assert lost_record == Recorded("a", False)
    assert lost_supply == "a"
    assert list(await store.load("wf")) == ["first", "second"]
    assert await store.history("wf") == before


async def test_order_holds_for_more_than_a_few_hundred_keys() -> None:
    store, _ = memory_store()
    holder = await claimed(store, "wf")
    rng = random.Random(11)
    keys = [f"key-{n}" for n in rng.sample(range(100_000), 1500)]
    for i, key in enumerate(keys):
        if i % 3:
            await store.record(holder, key, i)
        else:
            await store.supply("wf", key, i)
    loaded = await store.load("wf")
    assert list(loaded) == keys
    assert list(loaded.values()) == list(range(len(keys)))
    assert [entry.key for entry in await store.history("wf")] == keys


async def test_history_stamps_each_record_at_its_winning_write_and_never_restamps() -> None:
    store, clock = memory_store()
    holder = await claimed(store, "wf")
    t0 = clock.now()
    await store.record(holder, "charged", {"amount": 5})
    t1 = clock.advance(timedelta(minutes=1))
    await store.supply("wf", "approved", True)
    t2 = clock.advance(timedelta(minutes=1))
    await store.append("wf", "hello")
    clock.advance(timedelta(minutes=1))

    # A replayed step and a resubmitted approval lose, and must not move the stamps.
    await store.record(holder, "charged", {"amount": 5})
    await store.supply("wf", "approved", False)

    history = await store.history("wf")
    assert [(e.key, e.value, e.at) for e in history] == [
        ("charged", {"amount": 5}, t0),
        ("approved", True, t1),
        (inbox_key(2), "hello", t2),
    ]
    assert all(e.at.utcoffset() == timedelta(0) for e in history)
    assert [e.key for e in history] == list(await store.load("wf"))


# -- the claim ----------------------------------------------------------------------


async def test_one_of_a_hundred_concurrent_claimers_gets_the_workflow() -> None:
    store, _ = memory_store()
    rng = random.Random(3)

    async def claimer() -> Pass | None:
        await jitter(rng)
        return await store.claim("wf", liveness=LIVENESS, budget=BUDGET)

    passes = await asyncio.gather(*(claimer() for _ in range(100)))
    winners = [p for p in passes if p is not None]
    assert len(winners) == 1
    assert winners[0].workflow == "wf"


async def test_a_live_claim_refuses_another_until_released() -> None:
    store, clock = memory_store()
    holder = await claimed(store, "wf")
    clock.advance(LIVENESS / 2)
    assert await store.claim("wf", liveness=LIVENESS, budget=BUDGET) is None
    await store.release(holder)
    successor = await store.claim("wf", liveness=LIVENESS, budget=BUDGET)
    assert successor is not None
    assert successor.token > holder.token


async def test_a_released_pass_cannot_write_again() -> None:
    store, _ = memory_store()
    holder = await claimed(store, "wf")
    await store.release(holder)
    with pytest.raises(Fenced):
        await store.record(holder, "late", 1)
    assert await store.load("wf") == {}


async def test_claims_on_different_workflows_do_not_exclude_each_other() -> None:
    store, _ = memory_store()
    passes = await asyncio.gather(
        *(store.claim(f"wf-{i}", liveness=LIVENESS, budget=BUDGET) for i in range(50))
    )
    assert all(p is not None for p in passes)


async def test_tokens_strictly_increase_across_release_expiry_and_discard() -> None:
    """Across release, liveness expiry, budget expiry and discard, in that order."""
    store, clock = memory_store()
    tokens: list[int] = []

    released = await claimed(store, "wf")
    tokens.append(released.token)
    await store.release(released)

    lapsed = await claimed(store, "wf")
    tokens.append(lapsed.token)
    clock.advance(LIVENESS)  # never renewed: its liveness runs out

    spent = await store.claim("wf", liveness=LIVENESS, budget=timedelta(seconds=25))
    assert spent is not None
    tokens.append(spent.token)
    for _ in range(3):  # renewed faithfully, until the budget runs out anyway
        clock.advance(timedelta(seconds=8))
        await store.renew(spent)
    clock.advance(timedelta(seconds=1))

    discarded = await claimed(store, "wf")
    tokens.append(discarded.token)
    await store.discard("wf")

    last = await claimed(store, "wf")
    tokens.append(last.token)

    assert tokens == sorted(set(tokens)), f"tokens must strictly increase, got {tokens}"


async def test_renew_pushes_liveness_forward() -> None:
    store, clock = memory_store()
    holder = await claimed(store, "wf")
    for _ in range(5):
        clock.advance(LIVENESS * 0.8)
        assert await store.renew(holder) == holder
        assert await store.claim("wf", liveness=LIVENESS, budget=BUDGET) is None
    clock.advance(LIVENESS)
    assert await store.claim("wf", liveness=LIVENESS, budget=BUDGET) is not None


async def test_renew_never_lifts_the_budget() -> None:
    store, clock = memory_store()
    holder = await store.claim("wf", liveness=LIVENESS, budget=timedelta(seconds=25))
    assert holder is not None
    clock.advance(timedelta(seconds=8))
    await store.renew(holder)
    clock.advance(timedelta(seconds=8))
    await store.renew(holder)
    clock.advance(timedelta(seconds=8))
    await store.renew(holder)  # at 24s: liveness would run to 34s, the budget ends at 25s
    clock.advance(timedelta(seconds=1))

    successor = await store.claim("wf", liveness=LIVENESS, budget=BUDGET)
    assert successor is not None, "the budget ended the claim although liveness was renewed"
    with pytest.raises(Fenced):
        await store.renew(holder)


async def test_renew_is_fenced_once_the_budget_is_spent() -> None:
    store, clock = memory_store()
    holder = await store.claim("wf", liveness=LIVENESS, budget=timedelta(seconds=5))
    assert holder is not None
    clock.advance(timedelta(seconds=5))
    with pytest.raises(Fenced, match="budget"):
        await store.renew(holder)


async def test_renew_is_fenced_when_superseded() -> None:
    store, clock = memory_store()
    stalled = await claimed(store, "wf")
    clock.advance(LIVENESS)
    await claimed(store, "wf")
    with pytest.raises(Fenced):
        await store.renew(stalled)


async def test_a_stale_release_frees_nothing() -> None:
    store, clock = memory_store()
    stalled = await claimed(store, "wf")
    clock.advance(LIVENESS)
    current = await claimed(store, "wf")

    await store.release(stalled)

    assert await store.claim("wf", liveness=LIVENESS, budget=BUDGET) is None
    assert await store.record(current, "step", 1) == Recorded(1, True)
    assert await store.renew(current) == current


# -- fencing -----------------------------------------------------------------------

StaleWrite = Callable[[MemoryCheckpointer, Pass], Awaitable[object]]

STALE_WRITES: dict[str, StaleWrite] = {
    "record": lambda store, stale: store.record(stale, "step", "stale"),
    "transact": lambda store, stale: store.transact(stale, "step", bump("moved")),
    "renew": lambda store, stale: store.renew(stale),
}


@pytest.mark.parametrize("write", STALE_WRITES.values(), ids=STALE_WRITES.keys())
async def test_a_superseded_pass_is_fenced_and_writes_nothing(write: StaleWrite) -> None:
    store, clock = memory_store()
    stalled = await claimed(store, "wf")
    await store.record(stalled, "before", 0)
    clock.advance(LIVENESS)
    current = await claimed(store, "wf")

    with pytest.raises(Fenced, match=r"superseded"):
        await write(store, stalled)

    assert await store.load("wf") == {"before": 0}
    assert store.data == {}
    assert await store.claim("wf", liveness=LIVENESS, budget=BUDGET) is None
    assert await store.record(current, "step", "current") == Recorded("current", True)


async def test_a_token_the_store_never_issued_is_fenced() -> None:
    store, _ = memory_store()
    holder = await claimed(store, "wf")
    for forged in (Pass("wf", holder.token + 1), Pass("other", holder.token)):
        with pytest.raises(Fenced):
            await store.record(forged, "step", 1)
    assert await store.load("wf") == {}
    assert await store.load("other") == {}


async def test_fenced_is_not_an_exception_an_except_exception_would_absorb() -> None:
    store, clock = memory_store()
    stalled = await claimed(store, "wf")
    clock.advance(LIVENESS)
    await claimed(store, "wf")

    async def saga() -> str:
        try:
            await store.record(stalled, "step", 1)
        except Exception:
            return "compensated"
        return "carried on"

    with pytest.raises(Fenced):
        await saga()


# -- what record hands back ----------------------------------------------------------


async def test_recorded_first_is_the_stores_word_when_a_tuple_comes_back_a_list() -> None:
    store, _ = memory_store()
    winner = await claimed(store, "wf")
    won = await store.record(winner, "pair", (1, 2))
    assert won.value == [1, 2]
    assert won.first, "the pass that wrote the value is first even though it reads back unequal"

    await store.release(winner)
    replay = await claimed(store, "wf")
    assert await store.record(replay, "pair", (1, 2)) == Recorded([1, 2], True)  # a tie
    assert await store.record(replay, "pair", [1, 2]) == Recorded([1, 2], True)
    assert await store.record(replay, "pair", (2, 1)) == Recorded([1, 2], False)


async def test_a_record_never_overwrites() -> None:
    store, _ = memory_store()
    holder = await claimed(store, "wf")
    await store.record(holder, "charged", {"id": "ch_1"})
    assert await store.record(holder, "charged", {"id": "ch_2"}) == Recorded({"id": "ch_1"}, False)
    assert await store.load("wf") == {"charged": {"id": "ch_1"}}


async def test_values_cross_the_codec_on_the_way_in_and_out() -> None:
    store, _ = memory_store()
    holder = await claimed(store, "wf")
    value: dict[str, object] = {"items": (1, 2), "note": "ünïcode"}
    recorded = await store.record(holder, "order", value)
    value["note"] = "mutated after the write"

    assert recorded.value == {"items": [1, 2], "note": "ünïcode"}
    loaded = await store.load("wf")
    assert loaded == {"order": {"items": [1, 2], "note": "ünïcode"}}
    assert loaded["order"] is not recorded.value
    again = await store.load("wf")
    assert again["order"] is not loaded["order"], "each read decodes afresh"


# -- transact --------------------------------------------------------------------------


async def test_transact_moves_the_counter_once_across_ten_passes() -> None:
    store, _ = memory_store()
    rng = random.Random(5)
    results: list[Recorded] = []

    async def one_pass() -> None:
        while (holder := await store.claim("wf", liveness=LIVENESS, budget=BUDGET)) is None:
            await jitter(rng)
        results.append(await store.transact(holder, "reserved", bump("stock/piano")))
        await jitter(rng)
        await store.release(holder)

    await asyncio.gather(*(one_pass() for _ in range(10)))

    assert store.data == {"stock/piano": 1}
    assert [r.value for r in results] == [1] * 10
    assert [r.first for r in results].count(True) == 1
    assert await store.load("wf") == {"reserved": 1}


async def test_a_failing_effect_leaves_neither_its_move_nor_a_record() -> None:
    store, _ = memory_store()
    store.data["stock/piano"] = 3
    holder = await claimed(store, "wf")

    def moves_then_fails(data: dict[str, object]) -> object:
        data["stock/piano"] = 4
        data["audit"] = ["reserved"]
        raise RuntimeError("declined")

    with pytest.raises(RuntimeError, match="declined"):
        await store.transact(holder, "reserved", moves_then_fails)

    assert store.data == {"stock/piano": 3}
    assert await store.load("wf") == {}
    assert await store.transact(holder, "reserved", bump("stock/piano")) == Recorded(4, True)


async def test_an_effect_whose_result_cannot_be_encoded_leaves_neither_half() -> None:
    store, _ = memory_store()
    holder = await claimed(store, "wf")

    def moves_then_returns_junk(data: dict[str, object]) -> object:
        data["moved"] = True
        return object()

    with pytest.raises(UnencodableValue, match="'reserved'"):
        await store.transact(holder, "reserved", moves_then_returns_junk)
    assert store.data == {}
    assert await store.load("wf") == {}


async def test_a_fenced_transact_applies_nothing() -> None:
    store, clock = memory_store()
    stalled = await claimed(store, "wf")
    clock.advance(LIVENESS)
    await claimed(store, "wf")
    ran: list[str] = []

    def effect(data: dict[str, object]) -> object:
        ran.append("ran")
        data["moved"] = True
        return 1

    with pytest.raises(Fenced):
        await store.transact(stalled, "reserved", effect)
    assert ran == []
    assert store.data == {}
    assert await store.load("wf") == {}


async def test_transact_on_a_recorded_key_returns_the_record_without_running() -> None:
    store, _ = memory_store()
    holder = await claimed(store, "wf")
    await store.supply("wf", "reserved", 41)
    assert await store.transact(holder, "reserved", bump("moved")) == Recorded(41, False)
    assert store.data == {}


# -- supply ----------------------------------------------------------------------------


async def test_supply_is_first_writer_wins_without_a_claim() -> None:
    store, _ = memory_store()
    assert await store.supply("order-1", "approved", {"by": "ana"}) == {"by": "ana"}
    assert await store.supply("order-1", "approved", {"by": "bo"}) == {"by": "ana"}
    assert await store.load("order-1") == {"approved": {"by": "ana"}}


async def test_racing_supplies_all_agree_on_one_winner() -> None:
    store, _ = memory_store()
    rng = random.Random(13)

    async def submit(i: int) -> object:
        await jitter(rng)
        return await store.supply("order-1", "approved", i)

    answers = await asyncio.gather(*(submit(i) for i in range(100)))
    assert len(set(answers)) == 1
    assert await store.load("order-1") == {"approved": answers[0]}


async def test_supply_is_not_blocked_by_a_live_pass() -> None:
    store, _ = memory_store()
    holder = await claimed(store, "wf")
    assert await store.supply("wf", "approved", True) is True
    assert await store.record(holder, "approved", False) == Recorded(True, False)
    assert await store.claim("wf", liveness=LIVENESS, budget=BUDGET) is None, "still held"
    assert await store.record(holder, "next", 1) == Recorded(1, True)


# -- append ----------------------------------------------------------------------------


async def test_two_hundred_concurrent_appends_land_with_keys_in_append_and_load_order() -> None:
    store, _ = memory_store()
    holder = await claimed(store, "wf")
    await store.record(holder, "started", True)
    rng = random.Random(17)
    appended: list[tuple[str, int]] = []

    async def send(i: int) -> None:
        await jitter(rng)
        key = await store.append("wf", {"message": i})
        appended.append((key, i))

    await asyncio.gather(*(send(i) for i in range(200)))
    await store.record(holder, "finished", True)

    keys = [key for key, _ in appended]
    assert len(set(keys)) == 200, "concurrent appends got one key twice"
    assert all(key.startswith(INBOX_PREFIX) for key in keys)
    assert keys == sorted(keys), "inbox keys must sort in append order"
    assert [i for _, i in appended] != list(range(200)), "the race should have reordered sends"
    loaded = await store.load("wf")
    assert list(loaded) == ["started", *keys, "finished"]
    assert [loaded[key] for key in keys] == [{"message": i} for _, i in appended]


async def test_appends_to_different_workflows_do_not_disturb_each_other() -> None:
    store, _ = memory_store()
    first = [await store.append("a", i) for i in range(3)]
    await store.append("b", "other")
    first.append(await store.append("a", 3))
    assert first == sorted(first)
    assert list((await store.load("a")).values()) == [0, 1, 2, 3]
    assert list((await store.load("b")).values()) == ["other"]


# -- discard ---------------------------------------------------------------------------


async def test_discard_forgets_records_fences_the_pass_in_flight_and_frees_the_id() -> None:
    store, _ = memory_store()
    in_flight = await claimed(store, "wf")
    await store.record(in_flight, "charged", 1)
    await store.supply("wf", "approved", True)
    await store.append("wf", "hello")

    await store.discard("wf")

    assert await store.load("wf") == {}
    assert await store.history("wf") == []
    for write in STALE_WRITES.values():
        with pytest.raises(Fenced):
            await write(store, in_flight)
    assert await store.load("wf") == {}
    assert store.data == {}

    successor = await store.claim("wf", liveness=LIVENESS, budget=BUDGET)
    assert successor is not None, "a discarded id is claimable at once"
    assert successor.token > in_flight.token
    assert await store.record(successor, "charged", 2) == Recorded(2, True)


async def test_discarding_an_unknown_workflow_leaves_it_claimable() -> None:
    store, _ = memory_store()
    await store.discard("never-seen")
    assert await store.claim("never-seen", liveness=LIVENESS, budget=BUDGET) is not None


# -- refusals at the boundary --------------------------------------------------------


@pytest.mark.parametrize("which", ["liveness", "budget"])
@pytest.mark.parametrize("duration", [timedelta(0), timedelta(seconds=-1)], ids=["zero", "neg"])
async def test_non_positive_durations_are_refused_naming_the_workflow(
    which: str, duration: timedelta
) -> None:
    store, _ = memory_store()
    durations = {"liveness": LIVENESS, "budget": BUDGET, which: duration}
    with pytest.raises(ValueError, match=rf"'order-7'.*{which} must be positive"):
        await store.claim("order-7", liveness=durations["liveness"], budget=durations["budget"])
    fresh, _ = memory_store()
    after = await claimed(store, "order-7")
    assert after == await claimed(fresh, "order-7"), "the refused claim took a token"


async def test_a_duration_that_is_not_a_timedelta_is_refused() -> None:
    store, _ = memory_store()
    with pytest.raises(TypeError, match=r"liveness must be a datetime\.timedelta"):
        await store.claim("wf", liveness=10, budget=BUDGET)  # type: ignore[arg-type]


UNENCODABLE: dict[str, object] = {
    "nan": math.nan,
    "infinity": math.inf,
    "nested-nan": {"amounts": [1.0, math.nan]},
    "object": object(),
    "set": {1, 2},
}

Write = Callable[[MemoryCheckpointer, Pass, object], Awaitable[object]]

WRITES: dict[str, Write] = {
    "record": lambda store, holder, value: store.record(holder, "order", value),
    "supply": lambda store, holder, value: store.supply("wf-9", "order", value),
    "append": lambda store, holder, value: store.append("wf-9", value),
}


@pytest.mark.parametrize("value", UNENCODABLE.values(), ids=UNENCODABLE.keys())
@pytest.mark.parametrize("write", WRITES.values(), ids=WRITES.keys())
async def test_unencodable_values_are_refused_naming_workflow_and_key_and_nothing_is_written(
    write: Write, value: object
) -> None:
    store, _ = memory_store()
    holder = await claimed(store, "wf-9")
    await store.record(holder, "earlier", 1)
    with pytest.raises(UnencodableValue) as refused:
        await write(store, holder, value)
    assert isinstance(refused.value, TypeError)
    assert "'wf-9'" in str(refused.value)
    assert refused.value.workflow == "wf-9"
    if write is not WRITES["append"]:
        assert "'order'" in str(refused.value)
        assert refused.value.key == "order"
    assert await store.load("wf-9") == {"earlier": 1}
    assert await store.append("wf-9", "next") == inbox_key(1), "the refused write took a place"


ReservedWrite = Callable[[MemoryCheckpointer, Pass, str], Awaitable[object]]

RESERVED_WRITES: dict[str, ReservedWrite] = {
    "record": lambda store, holder, key: store.record(holder, key, 1),
    "transact": lambda store, holder, key: store.transact(holder, key, bump("moved")),
    "supply": lambda store, holder, key: store.supply("wf", key, 1),
}


@pytest.mark.parametrize("write", RESERVED_WRITES.values(), ids=RESERVED_WRITES.keys())
async def test_the_inbox_prefix_is_reserved_for_append(write: ReservedWrite) -> None:
    store, _ = memory_store()
    holder = await claimed(store, "wf")
    with pytest.raises(ValueError, match="reserved for inbox entries"):
        await write(store, holder, inbox_key(0))
    assert await store.load("wf") == {}
    assert store.data == {}
    assert await store.append("wf", "first") == inbox_key(0)


@pytest.mark.parametrize("key", ["", 7], ids=["empty", "not-a-string"])
async def test_a_key_must_be_a_non_empty_string(key: object) -> None:
    store, _ = memory_store()
    holder = await claimed(store, "wf")
    with pytest.raises(ValueError, match="'wf': a record key must be a non-empty string"):
        await store.record(holder, key, 1)  # type: ignore[arg-type]
    assert await store.load("wf") == {}


async def test_a_workflow_id_must_be_a_non_empty_string() -> None:
    store, _ = memory_store()
    with pytest.raises(ValueError, match="workflow id must be a non-empty string"):
        await store.supply("", "key", 1)


@pytest.mark.parametrize(
    ("workflow", "shown"),
    [
        ("order\n42", r"'order\\n42' has a control character \('\\n' at position 5\)"),
        ("a\rb", r"'a\\rb' has a control character \('\\r' at position 1\)"),
        ("tab\t", r"'tab\\t' has a control character \('\\t' at position 3\)"),
        ("\x00nul", r"'\\x00nul' has a control character \('\\x00' at position 0\)"),
        ("del\x7f", r"'del\\x7f' has a control character \('\\x7f' at position 3\)"),
        ("c1\x85", r"'c1\\x85' has a control character \('\\x85' at position 2\)"),
    ],
    ids=["newline", "carriage-return", "tab", "nul", "del", "c1-next-line"],
)
async def test_an_id_with_a_control_character_is_refused_naming_it_and_where(
    workflow: str, shown: str
) -> None:
    """show and logs print an id on a line of its own; a newline in one would forge a line."""
    store, _ = memory_store()
    with pytest.raises(ValueError, match=f"workflow id {shown}"):
        await store.supply(workflow, "key", 1)
    with pytest.raises(ValueError, match=f"workflow id {shown}"):
        await store.claim(workflow, liveness=timedelta(seconds=5), budget=timedelta(seconds=5))
    assert store.data == {}
    assert await store.workflows() == []


def test_check_key_refuses_exactly_the_control_characters() -> None:
    """check_key settles a printable key without its regular expression; every code point
    of category Cc is still refused, in any position, and no other is."""
    import unicodedata

    from durable.boundary import check_key

    for point in range(0x3000):
        char = chr(point)
        if 0xD800 <= point <= 0xDFFF:
            continue
        for key in (char, f"k{char}", f"{char}k"):
            if unicodedata.category(char) == "Cc":
                with pytest.raises(ValueError, match="has a control character"):
                    check_key("wf", key)
            else:
                assert check_key("wf", key) == key


async def test_a_key_with_a_control_character_is_refused_and_other_unicode_is_not() -> None:
    store, _ = memory_store()
    holder = await claimed(store, "wf")
    with pytest.raises(ValueError, match=r"'wf': record key 'a\\nb' has a control character"):
        await store.record(holder, "a\nb", 1)
    assert await store.load("wf") == {}
    for fine in ("no-break\u00a0space", "zero\u200bwidth", "line\u2028separator", "é ✓ 🙂"):
        assert (await store.record(holder, fine, fine)).first
        assert (await store.supply(f"wf-{fine}", fine, 1)) == 1
