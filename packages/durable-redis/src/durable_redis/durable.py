"""``RedisDurable``: a Redis checkpointer beside a Redis stream scheduler."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast

from durable.codec import CheckpointCodec
from durable.durable import SplitDurable

from durable_redis.checkpointer import RedisCheckpointer
from durable_redis.effect import LuaEffect
from durable_redis.scheduler import RedisStreamScheduler
from durable_redis.scripts import Client

__all__ = ["RedisDurable"]


class RedisDurable(SplitDurable[LuaEffect]):
    """The pair, as a :class:`~durable.durable.SplitDurable`: not atomic, by necessity.

    On a cluster the queue's keys share a slot of their own and each workflow's keys
    share the workflow's slot, so recording a value and queueing its workflow touch two
    slots, usually on two nodes, and no script may span them. ``arrive`` and ``send``
    therefore record first and queue second: a crash between the two leaves a workflow
    holding its value and waiting for a wakeup that anything asking again supplies, never
    a queued pass that finds nothing. The same holds on one node, where the two could
    share a script, so that a deployment behaves alike on both.
    """

    def __init__(self, checkpointer: RedisCheckpointer, scheduler: RedisStreamScheduler) -> None:
        super().__init__(checkpointer, scheduler)

    @classmethod
    def over(
        cls,
        client: Client,
        *,
        prefix: str = "durable",
        codec: CheckpointCodec[Any] | None = None,
        ttl: timedelta | None = None,
        lease: timedelta = timedelta(seconds=30),
        consumer: str | None = None,
    ) -> RedisDurable:
        """Both stores over one client and one key prefix."""
        return cls(
            RedisCheckpointer(client, prefix=prefix, codec=codec, ttl=ttl),
            RedisStreamScheduler(client, prefix=prefix, lease=lease, consumer=consumer),
        )

    @property
    def checkpointer(self) -> RedisCheckpointer:
        return cast(RedisCheckpointer, self._checkpointer)  # as constructed

    @property
    def scheduler(self) -> RedisStreamScheduler:
        return cast(RedisStreamScheduler, self._scheduler)  # as constructed

    async def prepare(self) -> None:
        """Load every script and create the consumer group (idempotent)."""
        await self.checkpointer.load_scripts()
        await self.scheduler.prepare()
