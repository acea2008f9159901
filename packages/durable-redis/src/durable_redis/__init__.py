"""durable_redis: the Redis and Redis Cluster store for durable.

Every guarantee is one Lua script, every key a script touches carries its workflow's
hash tag, and the same code runs on one node and on a cluster::

    import durable

    async with durable.open("redis://localhost:6379/0") as store:
        ...

    async with durable.open("redis+cluster://node-1:6379?prefix=payments") as store:
        ...
"""

import typing as _typing

from durable.plugins import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from durable_redis.checkpointer import RedisCheckpointer
    from durable_redis.durable import RedisDurable
    from durable_redis.effect import LuaEffect
    from durable_redis.errors import (
        CrossSlotError,
        LuaEffectFailed,
        RedisUnavailable,
        ReplicationUnconfirmed,
        SchemaTooNew,
        UntaggedKey,
    )
    from durable_redis.plugin import open_redis
    from durable_redis.scheduler import RedisStreamScheduler
else:
    # Imported when first used, so that loading the entry point (every durable command
    # does) does not import redis-py.
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "CrossSlotError": "durable_redis.errors",
            "LuaEffect": "durable_redis.effect",
            "LuaEffectFailed": "durable_redis.errors",
            "RedisCheckpointer": "durable_redis.checkpointer",
            "RedisDurable": "durable_redis.durable",
            "RedisStreamScheduler": "durable_redis.scheduler",
            "RedisUnavailable": "durable_redis.errors",
            "ReplicationUnconfirmed": "durable_redis.errors",
            "SchemaTooNew": "durable_redis.errors",
            "UntaggedKey": "durable_redis.errors",
            "open_redis": "durable_redis.plugin",
        },
    )

__all__ = [
    "CrossSlotError",
    "LuaEffect",
    "LuaEffectFailed",
    "RedisCheckpointer",
    "RedisDurable",
    "RedisStreamScheduler",
    "RedisUnavailable",
    "ReplicationUnconfirmed",
    "SchemaTooNew",
    "UntaggedKey",
    "open_redis",
]
