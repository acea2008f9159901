"""The contract's requirements, against a real server, with real concurrency.

Each test states one requirement of ``durable.interfaces`` and proves it on Postgres: several
connections (second pools on the same schema) where a requirement is about other writers,
real time where it is about deadlines. The conformance suite certifies the same requirements
across stores; these are the Postgres store's own, and run without it.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import psycopg.errors
import pytest
from durable import Fenced, Recorded, UnencodableValue
from durable.interfaces import INBOX_PREFIX, Delivery, Durable, inbox_key
from durable_postgres import PostgresCheckpointer, PostgresDurable, PostgresEffect
from durable_postgres.plugin import open_postgres
from psycopg import AsyncCursor, IsolationLevel
from psycopg_pool import AsyncConnectionPool

if TYPE_CHECKING:
    from durable.plugins import Testbed

pytestmark = pytest.mark.timeout(60)

SHORT = timedelta(milliseconds=400)
LONG = timedelta(minutes=5)


async def claimed(cp: PostgresCheckpointer, workflow: str = "wf") -> Any:
    holder = await cp.claim(workflow, liveness=LONG, budget=LONG)
    assert holder is not None
    return holder


def pg(durable: Durable[Any]) -> PostgresDurable:
    assert isinstance(durable, PostgresDurable)
    return durable


# -- load, history -------------------------------------------------------------


async def test_load_of_an_unknown_workflow_is_empty(cp: PostgresCheckpointer) -> None:
    assert await cp.load("nobody") == {}
    assert await cp.history("nobody") == []


async def test_load_returns_records_in_first_recorded_order_across_record_and_supply(
    cp: PostgresCheckpointer,
) -> None:
    holder = await claimed(cp)
    await cp.record(holder, "z", 1)
    await cp.supply("wf", "a", 2)
    await cp.record(holder, "m", 3)
    key = await cp.append("wf", "hello")
    await cp.supply("wf", "b", 4)
    assert list(await cp.load("wf")) == ["z", "a", "m", key, "b"]


async def test_a_losing_write_moves_nothing(cp: PostgresCheckpointer) -> None:
    holder = await claimed(cp)
    for key in ("first", "second", "third"):
        await cp.record(holder, key, key)
    before = await cp.history("wf")
    assert (await cp.record(holder, "first", "other")).first is False
    assert await cp.supply("wf", "second", "other") == "second"
    assert await cp.history("wf") == before


async def test_order_survives_many_keys_and_large_values(cp: PostgresCheckpointer) -> None:
    holder = await claimed(cp)
    keys = [f"k{i:04d}-{(i * 7919) % 1000}" for i in range(600)]
    for i, key in enumerate(keys):
        await cp.record(holder, key, "x" * (20_000 if i % 50 == 0 else 10))
    await cp.record(holder, keys[0], "loser")
    assert list(await cp.load("wf")) == keys


async def test_history_is_stamped_by_the_server_at_the_winning_write(
    cp: PostgresCheckpointer,
) -> None:
    holder = await claimed(cp)
    await cp.record(holder, "a", 1)
    await asyncio.sleep(0.05)
    await cp.record(holder, "b", 2)
    first = await cp.history("wf")
    await asyncio.sleep(0.05)
    await cp.record(holder, "a", 1)  # a replay: must not restamp
    await cp.supply("wf", "b", 3)
    again = await cp.history("wf")
    assert again == first
    a, b = first
    assert a.at.tzinfo is UTC
    assert b.at > a.at
    assert abs(datetime.now(UTC) - b.at) < timedelta(seconds=30)
    assert [e.key for e in first] == list(await cp.load("wf"))


# -- the claim -------------------------------------------------------------------


async def test_exactly_one_of_many_concurrent_claims_wins_across_connections(
    bed: Testbed[PostgresEffect],
) -> None:
    assert bed.url is not None
    async with open_postgres(bed.url, max_size=4) as other:
        stores = [bed.durable.checkpointer, other.checkpointer]
        results = await asyncio.gather(
            *(stores[i % 2].claim("wf", liveness=LONG, budget=LONG) for i in range(20))
        )
    assert len([r for r in results if r is not None]) == 1


async def test_a_held_workflow_cannot_be_claimed_until_liveness_passes(
    cp: PostgresCheckpointer,
) -> None:
    first = await cp.claim("wf", liveness=SHORT, budget=LONG)
    assert first is not None
    assert await cp.claim("wf", liveness=SHORT, budget=LONG) is None
    await asyncio.sleep(SHORT.total_seconds() + 0.1)
    second = await cp.claim("wf", liveness=SHORT, budget=LONG)
    assert second is not None
    assert second.token > first.token


async def test_tokens_strictly_increase_across_release_expiry_and_discard(
    cp: PostgresCheckpointer,
) -> None:
    tokens = []
    holder = await cp.claim("wf", liveness=SHORT, budget=LONG)
    assert holder is not None
    tokens.append(holder.token)
    await cp.release(holder)
    holder = await cp.claim("wf", liveness=SHORT, budget=LONG)
    assert holder is not None
    tokens.append(holder.token)
    await asyncio.sleep(SHORT.total_seconds() + 0.1)
    holder = await cp.claim("wf", liveness=SHORT, budget=LONG)
    assert holder is not None
    tokens.append(holder.token)
    await cp.discard("wf")
    holder = await cp.claim("wf", liveness=SHORT, budget=LONG)
    assert holder is not None
    tokens.append(holder.token)
    assert tokens == sorted(set(tokens))


async def test_renew_pushes_liveness_forward_but_never_past_the_budget(
    cp: PostgresCheckpointer,
) -> None:
    liveness = timedelta(seconds=1)
    holder = await cp.claim("wf", liveness=liveness, budget=timedelta(seconds=2))
    assert holder is not None
    for _ in range(2):
        await asyncio.sleep(0.4)
        await cp.renew(holder)
    assert await cp.claim("wf", liveness=liveness, budget=LONG) is None  # renewed, still held
    await asyncio.sleep(1.3)  # past the budget, whatever the renewals
    with pytest.raises(Fenced, match="budget"):
        await cp.renew(holder)
    assert await cp.claim("wf", liveness=liveness, budget=LONG) is not None


async def test_a_superseded_pass_is_fenced_on_renew_record_and_transact(
    bed: Testbed[PostgresEffect],
) -> None:
    cp = pg(bed.durable).checkpointer
    probe = bed.probe
    assert probe is not None
    stale = await cp.claim("wf", liveness=SHORT, budget=LONG)
    assert stale is not None
    await asyncio.sleep(SHORT.total_seconds() + 0.1)
    fresh = await cp.claim("wf", liveness=LONG, budget=LONG)
    assert fresh is not None
    with pytest.raises(Fenced, match=f"highest token issued is {fresh.token}"):
        await cp.renew(stale)
    with pytest.raises(Fenced):
        await cp.record(stale, "k", 1)
    with pytest.raises(Fenced):
        await cp.transact(stale, "t", probe.bump("wf", "c"))
    assert await cp.load("wf") == {}
    assert await probe.count("wf", "c") == 0


async def test_a_stalled_pass_racing_its_successor_from_another_handle_is_refused(
    bed: Testbed[PostgresEffect],
) -> None:
    assert bed.url is not None
    old = pg(bed.durable).checkpointer
    stale = await old.claim("wf", liveness=SHORT, budget=LONG)
    assert stale is not None
    await asyncio.sleep(SHORT.total_seconds() + 0.1)
    async with open_postgres(bed.url, max_size=4) as second:
        new = second.checkpointer
        newer = await claimed(new)

        async def stale_write(i: int) -> str:
            try:
                await old.record(stale, f"stale-{i}", i)
            except Fenced:
                return "fenced"
            return "written"

        async def newer_write(i: int) -> str:
            await new.record(newer, f"newer-{i}", i)
            return "written"

        outcomes = await asyncio.gather(
            *(write(i) for i in range(50) for write in (stale_write, newer_write))
        )
        assert outcomes.count("fenced") == 50
        assert sorted(await new.load("wf")) == sorted(f"newer-{i}" for i in range(50))


async def test_a_stale_release_frees_nothing_and_a_released_pass_cannot_write(
    cp: PostgresCheckpointer,
) -> None:
    stale = await cp.claim("wf", liveness=SHORT, budget=LONG)
    assert stale is not None
    await asyncio.sleep(SHORT.total_seconds() + 0.1)
    current = await claimed(cp)
    await cp.release(stale)
    assert await cp.claim("wf", liveness=LONG, budget=LONG) is None
    await cp.release(current)
    with pytest.raises(Fenced):
        await cp.record(current, "k", 1)
    assert await cp.claim("wf", liveness=LONG, budget=LONG) is not None


# -- record, supply ----------------------------------------------------------------


async def test_record_never_overwrites_and_says_who_won_by_encoding(
    cp: PostgresCheckpointer,
) -> None:
    holder = await claimed(cp)
    assert await cp.record(holder, "pair", (1, 2)) == Recorded([1, 2], True)
    assert await cp.record(holder, "pair", [1, 2]) == Recorded([1, 2], True)  # a tie is first
    assert await cp.record(holder, "pair", (1, 3)) == Recorded([1, 2], False)
    assert await cp.load("wf") == {"pair": [1, 2]}


async def test_supply_is_first_writer_wins_and_never_blocked_by_a_live_pass(
    bed: Testbed[PostgresEffect],
) -> None:
    cp = pg(bed.durable).checkpointer
    holder = await claimed(cp)
    inside = asyncio.Event()
    finish = asyncio.Event()

    async def slow(cursor: AsyncCursor[Any]) -> object:
        await cursor.execute("SELECT 1")
        inside.set()
        await finish.wait()
        return "done"

    transacting = asyncio.create_task(cp.transact(holder, "slow", slow))
    await inside.wait()
    # A pass is mid-transaction; supply from another connection must land at once.
    assert await asyncio.wait_for(cp.supply("wf", "approval", True), 5) is True
    assert await cp.supply("wf", "approval", False) is True
    finish.set()
    assert (await transacting).first is True


async def test_what_record_and_supply_returned_is_visible_to_a_second_handle(
    bed: Testbed[PostgresEffect],
) -> None:
    assert bed.reopen is not None
    cp = pg(bed.durable).checkpointer
    holder = await claimed(cp)
    await cp.record(holder, "a", {"x": 1})
    await cp.supply("wf", "b", [1])
    async with bed.reopen() as second:
        assert await second.checkpointer.load("wf") == {"a": {"x": 1}, "b": [1]}


async def test_a_value_the_codec_refuses_writes_nothing(cp: PostgresCheckpointer) -> None:
    holder = await claimed(cp)
    with pytest.raises(UnencodableValue, match="'wf', key 'k'"):
        await cp.record(holder, "k", float("nan"))
    with pytest.raises(UnencodableValue):
        await cp.supply("wf", "k", object())
    with pytest.raises(UnencodableValue):
        await cp.append("wf", {1: "non-string key"})
    assert await cp.load("wf") == {}


class _Reversing:
    """A codec of its own: JSON, reversed, so that anything skipping it shows."""

    def encode(self, value: object) -> str:
        return json.dumps(value, sort_keys=True)[::-1]

    def decode(self, encoded: str) -> object:
        return json.loads(encoded[::-1])


async def test_a_custom_codec_is_honoured_end_to_end(bed: Testbed[PostgresEffect]) -> None:
    assert bed.url is not None
    async with open_postgres(bed.url, codec=_Reversing()) as store:
        holder = await claimed(store.checkpointer)
        await store.checkpointer.record(holder, "a", {"k": [1, 2]})
        assert await store.checkpointer.load("wf") == {"a": {"k": [1, 2]}}
    async with pg(bed.durable).pool.connection() as conn:
        cursor = await conn.execute(
            f'SELECT value FROM "{bed.extras["schema"]}".workflow_checkpoint WHERE key = %s',
            ("a",),
        )
        row = await cursor.fetchone()
    assert row is not None
    assert row[0] == json.dumps({"k": [1, 2]}, sort_keys=True)[::-1]


async def test_an_application_pool_with_its_own_settings_is_used_and_left_as_it_was(
    bed: Testbed[PostgresEffect],
) -> None:
    """A shared pool need not be autocommit or READ COMMITTED: each borrow switches the
    connection for its own use and back."""
    store = pg(bed.durable)
    conninfo = store.pool.conninfo
    assert isinstance(conninfo, str)

    async def serializable(conn: Any) -> None:
        await conn.set_isolation_level(IsolationLevel.SERIALIZABLE)

    async with AsyncConnectionPool(
        conninfo, min_size=1, max_size=1, configure=serializable, open=False
    ) as pool:
        shared = PostgresDurable.on(pool, schema=store.checkpointer.schema)
        holder = await claimed(shared.checkpointer)
        assert (await shared.checkpointer.record(holder, "k", 1)).first is True
        await shared.arrive("wf", "a", 2)
        probe = bed.probe
        assert probe is not None
        assert (await shared.checkpointer.transact(holder, "t", probe.bump("wf", "c"))).first
        assert await shared.checkpointer.load("wf") == {"k": 1, "a": 2, "t": 1}
        async with pool.connection() as conn:
            assert conn.autocommit is False
            assert conn.isolation_level == IsolationLevel.SERIALIZABLE


# -- transact ------------------------------------------------------------------------


async def test_transact_ten_passes_move_the_counter_once(bed: Testbed[PostgresEffect]) -> None:
    cp = pg(bed.durable).checkpointer
    probe = bed.probe
    assert probe is not None
    results = []
    for _ in range(10):
        holder = await claimed(cp)
        results.append(await cp.transact(holder, "bumped", probe.bump("wf", "c")))
        await cp.release(holder)
    assert results[0] == Recorded(1, True)
    assert all(r == Recorded(1, False) for r in results[1:])
    assert await probe.count("wf", "c") == 1


async def test_a_failing_effect_leaves_neither_its_write_nor_the_record(
    bed: Testbed[PostgresEffect],
) -> None:
    cp = pg(bed.durable).checkpointer
    probe = bed.probe
    assert probe is not None
    holder = await claimed(cp)
    with pytest.raises(RuntimeError, match="by design"):
        await cp.transact(holder, "bumped", probe.bump_then_fail("wf", "c"))
    assert await probe.count("wf", "c") == 0
    assert await cp.load("wf") == {}
    assert await cp.transact(holder, "bumped", probe.bump("wf", "c")) == Recorded(1, True)


async def test_a_value_supplied_while_the_effect_ran_rolls_the_effect_back(
    bed: Testbed[PostgresEffect],
) -> None:
    cp = pg(bed.durable).checkpointer
    probe = bed.probe
    assert probe is not None
    holder = await claimed(cp)
    bump = probe.bump("wf", "c")

    async def racing(cursor: AsyncCursor[Any]) -> object:
        moved = await bump(cursor)
        await cp.supply("wf", "bumped", "from outside")  # another connection wins the key
        return moved

    assert await cp.transact(holder, "bumped", racing) == Recorded("from outside", False)
    assert await probe.count("wf", "c") == 0


async def test_concurrent_transacts_on_one_key_apply_the_effect_once(
    bed: Testbed[PostgresEffect],
) -> None:
    """Two passes, the first stalled inside its effect past its liveness: the second claims,
    and of the two transactions only the current token's commits."""
    cp = pg(bed.durable).checkpointer
    probe = bed.probe
    assert probe is not None
    stale = await cp.claim("wf", liveness=SHORT, budget=LONG)
    assert stale is not None
    bump = probe.bump("wf", "c")
    resume_stale = asyncio.Event()

    async def stalled(cursor: AsyncCursor[Any]) -> object:
        moved = await bump(cursor)
        await resume_stale.wait()
        return moved

    first = asyncio.create_task(cp.transact(stale, "bumped", stalled))
    await asyncio.sleep(SHORT.total_seconds() + 0.1)
    fresh = await cp.claim("wf", liveness=LONG, budget=LONG)  # not blocked by the stall
    assert fresh is not None
    second = asyncio.create_task(cp.transact(fresh, "bumped", probe.bump("wf", "c")))
    await asyncio.sleep(0.2)  # the second's effect now waits on the first's row lock
    resume_stale.set()
    with pytest.raises(Fenced):
        await first
    assert await second == Recorded(1, True)
    assert await probe.count("wf", "c") == 1


