"""``RedisDurable``: a Redis checkpointer beside a Redis stream scheduler."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from datetime import timedelta
from typing import Any, cast

from durable.boundary import check_key, check_message_id, check_workflow
from durable.codec import CheckpointCodec
from durable.durable import SplitDurable
from durable.interfaces import Admitted, Status, WorkflowStatus
from durable.plugins import Gap
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError

from durable_redis.checkpointer import RedisCheckpointer
from durable_redis.effect import LuaEffect
from durable_redis.errors import SchemaTooNew
from durable_redis.keys import schema_key
from durable_redis.replication import ReplicaWait
from durable_redis.scheduler import RedisStreamScheduler
from durable_redis.scripts import DRIVER_ERRORS, Client, as_text, describe, translate

__all__ = ["SCHEMA_VERSION", "RedisDurable"]

log = logging.getLogger(__name__)

SCHEMA_VERSION = 3
"""The layout of the keys under a prefix: 1 (no ``<prefix>:schema`` key) before lifecycle,
2 with each workflow's life hash and the status index, 3 with a stream per queue and each
pending workflow's route (queue routing)."""

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
    ``start`` hands the scheduler the queue it recorded, which becomes the workflow's
    route; every other wakeup (``arrive``, ``send``, ``retry``) finds the route, or reads
    the queue from the life once (see :class:`RedisStreamScheduler`).
    """

    replica_wait: ReplicaWait | None = None
    """``wait_replicas=`` and ``wait_timeout=`` as opened (``open_redis`` sets it; the
    confirming itself lives in the client's connections), for ``durable doctor``."""

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
        gap: Gap | None = None,
        group_commit: bool = True,
    ) -> RedisDurable:
        """Both stores over one client and one key prefix. ``gap`` is for tests only: every
        move of both stores awaits it before its script, and each move across them between
        its two writes (a store built with it is a subclass that does so, and one built
        without it runs the moves exactly as it always did)."""
        checkpointer = RedisCheckpointer(
            client, prefix=prefix, codec=codec, ttl=ttl, gap=gap, group_commit=group_commit
        )
        scheduler = RedisStreamScheduler(
            client, prefix=prefix, lease=lease, consumer=consumer, gap=gap
        )
        if gap is not None:
            return _Gapped(checkpointer, scheduler, gap)
        return cls(checkpointer, scheduler)

    @property
    def checkpointer(self) -> RedisCheckpointer:
        return cast(RedisCheckpointer, self._checkpointer)  # as constructed

    @property
    def scheduler(self) -> RedisStreamScheduler:
        return cast(RedisStreamScheduler, self._scheduler)  # as constructed

    async def _admit_and_queue(
        self, workflow: str, kind: str, input: object, queue: str
    ) -> Admitted:
        """Record the start, then queue it on the queue the life holds (a repeated start
        finds the first one's), which becomes the workflow's route."""
        admitted = await self.checkpointer.admit(workflow, kind, input, queue=queue)
        if admitted.queue:
            await self.scheduler.make_ready(workflow, queue=admitted.status.queue)
        return admitted

    async def prepare(self) -> None:
        """Load every script, create the consumer group, and bring the keys under this
        prefix to :data:`SCHEMA_VERSION` (idempotent; see :meth:`migrate`)."""
        await self.checkpointer.load_scripts()
        await self.scheduler.prepare()
        await self.migrate()

    async def migrate(self) -> int:
        """Upgrade keys written by an earlier release in place; returns how many workflows
        this call changed (gave a life, or routed).

        ``<prefix>:schema`` holds the version. Absent, the prefix is at version 1 (or new):
        every workflow holding records gets a life hash with no kind and the status its
        queue entry implies (``ready`` when it has a stream entry, ``sleeping`` until its
        deadline when it has one, else ``blocked``: nothing in version 1 tells a finished
        workflow from a blocked one, and ``blocked`` is the safe answer, since an arrival
        still runs it and ``finished`` would strand a waiting one for good), and its index
        member. From version 2 (one stream for every queue) to 3, every workflow with
        something pending (a current entry or a deadline) gets its route, the queue its
        life records, and a waiting entry of a queue other than ``default`` moves from the
        one stream to its queue's (an entry out with a worker stays with it; its next
        wakeup goes to its queue). Then the version is set. One preparer migrates under a
        short lock while the others wait for the version; should the lock's holder die,
        the next one migrates again, which is safe because each life is created only if
        absent and each route is the same queue again. A version above this release's is
        refused (:class:`SchemaTooNew`).
        """
        client, prefix = self.checkpointer.client, self.checkpointer.prefix
        key = schema_key(prefix)
        lock = f"{key}:migrating"
        where = f"the schema version of prefix {prefix!r}"
        adopted = routed = 0
        try:
            found = await client.get(key)
            if found is not None and self._checked(prefix, as_text(found)) == SCHEMA_VERSION:
                return 0
            mine = secrets.token_hex(8)
            while not await client.set(lock, mine, nx=True, px=_MIGRATION_LOCK // _MS):
                # Another preparer is migrating: wait for its version, or its lock to lapse.
                await asyncio.sleep(0.1)
                found = await client.get(key)
                if found is not None and self._checked(prefix, as_text(found)) == SCHEMA_VERSION:
                    return 0
            try:
                found = await client.get(key)
                version = 1 if found is None else self._checked(prefix, as_text(found))
                if version < 2:
                    for workflow in await self.checkpointer.workflows():
                        status, until = await self._queued_as(workflow)
                        adopted += await self.checkpointer.adopt(workflow, status, until)
                if version < 3:
                    routed = await self._route_pending()
                await client.set(key, str(SCHEMA_VERSION))
            finally:
                if await client.get(lock) == mine:
                    await client.delete(lock)
        except DRIVER_ERRORS as error:
            translated = translate(error, where=describe(client), doing=f"migrating {where}")
            raise (translated or error) from error
        if adopted:
            log.info("gave %d workflows of prefix %r a status (schema 1 -> 2)", adopted, prefix)
        if routed:
            log.info("routed %d workflows of prefix %r (schema 2 -> 3)", routed, prefix)
        return adopted + routed

    async def _route_pending(self) -> int:
        """Schema 2 -> 3: route every workflow with a current entry or a deadline."""
        scheduler = self.scheduler
        client = scheduler.client
        pending: set[str] = set()
        async for workflow, _ in client.hscan_iter(scheduler.current_key, count=500):
            pending.add(as_text(workflow))
        async for workflow, _ in client.zscan_iter(scheduler.deadlines_key, count=500):
            pending.add(as_text(workflow))
        moved = 0
        for workflow in sorted(pending):
            status = await self.checkpointer.status(workflow)
            queue = status.queue if status is not None else "default"
            moved += await scheduler.route(workflow, queue)
        return moved

    async def schema_versions(self) -> tuple[int | None, int]:
        """For ``durable doctor``: ``<prefix>:schema``'s version (``None`` when absent) and
        the one this release expects."""
        client, prefix = self.checkpointer.client, self.checkpointer.prefix
        try:
            found = await client.get(schema_key(prefix))
        except DRIVER_ERRORS as error:
            translated = translate(error, where=describe(client), doing="reading the schema")
            raise (translated or error) from error
        text = None if found is None else as_text(found)
        return (int(text) if text is not None and text.isdigit() else None), SCHEMA_VERSION

    async def doctor_findings(self, *, repair: bool, limit: int, stale: timedelta) -> list[Any]:
        """For ``durable doctor``: consumers of the worker group idle for over ``stale``.

        A worker that is killed leaves its consumer in the group for good (every process
        names its own). One that holds nothing pending is safe to remove, and ``repair``
        removes it (``XGROUP DELCONSUMER``; a live worker that was only idle is added back
        by its next read). One still holding deliveries is left: they are reclaimed by
        other workers once their lease lapses, and then it holds nothing."""
        from durable.doctor import Finding

        scheduler = self.scheduler
        client = scheduler.client
        try:
            # A consumer is one worker, in the group of each stream it read: it is gone
            # when idle on every one, and holds deliveries when it does on any.
            idle: dict[str, bool] = {}
            holds: dict[str, bool] = {}
            streams = [scheduler.stream_of(lane) for lane in await scheduler.lanes()]
            for stream in streams:
                try:
                    consumers: Any = await client.xinfo_consumers(stream, scheduler.group)
                except ResponseError:
                    continue  # a queue whose stream is gone: nobody reads it
                for consumer in consumers:
                    name = as_text(consumer["name"])
                    idle[name] = idle.get(name, True) and int(consumer["idle"]) >= stale / _MS
                    holds[name] = holds.get(name, False) or int(consumer["pending"]) > 0
            gone = [name for name in idle if idle[name] and not holds[name]]
            holding = [name for name in idle if idle[name] and holds[name]]
            removed: list[str] = []
            if repair:
                for name in gone:
                    for stream in streams:
                        with contextlib.suppress(ResponseError):
                            await client.xgroup_delconsumer(stream, scheduler.group, name)
                    removed.append(name)
        except DRIVER_ERRORS as error:
            translated = translate(error, where=describe(client), doing="reading the consumers")
            raise (translated or error) from error
        names = gone + holding
        replicas = await self._replication_finding(limit)
        said = (
            f"removed {len(removed)} dead consumer(s) holding nothing: {', '.join(removed[:limit])}"
        )
        return [
            Finding(
                "dead_consumers",
                len(names),
                tuple(names[:limit]),
                f"consumers of group {scheduler.group!r} idle for over "
                f"{int(stale.total_seconds())}s (workers that are gone): `durable doctor URL "
                "--repair` removes those holding nothing pending; the rest hold deliveries "
                "that other workers reclaim once their lease lapses",
                (said,) if removed else (),
                attention=bool(holding) or not removed,
            ),
            replicas,
        ]

    async def _replication_finding(self, limit: int) -> Any:
        """``unconfirmed_replicas``: primaries with replicas while writes do not wait for
        them. A failover then loses what the primary had not shipped yet, the highest
        fencing token among it, and the promoted primary can hand that token out again
        (see the docs' "Failover"). Also flags a ``wait_replicas=`` above the replicas a
        primary has, which fails every write."""
        from durable.doctor import Finding

        client = self.checkpointer.client
        counts: list[tuple[str, int]] = []
        try:
            if isinstance(client, RedisCluster):
                for node in client.get_primaries():
                    info = await client.execute_command("INFO", "replication", target_nodes=node)
                    counts.append((node.name, int(info.get("connected_slaves", 0))))
            else:
                info = await client.info("replication")
                counts.append((describe(client), int(info.get("connected_slaves", 0))))
        except DRIVER_ERRORS as error:
            translated = translate(error, where=describe(client), doing="reading INFO replication")
            raise (translated or error) from error
        wait = self.replica_wait
        if wait is None:
            exposed = [f"{name} ({count} replicas)" for name, count in counts if count > 0]
            advice = (
                "primaries with replicas, and writes that do not wait for them: a failover "
                "loses what was not yet shipped, fencing tokens included, so two passes can "
                "hold one workflow with one token; add ?wait_replicas=1&wait_timeout=1 to the "
                "store URL (docs: Failover)"
            )
        else:
            exposed = [
                f"{name} ({count} replicas, wait_replicas={wait.replicas})"
                for name, count in counts
                if count < wait.replicas
            ]
            advice = (
                "primaries with fewer replicas than wait_replicas= asks for: every write to "
                "them fails with ReplicationUnconfirmed until the replicas are back"
            )
        return Finding(
            "unconfirmed_replicas",
            len(exposed),
            tuple(exposed[:limit]),
            advice,
            attention=bool(exposed),
        )

    @staticmethod
    def _checked(prefix: str, found: str) -> int:
        """The version ``found`` names; a later one than this release's is refused."""
        if not found.isdigit() or int(found) > SCHEMA_VERSION:
            raise SchemaTooNew(prefix, found, SCHEMA_VERSION)
        return int(found)

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


class _Gapped(RedisDurable):
    """A testbed's :class:`RedisDurable`: each move across the two stores awaits the test's
    gap between its first write and its second, where a crash would leave it half done."""

    def __init__(
        self, checkpointer: RedisCheckpointer, scheduler: RedisStreamScheduler, gap: Gap
    ) -> None:
        super().__init__(checkpointer, scheduler)
        self._gap = gap

    async def arrive(self, workflow: str, key: str, value: object) -> object:
        check_workflow(workflow)
        check_key(workflow, key)
        stored = await self.checkpointer.supply(workflow, key, value)
        await self._gap("Durable.arrive", workflow)
        await self.scheduler.make_ready(workflow)
        return stored

    async def send(self, workflow: str, value: object, *, message_id: str | None = None) -> str:
        check_workflow(workflow)
        check_message_id(workflow, message_id)
        key = await self.checkpointer.append(workflow, value, message_id=message_id)
        await self._gap("Durable.send", workflow)
        await self.scheduler.make_ready(workflow)
        return key

    async def discard(self, workflow: str) -> None:
        check_workflow(workflow)
        await self.checkpointer.discard(workflow)
        await self._gap("Durable.discard", workflow)
        await self.scheduler.cancel(workflow)

    async def _admit_and_queue(
        self, workflow: str, kind: str, input: object, queue: str
    ) -> Admitted:
        admitted = await self.checkpointer.admit(workflow, kind, input, queue=queue)
        await self._gap("Durable.start", workflow)
        if admitted.queue:
            await self.scheduler.make_ready(workflow, queue=admitted.status.queue)
        return admitted

    async def _withdraw_and_cancel(self, workflow: str) -> WorkflowStatus:
        withdrawn = await self.checkpointer.withdraw(workflow)
        await self._gap("Durable.cancel", workflow)
        if withdrawn.status is Status.CANCELLED:
            await self.scheduler.cancel(workflow)
        return withdrawn

    async def _readmit_and_queue(self, workflow: str) -> WorkflowStatus:
        readmitted = await self.checkpointer.readmit(workflow)
        await self._gap("Durable.retry", workflow)
        await self.scheduler.make_ready(workflow)
        return readmitted
