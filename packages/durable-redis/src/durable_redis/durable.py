"""``RedisDurable``: a Redis checkpointer beside a Redis stream scheduler."""

from __future__ import annotations

import asyncio
import logging
import secrets
from datetime import timedelta
from typing import Any, cast

from durable.codec import CheckpointCodec
from durable.durable import SplitDurable
from durable.interfaces import Status

from durable_redis.checkpointer import RedisCheckpointer
from durable_redis.effect import LuaEffect
from durable_redis.errors import SchemaTooNew
from durable_redis.keys import schema_key
from durable_redis.scheduler import RedisStreamScheduler
from durable_redis.scripts import DRIVER_ERRORS, Client, as_text, describe, translate

__all__ = ["SCHEMA_VERSION", "RedisDurable"]

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2
"""The layout of the keys under a prefix: 1 (no ``<prefix>:schema`` key) before lifecycle,
2 with each workflow's life hash and the status index."""

_MIGRATION_LOCK = timedelta(seconds=60)


class RedisDurable(SplitDurable[LuaEffect]):
    """The pair, as a :class:`~durable.durable.SplitDurable`: not atomic, by necessity.

    On a cluster the queue's keys share a slot of their own and each workflow's keys
    share the workflow's slot, so recording a value and queueing its workflow touch two
    slots, usually on two nodes, and no script may span them. ``arrive`` and ``send``
    therefore record first and queue second: a crash between the two leaves a workflow
    holding its value and waiting for a wakeup that anything asking again supplies, never
    a queued pass that finds nothing. The same holds on one node, where the two could
    share a script, so that a deployment behaves alike on both.

    ``start``, ``cancel`` and ``retry`` follow the same rule (the lifecycle hooks of
    :class:`~durable.durable.SplitDurable`): the life is written by one script in the
    workflow's slot, then the queue is told. A crash between leaves a ``ready`` workflow
    that is not queued, and the same ``start`` again finds it ready and queues it.
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
        """Load every script, create the consumer group, and bring the keys under this
        prefix to :data:`SCHEMA_VERSION` (idempotent; see :meth:`migrate`)."""
        await self.checkpointer.load_scripts()
        await self.scheduler.prepare()
        await self.migrate()

    async def migrate(self) -> int:
        """Upgrade keys written by the previous release in place; returns how many
        workflows this call gave a life.

        ``<prefix>:schema`` holds the version. Absent, the prefix is at version 1 (or new):
        every workflow holding records gets a life hash with no kind and the status its
        queue entry implies (``ready`` when it has a stream entry, ``sleeping`` until its
        deadline when it has one, else ``blocked``: nothing in version 1 tells a finished
        workflow from a blocked one, and ``blocked`` is the safe answer, since an arrival
        still runs it and ``finished`` would strand a waiting one for good), and its index
        member; then the version is set. One preparer migrates under a short lock while
        the others wait for the version; should the lock's holder die, the next one
        migrates again, which is safe because each life is created only if absent.
        A version above this release's is refused (:class:`SchemaTooNew`).
        """
        client, prefix = self.checkpointer.client, self.checkpointer.prefix
        key = schema_key(prefix)
        lock = f"{key}:migrating"
        where = f"the schema version of prefix {prefix!r}"
        try:
            found = await client.get(key)
            if found is not None:
                return self._checked(prefix, as_text(found))
            mine = secrets.token_hex(8)
            while not await client.set(lock, mine, nx=True, px=_MIGRATION_LOCK // _MS):
                # Another preparer is migrating: wait for its version, or its lock to lapse.
                await asyncio.sleep(0.1)
                found = await client.get(key)
                if found is not None:
                    return self._checked(prefix, as_text(found))
            try:
                adopted = 0
                for workflow in await self.checkpointer.workflows():
                    status, until = await self._queued_as(workflow)
                    adopted += await self.checkpointer.adopt(workflow, status, until)
                await client.set(key, str(SCHEMA_VERSION))
            finally:
                if await client.get(lock) == mine:
                    await client.delete(lock)
        except DRIVER_ERRORS as error:
            translated = translate(error, where=describe(client), doing=f"migrating {where}")
            raise (translated or error) from error
        if adopted:
            log.info("gave %d workflows of prefix %r a status (schema 1 -> 2)", adopted, prefix)
        return adopted

    @staticmethod
    def _checked(prefix: str, found: str) -> int:
        if not found.isdigit() or int(found) > SCHEMA_VERSION:
            raise SchemaTooNew(prefix, found, SCHEMA_VERSION)
        return 0

    async def _queued_as(self, workflow: str) -> tuple[Status, Any]:
        """The status a version-1 workflow's queue entry implies (SQLite's rule)."""
        until = await self.scheduler.scheduled(workflow)
        if until is None:
            return Status.BLOCKED, None
        client, scheduler = self.scheduler.client, self.scheduler
        if await client.zscore(scheduler.deadlines_key, workflow) is not None:
            return Status.SLEEPING, until
        return Status.READY, None


_MS = timedelta(milliseconds=1)