# -- append ------------------------------------------------------------------------------


async def test_concurrent_appends_get_distinct_keys_in_append_order(
    cp: PostgresCheckpointer,
) -> None:
    keys = await asyncio.gather(*(cp.append("wf", i) for i in range(200)))
    assert len(set(keys)) == 200
    assert all(k.startswith(INBOX_PREFIX) for k in keys)
    loaded = await cp.load("wf")
    assert list(loaded) == sorted(keys)
    assert sorted(loaded.values()) == list(range(200))  # type: ignore[type-var]


async def test_an_inbox_key_is_the_sequence_number_the_entry_sits_at(
    bed: Testbed[PostgresEffect],
) -> None:
    cp = pg(bed.durable).checkpointer
    await cp.supply("wf", "before", 0)
    key = await cp.append("wf", "message")
    await cp.supply("wf", "after", 1)
    async with cp.pool.connection() as conn:
        cursor = await conn.execute(
            f'SELECT seq FROM "{bed.extras["schema"]}".workflow_checkpoint WHERE key = %s',
            (key,),
        )
        row = await cursor.fetchone()
    assert row is not None
    assert key == inbox_key(row[0])
    assert list(await cp.load("wf")) == ["before", key, "after"]


# -- discard -------------------------------------------------------------------------------


async def test_discard_forgets_records_fences_the_pass_in_flight_and_frees_the_id(
    cp: PostgresCheckpointer,
) -> None:
    holder = await claimed(cp)
    await cp.record(holder, "a", 1)
    await cp.append("wf", "m")
    await cp.discard("wf")
    assert await cp.load("wf") == {}
    with pytest.raises(Fenced):
        await cp.record(holder, "b", 2)
    assert await cp.load("wf") == {}
    again = await cp.claim("wf", liveness=LONG, budget=LONG)
    assert again is not None
    assert again.token > holder.token


