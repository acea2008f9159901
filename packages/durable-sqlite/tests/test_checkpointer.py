"""Every Checkpointer requirement of the contract, against a real SQLite file, with many
tasks racing on one connection where a race is what the requirement is about."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from durable import Checkpointer, Fenced, Pass, Recorded, StoreError, UnencodableValue
from durable.clock import ManualClock
from durable.interfaces import INBOX_PREFIX, Claimed, Enumerable, Inspectable, inbox_key
from durable_sqlite import SqliteCheckpointer, SqliteDurable
from durable_sqlite.connection import numbered

LIVE = timedelta(seconds=10)
BUDGET = timedelta(minutes=5)
TASKS = 50


async def claim(cp: SqliteCheckpointer, workflow: str = "wf") -> Pass:
    holder = await cp.claim(workflow, liveness=LIVE, budget=BUDGET)
    assert holder is not None
    return holder


def stock(cursor: sqlite3.Cursor) -> object:
    cursor.execute("CREATE TABLE IF NOT EXISTS stock (sku TEXT PRIMARY KEY, reserved INTEGER)")
    cursor.execute(
        "INSERT INTO stock VALUES ('piano', 1) "
        "ON CONFLICT (sku) DO UPDATE SET reserved = reserved + 1"
    )
    return cursor.execute("SELECT reserved FROM stock WHERE sku = 'piano'").fetchone()[0]


def reserved(path: Path) -> int | None:
    """The application's counter as the file holds it, read through a connection of its own."""
    raw = sqlite3.connect(path)
    try:
        if raw.execute("SELECT 1 FROM sqlite_master WHERE name = 'stock'").fetchone() is None:
            return None
        row = raw.execute("SELECT reserved FROM stock WHERE sku = 'piano'").fetchone()
        return None if row is None else int(row[0])
    finally:
        raw.close()


# -- the protocol ----------------------------------------------------------------------


def test_the_checkpointer_meets_the_protocols_it_claims(store: SqliteDurable) -> None:
    assert isinstance(store.checkpointer, Checkpointer)
    assert isinstance(store.checkpointer, Enumerable)
    assert isinstance(store.checkpointer, Inspectable)


# -- load and history ------------------------------------------------------------------


async def test_load_of_an_unknown_workflow_is_empty(store: SqliteDurable) -> None:
    assert await store.checkpointer.load("nobody") == {}
    assert await store.checkpointer.history("nobody") == []


async def test_load_returns_records_in_the_order_first_recorded(store: SqliteDurable) -> None:
    cp = store.checkpointer
    holder = await claim(cp)
    await cp.record(holder, "zeta", 1)
    await cp.supply("wf", "alpha", 2)
    inbox = await cp.append("wf", "message")
    await cp.record(holder, "mid", 3)
    await cp.record(holder, "zeta", 99)  # a losing write moves nothing
    await cp.supply("wf", "alpha", 98)
    assert list((await cp.load("wf")).items()) == [
        ("zeta", 1),
        ("alpha", 2),
        (inbox, "message"),
        ("mid", 3),
    ]


async def test_records_of_one_workflow_are_not_mixed_with_another(store: SqliteDurable) -> None:
    cp = store.checkpointer
    await cp.supply("a", "k", 1)
    await cp.supply("b", "k", 2)
    await cp.supply("a", "j", 3)
    assert await cp.load("a") == {"k": 1, "j": 3}
    assert await cp.load("b") == {"k": 2}


async def test_history_is_load_with_each_records_time_at_its_winning_write(
    clocked: SqliteDurable, clock: ManualClock
) -> None:
    cp = clocked.checkpointer
    holder = await claim(cp)
    first = clock.now()
    await cp.record(holder, "charged", {"id": 7})
    clock.advance(timedelta(seconds=3))
    second = clock.now()
    await cp.supply("wf", "approved", True)
    clock.advance(timedelta(seconds=3))
    await cp.record(holder, "charged", {"id": 8})  # loses, and does not restamp
    await cp.supply("wf", "approved", False)
    history = await cp.history("wf")
    assert [(e.key, e.value, e.at) for e in history] == [
        ("charged", {"id": 7}, first),
        ("approved", True, second),
    ]
    assert [e.key for e in history] == list(await cp.load("wf"))


