"""The conformance hook: one fresh, isolated Redis store per test, and its probe.

Which server a test runs against, first match wins:

1. the URL the suite was given (``--durable-url``), ``redis://``, ``rediss://`` or
   ``redis+cluster://``; a ``redis+cluster://`` URL with no host starts a throwaway
   3-primary cluster on loopback ports for the process (stopped, by PID, at exit);
2. ``DURABLE_REDIS_URL`` from the environment, read the same way;
3. ``redis://127.0.0.1:6379/0`` when something there answers PING;
4. a Redis container via ``testcontainers`` (the ``testcontainers`` extra), when
   installed and a Docker daemon answers;
5. otherwise the test is skipped, saying how to provide a server.

Each test gets a key prefix of its own (carried in the testbed's URL, so another process
opening that URL sees the same store), and every key under it is deleted afterwards. The
prefix is the isolation: it works on a cluster, which has only database 0.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Never
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from durable.plugins import Gap, Testbed

from durable_redis.checkpointer import RedisCheckpointer
from durable_redis.durable import RedisDurable
from durable_redis.effect import LuaEffect
from durable_redis.keys import glob_escape
from durable_redis.plugin import open_redis
from durable_redis.scripts import Client, describe, lua
from durable_redis.servers import LocalCluster, answers_ping, binaries_available, start_cluster

__all__ = ["LocalCluster", "RedisProbe", "clean_prefix", "resolve_url", "start_cluster", "testbed"]

DEFAULT_URL = "redis://127.0.0.1:6379/0"
ENVIRONMENT = "DURABLE_REDIS_URL"

_started: dict[str, str] = {}
_stops: contextlib.ExitStack | None = None


class RedisProbe:
    """The conformance probe: counters in a hash under the workflow's own hash tag, moved by
    ``LuaEffect`` scripts (``scripts/probe_bump*.lua``)."""

    def __init__(self, checkpointer: RedisCheckpointer) -> None:
        self._checkpointer = checkpointer

    def _key(self, workflow: str) -> str:
        return f"{self._checkpointer.hash_key(workflow)}:probe"

    def bump(self, workflow: str, counter: str) -> LuaEffect:
        return LuaEffect(lua("probe_bump"), (self._key(workflow),), (counter,))

    def bump_then_fail(self, workflow: str, counter: str) -> LuaEffect:
        return LuaEffect(lua("probe_bump_then_fail"), (self._key(workflow),), (counter,))

    async def count(self, workflow: str, counter: str) -> int:
        value = await self._checkpointer.client.hget(self._key(workflow), counter)
        return int(value) if value is not None else 0


def _start_shared(kind: str, start: Callable[[], contextlib.AbstractContextManager[str]]) -> str:
    """Start a throwaway server once per process and stop it (by PID) at exit."""
    global _stops
    if kind not in _started:
        if _stops is None:
            _stops = contextlib.ExitStack()
            atexit.register(_stops.close)
        _started[kind] = _stops.enter_context(start())
    return _started[kind]


@contextlib.contextmanager
def _cluster_url() -> Iterator[str]:
    with start_cluster() as cluster:
        yield cluster.url


@contextlib.contextmanager
def _container_url() -> Iterator[str]:
    from testcontainers.redis import RedisContainer  # type: ignore[import-not-found]

    with RedisContainer() as container:
        host = container.get_container_host_ip()
        port = container.get_exposed_port(container.port)
        yield f"redis://{host}:{port}/0"


def _skip(reason: str) -> Never:
    try:
        import pytest
    except ImportError:  # outside pytest (the bench): an ordinary error
        raise RuntimeError(reason) from None
    pytest.skip(reason)
    raise AssertionError("pytest.skip returned")  # pragma: no cover


def resolve_url(url: str | None) -> str:
    """The server URL a test runs against (see the module docstring)."""
    url = url or os.environ.get(ENVIRONMENT) or None
    if url is not None:
        if url.rstrip("/") in ("redis+cluster:", "redis+cluster://"):
            if not binaries_available():
                _skip("starting a Redis Cluster needs redis-server and redis-cli on PATH")
            return _start_shared("cluster", _cluster_url)
        return url
    if answers_ping(6379):
        return DEFAULT_URL
    try:
        import docker  # type: ignore[import-untyped]  # noqa: F401
        import testcontainers.redis  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        pass
    else:
        with contextlib.suppress(Exception):
            return _start_shared("container", _container_url)
    _skip(
        f"no Redis server: set {ENVIRONMENT} (or --durable-url) to a redis:// or "
        "redis+cluster:// URL, start one on 127.0.0.1:6379, or install "
        "durable-redis[testcontainers] with Docker running"
    )


def _with_prefix(url: str, prefix: str) -> str:
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "prefix"]
    query.append(("prefix", prefix))
    return urlunsplit(parts._replace(query=urlencode(query)))


async def clean_prefix(client: Client, prefix: str) -> int:
    """Delete every key under ``prefix`` (on a cluster, on every primary). Returns how many."""
    doomed = [key async for key in client.scan_iter(match=f"{glob_escape(prefix)}:*", count=1000)]
    for key in doomed:
        await client.unlink(key)
    return len(doomed)


async def _server_line(client: Client) -> str:
    try:
        info = await client.info("server")
    except Exception:
        return describe(client)
    version = info.get("redis_version") if isinstance(info, dict) else None
    if version is None and isinstance(info, dict):  # a cluster answers per node
        version = next((v.get("redis_version") for v in info.values() if isinstance(v, dict)), None)
    return f"{describe(client)} (Redis {version})" if version else describe(client)


@asynccontextmanager
async def testbed(
    url: str | None,
    *,
    gap: Gap | None = None,  # noqa: PT028 (a testing hook, not a test)
) -> AsyncIterator[Testbed[LuaEffect]]:
    """One test's own store: a fresh key prefix on the resolved server, cleaned afterwards.
    ``gap`` (a :data:`durable.plugins.Gap`) is awaited by every move of both handles
    (``reopen``'s included) just before its script, and by each move across the two stores
    between its two writes."""
    prefix = f"durable-test-{uuid.uuid4().hex[:12]}"
    test_url = _with_prefix(resolve_url(url), prefix)
    async with open_redis(test_url, gap=gap) as durable:

        @asynccontextmanager
        async def reopen() -> AsyncIterator[RedisDurable]:
            async with open_redis(test_url, gap=gap) as second:
                yield second

        client = durable.checkpointer.client
        try:
            yield Testbed(
                durable=durable,
                reopen=reopen,
                url=test_url,
                probe=RedisProbe(durable.checkpointer),
                server=await _server_line(client),
                extras={"prefix": prefix, "cluster": _is_cluster(client)},
            )
        finally:
            await clean_prefix(client, prefix)


def _is_cluster(client: Client) -> bool:
    from redis.asyncio.cluster import RedisCluster

    return isinstance(client, RedisCluster)