async def test_a_record_racing_a_discard_never_survives_it(cp: PostgresCheckpointer) -> None:
    for round_ in range(20):
        workflow = f"wf-{round_}"
        holder = await claimed(cp, workflow)

        async def keep_writing(holder: Any = holder, workflow: str = workflow) -> None:
            i = 0
            try:
                while True:
                    await cp.record(holder, f"k{i}", i)
                    i += 1
            except Fenced:
                return

        writer = asyncio.create_task(keep_writing())
        await asyncio.sleep(0.01)
        await cp.discard(workflow)
        await writer
        assert await cp.load(workflow) == {}


# -- scheduler --------------------------------------------------------------------------


async def test_a_ready_workflow_is_delivered_and_hidden_for_the_lease(
    bed: Testbed[PostgresEffect],
) -> None:
    assert bed.url is not None
    async with open_postgres(bed.url, lease=0.5) as store:
        scheduler = store.scheduler
        await scheduler.make_ready("wf")
        delivery = await scheduler.next_ready(timedelta(seconds=1))
        assert delivery is not None
        assert delivery.workflow == "wf"
        assert await scheduler.next_ready(timedelta(milliseconds=100)) is None
        again = await scheduler.next_ready(timedelta(seconds=2))  # the taker "died"
        assert again is not None
        assert again.workflow == "wf"
        assert again.receipt != delivery.receipt