async def test_history_is_stamped_by_sqlites_clock_by_default(store: SqliteDurable) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    await store.checkpointer.supply("wf", "k", 1)
    after = datetime.now(UTC) + timedelta(milliseconds=2)
    (entry,) = await store.checkpointer.history("wf")
    assert entry.at.tzinfo is not None
    assert entry.at.utcoffset() == timedelta(0)
    assert before <= entry.at <= after


async def _binds_each_value_in_its_place(cp: SqliteCheckpointer, clock: ManualClock | None) -> None:
    """The step's write binds a tuple by position (numbered), the clock's reading last and
    only when it is a given one: each value lands in its own column, under either clock."""
    holder = await claim(cp)
    before = datetime.now(UTC).replace(microsecond=0)
    assert await cp.record_as(holder, "charged", {"id": 7}, "step") == Recorded({"id": 7}, True)
    after = datetime.now(UTC) + timedelta(milliseconds=2)
    (entry,) = await cp.history("wf")
    assert (entry.key, entry.value, entry.operation) == ("charged", {"id": 7}, "step")
    if clock is not None:
        assert entry.at == clock.now()
    else:
        assert before <= entry.at <= after
    with pytest.raises(Fenced):
        await cp.record_as(Pass("wf", holder.token + 1), "other", 1, "step")


async def test_a_step_record_binds_each_value_in_its_place(store: SqliteDurable) -> None:
    await _binds_each_value_in_its_place(store.checkpointer, None)


async def test_a_step_record_binds_each_value_in_its_place_with_a_given_clock(
    clocked: SqliteDurable, clock: ManualClock
) -> None:
    await _binds_each_value_in_its_place(clocked.checkpointer, clock)


def test_numbered_writes_each_name_as_its_place_and_refuses_one_left_over() -> None:
    text = "-- a comment may say :anything\nSELECT :b, :a, :b, :ab"
    expected = "-- a comment may say :anything\nSELECT ?3, ?2, ?3, ?1"
    assert numbered(text, ("ab", "a", "b")) == expected
    with pytest.raises(ValueError, match=r"\[':c'\]"):
        numbered("SELECT :a, :c", ("a", "b"))


# -- the claim -------------------------------------------------------------------------


async def test_one_live_pass_per_workflow_among_many_concurrent_claims(
    store: SqliteDurable,
) -> None:
    cp = store.checkpointer
    passes = await asyncio.gather(
        *(cp.claim("wf", liveness=LIVE, budget=BUDGET) for _ in range(TASKS))
    )
    won = [p for p in passes if p is not None]
    assert len(won) == 1
    assert await cp.claim("wf", liveness=LIVE, budget=BUDGET) is None


async def test_claims_on_different_workflows_do_not_contend(store: SqliteDurable) -> None:
    cp = store.checkpointer
    passes = await asyncio.gather(
        *(cp.claim(f"wf-{i}", liveness=LIVE, budget=BUDGET) for i in range(TASKS))
    )
    assert all(p is not None and p.token == 1 for p in passes)


async def test_a_claim_is_free_once_its_liveness_passes(
    clocked: SqliteDurable, clock: ManualClock
) -> None:
    cp = clocked.checkpointer
    first = await claim(cp)
    clock.advance(LIVE - timedelta(microseconds=1))
    assert await cp.claim("wf", liveness=LIVE, budget=BUDGET) is None
    clock.advance(timedelta(microseconds=1))
    second = await cp.claim("wf", liveness=LIVE, budget=BUDGET)
    assert second is not None
    assert second.token > first.token


async def test_a_claim_is_free_once_its_budget_is_spent_however_often_renewed(
    clocked: SqliteDurable, clock: ManualClock
) -> None:
    cp = clocked.checkpointer
    holder = await cp.claim("wf", liveness=timedelta(seconds=4), budget=timedelta(seconds=10))
    assert holder is not None
    for _ in range(4):
        clock.advance(timedelta(seconds=2))
        await cp.renew(holder)
    assert await cp.claim("wf", liveness=LIVE, budget=BUDGET) is None  # at 8 s: still held
    clock.advance(timedelta(seconds=2))
    assert await cp.claim("wf", liveness=LIVE, budget=BUDGET) is not None  # at 10 s: spent


