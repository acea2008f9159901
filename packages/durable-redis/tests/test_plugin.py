"""The plugin, its URLs, and the values a caller builds (keys, effects)."""

from __future__ import annotations

import importlib.metadata
import logging
import secrets
import subprocess
import sys
from datetime import timedelta

import durable
import pytest
from durable.plugins import StorePlugin
from durable_redis import LuaEffect, RedisCheckpointer, RedisDurable, RedisStreamScheduler
from durable_redis.keys import check_prefix, glob_escape, hash_tag_of
from durable_redis.plugin import open_redis, parse_url
from redis.asyncio import Redis


def test_the_plugin_is_found_through_its_entry_point() -> None:
    (entry,) = [e for e in importlib.metadata.entry_points(group="durable") if e.name == "redis"]
    plugin = entry.load().durable_store()
    assert isinstance(plugin, StorePlugin)
    assert plugin.name == "redis"
    assert set(plugin.schemes) >= {"redis", "rediss", "redis+cluster"}
    assert plugin.capabilities == {
        "transact",
        "cluster",
        "enumerate",
        "lifecycle",
        "queues",
        "limits",
        "operations",
    }
    assert plugin.testing is not None
    assert plugin.distribution == "durable-redis"


def test_loading_the_entry_point_imports_no_driver_and_every_export_resolves() -> None:
    """Every durable command loads every store's entry point: redis-py must wait until the
    store is opened. Then each name the package exports is there, from where it says."""
    source = (
        "import importlib, pkgutil, sys, types, durable.plugins, durable_redis as package\n"
        "durable.plugins.stores()\n"
        "print('redis' in sys.modules)\n"
        "for found in pkgutil.iter_modules(package.__path__):\n"
        "    importlib.import_module('durable_redis.' + found.name)\n"
        # A submodule of an exported name would shadow it once imported: none may be one.
        "print([n for n in package.__all__ if isinstance(getattr(package, n), types.ModuleType)])\n"
        "print('redis' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["False", "[]", "True"]


def test_store_options_are_taken_out_of_the_url_and_the_rest_left_to_redis_py() -> None:
    parsed = parse_url(
        "redis://u:p@host:7000/2?prefix=pay&ttl=60&delivery_lease=5&socket_timeout=3"
    )
    assert parsed.client_url == "redis://u:p@host:7000/2?socket_timeout=3"
    assert not parsed.cluster
    assert parsed.options == {"prefix": "pay", "ttl": "60", "lease": "5"}
    cluster = parse_url("rediss+cluster://node:7001?prefix=pay")
    assert cluster.cluster
    assert cluster.client_url == "rediss://node:7001"


def test_the_old_lease_option_is_read_as_the_delivery_lease_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="durable_redis"):
        parsed = parse_url("redis://host:7000/2?lease=5")
    assert parsed.options == {"lease": "5"}
    assert parsed.client_url == "redis://host:7000/2"
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "durable_redis.plugin"]
    assert "lease= is deprecated: write delivery_lease=" in warning
    assert "--liveness" in warning


def test_the_delivery_lease_under_both_names_is_refused() -> None:
    with pytest.raises(ValueError, match="both delivery_lease= and lease="):
        parse_url("redis://u:secret@host:7000/2?lease=5&delivery_lease=6")


async def test_durable_open_reads_the_options_from_the_url(node_url: str) -> None:
    prefix = f"durable-test-options-{secrets.token_hex(6)}"  # a shared server: a prefix of its own
    url = f"{node_url.split('?')[0]}?prefix={prefix}&ttl=90&delivery_lease=7"
    async with durable.open(url) as store:
        assert isinstance(store, RedisDurable)
        assert store.checkpointer.prefix == prefix
        assert store.checkpointer.ttl == timedelta(seconds=90)
        assert store.scheduler.lease == timedelta(seconds=7)
        client = store.scheduler.client
        await client.delete(*[key async for key in client.scan_iter(match=f"{prefix}*")])


async def test_a_client_of_ones_own_is_used_and_left_open(node_url: str) -> None:
    client = Redis.from_url(node_url.split("?")[0])  # responses not decoded: bytes back
    try:
        async with open_redis("redis://unused", client=client, prefix="durable-test-own") as store:
            cp = store.checkpointer
            holder = await cp.claim(
                "wf", liveness=timedelta(seconds=5), budget=timedelta(seconds=9)
            )
            assert holder is not None
            await cp.record(holder, "k", [1])
            key = await cp.append("wf", "hi")
            assert await cp.load("wf") == {"k": [1], key: "hi"}
            assert await cp.workflows() == ["wf"]
            await store.scheduler.make_ready("wf")
            delivery = await store.scheduler.next_ready(timedelta(milliseconds=50))
            assert delivery is not None
            assert delivery.workflow == "wf"
            await store.discard("wf")
        assert await client.ping()
    finally:
        for key in [k async for k in client.scan_iter(match="durable-test-own:*")]:
            await client.delete(key)
        await client.aclose()


def test_a_prefix_with_a_brace_is_refused() -> None:
    for prefix in ("a{b", "a}b", "{x}", ""):
        with pytest.raises(ValueError, match="prefix"):
            check_prefix(prefix)
    with pytest.raises(ValueError, match="brace"):
        RedisCheckpointer(Redis(), prefix="{shared}")
    with pytest.raises(ValueError, match="brace"):
        RedisStreamScheduler(Redis(), prefix="{shared}")


def test_hash_tags_are_read_the_way_redis_cluster_reads_them() -> None:
    assert hash_tag_of("plain") is None
    assert hash_tag_of("a{}b") is None  # an empty tag hashes the whole key
    assert hash_tag_of("a{b}c{d}") == "b"
    assert hash_tag_of("a{b{c}d") == "b{c"
    assert hash_tag_of("a}b{c}") == "c"
    assert glob_escape("p*[x]?") == r"p\*\[x\]\?"


def test_a_lua_effect_is_checked_and_frozen_when_built() -> None:
    effect = LuaEffect("return '1'", ["k:{t}"], ["a", 1, 2.5, b"x"])  # type: ignore[arg-type]
    assert effect.keys == ("k:{t}",)
    assert effect.args == ("a", 1, 2.5, b"x")
    assert hash(effect) == hash(LuaEffect("return '1'", ("k:{t}",), ("a", 1, 2.5, b"x")))
    with pytest.raises(ValueError, match="source"):
        LuaEffect("  ")
    with pytest.raises(TypeError, match="keys"):
        LuaEffect("return '1'", "k:{t}")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="argument"):
        LuaEffect("return '1'", (), (True,))
    with pytest.raises(TypeError, match="argument"):
        LuaEffect("return '1'", (), (None,))  # type: ignore[arg-type]


async def test_group_commit_and_wait_replicas_are_refused_together() -> None:
    """Each write's WAIT travels beside it on its connection; a pipeline of several writes
    would read the replies out of step, so asking for both is an error, not a surprise."""
    with pytest.raises(ValueError, match="group_commit= and wait_replicas="):
        async with durable.open("redis://127.0.0.1:1/0?wait_replicas=1&group_commit=1"):
            pass
