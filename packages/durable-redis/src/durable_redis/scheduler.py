"""``RedisStreamScheduler``: a stream per queue with a consumer group, and a sorted set of
deadlines.

``make_ready`` adds a stream entry to the stream of the workflow's queue; ``next_ready``
reads one through the group, which moves it to the group's pending list until it is
answered for; a taker that dies leaves it there, and a later take reclaims it with
``XAUTOCLAIM``. A sleeping workflow waits in a sorted set scored by its deadline, and
``wake_due`` moves what is due onto its queue's stream in one script, so a timer can never
hold a workflow that is neither sleeping nor runnable.

A hash maps each workflow to its *current* entry, the one delivery that may still act
for it. That is what keeps a wakeup that lands while a pass runs: the wakeup adds a new
entry, which becomes current, and the running pass's answer (``wake_at`` or ``done``) no
longer matches and so undoes nothing. ``cancel`` deletes the current entry, and an answer
asks the stream whether its entry is still there before it schedules anything, so a
cancelled workflow is never reinstated by the pass that was running when it was
cancelled.

Routing (the ``queues`` capability, :class:`~durable.interfaces.Routed`): a workflow's
queue is recorded on its life, in the workflow's own slot, which no queue script may
touch on a cluster. So the scheduler keeps its own copy, a *route* per workflow in a hash
beside the streams: ``start`` writes it with the queue it just recorded, and a
``make_ready`` that finds none reads the queue from the life once (it never changes while
the life lasts) and writes it. Every script then moves a workflow between its deadline,
its current entry, its route and its queue's stream in one step, and a taker reads only
the streams of the queues it serves, so it never takes another queue's work to put it
back.

Every key shares one hash tag of its own, so on a cluster the queue is one slot (on one
node) and the checkpoint is another: which is why a Redis deployment is a
``SplitDurable`` (``atomic = False``) rather than one commit per move.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from datetime import datetime, timedelta
from typing import Any

from durable.boundary import check_duration, check_queues, check_workflow
from durable.interfaces import Delivery, QueueLimit
from durable.plugins import Gap
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError

from durable_redis.keys import check_prefix, life_key, queue_base, ready_stream
from durable_redis.scripts import (
    DRIVER_ERRORS,
    EPOCH,
    QUEUE_SCRIPTS,
    Client,
    ScriptBook,
    as_text,
    describe,
    milliseconds,
    queue_source,
    translate,
)

__all__ = ["RedisStreamScheduler"]

_MS = timedelta(milliseconds=1)
_WAKE_BATCH = 500


def epoch_ms(moment: datetime) -> int:
    """An aware moment as whole epoch milliseconds (floored, so a deadline equal to a
    timer's ``now`` is due at that ``now``)."""
    return (moment - EPOCH) // _MS


def _still_wanted() -> None:
    """Raise ``CancelledError`` if this task was cancelled during the last call.

    redis-py can lose a cancellation that lands while a command is being sent or its reply
    read, and hand back a reply as if nothing happened (a known class of bug in its asyncio
    client). A worker cancelled there would go on to take work it will never answer for, so
    after every call that hands out work, ask the task itself whether it was cancelled.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class RedisStreamScheduler:
    """A :class:`~durable.interfaces.Scheduler` (and :class:`~durable.interfaces.Routed`)
    over Redis streams, one per queue, and a consumer group on each.

    ``lease`` is how long a taken delivery stays with its taker before ``next_ready`` may
    hand it to another (``reclaim`` takes an explicit idle time instead); the server's
    clock measures it, as the pending list's idle time. ``consumer`` names this taker in
    the group (by default host, process and a random part, so two schedulers in one
    process are two takers). ``prefix`` must match the checkpointer's deployment. ``gap``
    is for tests only, as for :class:`~durable_redis.RedisCheckpointer`.
    """

    def __init__(
        self,
        client: Client,
        *,
        prefix: str = "durable",
        lease: timedelta = timedelta(seconds=30),
        consumer: str | None = None,
        group: str = "workers",
        gap: Gap | None = None,
    ) -> None:
        self.client = client
        self._gap = gap
        self.prefix = check_prefix(prefix)
        self._lease = check_duration("lease", lease)
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.group = group
        base = queue_base(self.prefix)
        self.stream_key = ready_stream(self.prefix, "default")
        """The default queue's stream (each other queue's is :meth:`stream_of`)."""
        self.deadlines_key = f"{base}:sleeping"
        self.current_key = f"{base}:current"
        self.routes_key = f"{base}:routes"
        """workflow -> its queue, for the workflows with something pending."""
        self.queues_key = f"{base}:queues"
        """The set of lanes (a queue, or ``<queue>!<priority>``) that have a stream."""
        self.limits_key = f"{base}:limits"
        """queue -> its limit, ``<concurrent>|<rate>``."""
        self.priorities_key = f"{base}:priorities"
        self.slotted_key = f"{base}:slotted"
        """workflow -> the receipt of the delivery holding its queue's slot."""
        self._keys = (
            self.stream_key,
            self.deadlines_key,
            self.current_key,
            self.routes_key,
            self.queues_key,
            self.limits_key,
            self.priorities_key,
            self.slotted_key,
        )
        self._turn = 0
        self._one_node = not isinstance(client, RedisCluster)
        self._scripts = ScriptBook(client, QUEUE_SCRIPTS, queue_source)
        self._where = describe(client)

    def __repr__(self) -> str:
        return (
            f"RedisStreamScheduler({self._where}, prefix={self.prefix!r}, "
            f"lease={self._lease!r}, consumer={self.consumer!r})"
        )

    @property
    def lease(self) -> timedelta:
        return self._lease

    def _translated(self, error: Exception, doing: str) -> Exception:
        return translate(error, where=self._where, doing=doing, keys=self._keys) or error

    def stream_of(self, lane: str) -> str:
        """The stream of a lane's runnable workflows: a queue's (priority 0), or
        ``<queue>!<priority>``'s."""
        return ready_stream(self.prefix, lane)

    async def lanes(self) -> list[str]:
        """Every lane that has a stream, sorted (``default`` always)."""
        try:
            found = await self.client.smembers(self.queues_key)
        except DRIVER_ERRORS as error:
            raise self._translated(error, "listing the queues") from error
        return sorted({"default", *(as_text(lane) for lane in found)})

    async def queues(self) -> list[str]:
        """Every queue that has a stream, sorted (``default`` always)."""
        return sorted({lane.partition("!")[0] for lane in await self.lanes()})

    async def prepare(self) -> None:
        """Create the default stream and the consumer group on each lane's stream
        (idempotent) and load the scripts."""
        for queue in await self.lanes():
            try:
                await self.client.xgroup_create(
                    self.stream_of(queue), self.group, id="0", mkstream=True
                )
            except ResponseError as error:
                if "BUSYGROUP" not in str(error):
                    raise self._translated(error, "creating the consumer group") from error
            except DRIVER_ERRORS as error:
                raise self._translated(error, "creating the consumer group") from error
        try:
            await self._scripts.preload()
        except DRIVER_ERRORS as error:
            raise self._translated(error, "loading the queue scripts") from error

    async def _call(
        self, name: str, keys: tuple[str, ...], args: tuple[Any, ...], doing: str
    ) -> Any:
        for attempt in (1, 2):
            try:
                return await self._scripts[name](keys=keys, args=args)
            except ResponseError as error:
                # The stream (and with it the group) is gone: a flushed or restarted
                # server that kept nothing. Recreate it once and try again.
                if "NOGROUP" in str(error) and attempt == 1:
                    await self.prepare()
                    continue
                raise self._translated(error, doing) from error
            except DRIVER_ERRORS as error:
                raise self._translated(error, doing) from error
        raise AssertionError("unreachable")

    async def make_ready(self, workflow: str, *, queue: str | None = None) -> None:
        """Make ``workflow`` runnable now, on its queue's stream.

        ``queue`` is for ``start``, which has just recorded it: it becomes the workflow's
        route. Without it the route is used, and a workflow without one (nothing pending
        since its last ``done``, or never routed) gets the queue its life records, read
        once from its own slot (on one node, by the same script), or ``"default"`` when it
        has no life."""
        check_workflow(workflow)
        if queue is not None:
            check_queues([queue])
        if self._gap is not None:
            await self._gap("Scheduler.make_ready", workflow)
        doing = f"make_ready of {workflow!r}"
        if queue is not None:
            await self._call("make_ready", self._keys, (self.group, workflow, queue, "1"), doing)
            return
        keys: tuple[str, ...] = self._keys
        if self._one_node:
            # One node has no slots to keep apart: the script reads the life itself.
            keys = (*keys, life_key(self.prefix, workflow))
        added = await self._call("make_ready", keys, (self.group, workflow, "", "0"), doing)
        if int(added) != -1:
            return
        recorded = await self._life_queue(workflow)
        await self._call("make_ready", self._keys, (self.group, workflow, recorded, "0"), doing)

    async def _life_queue(self, workflow: str) -> str:
        """The queue ``workflow``'s life records (``"default"`` without one). Another slot
        on a cluster, so not part of any queue script: safe because a life's queue never
        changes, and a ``start`` that writes a new life writes its route itself."""
        key = life_key(self.prefix, workflow)
        try:
            queue = await self.client.hget(key, "queue")
        except DRIVER_ERRORS as error:
            raise self._translated(error, f"reading the queue of {workflow!r}") from error
        return "default" if queue is None else as_text(queue) or "default"

    async def route(self, workflow: str, queue: str) -> bool:
        """Record ``workflow``'s queue, moving a waiting entry of another queue's stream onto
        its own (the schema 2 -> 3 migration). True when an entry moved."""
        check_workflow(workflow)
        check_queues([queue])
        moved = await self._call(
            "route", self._keys, (self.group, workflow, queue), f"routing {workflow!r}"
        )
        return int(moved) == 1

    async def _take(
        self, served: frozenset[str] | None, idle: timedelta, read_new: bool, doing: str
    ) -> Delivery | list[Any]:
        """One script: a delivery, or the streams looked at and their newest ids."""
        self._turn += 1
        which: tuple[Any, ...] = ("*",) if served is None else (len(served), *sorted(served))
        reply = await self._call(
            "take",
            self._keys,
            (
                self.group,
                self.consumer,
                milliseconds(idle),
                "1" if read_new else "0",
                milliseconds(self._lease),
                self._turn,
                *which,
            ),
            doing,
        )
        if int(reply[0]) == 1:
            _, ref, workflow, deliveries, slot = reply
            receipt = f"{as_text(ref)}/{int(deliveries)}"
            return Delivery(as_text(workflow), receipt, slot=int(slot) == 1)
        return list(reply[1:])

    async def next_ready(self, within: timedelta) -> Delivery | None:
        """One runnable workflow of any queue: a delivery idle past the lease first, then a
        new entry, then a blocking read for up to ``within``."""
        check_duration("within", within)
        return await self._next(None, within)

    async def next_ready_in(self, queues: frozenset[str], within: timedelta) -> Delivery | None:
        """As :meth:`next_ready`, reading only the streams of ``queues``
        (``queues.routes-by-queue``): a workflow of another queue is never read, so it
        stays first in line for a taker of its queue (``queues.leaves-others-ready``)."""
        served = check_queues(queues)
        check_duration("within", within)
        return await self._next(served, within)

    async def _next(self, served: frozenset[str] | None, within: timedelta) -> Delivery | None:
        if self._gap is not None:
            await self._gap("Scheduler.next_ready", "")
        loop = asyncio.get_running_loop()
        give_up = loop.time() + within.total_seconds()
        while True:
            taken = await self._take(served, self._lease, True, "next_ready")
            _still_wanted()
            if isinstance(taken, Delivery):
                return taken
            left = timedelta(seconds=give_up - loop.time())
            if left <= timedelta(0):
                return None
            fast, pairs = int(taken[0]) == 1, taken[1:]
            streams = {as_text(pairs[i]): as_text(pairs[i + 1]) for i in range(0, len(pairs), 2)}
            if fast:
                # One stream, the default one (always there), unlimited: read it through
                # the group while blocking, so the entry that wakes the read is ours at once.
                return await self._read_blocking(left)
            if not await self._wait_for_entries(streams, left):
                return None

    async def _read_blocking(self, within: timedelta) -> Delivery | None:
        for attempt in (1, 2):
            try:
                read: Any = await self.client.xreadgroup(
                    self.group,
                    self.consumer,
                    {self.stream_key: ">"},
                    count=1,
                    block=milliseconds(within),
                )
                break
            except ResponseError as error:
                if "NOGROUP" in str(error) and attempt == 1:
                    await self.prepare()
                    continue
                raise self._translated(error, "next_ready") from error
            except DRIVER_ERRORS as error:
                raise self._translated(error, "next_ready") from error
        _still_wanted()
        if not read:
            return None
        _, entries = read[0]
        entry, fields = entries[0]
        workflow = fields.get("w", fields.get(b"w"))
        return Delivery(as_text(workflow), f"{as_text(entry)}/1")

    async def _wait_for_entries(self, streams: dict[Any, Any], within: timedelta) -> bool:
        """Block until one of ``streams`` has an entry newer than the id given for it (or
        ``within`` passes), without taking it: the caller then takes through the script,
        which picks one entry of one stream, where a group read of several streams would
        take one of each."""
        try:
            read: Any = await self.client.xread(streams, count=1, block=milliseconds(within))
        except DRIVER_ERRORS as error:
            raise self._translated(error, "next_ready") from error
        _still_wanted()
        return bool(read)

    async def reclaim(self, idle: timedelta) -> Delivery | None:
        """Take over one delivery of any queue whose taker has been silent for ``idle``
        (``XAUTOCLAIM``)."""
        check_duration("idle", idle)
        if self._gap is not None:
            await self._gap("Scheduler.reclaim", "")
        taken = await self._take(None, idle, False, "reclaim")
        _still_wanted()
        return taken if isinstance(taken, Delivery) else None

    def _answer_args(self, delivery: Delivery, when: str) -> tuple[str, ...]:
        entry, _, deliveries = delivery.receipt.rpartition("/")
        if not entry or not deliveries.isdigit():
            raise ValueError(
                f"workflow {delivery.workflow!r}: {delivery.receipt!r} is not a receipt this "
                "scheduler issued"
            )
        return (self.group, delivery.workflow, entry, deliveries, when)

    async def wake_at(self, delivery: Delivery, when: datetime) -> None:
        if not isinstance(when, datetime) or when.tzinfo is None:
            raise TypeError(
                f"workflow {delivery.workflow!r}: wake_at needs an aware datetime, got {when!r}"
            )
        args = self._answer_args(delivery, str(epoch_ms(when)))
        if self._gap is not None:
            await self._gap("Scheduler.wake_at", delivery.workflow)
        await self._call("answer", self._keys, args, f"wake_at for {delivery.workflow!r}")

    async def done(self, delivery: Delivery) -> None:
        args = self._answer_args(delivery, "")
        if self._gap is not None:
            await self._gap("Scheduler.done", delivery.workflow)
        await self._call("answer", self._keys, args, f"done for {delivery.workflow!r}")

    async def wake_due(self, now: datetime) -> tuple[str, ...]:
        if not isinstance(now, datetime) or now.tzinfo is None:
            raise TypeError(f"wake_due needs an aware datetime, got {now!r}")
        moved: list[str] = []
        while True:
            batch = await self._call(
                "wake_due", self._keys, (epoch_ms(now), _WAKE_BATCH, self.group), "wake_due"
            )
            moved.extend(as_text(workflow) for workflow in batch)
            if len(batch) < _WAKE_BATCH:
                return tuple(moved)

    async def cancel(self, workflow: str) -> None:
        check_workflow(workflow)
        if self._gap is not None:
            await self._gap("Scheduler.cancel", workflow)
        await self._call("cancel", self._keys, (workflow,), f"cancel of {workflow!r}")

    # -- limits (the ``limits`` capability, :class:`~durable.interfaces.Limited`) ------------
    #
    # Kept beside the streams, in the queue's slot, so the take script counts a queue's live
    # slots and recent hand-outs and takes in one step: a sorted set of slots per limited
    # queue (scored by when each lapses, so a dead taker's slot lapses with no sweeper) and
    # one of hand-out times per rate-limited queue.

    async def set_limit(self, queue: str, limit: QueueLimit | None) -> None:
        """Keep ``limit`` for ``queue`` in the store (``None`` or an unlimited one removes
        it); every handle's next take honours it. Lowering it takes no slot back."""
        (queue,) = check_queues([queue])
        if limit is not None and not isinstance(limit, QueueLimit):
            raise TypeError(f"queue {queue!r}: a limit is a QueueLimit or None, got {limit!r}")
        try:
            if limit is None or limit.unlimited:
                await self.client.hdel(self.limits_key, queue)
            else:
                concurrent = "" if limit.concurrent is None else str(limit.concurrent)
                rate = "" if limit.rate is None else str(limit.rate)
                await self.client.hset(self.limits_key, queue, f"{concurrent}|{rate}")
        except DRIVER_ERRORS as error:
            raise self._translated(error, f"setting the limit of queue {queue!r}") from error

    async def limits(self) -> dict[str, QueueLimit]:
        """Every queue's limit, by queue name."""
        try:
            found = await self.client.hgetall(self.limits_key)
        except DRIVER_ERRORS as error:
            raise self._translated(error, "reading the queue limits") from error
        kept: dict[str, QueueLimit] = {}
        for queue, text in found.items():
            concurrent, _, rate = as_text(text).partition("|")
            kept[as_text(queue)] = QueueLimit(
                int(concurrent) if concurrent else None, int(rate) if rate else None
            )
        return dict(sorted(kept.items()))

    async def held(self, queue: str) -> int:
        """How many slots of ``queue`` are live now (by the server's clock)."""
        (queue,) = check_queues([queue])
        return int(await self._call("held", self._keys, (queue,), f"counting slots of {queue!r}"))

    async def hold(self, delivery: Delivery, liveness: timedelta) -> bool:
        """Keep ``delivery``'s slot live for ``liveness`` more; ``False``, with nothing
        written, when the slot is no longer this delivery's or has lapsed."""
        check_duration("liveness", liveness, workflow=delivery.workflow)
        reply = await self._call(
            "hold",
            self._keys,
            (delivery.workflow, delivery.receipt, milliseconds(liveness)),
            f"holding the slot of {delivery.workflow!r}",
        )
        return int(reply) == 1

    async def prioritize(self, workflow: str, priority: int) -> None:
        """Keep ``workflow``'s priority within its queue (higher first; 0 by default), until
        it is discarded; a waiting entry moves to its new place at once."""
        check_workflow(workflow)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise TypeError(f"workflow {workflow!r}: a priority is an int, got {priority!r}")
        await self._call(
            "prioritize",
            self._keys,
            (self.group, workflow, str(priority)),
            f"prioritizing {workflow!r}",
        )

    async def scheduled(self, workflow: str) -> datetime | None:
        """When ``workflow`` is next runnable: the deadline it sleeps until, the moment its
        current stream entry was added if it is runnable (or out with a taker), or ``None``.
        For operators (``durable show``); nothing is decided by it."""
        check_workflow(workflow)
        try:
            score = await self.client.zscore(self.deadlines_key, workflow)
            if score is not None:
                return EPOCH + timedelta(milliseconds=score)
            current = await self.client.hget(self.current_key, workflow)
            if current is None:
                return None
            queue, _, entry = as_text(current).rpartition(":")
            stream = self.stream_of(queue or "default")
            if not await self.client.xrange(stream, entry, entry):
                return None
        except DRIVER_ERRORS as error:
            raise self._translated(error, f"reading the schedule of {workflow!r}") from error
        return EPOCH + timedelta(milliseconds=int(entry.split("-", 1)[0]))