async def test_renew_pushes_liveness_forward_never_past_the_budget(
    clocked: SqliteDurable, clock: ManualClock
) -> None:
    cp = clocked.checkpointer
    start = clock.now()
    holder = await cp.claim("wf", liveness=timedelta(seconds=4), budget=timedelta(seconds=10))
    assert holder is not None
    assert await cp.claimed("wf") == Claimed(
        holder.token, start + timedelta(seconds=4), start + timedelta(seconds=10)
    )
    clock.advance(timedelta(seconds=3))
    assert await cp.renew(holder) == holder
    claimed = await cp.claimed("wf")
    assert claimed is not None
    assert claimed.live_until == start + timedelta(seconds=7)
    clock.advance(timedelta(seconds=5))
    await cp.renew(holder)
    claimed = await cp.claimed("wf")
    assert claimed is not None
    assert claimed.live_until == start + timedelta(seconds=10)


async def test_renew_is_fenced_once_the_budget_is_spent(
    clocked: SqliteDurable, clock: ManualClock
) -> None:
    cp = clocked.checkpointer
    holder = await cp.claim("wf", liveness=timedelta(seconds=4), budget=timedelta(seconds=5))
    assert holder is not None
    clock.advance(timedelta(seconds=3))
    await cp.renew(holder)
    clock.advance(timedelta(seconds=2))
    with pytest.raises(Fenced, match="budget"):
        await cp.renew(holder)


async def test_renew_of_a_superseded_pass_is_fenced(
    clocked: SqliteDurable, clock: ManualClock
) -> None:
    cp = clocked.checkpointer
    stale = await claim(cp)
    clock.advance(LIVE)
    newer = await claim(cp)
    with pytest.raises(Fenced, match=f"highest token issued is {newer.token}"):
        await cp.renew(stale)
    assert await cp.renew(newer) == newer


async def test_release_frees_the_workflow_now(store: SqliteDurable) -> None:
    cp = store.checkpointer
    holder = await claim(cp)
    await cp.release(holder)
    assert await cp.claimed("wf") is None
    again = await cp.claim("wf", liveness=LIVE, budget=BUDGET)
    assert again is not None
    assert again.token > holder.token


async def test_a_stale_holders_release_frees_nothing(
    clocked: SqliteDurable, clock: ManualClock
) -> None:
    cp = clocked.checkpointer
    stale = await claim(cp)
    clock.advance(LIVE)
    newer = await claim(cp)
    await cp.release(stale)
    assert await cp.claim("wf", liveness=LIVE, budget=BUDGET) is None
    await cp.record(newer, "still-mine", 1)


async def test_a_released_pass_cannot_write_again(store: SqliteDurable) -> None:
    cp = store.checkpointer
    holder = await claim(cp)
    await cp.release(holder)
    with pytest.raises(Fenced):
        await cp.record(holder, "late", 1)
    with pytest.raises(Fenced):
        await cp.transact(holder, "late", stock)
    assert await cp.load("wf") == {}


async def test_tokens_strictly_increase_across_release_expiry_and_discard(
    clocked: SqliteDurable, clock: ManualClock
) -> None:
    cp = clocked.checkpointer
    tokens = [(await claim(cp)).token]
    await cp.release(Pass("wf", tokens[-1]))
    tokens.append((await claim(cp)).token)
    clock.advance(LIVE)
    tokens.append((await claim(cp)).token)
    await cp.discard("wf")
    tokens.append((await claim(cp)).token)
    await cp.discard("wf")
    await cp.discard("wf")
    tokens.append((await claim(cp)).token)
    assert tokens == sorted(set(tokens))


# -- record ----------------------------------------------------------------------------


async def test_a_stalled_pass_is_refused_after_a_newer_claim(
    clocked: SqliteDurable, clock: ManualClock
) -> None:
    cp = clocked.checkpointer
    stalled = await claim(cp)
    await cp.record(stalled, "before", 1)
    clock.advance(LIVE)
    newer = await claim(cp)
    with pytest.raises(Fenced, match=f"pass {stalled.token} on 'wf' was superseded"):
        await cp.record(stalled, "after", 2)
    await cp.record(newer, "newer", 3)
    assert await cp.load("wf") == {"before": 1, "newer": 3}


async def test_record_never_overwrites_and_says_who_won(store: SqliteDurable) -> None:
    cp = store.checkpointer
    holder = await claim(cp)
    assert await cp.record(holder, "k", {"b": 1, "a": 2}) == Recorded({"a": 2, "b": 1}, True)
    assert await cp.record(holder, "k", {"a": 3}) == Recorded({"a": 2, "b": 1}, False)
    assert await cp.load("wf") == {"k": {"a": 2, "b": 1}}


