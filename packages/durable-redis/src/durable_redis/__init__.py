"""durable_redis: the Redis and Redis Cluster store for durable.

Every guarantee is one Lua script, every key a script touches carries its workflow's
hash tag, and the same code runs on one node and on a cluster::

    import durable

    async with durable.open("redis://localhost:6379/0") as store:
        ...

    async with durable.open("redis+cluster://node-1:6379?prefix=payments") as store:
        ...
"""

from durable_redis.checkpointer import RedisCheckpointer
from durable_redis.durable import RedisDurable
from durable_redis.effect import LuaEffect
from durable_redis.errors import CrossSlotError, LuaEffectFailed, RedisUnavailable, UntaggedKey
from durable_redis.plugin import open_redis
from durable_redis.scheduler import RedisStreamScheduler

__all__ = [
    "CrossSlotError",
    "LuaEffect",
    "LuaEffectFailed",
    "RedisCheckpointer",
    "RedisDurable",
    "RedisStreamScheduler",
    "RedisUnavailable",
    "UntaggedKey",
    "open_redis",
]