async def test_next_ready_waits_for_a_workflow_made_ready_meanwhile(
    store: PostgresDurable,
) -> None:
    async def later() -> None:
        await asyncio.sleep(0.2)
        await store.scheduler.make_ready("late")

    waker = asyncio.create_task(later())
    delivery = await store.scheduler.next_ready(timedelta(seconds=3))
    await waker
    assert delivery is not None
    assert delivery.workflow == "late"


async def test_a_make_ready_during_a_delivery_is_not_undone_by_its_answer(
    store: PostgresDurable,
) -> None:
    scheduler = store.scheduler
    for answer in ("done", "wake_at"):
        await scheduler.make_ready(answer)
        delivery = await scheduler.next_ready(timedelta(seconds=1))
        assert delivery is not None
        await scheduler.make_ready(answer)  # a wakeup while the pass runs
        if answer == "done":
            await scheduler.done(delivery)
        else:
            await scheduler.wake_at(delivery, datetime.now(UTC) + timedelta(hours=1))
        redelivered = await scheduler.next_ready(timedelta(seconds=1))
        assert redelivered is not None
        assert redelivered.workflow == answer


async def test_wake_at_schedules_and_done_forgets(store: PostgresDurable) -> None:
    scheduler = store.scheduler
    await scheduler.make_ready("wf")
    delivery = await scheduler.next_ready(timedelta(seconds=1))
    assert delivery is not None
    await scheduler.wake_at(delivery, datetime.now(UTC) + timedelta(milliseconds=300))
    assert await scheduler.next_ready(timedelta(milliseconds=50)) is None
    woken = await scheduler.next_ready(timedelta(seconds=2))
    assert woken is not None
    assert woken.workflow == "wf"
    await scheduler.done(woken)
    assert await scheduler.scheduled("wf") is None
    assert await scheduler.next_ready(timedelta(milliseconds=100)) is None


