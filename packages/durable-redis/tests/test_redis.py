"""What only a Redis store has to prove: its scripts, its keys, its cluster, its stream."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from durable.interfaces import Fenced, Pass
from durable.plugins import Testbed as Bed
from durable.run import Finished, Run, resume
from durable_redis import (
    CrossSlotError,
    LuaEffect,
    RedisCheckpointer,
    RedisDurable,
    RedisStreamScheduler,
    UntaggedKey,
)
from durable_redis.keys import hash_tag_of, tag_for, workflow_of_tag
from durable_redis.plugin import WaitingCluster, connect, open_redis, parse_url
from durable_redis.servers import LocalCluster, free_port, start_server
from durable_redis.testing import clean_prefix
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ClusterCrossSlotError, ResponseError

LIVE = timedelta(seconds=30)
BUDGET = timedelta(minutes=5)
SEED_LEDGER = "return cjson.encode(redis.call('HINCRBY', KEYS[1], ARGV[1], tonumber(ARGV[2])))"


def as_store(bed: Bed[Any]) -> RedisDurable:
    assert isinstance(bed.durable, RedisDurable)
    return bed.durable


def as_count(value: object) -> int:
    assert isinstance(value, int)
    return value


def prefix_of(bed: Bed[Any]) -> str:
    prefix = bed.extras["prefix"]
    assert isinstance(prefix, str)
    return prefix


# -- load order ---------------------------------------------------------------------------


async def test_load_order_survives_the_listpack_to_hashtable_conversion(bed: Bed[Any]) -> None:
    cp = as_store(bed).checkpointer
    holder = await cp.claim("wf", liveness=LIVE, budget=BUDGET)
    assert holder is not None
    keys = [f"step-{n:04d}" for n in range(200)]
    random.Random(7).shuffle(keys)
    await cp.record(holder, keys[0], "x" * 100)  # a value over 64 bytes converts on its own
    for key in keys[1:]:
        await cp.record(holder, key, key)
    records = f"{cp.hash_key('wf')}:records"
    assert await cp.client.object("ENCODING", records) == "hashtable"
    raw_order = list(await cp.client.hgetall(records))
    assert raw_order != keys  # the hash itself no longer keeps insertion order
    assert list(await cp.load("wf")) == keys
    assert [entry.key for entry in await cp.history("wf")] == keys


# -- tokens and TTLs ----------------------------------------------------------------------


async def test_a_token_minted_after_the_claim_key_expired_still_outranks_the_stalled_pass(
    bed: Bed[Any],
) -> None:
    store = as_store(bed)
    cp = RedisCheckpointer(
        store.checkpointer.client, prefix=prefix_of(bed), ttl=timedelta(milliseconds=100)
    )
    stalled = await cp.claim(
        "wf", liveness=timedelta(milliseconds=50), budget=timedelta(milliseconds=100)
    )
    assert stalled is not None
    await cp.record(stalled, "a", 1)
    base = cp.hash_key("wf")
    assert 0 < await cp.client.pttl(f"{base}:claim") <= 100
    await asyncio.sleep(0.25)
    assert await cp.client.exists(f"{base}:claim", f"{base}:records") == 0  # TTL ran out
    newer = await cp.claim("wf", liveness=LIVE, budget=BUDGET)
    assert newer is not None
    assert newer.token > stalled.token  # a counter would have restarted at 1 here
    with pytest.raises(Fenced):
        await cp.record(stalled, "b", "from the stalled pass")
    assert await cp.load("wf") == {}


async def test_every_write_refreshes_the_ttl_and_a_held_claim_outlives_it(bed: Bed[Any]) -> None:
    cp = RedisCheckpointer(
        as_store(bed).checkpointer.client, prefix=prefix_of(bed), ttl=timedelta(seconds=60)
    )
    holder = await cp.claim("wf", liveness=LIVE, budget=timedelta(minutes=10))
    assert holder is not None
    base = cp.hash_key("wf")
    assert await cp.client.pttl(f"{base}:claim") > 60_000  # sized to the budget
    await cp.record(holder, "a", 1)
    assert 59_000 < await cp.client.pttl(f"{base}:records") <= 60_000
    await cp.client.pexpire(f"{base}:records", 5_000)
    await cp.supply("wf", "b", 2)
    assert await cp.client.pttl(f"{base}:records") > 59_000
    assert await cp.client.pttl(f"{base}:claim") > 60_000  # never shortened by a write


# -- transact -----------------------------------------------------------------------------


async def test_the_seeds_ledger_effect_run_ten_times_moves_once(bed: Bed[Any]) -> None:
    store = as_store(bed)
    cp = store.checkpointer
    ledger = f"{cp.hash_key('order-1')}:ledger"

    async def body(run: Run[LuaEffect]) -> int:
        effect = LuaEffect(source=SEED_LEDGER, keys=(ledger,), args=("piano", 1))
        return await run.transact("reserved", effect, as_count)

    for _ in range(10):
        assert await resume(store, "order-1", body) == Finished(1)
    assert await cp.client.hget(ledger, "piano") == "1"
    # Not only Run's replay: the script itself refuses a second performance.
    for _ in range(10):
        holder = await cp.claim("order-1", liveness=LIVE, budget=BUDGET)
        assert holder is not None
        effect = LuaEffect(SEED_LEDGER, (ledger,), ("piano", 1))
        assert (await cp.transact(holder, "reserved", effect)).value == 1
        await cp.release(holder)
    assert await cp.client.hget(ledger, "piano") == "1"


async def test_an_effect_key_outside_the_tag_is_refused_before_anything_is_sent() -> None:
    # A client on a closed port: had anything been sent, this would be RedisUnavailable.
    client = Redis(host="127.0.0.1", port=free_port())
    cp = RedisCheckpointer(client, prefix="app")
    holder_key = cp.hash_key("order{7}")
    assert holder_key == "app:{order%7B7%7D}"
    holder = Pass("order{7}", 1)
    for key, why in (
        ("ledger", "has no hash tag"),
        ("app:{order}:ledger", "carries the hash tag {order}"),
        ("app:{order{7}}:ledger", "carries the hash tag {order{7}"),
    ):
        with pytest.raises(UntaggedKey, match=re.escape(why)) as refused:
            await cp.transact(holder, "k", LuaEffect(SEED_LEDGER, (key,), ("piano", 1)))
        assert refused.value.key == key
        assert "{order%7B7%7D}" in str(refused.value)
    for own in ("claim", "records", "life"):  # the life: an effect must not forge a status
        with pytest.raises(ValueError, match="store's own keys"):
            await cp.transact(holder, "k", LuaEffect(SEED_LEDGER, (f"{holder_key}:{own}",)))
    await client.aclose()


async def test_composed_effect_scripts_are_cached_by_source(bed: Bed[Any]) -> None:
    cp = as_store(bed).checkpointer
    holder = await cp.claim("wf", liveness=LIVE, budget=BUDGET)
    assert holder is not None
    ledger = f"{cp.hash_key('wf')}:ledger"
    for n in range(3):
        await cp.transact(holder, f"k{n}", LuaEffect(SEED_LEDGER, (ledger,), (f"item{n}", 1)))
    assert len(cp._scripts._effects) == 1


# -- hash tags ----------------------------------------------------------------------------


IDS_WITH_BRACES = ["a}{b", "{x}", "x{", "}", "{}", "{", "%7B", "%", "{a}", "{a}b", "a}x", "a}y"]


def test_a_workflow_id_with_braces_still_gets_exactly_one_tag_of_its_own() -> None:
    cp = RedisCheckpointer(Redis(), prefix="p")
    tags = {}
    for wf in IDS_WITH_BRACES:
        base = cp.hash_key(wf)
        for key in (f"{base}:records", f"{base}:claim", f"{base}:ledger"):
            assert hash_tag_of(key) == tag_for(wf)
        assert not {"{", "}"} & set(tag_for(wf))
        assert workflow_of_tag(tag_for(wf)) == wf
        tags[tag_for(wf)] = wf
    assert len(tags) == len(IDS_WITH_BRACES)  # "{a}" and "{a}b" no longer share the tag "a"


async def test_a_braced_workflow_id_keeps_every_key_in_one_cluster_slot(
    cluster_bed: Bed[Any],
) -> None:
    store = as_store(cluster_bed)
    cp = store.checkpointer
    assert isinstance(cp.client, RedisCluster)
    for wf in IDS_WITH_BRACES:
        base = cp.hash_key(wf)
        slots = {cp.client.keyslot(f"{base}:{part}") for part in ("records", "claim", "ledger")}
        assert len(slots) == 1
        holder = await cp.claim(wf, liveness=LIVE, budget=BUDGET)
        assert holder is not None
        effect = LuaEffect(SEED_LEDGER, (f"{base}:ledger",), ("piano", 1))
        assert (await cp.transact(holder, "reserved", effect)).value == 1
    assert sorted(await cp.workflows()) == sorted(IDS_WITH_BRACES)


# -- group commit on a cluster ----------------------------------------------------------------


async def _claim_all(cp: RedisCheckpointer, workflows: list[str]) -> list[Pass]:
    holders = []
    for wf in workflows:
        holder = await cp.claim(wf, liveness=LIVE, budget=BUDGET)
        assert holder is not None
        holders.append(holder)
    return holders


async def _record_all_at_once(cp: RedisCheckpointer, holders: list[Pass]) -> None:
    """Record one step of each pass and one stale write per workflow, all at once, so
    they wait together and go as pipelines; check each verdict is its own."""
    stale = [dataclasses.replace(h, token=h.token - 1) for h in holders]

    async def fresh(holder: Pass) -> bool:
        return (await cp.record(holder, "step", holder.workflow)).first

    async def refused(holder: Pass) -> bool:
        try:
            await cp.record(holder, "stale", holder.workflow)
        except Fenced:
            return True
        return False

    async with asyncio.timeout(30):
        answers = await asyncio.gather(*(fresh(h) for h in holders), *(refused(h) for h in stale))
    assert all(answers)
    for holder in holders:
        assert await cp.load(holder.workflow) == {"step": holder.workflow}


async def test_scripts_waiting_together_on_a_cluster_each_get_their_own_verdict(
    cluster_bed: Bed[Any],
) -> None:
    cp = as_store(cluster_bed).checkpointer
    client = cp.client
    assert isinstance(client, RedisCluster)
    workflows = [f"wf-{n}" for n in range(48)]
    manager = client.nodes_manager
    slots = {client.keyslot(f"{cp.hash_key(wf)}:records") for wf in workflows}
    nodes = {manager.slots_cache[slot][0].name for slot in slots}
    assert len(nodes) == 3  # the batch spans every primary: one pipeline each
    await _record_all_at_once(cp, await _claim_all(cp, workflows))


async def test_a_stale_slot_map_sends_the_redirected_scripts_again_alone(
    cluster_bed: Bed[Any],
) -> None:
    """The client's map says one node holds every slot (as after a resharding it has not
    seen): that node answers MOVED for most scripts of its pipeline, and those go again
    alone through the cluster client, which follows the redirection."""
    cp = as_store(cluster_bed).checkpointer
    client = cp.client
    assert isinstance(client, RedisCluster)
    workflows = [f"moved-{n}" for n in range(48)]
    slots = {client.keyslot(f"{cp.hash_key(wf)}:records") for wf in workflows}
    holders = await _claim_all(cp, workflows)
    manager = client.nodes_manager
    wrong = manager.slots_cache[next(iter(slots))][0]
    assert len({manager.slots_cache[slot][0].name for slot in slots}) == 3
    for slot in slots:
        manager.slots_cache[slot] = [wrong]
    await _record_all_at_once(cp, holders)


# -- what a cluster refuses -----------------------------------------------------------------


def _elsewhere(client: RedisCluster, cp: RedisCheckpointer, own: str, same_node: bool) -> str:
    """A workflow key in another slot: on another node, or on the same node as ``own``."""
    node = client.get_node_from_key(own)
    assert node is not None
    for n in range(10_000):
        key = f"{cp.hash_key(f'other-{n}')}:ledger"
        if client.keyslot(key) == client.keyslot(own):
            continue
        other = client.get_node_from_key(key)
        assert other is not None
        if (other.name == node.name) == same_node:
            return key
    raise AssertionError("no such key")


async def test_the_cluster_refuses_the_same_script_sent_raw_and_writes_nothing(
    cluster_bed: Bed[Any],
) -> None:
    cp = as_store(cluster_bed).checkpointer
    client = cp.client
    assert isinstance(client, RedisCluster)
    own = f"{cp.hash_key('wf')}:ledger"
    far = _elsewhere(client, cp, own, same_node=False)
    near = _elsewhere(client, cp, own, same_node=True)
    node = client.get_node_from_key(own)
    assert node is not None
    raw = Redis(host=node.host, port=int(node.port), decode_responses=True)  # no client checks
    bump_both = "redis.call('HINCRBY', KEYS[1], 'n', 1) redis.call('HINCRBY', KEYS[2], 'n', 1)"
    bump_undeclared = "#!lua\nredis.call('HINCRBY', ARGV[1], 'n', 1) return 1"
    try:
        with pytest.raises(ClusterCrossSlotError):  # declared keys in two slots
            await raw.eval(bump_both, 2, own, near)
        with pytest.raises(ResponseError, match="non local key"):  # undeclared, on another node
            await raw.eval(bump_undeclared, 1, own, far)
        with pytest.raises(ResponseError, match="do not hash to the same slot"):  # same node
            await raw.eval(bump_undeclared, 1, own, near)
    finally:
        await raw.aclose()
    assert await client.exists(own) == 0
    assert await client.exists(far) == 0
    assert await client.exists(near) == 0

    # Through transact: the effect's own write came first and is put back.
    holder = await cp.claim("wf", liveness=LIVE, budget=BUDGET)
    assert holder is not None
    sneaky = LuaEffect(
        "redis.call('HINCRBY', KEYS[1], 'n', 1) redis.call('HINCRBY', ARGV[1], 'n', 1) return '1'",
        (own,),
        (far,),
    )
    with pytest.raises(CrossSlotError, match="non local key") as refused:
        await cp.transact(holder, "k", sneaky)
    assert own in refused.value.keys
    assert await client.exists(own) == 0
    assert await client.exists(far) == 0
    assert await cp.load("wf") == {}


async def test_a_cross_slot_effect_is_refused_on_one_node_too(node_bed: Bed[Any]) -> None:
    cp = as_store(node_bed).checkpointer
    holder = await cp.claim("wf", liveness=LIVE, budget=BUDGET)
    assert holder is not None
    with pytest.raises(UntaggedKey):
        await cp.transact(
            holder,
            "k",
            LuaEffect(SEED_LEDGER, (f"{cp.hash_key('other')}:ledger",), ("piano", 1)),
        )
    assert await cp.load("wf") == {}


# -- claims under contention ----------------------------------------------------------------


async def test_fifty_concurrent_claimers_on_separate_connections_get_one_winner(
    bed: Bed[Any],
) -> None:
    assert bed.url is not None
    parsed = parse_url(bed.url)
    clients = [connect(parsed) for _ in range(50)]
    try:
        claimers = [RedisCheckpointer(c, prefix=prefix_of(bed)) for c in clients]
        for claimer in claimers:  # connect first, so the claims race rather than the handshakes
            await claimer.client.ping()
        passes = await asyncio.gather(
            *(c.claim("contended", liveness=LIVE, budget=BUDGET) for c in claimers)
        )
    finally:
        for client in clients:
            await client.aclose()
    winners = [p for p in passes if p is not None]
    assert len(winners) == 1


async def test_hundreds_of_concurrent_writes_on_one_cluster_client_wait_rather_than_fail(
    cluster: LocalCluster,
) -> None:
    """redis-py's cluster client refuses a command at once when its node already has 100
    connections busy; the store's client makes it wait for one instead."""
    prefix = f"durable-test-{random.getrandbits(48):012x}"
    async with open_redis(cluster.url, prefix=prefix) as store:
        cp = store.checkpointer
        assert isinstance(cp.client, WaitingCluster)
        await cp.client.ping()
        workflows = [f"burst-{i}" for i in range(600)]  # about 200 to each primary at once
        passes = await asyncio.gather(
            *(cp.claim(wf, liveness=LIVE, budget=BUDGET) for wf in workflows)
        )
        assert all(p is not None for p in passes)
        recorded = await asyncio.gather(
            *(cp.record(p, "step", p.workflow) for p in passes if p is not None)
        )
        assert [r.value for r in recorded] == workflows
        await asyncio.gather(*(store.discard(wf) for wf in workflows))
    async with open_redis(cluster.url, prefix=prefix) as store:
        await clean_prefix(store.checkpointer.client, prefix)