async def test_a_write_of_the_stored_encoding_counts_as_first(store: SqliteDurable) -> None:
    cp = store.checkpointer
    holder = await claim(cp)
    await cp.record(holder, "k", [1, 2])
    assert await cp.record(holder, "k", (1, 2)) == Recorded([1, 2], True)


async def test_a_tuple_that_won_comes_back_a_list_and_first(store: SqliteDurable) -> None:
    holder = await claim(store.checkpointer)
    assert await store.checkpointer.record(holder, "k", (1, "x")) == Recorded([1, "x"], True)


async def test_many_concurrent_records_of_one_key_agree_on_one_winner(
    store: SqliteDurable,
) -> None:
    cp = store.checkpointer
    holder = await claim(cp)
    results = await asyncio.gather(*(cp.record(holder, "k", i) for i in range(TASKS)))
    winners = [r for r in results if r.first]
    assert len(winners) == 1
    assert {r.value for r in results} == {winners[0].value}
    assert await cp.load("wf") == {"k": winners[0].value}


async def test_many_concurrent_records_of_distinct_keys_all_land(store: SqliteDurable) -> None:
    cp = store.checkpointer
    holder = await claim(cp)
    await asyncio.gather(*(cp.record(holder, f"k{i}", i) for i in range(TASKS)))
    assert await cp.load("wf") == {f"k{i}": i for i in range(TASKS)}


async def test_a_returned_record_is_in_the_file(store: SqliteDurable, path: Path) -> None:
    cp = store.checkpointer
    holder = await claim(cp)
    await cp.record(holder, "k", "durable")
    raw = sqlite3.connect(path)
    try:
        assert raw.execute("SELECT key, value FROM durable_checkpoint").fetchall() == [
            ("k", '"durable"')
        ]
    finally:
        raw.close()


# -- transact --------------------------------------------------------------------------


async def test_transact_commits_the_effect_and_its_record_together(
    store: SqliteDurable,
    path: Path,
) -> None:
    cp = store.checkpointer
    holder = await claim(cp)
    assert await cp.transact(holder, "reserved", stock) == Recorded(1, True)
    assert reserved(path) == 1
    assert await cp.load("wf") == {"reserved": 1}


async def test_transact_is_at_most_once_across_passes(
    clocked: SqliteDurable, clock: ManualClock, path: Path
) -> None:
    cp = clocked.checkpointer
    for _ in range(10):
        holder = await claim(cp)
        await cp.transact(holder, "reserved", stock)
        clock.advance(LIVE)
    holder = await claim(cp)
    assert await cp.transact(holder, "reserved", stock) == Recorded(1, False)
    assert reserved(path) == 1


async def test_concurrent_transacts_of_one_key_perform_the_effect_once(
    store: SqliteDurable,
    path: Path,
) -> None:
    cp = store.checkpointer
    holder = await claim(cp)
    results = await asyncio.gather(*(cp.transact(holder, "reserved", stock) for _ in range(TASKS)))
    assert sum(r.first for r in results) == 1
    assert {r.value for r in results} == {1}
    assert reserved(path) == 1


async def test_an_effect_that_raises_leaves_neither_its_writes_nor_a_record(
    store: SqliteDurable,
    path: Path,
) -> None:
    cp = store.checkpointer
    holder = await claim(cp)

    def fails(cursor: sqlite3.Cursor) -> object:
        stock(cursor)
        raise RuntimeError("declined")

    with pytest.raises(RuntimeError, match="declined"):
        await cp.transact(holder, "reserved", fails)
    assert reserved(path) is None
    assert await cp.load("wf") == {}
    assert await cp.transact(holder, "reserved", stock) == Recorded(1, True)


async def test_a_fenced_holders_effect_is_not_applied(
    clocked: SqliteDurable, clock: ManualClock, path: Path
) -> None:
    cp = clocked.checkpointer
    stale = await claim(cp)
    clock.advance(LIVE)
    await claim(cp)
    with pytest.raises(Fenced):
        await cp.transact(stale, "reserved", stock)
    assert reserved(path) is None


