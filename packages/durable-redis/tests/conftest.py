"""Servers for the Redis store's own tests: one node, and a real 3-primary cluster.

The node is whatever ``durable_redis.testing`` resolves (``DURABLE_REDIS_URL``, then
``127.0.0.1:6379``). The cluster is started here once per session from ``redis-server``
processes on free loopback ports and stopped by PID when the session ends, failed or
not. Tests that stop, restart or lock a server start their own throwaway one instead
(``durable_redis.servers.start_server``), never touching the shared node.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from durable.plugins import Testbed as Bed
from durable_redis.effect import LuaEffect
from durable_redis.servers import LocalCluster, binaries_available, start_cluster
from durable_redis.testing import resolve_url, testbed


@pytest.fixture(scope="session")
def cluster() -> Iterator[LocalCluster]:
    if not binaries_available():
        pytest.skip("a Redis Cluster needs redis-server and redis-cli on PATH")
    with start_cluster() as started:
        yield started


@pytest.fixture(scope="session")
def node_url() -> str:
    return resolve_url(None)


@pytest.fixture(params=["node", "cluster"])
def server_url(request: pytest.FixtureRequest) -> str:
    """Each test using this runs on one node and on the cluster."""
    if request.param == "cluster":
        started: LocalCluster = request.getfixturevalue("cluster")
        return started.url
    url: str = request.getfixturevalue("node_url")
    return url


@pytest.fixture
async def bed(server_url: str) -> AsyncIterator[Bed[LuaEffect]]:
    """A fresh store on the parametrized server, under a key prefix of its own."""
    async with testbed(server_url) as fresh:
        yield fresh


@pytest.fixture
async def node_bed(node_url: str) -> AsyncIterator[Bed[LuaEffect]]:
    async with testbed(node_url) as fresh:
        yield fresh


@pytest.fixture
async def cluster_bed(cluster: LocalCluster) -> AsyncIterator[Bed[Any]]:
    async with testbed(cluster.url) as fresh:
        yield fresh