async def test_a_plain_cluster_client_does_fail_under_the_same_burst(cluster: LocalCluster) -> None:
    """The control for the test above: without waiting, the same burst fails, so the test
    above shows the waiting and not a burst too small to matter."""
    client = RedisCluster.from_url(parse_url(cluster.url).client_url, decode_responses=True)
    try:
        await client.ping()
        prefix = f"durable-test-{random.getrandbits(48):012x}"
        cp = RedisCheckpointer(client, prefix=prefix)
        outcomes = await asyncio.gather(
            *(cp.claim(f"burst-{i}", liveness=LIVE, budget=BUDGET) for i in range(600)),
            return_exceptions=True,
        )
        assert any(isinstance(o, BaseException) for o in outcomes)
        await clean_prefix(client, prefix)
    finally:
        await client.aclose()


# -- the stream -----------------------------------------------------------------------------


async def test_a_dead_consumers_delivery_is_reclaimed_with_xautoclaim(bed: Bed[Any]) -> None:
    assert bed.url is not None
    parsed = parse_url(bed.url)
    prefix = prefix_of(bed)
    dead_client = connect(parsed)
    dead = RedisStreamScheduler(dead_client, prefix=prefix, consumer="dead")
    await dead.prepare()
    await dead.make_ready("wf")
    lost = await dead.next_ready(timedelta(milliseconds=50))
    assert lost is not None
    await dead_client.aclose()  # the taker dies without answering

    heir = RedisStreamScheduler(as_store(bed).scheduler.client, prefix=prefix, consumer="heir")
    assert await heir.reclaim(timedelta(seconds=10)) is None  # not silent for long enough
    await asyncio.sleep(0.06)
    found = await heir.reclaim(timedelta(milliseconds=50))
    assert found is not None
    assert found.workflow == "wf"
    client = heir.client
    (pending,) = await client.xpending_range(heir.stream_key, heir.group, "-", "+", 10)
    assert pending["consumer"] == "heir"
    assert pending["times_delivered"] == 2
    assert found.receipt.endswith("/2")

    ghost = RedisStreamScheduler(client, prefix=prefix, consumer="dead")
    await ghost.done(lost)  # the dead taker's answer, arriving late, touches nothing
    assert len(await client.xpending_range(heir.stream_key, heir.group, "-", "+", 10)) == 1
    await heir.done(found)
    assert await client.xpending_range(heir.stream_key, heir.group, "-", "+", 10) == []
    assert await client.xlen(heir.stream_key) == 0