async def test_wake_at_never_reinstates_a_workflow_cancelled_since(
    store: PostgresDurable,
) -> None:
    scheduler = store.scheduler
    await scheduler.make_ready("wf")
    delivery = await scheduler.next_ready(timedelta(seconds=1))
    assert delivery is not None
    await scheduler.cancel("wf")
    await scheduler.wake_at(delivery, datetime.now(UTC))
    assert await scheduler.scheduled("wf") is None
    assert await scheduler.next_ready(timedelta(milliseconds=100)) is None


async def test_a_receipt_this_store_never_issued_matches_nothing(
    store: PostgresDurable,
) -> None:
    await store.scheduler.make_ready("wf")
    await store.scheduler.done(Delivery("wf", "not-a-number"))
    await store.scheduler.wake_at(Delivery("wf", "12345"), datetime.now(UTC) + LONG)
    assert await store.scheduler.next_ready(timedelta(seconds=1)) is not None


async def test_several_consumers_on_several_connections_take_each_workflow_once(
    bed: Testbed[PostgresEffect],
) -> None:
    assert bed.url is not None
    first = pg(bed.durable)
    await asyncio.gather(*(first.scheduler.make_ready(f"wf-{i}") for i in range(2000)))
    async with open_postgres(bed.url, max_size=8) as second:
        taken: list[str] = []

        async def consume(scheduler: Any) -> None:
            while (delivery := await scheduler.next_ready(timedelta(milliseconds=200))) is not None:
                taken.append(delivery.workflow)
                await scheduler.done(delivery)

        await asyncio.gather(*(consume([first, second][i % 2].scheduler) for i in range(12)))
    assert sorted(taken) == sorted(f"wf-{i}" for i in range(2000))


