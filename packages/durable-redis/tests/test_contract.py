"""The contract, on one node and on a real 3-primary cluster, over separate connections.

Every test here runs twice (``server_url`` is parametrized): what holds on one node
must hold on a cluster, where a key outside the workflow's slot is an error rather than
a convenience. Races are real: the racers hold clients of their own, so the server, not
the event loop, decides who wins.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from durable.codec import UnencodableValue
from durable.interfaces import INBOX_PREFIX, Delivery, Fenced, Pass, Recorded
from durable.plugins import Testbed as Bed
from durable_redis import (
    LuaEffect,
    LuaEffectFailed,
    RedisCheckpointer,
    RedisDurable,
    RedisStreamScheduler,
)

LIVE = timedelta(seconds=30)
BUDGET = timedelta(minutes=5)
SHORT = timedelta(milliseconds=20)


async def take(store: RedisDurable) -> Pass:
    holder = await store.checkpointer.claim("wf", liveness=LIVE, budget=BUDGET)
    assert holder is not None
    return holder


@asynccontextmanager
async def others(bed: Bed[Any], n: int) -> AsyncIterator[list[RedisDurable]]:
    """``n`` further stores on the same backing store, each with its own client."""
    assert bed.reopen is not None
    async with AsyncExitStack() as stack:
        opened = [await stack.enter_async_context(bed.reopen()) for _ in range(n)]
        assert all(isinstance(store, RedisDurable) for store in opened)
        yield cast(list[RedisDurable], opened)


def as_store(bed: Bed[Any]) -> RedisDurable:
    assert isinstance(bed.durable, RedisDurable)
    return bed.durable


async def server_now(cp: RedisCheckpointer) -> datetime:
    seconds, micros = await cp.client.time()
    return datetime.fromtimestamp(seconds, UTC) + timedelta(microseconds=micros)


# -- load and history -----------------------------------------------------------------


async def test_load_returns_every_record_in_first_recorded_order(bed: Bed[Any]) -> None:
    cp = as_store(bed).checkpointer
    assert await cp.load("never-seen") == {}
    holder = await take(as_store(bed))
    for key in ("zeta", "alpha", "mid"):
        await cp.record(holder, key, key.upper())
    await cp.supply("wf", "beta", 2)
    await cp.record(holder, "alpha", "a losing write moves nothing")
    assert list((await cp.load("wf")).items()) == [
        ("zeta", "ZETA"),
        ("alpha", "ALPHA"),
        ("mid", "MID"),
        ("beta", 2),
    ]


async def test_history_stamps_each_record_with_the_server_clock_at_its_winning_write(
    bed: Bed[Any],
) -> None:
    cp = as_store(bed).checkpointer
    holder = await take(as_store(bed))
    before = await server_now(cp)
    await cp.record(holder, "first", 1)
    await cp.supply("wf", "second", 2)
    after = await server_now(cp)
    await asyncio.sleep(0.01)
    await cp.record(holder, "first", 1)  # a replayed (tying) write does not restamp
    entries = await cp.history("wf")
    assert [(e.key, e.value) for e in entries] == [("first", 1), ("second", 2)]
    for entry in entries:
        assert entry.at.tzinfo is not None
        assert entry.at.utcoffset() == timedelta(0)
        assert before <= entry.at <= after
    assert entries[0].at <= entries[1].at


# -- the claim --------------------------------------------------------------------------


async def test_claim_is_exclusive_across_connections(bed: Bed[Any]) -> None:
    holder = await take(as_store(bed))
    async with others(bed, 1) as (second,):
        assert await second.checkpointer.claim("wf", liveness=LIVE, budget=BUDGET) is None
        await as_store(bed).checkpointer.release(holder)
        again = await second.checkpointer.claim("wf", liveness=LIVE, budget=BUDGET)
    assert again is not None
    assert again.token > holder.token


async def test_a_claim_is_free_once_its_liveness_lapses(bed: Bed[Any]) -> None:
    cp = as_store(bed).checkpointer
    first = await cp.claim("wf", liveness=SHORT, budget=BUDGET)
    assert first is not None
    await asyncio.sleep(0.06)
    second = await cp.claim("wf", liveness=LIVE, budget=BUDGET)
    assert second is not None
    assert second.token > first.token
    with pytest.raises(Fenced):
        await cp.record(first, "k", "the stalled pass")
    assert await cp.load("wf") == {}


async def test_renew_pushes_liveness_forward_but_never_past_the_budget(
    bed: Bed[Any],
) -> None:
    cp = as_store(bed).checkpointer
    holder = await cp.claim(
        "wf", liveness=timedelta(milliseconds=60), budget=timedelta(milliseconds=150)
    )
    assert holder is not None
    for _ in range(3):
        await asyncio.sleep(0.03)
        assert await cp.renew(holder) == holder
        assert await cp.claim("wf", liveness=LIVE, budget=BUDGET) is None
    await asyncio.sleep(0.12)  # past the budget however often it is renewed
    with pytest.raises(Fenced, match="budget"):
        await cp.renew(holder)
    after = await cp.claim("wf", liveness=LIVE, budget=BUDGET)
    assert after is not None
    assert after.token > holder.token


async def test_renew_by_a_superseded_pass_is_fenced(bed: Bed[Any]) -> None:
    cp = as_store(bed).checkpointer
    stale = await cp.claim("wf", liveness=SHORT, budget=BUDGET)
    assert stale is not None
    await asyncio.sleep(0.05)
    assert await cp.claim("wf", liveness=LIVE, budget=BUDGET) is not None
    with pytest.raises(Fenced, match="superseded"):
        await cp.renew(stale)


async def test_release_frees_now_and_a_stale_release_frees_nothing(bed: Bed[Any]) -> None:
    cp = as_store(bed).checkpointer
    stale = await cp.claim("wf", liveness=SHORT, budget=BUDGET)
    assert stale is not None
    await asyncio.sleep(0.05)
    live = await take(as_store(bed))
    await cp.release(stale)
    assert await cp.claim("wf", liveness=LIVE, budget=BUDGET) is None
    await cp.release(live)
    assert await cp.claim("wf", liveness=LIVE, budget=BUDGET) is not None


async def test_a_released_pass_cannot_write_again(bed: Bed[Any]) -> None:
    cp = as_store(bed).checkpointer
    holder = await take(as_store(bed))
    await cp.release(holder)
    with pytest.raises(Fenced):
        await cp.record(holder, "k", 1)
    assert await cp.load("wf") == {}


# -- record -----------------------------------------------------------------------------


async def test_record_never_overwrites_and_the_store_says_who_won(bed: Bed[Any]) -> None:
    cp = as_store(bed).checkpointer
    holder = await take(as_store(bed))
    assert await cp.record(holder, "k", (1, 2)) == Recorded([1, 2], True)
    assert await cp.record(holder, "k", [1, 2]) == Recorded([1, 2], True)  # a tie is first
    assert await cp.record(holder, "k", "other") == Recorded([1, 2], False)
    assert await cp.load("wf") == {"k": [1, 2]}


async def test_a_stalled_pass_is_refused_after_a_newer_claim(bed: Bed[Any]) -> None:
    store = as_store(bed)
    stalled = await store.checkpointer.claim("wf", liveness=SHORT, budget=BUDGET)
    assert stalled is not None
    await asyncio.sleep(0.05)
    async with others(bed, 1) as (second,):
        newer = await second.checkpointer.claim("wf", liveness=LIVE, budget=BUDGET)
        assert newer is not None
        with pytest.raises(Fenced, match=str(newer.token)):
            await store.checkpointer.record(stalled, "k", "stale")
        assert await second.checkpointer.load("wf") == {}
        assert (await second.checkpointer.record(newer, "k", "fresh")).first


async def test_concurrent_records_of_one_key_agree_on_one_winner(bed: Bed[Any]) -> None:
    holder = await take(as_store(bed))
    async with others(bed, 8) as racers:
        results = await asyncio.gather(
            *(r.checkpointer.record(holder, "k", f"value-{i}") for i, r in enumerate(racers))
        )
    winners = [r for r in results if r.first]
    assert len(winners) == 1
    assert {r.value for r in results} == {winners[0].value}


# -- transact ---------------------------------------------------------------------------


async def test_transact_commits_the_effect_with_its_record_at_most_once(
    bed: Bed[Any],
) -> None:
    store, probe = as_store(bed), bed.probe
    assert probe is not None
    holder = await take(store)
    first = await store.checkpointer.transact(holder, "bumped", probe.bump("wf", "n"))
    assert first == Recorded(1, True)
    await store.checkpointer.release(holder)
    for _ in range(3):  # later passes find it recorded and do not perform it again
        later = await take(store)
        assert await store.checkpointer.transact(
            later, "bumped", probe.bump("wf", "n")
        ) == Recorded(1, False)
        await store.checkpointer.release(later)
    assert await probe.count("wf", "n") == 1
    assert await store.checkpointer.load("wf") == {"bumped": 1}


async def test_a_failing_effect_leaves_neither_its_writes_nor_a_record(bed: Bed[Any]) -> None:
    store, probe = as_store(bed), bed.probe
    assert probe is not None
    holder = await take(store)
    await store.checkpointer.transact(holder, "once", probe.bump("wf", "n"))
    with pytest.raises(LuaEffectFailed, match="by design"):
        await store.checkpointer.transact(holder, "fails", probe.bump_then_fail("wf", "n"))
    assert await probe.count("wf", "n") == 1
    assert await store.checkpointer.load("wf") == {"once": 1}


async def test_a_fenced_holders_effect_is_not_applied(bed: Bed[Any]) -> None:
    store, probe = as_store(bed), bed.probe
    assert probe is not None
    stale = await store.checkpointer.claim("wf", liveness=SHORT, budget=BUDGET)
    assert stale is not None
    await asyncio.sleep(0.05)
    await take(store)
    with pytest.raises(Fenced):
        await store.checkpointer.transact(stale, "k", probe.bump("wf", "n"))
    assert await probe.count("wf", "n") == 0
    assert await store.checkpointer.load("wf") == {}


async def test_an_effect_that_returns_no_encoding_is_undone(bed: Bed[Any]) -> None:
    store = as_store(bed)
    cp = store.checkpointer
    holder = await take(store)
    ledger = f"{cp.hash_key('wf')}:ledger"
    for source, why in (
        ("return redis.call('HINCRBY', KEYS[1], 'n', 1)", "number"),
        ("redis.call('HINCRBY', KEYS[1], 'n', 1)", "nil"),
        ("redis.call('HINCRBY', KEYS[1], 'n', 1) return 'not json'", "not JSON"),
        ("redis.call('HINCRBY', KEYS[1], 'n', 1) return redis.error_reply('no')", "no"),
    ):
        with pytest.raises(LuaEffectFailed, match=why):
            await cp.transact(holder, "k", LuaEffect(source, (ledger,)))
    with pytest.raises(LuaEffectFailed, match="does not compile"):
        await cp.transact(holder, "k", LuaEffect("this is not lua", (ledger,)))
    assert await cp.client.exists(ledger) == 0
    assert await cp.load("wf") == {}


# -- supply and append --------------------------------------------------------------------


async def test_supply_is_first_writer_wins_and_never_blocked_by_a_live_pass(
    bed: Bed[Any],
) -> None:
    store = as_store(bed)
    holder = await take(store)
    async with others(bed, 1) as (outside,):
        assert await outside.checkpointer.supply("wf", "approval", {"ok": True}) == {"ok": True}
        assert await outside.checkpointer.supply("wf", "approval", {"ok": False}) == {"ok": True}
    assert await store.checkpointer.record(holder, "approval", "x") == Recorded({"ok": True}, False)


async def test_concurrent_appends_get_distinct_keys_in_append_order_and_none_is_lost(
    bed: Bed[Any],
) -> None:
    async with others(bed, 10) as senders:
        keys = await asyncio.gather(
            *(s.checkpointer.append("wf", f"message-{i}") for i, s in enumerate(senders))
        )
    assert len(set(keys)) == 10
    assert all(key.startswith(INBOX_PREFIX) for key in keys)
    loaded = await as_store(bed).checkpointer.load("wf")
    assert sorted(loaded) == list(loaded)  # key order and load order are one order
    assert sorted(str(v) for v in loaded.values()) == sorted(f"message-{i}" for i in range(10))


async def test_an_appended_entry_sits_in_load_at_its_append_position(bed: Bed[Any]) -> None:
    store = as_store(bed)
    holder = await take(store)
    await store.checkpointer.record(holder, "a", 1)
    inbox = await store.checkpointer.append("wf", "hello")
    await store.checkpointer.supply("wf", "b", 2)
    assert list(await store.checkpointer.load("wf")) == ["a", inbox, "b"]


# -- discard ----------------------------------------------------------------------------


async def test_discard_forgets_records_and_fences_the_pass_in_flight(bed: Bed[Any]) -> None:
    store = as_store(bed)
    in_flight = await take(store)
    await store.checkpointer.record(in_flight, "a", 1)
    await store.checkpointer.discard("wf")
    assert await store.checkpointer.load("wf") == {}
    with pytest.raises(Fenced):
        await store.checkpointer.record(in_flight, "b", 2)
    fresh = await take(store)  # claimable at once
    assert fresh.token > in_flight.token
    assert await store.checkpointer.load("wf") == {}


async def test_tokens_strictly_increase_across_release_expiry_and_discard(
    bed: Bed[Any],
) -> None:
    cp = as_store(bed).checkpointer
    tokens = []
    for move in ("release", "expire", "discard", "release"):
        holder = await cp.claim("wf", liveness=SHORT, budget=BUDGET)
        assert holder is not None
        tokens.append(holder.token)
        if move == "release":
            await cp.release(holder)
        elif move == "expire":
            await asyncio.sleep(0.05)
        else:
            await cp.discard("wf")
    assert tokens == sorted(set(tokens))


# -- the boundary ---------------------------------------------------------------------------


async def test_bad_durations_and_unencodable_values_are_refused_before_anything_is_written(
    bed: Bed[Any],
) -> None:
    store = as_store(bed)
    cp = store.checkpointer
    with pytest.raises(ValueError, match="liveness"):
        await cp.claim("wf", liveness=timedelta(0), budget=BUDGET)
    with pytest.raises(ValueError, match="budget"):
        await cp.claim("wf", liveness=LIVE, budget=timedelta(seconds=-1))
    holder = await take(store)
    with pytest.raises(UnencodableValue, match=r"'wf'.*'k'"):
        await cp.record(holder, "k", object())
    with pytest.raises(UnencodableValue, match="'k'"):
        await cp.supply("wf", "k", float("nan"))
    with pytest.raises(UnencodableValue):
        await cp.append("wf", {1, 2})
    with pytest.raises(ValueError, match="reserved"):
        await cp.record(holder, INBOX_PREFIX + "1", 1)
    with pytest.raises(ValueError, match="workflow id"):
        await cp.load("")
    with pytest.raises(ValueError, match="lease"):
        RedisStreamScheduler(cp.client, lease=timedelta(0))
    assert await cp.load("wf") == {}


async def test_a_second_client_reads_what_the_first_wrote(bed: Bed[Any]) -> None:
    store = as_store(bed)
    holder = await take(store)
    await store.checkpointer.record(holder, "k", {"nested": [1, "two"]})
    async with others(bed, 1) as (second,):
        assert await second.checkpointer.load("wf") == {"k": {"nested": [1, "two"]}}
        assert await second.checkpointer.claim("wf", liveness=LIVE, budget=BUDGET) is None


async def test_workflows_lists_the_workflows_of_this_prefix_only(bed: Bed[Any]) -> None:
    cp = as_store(bed).checkpointer
    ids = ["plain", "with{brace}", "50%", "a:b"]
    for wf in ids:
        await cp.supply(wf, "k", 1)
    holder = await cp.claim("claimed-only", liveness=LIVE, budget=BUDGET)
    assert holder is not None
    other = RedisCheckpointer(cp.client, prefix=cp.prefix + "-other")
    await other.supply("elsewhere", "k", 1)
    try:
        assert sorted(await cp.workflows()) == sorted(ids)
        assert len(await cp.workflows(limit=2)) == 2
    finally:
        await other.discard("elsewhere")
        await cp.client.delete(f"{other.hash_key('elsewhere')}:claim")


# -- the scheduler ----------------------------------------------------------------------------


WITHIN = timedelta(milliseconds=50)


async def test_a_workflow_made_ready_is_delivered_and_a_repeat_wakeup_is_folded_in(
    bed: Bed[Any],
) -> None:
    scheduler = as_store(bed).scheduler
    await scheduler.make_ready("wf")
    await scheduler.make_ready("wf")  # not yet taken: the same delivery covers both
    delivery = await scheduler.next_ready(WITHIN)
    assert delivery is not None
    assert delivery.workflow == "wf"
    assert await scheduler.next_ready(WITHIN) is None
    await scheduler.done(delivery)
    assert await scheduler.next_ready(WITHIN) is None


async def test_next_ready_waits_for_a_wakeup_from_another_connection(bed: Bed[Any]) -> None:
    scheduler = as_store(bed).scheduler
    async with others(bed, 1) as (sender,):
        waiting = asyncio.ensure_future(scheduler.next_ready(timedelta(seconds=5)))
        await asyncio.sleep(0.05)
        await sender.scheduler.make_ready("wf")
        delivery = await asyncio.wait_for(waiting, 5)
    assert delivery is not None
    assert delivery.workflow == "wf"


async def test_a_dead_takers_delivery_is_handed_out_again_after_the_lease(
    bed: Bed[Any],
) -> None:
    async with others(bed, 2) as (dying, survivor):
        lease = timedelta(milliseconds=50)
        short = RedisStreamScheduler(
            dying.scheduler.client, prefix=dying.scheduler.prefix, lease=lease
        )
        heir = RedisStreamScheduler(
            survivor.scheduler.client, prefix=survivor.scheduler.prefix, lease=lease
        )
        await short.make_ready("wf")
        lost = await short.next_ready(WITHIN)
        assert lost is not None
        assert await heir.next_ready(timedelta(milliseconds=10)) is None  # hidden for the lease
        await asyncio.sleep(0.08)
        again = await heir.next_ready(WITHIN)
        assert again is not None
        assert again.workflow == "wf"
        assert again.receipt != lost.receipt
        await short.done(lost)  # the dead taker's late answer changes nothing
        assert await heir.next_ready(timedelta(milliseconds=10)) is None
        await heir.done(again)


async def test_a_wakeup_during_a_delivery_is_not_undone_by_its_wake_at_or_done(
    bed: Bed[Any],
) -> None:
    scheduler = as_store(bed).scheduler
    later = datetime.now(UTC) + timedelta(hours=1)
    for answer in ("wake_at", "done"):
        await scheduler.make_ready("wf")
        out = await scheduler.next_ready(WITHIN)
        assert out is not None
        await scheduler.make_ready("wf")  # lands while the pass runs
        if answer == "wake_at":
            await scheduler.wake_at(out, later)
        else:
            await scheduler.done(out)
        runnable = await scheduler.scheduled("wf")
        assert runnable is not None
        assert runnable < later, "the wakeup stays runnable now, not at the pass's deadline"
        survivor = await scheduler.next_ready(WITHIN)
        assert survivor is not None
        assert survivor.workflow == "wf"
        await scheduler.done(survivor)
        assert await scheduler.next_ready(timedelta(milliseconds=10)) is None


async def test_wake_at_schedules_and_answers_for_the_delivery_in_one_call(
    bed: Bed[Any],
) -> None:
    scheduler = as_store(bed).scheduler
    await scheduler.make_ready("wf")
    delivery = await scheduler.next_ready(WITHIN)
    assert delivery is not None
    when = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    await scheduler.wake_at(delivery, when)
    assert await scheduler.scheduled("wf") == when
    assert await scheduler.reclaim(timedelta(milliseconds=1)) is None  # answered for
    assert await scheduler.wake_due(when - timedelta(milliseconds=1)) == ()
    assert await scheduler.wake_due(when) == ("wf",)
    woken = await scheduler.next_ready(WITHIN)
    assert woken is not None
    assert woken.workflow == "wf"


async def test_wake_at_never_reinstates_a_workflow_cancelled_since_its_delivery(
    bed: Bed[Any],
) -> None:
    scheduler = as_store(bed).scheduler
    soon = datetime.now(UTC)
    for answer in ("wake_at", "done"):
        await scheduler.make_ready("wf")
        out = await scheduler.next_ready(WITHIN)
        assert out is not None
        await scheduler.cancel("wf")
        if answer == "wake_at":
            await scheduler.wake_at(out, soon)
        else:
            await scheduler.done(out)
        assert await scheduler.scheduled("wf") is None
        assert await scheduler.wake_due(soon + timedelta(days=1)) == ()
        assert await scheduler.next_ready(timedelta(milliseconds=10)) is None
        assert await scheduler.reclaim(timedelta(milliseconds=1)) is None


async def test_wake_due_moves_each_workflow_once_under_concurrent_timers(
    bed: Bed[Any],
) -> None:
    scheduler = as_store(bed).scheduler
    when = datetime.now(UTC)
    for i in range(20):
        await scheduler.make_ready(f"wf-{i}")
        delivery = await scheduler.next_ready(WITHIN)
        assert delivery is not None
        await scheduler.wake_at(delivery, when)
    async with others(bed, 4) as timers:
        moved = await asyncio.gather(*(t.scheduler.wake_due(when) for t in timers))
    everything = [wf for batch in moved for wf in batch]
    assert sorted(everything) == sorted(f"wf-{i}" for i in range(20))
    delivered = set()
    while (delivery := await scheduler.next_ready(timedelta(milliseconds=10))) is not None:
        delivered.add(delivery.workflow)
        await scheduler.done(delivery)
    assert delivered == {f"wf-{i}" for i in range(20)}


async def test_a_receipt_this_scheduler_never_issued_is_refused(bed: Bed[Any]) -> None:
    with pytest.raises(ValueError, match="receipt"):
        await as_store(bed).scheduler.done(Delivery("wf", "not-a-receipt"))


# -- the pair ------------------------------------------------------------------------------


async def test_arrive_and_send_record_first_and_make_the_workflow_ready(
    bed: Bed[Any],
) -> None:
    store = as_store(bed)
    assert store.atomic is False
    assert await store.arrive("wf", "approval", "yes") == "yes"
    assert await store.arrive("wf", "approval", "no") == "yes"
    key = await store.send("wf", {"note": 1})
    assert await store.checkpointer.load("wf") == {"approval": "yes", key: {"note": 1}}
    delivery = await store.scheduler.next_ready(WITHIN)
    assert delivery is not None
    assert delivery.workflow == "wf"
    assert await store.scheduler.next_ready(timedelta(milliseconds=10)) is None


async def test_discard_forgets_the_records_and_cancels_the_runs(bed: Bed[Any]) -> None:
    store = as_store(bed)
    await store.send("wf", "hello")
    await store.discard("wf")
    assert await store.checkpointer.load("wf") == {}
    assert await store.scheduler.next_ready(timedelta(milliseconds=10)) is None