async def test_wake_at_for_a_cancelled_delivery_asks_the_stream_and_reinstates_nothing(
    bed: Bed[Any],
) -> None:
    scheduler = as_store(bed).scheduler
    client = scheduler.client
    await scheduler.make_ready("wf")
    out = await scheduler.next_ready(timedelta(milliseconds=50))
    assert out is not None
    entry = out.receipt.rpartition("/")[0]
    await scheduler.cancel("wf")
    assert await client.xrange(scheduler.stream_key, entry, entry) == []  # the entry is gone
    assert (
        len(await client.xpending_range(scheduler.stream_key, scheduler.group, "-", "+", 10)) == 1
    )
    await scheduler.wake_at(out, datetime.now(UTC) + timedelta(seconds=1))
    assert await client.zcard(scheduler.deadlines_key) == 0
    assert await client.hlen(scheduler.current_key) == 0
    assert await client.xpending_range(scheduler.stream_key, scheduler.group, "-", "+", 10) == []
    assert await scheduler.next_ready(timedelta(milliseconds=10)) is None


async def test_a_superseded_entry_of_a_dead_taker_is_dropped_not_redelivered(
    bed: Bed[Any],
) -> None:
    scheduler = as_store(bed).scheduler
    await scheduler.make_ready("wf")
    lost = await scheduler.next_ready(timedelta(milliseconds=50))
    assert lost is not None
    await scheduler.make_ready("wf")  # the newer entry is the one that counts now
    newer = await scheduler.next_ready(timedelta(milliseconds=50))
    assert newer is not None
    assert newer.receipt != lost.receipt
    await scheduler.done(newer)
    await asyncio.sleep(0.02)
    assert await scheduler.reclaim(timedelta(milliseconds=10)) is None
    assert await scheduler.client.xlen(scheduler.stream_key) == 0


