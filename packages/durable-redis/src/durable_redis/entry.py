"""The ``durable`` entry point of the Redis store: what the store is, without redis-py.

Every ``durable`` command loads every installed store's entry point to learn names and
schemes, so this module imports nothing of the driver; ``open`` and ``testing`` import
:mod:`durable_redis.plugin` and :mod:`durable_redis.testing` when they are called.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

from durable.interfaces import Durable
from durable.plugins import StorePlugin, Testbed, hookimpl

__all__ = ["SCHEMES", "durable_store"]

SCHEMES = ("redis", "rediss", "redis+cluster", "rediss+cluster")


def open_store(url: str, **options: Any) -> AbstractAsyncContextManager[Durable[Any]]:
    """:func:`durable_redis.plugin.open_redis`, imported on first use."""
    from durable_redis.plugin import open_redis

    return open_redis(url, **options)


def testing(url: str | None) -> AbstractAsyncContextManager[Testbed[Any]]:
    """:func:`durable_redis.testing.testbed`, imported on first use."""
    from durable_redis.testing import testbed

    return testbed(url)


@hookimpl
def durable_store() -> StorePlugin:
    """The Redis store, on one node or a cluster."""
    return StorePlugin(
        name="redis",
        schemes=SCHEMES,
        open=open_store,
        capabilities=frozenset({"transact", "cluster", "enumerate", "lifecycle"}),
        testing=testing,
        distribution="durable-redis",
        description="Redis and Redis Cluster: every guarantee as one Lua script",
    )
