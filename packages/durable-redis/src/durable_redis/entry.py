"""The ``durable`` entry point of the Redis store: what the store is, without redis-py.

Every ``durable`` command loads every installed store's entry point to learn names and
schemes, so this module imports nothing of the driver; ``open`` and ``testing`` import
:mod:`durable_redis.plugin` and :mod:`durable_redis.testing` when they are called.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

from durable.interfaces import Durable
from durable.plugins import Gap, StorePlugin, Testbed, hookimpl

__all__ = ["SCHEMES", "durable_store"]

SCHEMES = (
    "redis",
    "rediss",
    "redis+cluster",
    "rediss+cluster",
    "redis+sentinel",
    "rediss+sentinel",
)


def open_store(url: str, **options: Any) -> AbstractAsyncContextManager[Durable[Any]]:
    """:func:`durable_redis.plugin.open_redis`, imported on first use."""
    from durable_redis.plugin import open_redis

    return open_redis(url, **options)


def testing(
    url: str | None,
    *,
    gap: Gap | None = None,  # noqa: PT028 (a testing hook, not a test)
) -> AbstractAsyncContextManager[Testbed[Any]]:
    """:func:`durable_redis.testing.testbed`, imported on first use; ``gap`` is the racing
    tests' (see :data:`durable.plugins.Gap`)."""
    from durable_redis.testing import testbed

    return testbed(url, gap=gap)


@hookimpl
def durable_store() -> StorePlugin:
    """The Redis store, on one node or a cluster."""
    return StorePlugin(
        name="redis",
        schemes=SCHEMES,
        open=open_store,
        capabilities=frozenset(
            {"transact", "cluster", "enumerate", "lifecycle", "queues", "limits", "operations"}
        ),
        testing=testing,
        distribution="durable-redis",
        description="Redis and Redis Cluster: every guarantee as one Lua script",
    )