async def test_a_lost_stream_is_recreated_with_its_group(node_bed: Bed[Any]) -> None:
    scheduler = as_store(node_bed).scheduler
    await scheduler.client.delete(scheduler.stream_key)
    await scheduler.make_ready("wf")
    assert await scheduler.next_ready(timedelta(milliseconds=50)) is not None
    await scheduler.client.delete(scheduler.stream_key)
    assert await scheduler.next_ready(timedelta(milliseconds=20)) is None


# -- round trips ------------------------------------------------------------------------------


async def test_one_script_call_per_record_and_load_in_one_round_trip() -> None:
    with start_server() as server:  # its own server, so nobody else's commands are counted
        async with open_redis(server.url) as store:
            cp = store.checkpointer
            holder = await cp.claim("wf", liveness=LIVE, budget=BUDGET)
            assert holder is not None
            for start in range(0, 10_000, 50):
                await asyncio.gather(
                    *(cp.supply("wf", f"k{n}", n) for n in range(start, start + 50))
                )
            sent: list[str] = []
            send = cp.client.execute_command

            async def counting(*args: Any, **options: Any) -> Any:
                sent.append(str(args[0]))
                return await send(*args, **options)

            cp.client.execute_command = counting  # type: ignore[method-assign]
            await cp.client.config_resetstat()
            sent.clear()
            for n in range(10):
                await cp.record(holder, f"step-{n}", n)
            assert sent == ["EVALSHA"] * 10
            stats = await cp.client.info("commandstats")
            assert stats["cmdstat_evalsha"]["calls"] == 10
            sent.clear()
            loaded = await cp.load("wf")
            assert sent == ["HGETALL"]
            assert len(loaded) == 10_010
            assert list(loaded)[-10:] == [f"step-{n}" for n in range(10)]