async def test_an_effect_whose_result_cannot_be_encoded_is_rolled_back(
    store: SqliteDurable,
    path: Path,
) -> None:
    cp = store.checkpointer
    holder = await claim(cp)

    def unencodable(cursor: sqlite3.Cursor) -> object:
        stock(cursor)
        return {1, 2}

    with pytest.raises(UnencodableValue, match="'wf', key 'reserved'"):
        await cp.transact(holder, "reserved", unencodable)
    assert reserved(path) is None
    assert await cp.load("wf") == {}


async def test_an_async_effect_is_refused_before_anything_runs(
    store: SqliteDurable, path: Path
) -> None:
    cp = store.checkpointer
    holder = await claim(cp)

    async def reserve(cursor: sqlite3.Cursor) -> object:
        return stock(cursor)

    with pytest.raises(TypeError, match="plain function of the cursor"):
        await cp.transact(holder, "reserved", reserve)
    with pytest.raises(TypeError, match="returned an awaitable"):
        await cp.transact(holder, "reserved", lambda cursor: reserve(cursor))
    assert reserved(path) is None
    assert await cp.load("wf") == {}


async def test_an_effect_that_commits_by_itself_is_reported(store: SqliteDurable) -> None:
    cp = store.checkpointer
    holder = await claim(cp)

    def commits(cursor: sqlite3.Cursor) -> object:
        cursor.execute("COMMIT")
        return 1

    with pytest.raises(StoreError, match="ended the transaction itself"):
        await cp.transact(holder, "k", commits)
    assert await cp.load("wf") == {}
    await cp.record(holder, "after", 1)  # the connection is usable again


async def test_transact_refuses_something_that_is_not_a_function(store: SqliteDurable) -> None:
    holder = await claim(store.checkpointer)
    with pytest.raises(TypeError, match=r"function of a sqlite3\.Cursor"):
        await store.checkpointer.transact(holder, "k", "UPDATE stock SET n = 1")  # type: ignore[arg-type]


# -- supply and append -----------------------------------------------------------------


async def test_supply_needs_no_claim_and_is_never_blocked_by_a_live_pass(
    store: SqliteDurable,
) -> None:
    cp = store.checkpointer
    holder = await claim(cp)
    assert await cp.supply("wf", "approved", True) is True
    assert await cp.supply("wf", "approved", False) is True
    assert (await cp.record(holder, "approved", False)) == Recorded(True, False)


async def test_concurrent_supplies_agree_on_the_first_writer(store: SqliteDurable) -> None:
    cp = store.checkpointer
    stored = await asyncio.gather(*(cp.supply("wf", "order", {"n": i}) for i in range(TASKS)))
    assert len({str(s) for s in stored}) == 1
    assert await cp.load("wf") == {"order": stored[0]}


async def test_concurrent_appends_get_distinct_keys_in_load_order_and_lose_nothing(
    store: SqliteDurable,
) -> None:
    cp = store.checkpointer
    await cp.supply("wf", "before", 0)
    keys = await asyncio.gather(*(cp.append("wf", i) for i in range(TASKS)))
    await cp.supply("wf", "after", 0)
    assert len(set(keys)) == TASKS
    assert all(k.startswith(INBOX_PREFIX) for k in keys)
    loaded = await cp.load("wf")
    inbox = [k for k in loaded if k.startswith(INBOX_PREFIX)]
    assert inbox == sorted(keys)
    assert sorted(loaded[k] for k in inbox) == list(range(TASKS))  # type: ignore[type-var]
    assert next(iter(loaded)) == "before"
    assert list(loaded)[-1] == "after"


async def test_append_keys_sort_in_append_order_within_a_workflow(store: SqliteDurable) -> None:
    cp = store.checkpointer
    keys = []
    for i in range(5):
        keys.append(await cp.append("wf", i))
        await cp.append("other", i)
    assert keys == sorted(keys)
    assert [v for k, v in (await cp.load("wf")).items()] == [0, 1, 2, 3, 4]


async def test_append_keys_are_spelled_as_the_core_spells_inbox_keys(
    store: SqliteDurable, path: Path
) -> None:
    key = await store.checkpointer.append("wf", "x")
    assert key == inbox_key(int(key.removeprefix(INBOX_PREFIX)))
    # The widest numbers too: the next seq after the highest one in the table.
    raw = sqlite3.connect(path)
    try:
        with raw:
            raw.execute(
                "INSERT INTO durable_checkpoint (seq, workflow, key, value, recorded_at) "
                "VALUES (?, 'elsewhere', 'k', '1', 0)",
                (2**62,),
            )
    finally:
        raw.close()
    assert await store.checkpointer.append("wf", "y") == inbox_key(2**62 + 1)


