"""``RedisStreamScheduler``: a stream with a consumer group, and a sorted set of deadlines.

``make_ready`` adds a stream entry; ``next_ready`` reads one through the group, which
moves it to the group's pending list until it is answered for; a taker that dies leaves
it there, and ``reclaim`` takes it over with ``XAUTOCLAIM``. A sleeping workflow waits in
a sorted set scored by its deadline, and ``wake_due`` moves what is due onto the stream in
one script, so a timer can never hold a workflow that is neither sleeping nor runnable.

A hash maps each workflow to its *current* entry, the one delivery that may still act
for it. That is what keeps a wakeup that lands while a pass runs: the wakeup adds a new
entry, which becomes current, and the running pass's answer (``wake_at`` or ``done``) no
longer matches and so undoes nothing. ``cancel`` deletes the current entry, and an answer
asks the stream whether its entry is still there before it schedules anything, so a
cancelled workflow is never reinstated by the pass that was running when it was
cancelled.

The three keys share one hash tag of their own, so on a cluster the queue is one slot
(on one node) and the checkpoint is another: which is why a Redis deployment is a
``SplitDurable`` (``atomic = False``) rather than one commit per move.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from datetime import datetime, timedelta
from typing import Any

from durable.boundary import check_duration, check_workflow
from durable.interfaces import Delivery
from redis.exceptions import ResponseError

from durable_redis.keys import check_prefix
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
    """A :class:`~durable.interfaces.Scheduler` over a Redis stream and consumer group.

    ``lease`` is how long a taken delivery stays with its taker before ``next_ready`` may
    hand it to another (``reclaim`` takes an explicit idle time instead); the server's
    clock measures it, as the pending list's idle time. ``consumer`` names this taker in
    the group (by default host, process and a random part, so two schedulers in one
    process are two takers). ``prefix`` must match the checkpointer's deployment.
    """

    def __init__(
        self,
        client: Client,
        *,
        prefix: str = "durable",
        lease: timedelta = timedelta(seconds=30),
        consumer: str | None = None,
        group: str = "workers",
    ) -> None:
        self.client = client
        self.prefix = check_prefix(prefix)
        self._lease = check_duration("lease", lease)
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.group = group
        base = f"{self.prefix}:queue:{{{self.prefix}}}"
        self.stream_key = f"{base}:ready"
        self.deadlines_key = f"{base}:sleeping"
        self.current_key = f"{base}:current"
        self._keys = (self.stream_key, self.deadlines_key, self.current_key)
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

    async def prepare(self) -> None:
        """Create the stream and its consumer group (idempotent) and load the scripts."""
        try:
            await self.client.xgroup_create(self.stream_key, self.group, id="0", mkstream=True)
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

    async def make_ready(self, workflow: str) -> None:
        check_workflow(workflow)
        await self._call(
            "make_ready", self._keys, (self.group, workflow), f"make_ready of {workflow!r}"
        )

    def _delivery(self, reply: list[Any]) -> Delivery:
        entry, workflow, deliveries = reply
        return Delivery(as_text(workflow), f"{as_text(entry)}/{int(deliveries)}")

    async def _take(self, idle: timedelta, read_new: bool, doing: str) -> Delivery | None:
        reply = await self._call(
            "take",
            (self.stream_key, self.current_key),
            (self.group, self.consumer, milliseconds(idle), "1" if read_new else "0"),
            doing,
        )
        return None if reply is None else self._delivery(reply)

    async def next_ready(self, within: timedelta) -> Delivery | None:
        """One runnable workflow: a delivery idle past the lease first, then a new entry,
        then a blocking read for up to ``within``."""
        check_duration("within", within)
        taken = await self._take(self._lease, True, "next_ready")
        _still_wanted()
        if taken is not None:
            return taken
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

    async def reclaim(self, idle: timedelta) -> Delivery | None:
        """Take over one delivery whose taker has been silent for ``idle`` (``XAUTOCLAIM``)."""
        check_duration("idle", idle)
        taken = await self._take(idle, False, "reclaim")
        _still_wanted()
        return taken

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
        await self._call("answer", self._keys, args, f"wake_at for {delivery.workflow!r}")

    async def done(self, delivery: Delivery) -> None:
        args = self._answer_args(delivery, "")
        await self._call("answer", self._keys, args, f"done for {delivery.workflow!r}")

    async def wake_due(self, now: datetime) -> tuple[str, ...]:
        if not isinstance(now, datetime) or now.tzinfo is None:
            raise TypeError(f"wake_due needs an aware datetime, got {now!r}")
        moved: list[str] = []
        while True:
            batch = await self._call(
                "wake_due", self._keys, (epoch_ms(now), _WAKE_BATCH), "wake_due"
            )
            moved.extend(as_text(workflow) for workflow in batch)
            if len(batch) < _WAKE_BATCH:
                return tuple(moved)

    async def cancel(self, workflow: str) -> None:
        check_workflow(workflow)
        await self._call("cancel", self._keys, (workflow,), f"cancel of {workflow!r}")

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
            entry = as_text(current)
            if not await self.client.xrange(self.stream_key, entry, entry):
                return None
        except DRIVER_ERRORS as error:
            raise self._translated(error, f"reading the schedule of {workflow!r}") from error
        return EPOCH + timedelta(milliseconds=int(entry.split("-", 1)[0]))
