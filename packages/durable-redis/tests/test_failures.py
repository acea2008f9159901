"""Bad input and bad weather: each is recovered from, or a clear error with nothing
half-written. Servers that are stopped, restarted or locked are throwaway ones started
here, never the shared one."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from durable.interfaces import StoreError
from durable.plugins import Testbed as Bed
from durable_redis import RedisDurable, RedisUnavailable
from durable_redis.plugin import open_redis
from durable_redis.servers import (
    LocalCluster,
    binaries_available,
    free_port,
    start_cluster,
    start_server,
)

LIVE = timedelta(seconds=30)
BUDGET = timedelta(minutes=5)

needs_binaries = pytest.mark.skipif(
    not binaries_available(), reason="needs redis-server and redis-cli on PATH"
)


def as_store(bed: Bed[Any]) -> RedisDurable:
    assert isinstance(bed.durable, RedisDurable)
    return bed.durable


@pytest.mark.parametrize("scheme", ["redis", "redis+cluster"])
async def test_an_unreachable_server_is_a_clear_error(scheme: str) -> None:
    port = free_port()  # nothing listens here
    with pytest.raises(RedisUnavailable, match=f"127.0.0.1:{port}") as refused:
        async with open_redis(f"{scheme}://127.0.0.1:{port}/0"):
            pass
    assert isinstance(refused.value, StoreError)
    assert "could not reach" in str(refused.value)


@needs_binaries
async def test_a_wrong_password_is_a_clear_error_and_the_right_one_works() -> None:
    with start_server(password="correct-horse") as server:
        for url in (
            f"redis://:wrong@127.0.0.1:{server.port}/0",
            f"redis://127.0.0.1:{server.port}/0",
        ):
            with pytest.raises(RedisUnavailable, match="credentials") as refused:
                async with open_redis(url):
                    pass
            assert "wrong" not in str(refused.value)  # the password is never echoed
        async with open_redis(server.url) as store:
            assert await store.checkpointer.supply("wf", "k", 1) == 1


async def test_a_script_flush_is_recovered_from_by_loading_again(bed: Bed[Any]) -> None:
    store, probe = as_store(bed), bed.probe
    assert probe is not None
    cp, scheduler = store.checkpointer, store.scheduler
    holder = await cp.claim("wf", liveness=LIVE, budget=BUDGET)
    assert holder is not None
    await cp.record(holder, "before", 1)
    await cp.transact(holder, "bumped", probe.bump("wf", "n"))
    await cp.client.script_flush()  # every primary, on a cluster
    assert (await cp.record(holder, "after", 2)).first
    assert (await cp.transact(holder, "bumped-again", probe.bump("wf", "n"))).value == 2
    await scheduler.make_ready("wf")
    assert await scheduler.next_ready(timedelta(milliseconds=50)) is not None
    assert await cp.load("wf") == {"before": 1, "bumped": 1, "after": 2, "bumped-again": 2}


@needs_binaries
async def test_a_server_restart_between_two_calls_is_recovered_from() -> None:
    with start_server(persistent=True) as server:
        async with open_redis(server.url) as store:
            cp = store.checkpointer
            holder = await cp.claim("wf", liveness=LIVE, budget=BUDGET)
            assert holder is not None
            await cp.record(holder, "before", 1)
            await store.scheduler.make_ready("wf")
            server.restart()  # scripts and connections are gone; the data is in the AOF
            assert (await cp.record(holder, "after", 2)).first
            assert await cp.load("wf") == {"before": 1, "after": 2}
            delivery = await store.scheduler.next_ready(timedelta(milliseconds=100))
            assert delivery is not None
            assert delivery.workflow == "wf"


@needs_binaries
async def test_a_call_while_the_server_is_down_fails_clearly_and_writes_nothing() -> None:
    with start_server(persistent=True) as server:
        async with open_redis(server.url) as store:
            cp = store.checkpointer
            holder = await cp.claim("wf", liveness=LIVE, budget=BUDGET)
            assert holder is not None
            await cp.record(holder, "before", 1)
            server.stop()
            with pytest.raises(RedisUnavailable, match="could not reach"):
                await cp.record(holder, "during", 2)
            with pytest.raises(RedisUnavailable):
                await store.scheduler.wake_due(datetime.now(UTC))
            server.start()
            assert await cp.load("wf") == {"before": 1}
            assert (await cp.record(holder, "during", 2)).first
            assert await cp.load("wf") == {"before": 1, "during": 2}


@needs_binaries
async def test_a_restart_that_kept_nothing_leaves_a_working_empty_store() -> None:
    with start_server(persistent=False) as server:
        async with open_redis(server.url) as store:
            cp = store.checkpointer
            holder = await cp.claim("wf", liveness=LIVE, budget=BUDGET)
            assert holder is not None
            await cp.record(holder, "before", 1)
            await store.scheduler.make_ready("wf")
            server.restart()
            # The claim is gone with everything else, so the old pass is refused, not
            # allowed to write into an empty workflow; the queue recreates its group.
            with pytest.raises(BaseException, match="superseded"):
                await cp.record(holder, "after", 2)
            assert await cp.load("wf") == {}
            fresh = await cp.claim("wf", liveness=LIVE, budget=BUDGET)
            assert fresh is not None
            await store.scheduler.make_ready("wf")
            assert await store.scheduler.next_ready(timedelta(milliseconds=100)) is not None


async def test_bad_store_options_are_refused_with_the_option_named() -> None:
    with pytest.raises(ValueError, match="ttl= takes seconds"):
        async with open_redis("redis://127.0.0.1:1/0?ttl=soon"):
            pass
    with pytest.raises(ValueError, match="brace"):
        async with open_redis("redis://127.0.0.1:1/0?prefix=a{b}"):
            pass
    with pytest.raises(ValueError, match="not a Redis store URL"):
        async with open_redis("postgres://127.0.0.1:1/0"):
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _fails_inside(starter: Callable[[], Any], pids: list[int]) -> None:
    with starter() as started:
        if isinstance(started, LocalCluster):
            assert len(started.pids) == 3
            pids.extend(started.pids)
        else:
            assert started.pid is not None
            pids.append(started.pid)
        raise RuntimeError("the test failed")


@needs_binaries
def test_throwaway_servers_and_clusters_are_stopped_by_pid_even_when_the_test_fails() -> None:
    pids: list[int] = []
    with pytest.raises(RuntimeError, match="the test failed"):
        _fails_inside(start_server, pids)
    with pytest.raises(RuntimeError, match="the test failed"):
        _fails_inside(start_cluster, pids)
    assert len(pids) == 4
    assert not [pid for pid in pids if _alive(pid)]