async def test_wake_due_and_reclaim_have_nothing_to_move(store: PostgresDurable) -> None:
    assert await store.scheduler.wake_due(datetime.now(UTC)) == ()
    assert await store.scheduler.reclaim(timedelta(seconds=1)) is None


# -- durable -------------------------------------------------------------------------------


async def test_arrive_supplies_and_makes_ready_in_one_commit(store: PostgresDurable) -> None:
    assert store.atomic is True
    assert await store.arrive("wf", "approval", True) is True
    assert await store.arrive("wf", "approval", False) is True
    assert await store.checkpointer.load("wf") == {"approval": True}
    delivery = await store.scheduler.next_ready(timedelta(seconds=1))
    assert delivery is not None
    assert delivery.workflow == "wf"


async def test_send_appends_and_makes_ready(store: PostgresDurable) -> None:
    key = await store.send("wf", {"order": 7})
    assert (await store.checkpointer.load("wf")) == {key: {"order": 7}}
    delivery = await store.scheduler.next_ready(timedelta(seconds=1))
    assert delivery is not None
    assert delivery.workflow == "wf"


async def test_discard_of_the_durable_also_cancels_its_runs(store: PostgresDurable) -> None:
    holder = await claimed(store.checkpointer)
    await store.send("wf", 1)
    await store.discard("wf")
    assert await store.checkpointer.load("wf") == {}
    assert await store.scheduler.scheduled("wf") is None
    with pytest.raises(Fenced):
        await store.checkpointer.record(holder, "k", 1)