# -- discard ---------------------------------------------------------------------------


async def test_discard_forgets_every_record_and_fences_a_pass_in_flight(
    store: SqliteDurable,
) -> None:
    cp = store.checkpointer
    holder = await claim(cp)
    await cp.record(holder, "k", 1)
    await cp.append("wf", "message")
    await cp.discard("wf")
    assert await cp.load("wf") == {}
    with pytest.raises(Fenced):
        await cp.record(holder, "k2", 2)
    with pytest.raises(Fenced):
        await cp.renew(holder)
    assert await cp.load("wf") == {}


async def test_a_discarded_workflow_is_claimable_at_once_with_a_higher_token(
    store: SqliteDurable,
) -> None:
    cp = store.checkpointer
    holder = await claim(cp)
    await cp.discard("wf")
    again = await cp.claim("wf", liveness=LIVE, budget=BUDGET)
    assert again is not None
    assert again.token > holder.token
    await cp.record(again, "fresh", 1)
    assert await cp.load("wf") == {"fresh": 1}


async def test_discard_of_an_unknown_workflow_still_raises_its_fence(
    store: SqliteDurable,
) -> None:
    cp = store.checkpointer
    await cp.discard("never")
    holder = await cp.claim("never", liveness=LIVE, budget=BUDGET)
    assert holder is not None
    assert holder.token > 1


# -- the boundary ----------------------------------------------------------------------


async def test_a_value_the_codec_cannot_encode_is_refused_naming_workflow_and_key(
    store: SqliteDurable,
) -> None:
    cp = store.checkpointer
    holder = await claim(cp)
    with pytest.raises(UnencodableValue, match="workflow 'wf', key 'k'"):
        await cp.record(holder, "k", object())
    with pytest.raises(UnencodableValue, match="workflow 'wf', key 'j'"):
        await cp.supply("wf", "j", float("nan"))
    with pytest.raises(UnencodableValue, match="workflow 'wf'"):
        await cp.append("wf", {1: "int key"})
    assert await cp.load("wf") == {}


async def test_non_positive_durations_are_refused(store: SqliteDurable) -> None:
    cp = store.checkpointer
    with pytest.raises(ValueError, match="liveness must be positive"):
        await cp.claim("wf", liveness=timedelta(0), budget=BUDGET)
    with pytest.raises(ValueError, match="budget must be positive"):
        await cp.claim("wf", liveness=LIVE, budget=timedelta(seconds=-1))
    assert await cp.claimed("wf") is None


async def test_keys_are_checked_before_anything_is_written(store: SqliteDurable) -> None:
    cp = store.checkpointer
    holder = await claim(cp)
    with pytest.raises(ValueError, match="reserved for inbox entries"):
        await cp.record(holder, inbox_key(1), 1)
    with pytest.raises(ValueError, match="non-empty string"):
        await cp.supply("wf", "", 1)
    with pytest.raises(ValueError, match="workflow id"):
        await cp.load("")
    assert await cp.load("wf") == {}


# -- enumerate and inspect ------------------------------------------------------------


async def test_workflows_lists_ids_holding_records_sorted_and_bounded(
    store: SqliteDurable,
) -> None:
    cp = store.checkpointer
    for workflow in ("c", "a", "b"):
        await cp.supply(workflow, "k", 1)
        await cp.supply(workflow, "j", 1)
    await claim(cp, "claimed-only")
    await cp.supply("gone", "k", 1)
    await cp.discard("gone")
    assert await cp.workflows() == ["a", "b", "c"]
    assert await cp.workflows(limit=2) == ["a", "b"]
    with pytest.raises(ValueError, match="limit"):
        await cp.workflows(limit=0)


async def test_claimed_reports_only_a_live_claim(
    clocked: SqliteDurable, clock: ManualClock
) -> None:
    cp = clocked.checkpointer
    assert await cp.claimed("wf") is None
    holder = await claim(cp)
    claimed = await cp.claimed("wf")
    assert claimed is not None
    assert claimed.token == holder.token
    clock.advance(LIVE)
    assert await cp.claimed("wf") is None
