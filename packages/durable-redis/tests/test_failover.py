"""Failover: writes confirmed on replicas (``wait_replicas=``), Sentinel, and the drill.

Every server here is a real ``redis-server`` this module starts on loopback ports in
17000-17999 and stops by its PID; the drill's workers are real processes and its primary
is really SIGKILLed. These are the short runs; ``hatch run failover`` runs the full
drills on both deployments and prints their figures (docs: Failover).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta

import pytest
from durable.interfaces import StoreUnavailable
from durable_redis.errors import ReplicationUnconfirmed
from durable_redis.failover import Drill, run_drill
from durable_redis.plugin import open_redis, parse_url
from durable_redis.servers import binaries_available, start_cluster, start_replicated
from redis.asyncio.cluster import RedisCluster

needs_binaries = pytest.mark.skipif(
    not binaries_available(), reason="needs redis-server and redis-cli on PATH"
)

PORTS = range(17000, 18000)
LIVENESS = timedelta(seconds=5)
BUDGET = timedelta(seconds=60)


def test_a_sentinel_url_names_its_sentinels_and_service_and_keeps_the_store_options() -> None:
    parsed = parse_url(
        "redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/main?prefix=p&wait_replicas=2"
    )
    assert parsed.sentinel
    assert not parsed.cluster
    assert parsed.client_url == "redis://127.0.0.1:26379,127.0.0.1:26380/main"
    assert parsed.options == {"prefix": "p", "wait_replicas": "2"}


async def test_wait_options_are_checked_before_anything_is_opened() -> None:
    with pytest.raises(ValueError, match="wait_replicas= must be 1 or more"):
        async with open_redis("redis://127.0.0.1:1/0?wait_replicas=0"):
            pass
    with pytest.raises(ValueError, match="wait_timeout= needs wait_replicas="):
        async with open_redis("redis://127.0.0.1:1/0?wait_timeout=1"):
            pass
    # The same options as keywords, checked the same way.
    with pytest.raises(ValueError, match="wait_replicas= must be 1 or more"):
        async with open_redis("redis://127.0.0.1:1/0", wait_replicas=0):
            pass
    with pytest.raises(ValueError, match="wait_timeout= needs wait_replicas="):
        async with open_redis("redis://127.0.0.1:1/0", wait_timeout=timedelta(seconds=1)):
            pass


@needs_binaries
async def test_a_write_no_replica_confirms_is_a_store_error_never_a_success() -> None:
    with start_replicated(replicas=1, sentinels=1, within=PORTS) as servers:
        url = f"{servers.primary.url}?prefix=unconfirmed&wait_replicas=1&wait_timeout=0.2"
        async with open_redis(url) as store:
            checkpointer = store.checkpointer
            holder = await checkpointer.claim("wf-1", liveness=LIVENESS, budget=BUDGET)
            assert holder is not None
            assert (await checkpointer.record(holder, "before", 1)).first
            servers.replicas[0].pause()
            try:
                with pytest.raises(ReplicationUnconfirmed, match="0 of the 1 replicas") as caught:
                    await checkpointer.record(holder, "while-alone", 2)
                assert isinstance(caught.value, StoreUnavailable)  # a worker waits it out
            finally:
                servers.replicas[0].resume()
            assert (await checkpointer.record(holder, "after", 3)).first
            # The connection is in step after the refusal: reads answer what they should.
            assert await checkpointer.load("wf-1") == {"before": 1, "while-alone": 2, "after": 3}
        # The keyword form waits the same way.
        keywords = {"wait_replicas": 1, "wait_timeout": timedelta(milliseconds=200)}
        async with open_redis(f"{servers.primary.url}?prefix=keywords", **keywords) as store:
            checkpointer = store.checkpointer
            holder = await checkpointer.claim("wf-2", liveness=LIVENESS, budget=BUDGET)
            assert holder is not None
            servers.replicas[0].pause()
            try:
                with pytest.raises(ReplicationUnconfirmed, match="0 of the 1 replicas"):
                    await checkpointer.record(holder, "while-alone", 2)
            finally:
                servers.replicas[0].resume()
            assert (await checkpointer.record(holder, "after", 3)).first


@needs_binaries
async def test_doctor_warns_of_replicas_the_writes_do_not_wait_for() -> None:
    with start_replicated(replicas=1, sentinels=1, within=PORTS) as servers:
        findings = {}
        for wait in ("", "&wait_replicas=1", "&wait_replicas=2"):
            async with open_redis(f"{servers.url}?prefix=doctor{wait}") as store:
                found = await store.doctor_findings(repair=False, limit=5, stale=timedelta(hours=1))
                findings[wait] = next(f for f in found if f.name == "unconfirmed_replicas")
        assert findings[""].attention
        assert findings[""].count == 1
        assert "wait_replicas" in findings[""].advice
        assert not findings["&wait_replicas=1"].attention
        assert findings["&wait_replicas=2"].attention  # more than the primary has


@needs_binaries
async def test_with_wait_replicas_a_killed_primary_loses_no_token_record_or_effect(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    figures = await run_drill(
        Drill("sentinel", True, workflows=12, workers=2, steps=15, deadline=60, within=PORTS)
    )
    logging.getLogger(__name__).info("%s", figures.line())
    assert figures.passes >= figures.workflows
    assert figures.tokens_issued_twice == 0
    assert figures.records_lost == 0
    assert figures.workflows_stuck == 0
    assert figures.effects_not_once == 0


@needs_binaries
async def test_without_wait_replicas_the_same_drill_reports_what_the_failover_lost() -> None:
    figures = await run_drill(
        Drill("sentinel", False, workflows=12, workers=2, steps=15, deadline=60, within=PORTS)
    )
    logging.getLogger(__name__).warning("without wait_replicas=: %s", figures.line())
    # Allowed to lose acknowledged writes, tokens, even a queued wakeup (a stuck
    # workflow); but transact's effect travels with its record in one script, so the two
    # are lost or kept together, and the effect never happens twice.
    assert figures.passes >= figures.workflows
    assert figures.effects_not_once == 0


@needs_binaries
async def test_a_cluster_client_follows_a_promoted_replica_without_a_restart() -> None:
    with start_cluster(3, replicas=1, within=PORTS, node_timeout=1000) as cluster:
        async with (
            open_redis(f"{cluster.url}?prefix=follow&wait_replicas=1") as confirmed,
            open_redis(f"{cluster.url}?prefix=follow") as plain,
        ):
            holder = await confirmed.checkpointer.claim("wf-1", liveness=LIVENESS, budget=BUDGET)
            assert holder is not None
            await confirmed.checkpointer.record(holder, "before", 1)  # on a replica too
            client = plain.checkpointer.client
            assert isinstance(client, RedisCluster)
            node = client.get_node_from_key(f"{plain.checkpointer.hash_key('wf-1')}:claim")
            assert node is not None
            victim = next(server for server in cluster.nodes if server.port == node.port)
            victim.kill()
            # The client opened before the kill writes again once the replica is promoted
            # (redirections and a refreshed slot map), with no new client and no restart.
            async with asyncio.timeout(30):
                while True:
                    try:
                        await plain.checkpointer.record(holder, "after", 2)
                        break
                    except StoreUnavailable:
                        await asyncio.sleep(0.2)
            assert await plain.checkpointer.load("wf-1") == {"before": 1, "after": 2}