async def test_a_move_that_fails_leaves_neither_half(store: PostgresDurable) -> None:
    with pytest.raises(UnencodableValue):
        await store.arrive("wf", "bad", "\ud800")
    assert await store.checkpointer.load("wf") == {}
    assert await store.scheduler.scheduled("wf") is None


async def test_a_move_whose_second_statement_fails_on_the_server_leaves_neither_half(
    bed: Testbed[PostgresEffect],
) -> None:
    store = pg(bed.durable)
    async with store.pool.connection() as conn:
        await conn.execute(
            f'ALTER TABLE "{bed.extras["schema"]}".workflow_queue '
            "ADD CONSTRAINT refuse_everything CHECK (workflow = '')".encode()
        )
    with pytest.raises(psycopg.errors.CheckViolation, match="refuse_everything"):
        await store.arrive("wf", "approval", True)
    with pytest.raises(psycopg.errors.CheckViolation, match="refuse_everything"):
        await store.send("wf", "message")
    assert await store.checkpointer.load("wf") == {}
    assert await store.checkpointer.supply("wf", "after", 1) == 1  # the store still works


async def test_workflows_lists_ids_holding_records_sorted_and_limited(
    cp: PostgresCheckpointer,
) -> None:
    for workflow in ("c", "a", "b"):
        await cp.supply(workflow, "k", 1)
    assert await cp.workflows() == ["a", "b", "c"]
    assert await cp.workflows(limit=2) == ["a", "b"]
    with pytest.raises(ValueError, match="limit"):
        await cp.workflows(limit=0)


async def test_claimed_reports_the_live_claim(cp: PostgresCheckpointer) -> None:
    assert await cp.claimed("wf") is None
    holder = await claimed(cp)
    live = await cp.claimed("wf")
    assert live is not None
    assert live.token == holder.token
    await cp.release(holder)
    assert await cp.claimed("wf") is None


@pytest.mark.parametrize(
    "workflow",
    ["a:b", "{braces}", "with space", "ünïcødé ✓", "x" * 1024, "'; DROP TABLE x; --"],
)
async def test_odd_ids_and_keys_stay_isolated(cp: PostgresCheckpointer, workflow: str) -> None:
    holder = await claimed(cp, workflow)
    await cp.record(holder, workflow, workflow)
    await cp.supply(workflow + "-other", workflow, "other")
    assert await cp.load(workflow) == {workflow: workflow}
    assert await cp.load(workflow + "-other") == {workflow: "other"}
