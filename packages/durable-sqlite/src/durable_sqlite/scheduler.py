"""When a workflow may run, in an SQLite file: :class:`SqliteScheduler`.

One visibility-scored table, the shape the design calls the one that gets the hard cases
for free. A row is runnable once its ``visible_at`` has passed; taking it pushes the
score out by the lease under a fresh receipt. So a taker that dies needs nobody to
notice (the row becomes visible again on its own), a timer needs no separate structure
(a sleeping workflow is a row scored in the future), ``make_ready`` wins over an answer
for an older delivery because it clears the receipt the answer must match, and
``cancel`` deletes the row, so an answer for a cancelled delivery has nothing to put back.
``reclaim`` and ``wake_due`` therefore have nothing to do here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import sqlite3
from collections.abc import Mapping
from datetime import datetime, timedelta

import aiosqlite
from durable.boundary import check_duration, check_queues, check_workflow
from durable.clock import Clock
from durable.interfaces import Delivery, QueueLimit
from durable.plugins import Gap

from durable_sqlite.connection import (
    check_driver,
    clock_reader,
    create_schema,
    duration_micros,
    from_micros,
    on_thread,
    statements_for,
    thread_gap,
    to_micros,
    transaction,
    within_transaction,
)

__all__ = ["DEFAULT_LEASE", "DEFAULT_POLL", "SqliteScheduler"]

DEFAULT_LEASE = timedelta(seconds=30)
DEFAULT_POLL = timedelta(milliseconds=25)


class SqliteScheduler:
    """A :class:`~durable.interfaces.Scheduler` as one visibility-scored table.

    ``lease`` is how long a taken delivery stays hidden. ``poll`` is how often a waiting
    ``next_ready`` looks at the table again: a ``make_ready`` through this object (or a
    :class:`~durable_sqlite.SqliteDurable` over it) wakes it at once, but one made by
    another connection or process is seen at the next look. ``clock`` is as for
    :class:`~durable_sqlite.SqliteCheckpointer`: SQLite's own when ``None``. ``gap`` is for
    tests only, as for :class:`~durable_sqlite.SqliteCheckpointer`.
    """

    def __init__(
        self,
        connection: aiosqlite.Connection,
        *,
        lease: timedelta = DEFAULT_LEASE,
        clock: Clock | None = None,
        poll: timedelta = DEFAULT_POLL,
        gap: Gap | None = None,
    ) -> None:
        self.connection = check_driver(connection)
        self._gap = thread_gap(gap)
        self._lease = check_duration("lease", lease)
        self._lease_micros = duration_micros(lease)
        self._poll = check_duration("poll", poll).total_seconds()
        self.clock = clock
        self._now = clock_reader(clock)
        self._sql = statements_for(clock is None)
        self._changed = asyncio.Event()

    def __repr__(self) -> str:
        clock = "sqlite" if self.clock is None else repr(self.clock)
        return f"SqliteScheduler(lease={self._lease!r}, clock={clock})"

    @property
    def lease(self) -> timedelta:
        return self._lease

    async def prepare(self) -> None:
        # The table is part of the schema that connect() already created on open.
        await create_schema(self.connection)

    async def make_ready(self, workflow: str) -> None:
        check_workflow(workflow)

        def make_ready(raw: sqlite3.Connection) -> None:
            if self._gap is not None:
                self._gap("Scheduler.make_ready", workflow)
            self._make_ready_in(raw, workflow)

        await transaction(self.connection, make_ready)
        self._changed.set()

    def _make_ready_in(self, raw: sqlite3.Connection, workflow: str) -> None:
        raw.execute(self._sql["make_ready"], {"workflow": workflow, "now": self._now()})

    def _take(self, raw: sqlite3.Connection, queues: str | None = None) -> Delivery | None:
        # Looked at without the write lock first, so an idle poll never queues behind
        # writers on the file.
        if queues is None:
            due = raw.execute(self._sql["due"], {"now": self._now()}).fetchone()[0]
        else:
            due = raw.execute(self._sql["due_in"], {"now": self._now(), "queues": queues})
            due = due.fetchone()[0]
        if not due:
            return None
        return within_transaction(lambda raw: self._take_in(raw, queues), raw)

    def _take_in(self, raw: sqlite3.Connection, queues: str | None = None) -> Delivery | None:
        if self._gap is not None:
            self._gap("Scheduler.next_ready", "")
        receipt = secrets.token_hex(8)
        params = {"now": self._now(), "lease": self._lease_micros, "receipt": receipt}
        if raw.execute(self._sql["limited"]).fetchone()[0]:
            return self._take_limited(raw, queues, params)
        if queues is None:
            row = raw.execute(self._sql["take"], params).fetchone()
        else:
            row = raw.execute(self._sql["take_in"], {**params, "queues": queues}).fetchone()
        return None if row is None else Delivery(row[0], receipt)

    def _take_limited(
        self, raw: sqlite3.Connection, queues: str | None, params: Mapping[str, object]
    ) -> Delivery | None:
        # One transaction (the caller's, under the write lock): choose by the counts, then
        # write the slot and the hand-out the counts will see next.
        row = raw.execute(self._sql["take_limited"], {**params, "queues": queues}).fetchone()
        if row is None:
            return None
        taken = {**params, "workflow": row[0]}
        slot = raw.execute(self._sql["take_slot"], taken).rowcount == 1
        if raw.execute(self._sql["count_handout"], taken).rowcount:
            raw.execute(self._sql["prune_handouts"], taken)
        return Delivery(row[0], str(params["receipt"]), slot)

    async def set_limit(self, queue: str, limit: QueueLimit | None) -> None:
        """Keep ``limit`` for ``queue`` in the file, for every handle and process on it."""
        (queue,) = check_queues([queue])
        if limit is not None and not isinstance(limit, QueueLimit):
            raise TypeError(f"queue {queue!r}: a limit is a QueueLimit or None, got {limit!r}")
        params: dict[str, object]
        if limit is None or limit.unlimited:
            sql, params = self._sql["clear_limit"], {"queue": queue}
        else:
            sql = self._sql["set_limit"]
            params = {"queue": queue, "concurrent": limit.concurrent, "rate": limit.rate}
        await transaction(self.connection, lambda raw: raw.execute(sql, params))
        self._changed.set()

    async def limits(self) -> dict[str, QueueLimit]:
        sql = self._sql["limits"]
        rows = await on_thread(self.connection, lambda raw: raw.execute(sql).fetchall())
        return {row[0]: QueueLimit(row[1], row[2]) for row in rows}

    async def held(self, queue: str) -> int:
        (queue,) = check_queues([queue])
        params = {"queue": queue, "now": self._now()}
        sql = self._sql["held"]
        row = await on_thread(self.connection, lambda raw: raw.execute(sql, params).fetchone())
        return int(row[0])

    async def hold(self, delivery: Delivery, liveness: timedelta) -> bool:
        check_duration("liveness", liveness, workflow=delivery.workflow)
        params = {
            "workflow": delivery.workflow,
            "receipt": delivery.receipt,
            "liveness": duration_micros(liveness),
            "now": self._now(),
        }
        sql = self._sql["hold"]
        return bool(
            await transaction(self.connection, lambda raw: raw.execute(sql, params).rowcount)
        )

    async def prioritize(self, workflow: str, priority: int) -> None:
        check_workflow(workflow)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise TypeError(f"workflow {workflow!r}: a priority is an int, got {priority!r}")
        params = {"workflow": workflow, "priority": priority}
        sql = self._sql["prioritize" if priority else "unprioritize"]
        await transaction(self.connection, lambda raw: raw.execute(sql, params))

    async def next_ready(self, within: timedelta) -> Delivery | None:
        return await self._next_ready(None, within)

    async def next_ready_in(self, queues: frozenset[str], within: timedelta) -> Delivery | None:
        served = json.dumps(sorted(check_queues(queues)))
        return await self._next_ready(served, within)

    async def _next_ready(self, queues: str | None, within: timedelta) -> Delivery | None:
        check_duration("within", within)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + within.total_seconds()
        while True:
            self._changed.clear()
            delivery = await on_thread(self.connection, lambda raw: self._take(raw, queues))
            if delivery is not None:
                return delivery
            remaining = give_up - loop.time()
            if remaining <= 0:
                return None
            # asyncio.timeout rather than wait_for: on Python 3.11, wait_for swallows a
            # cancellation that lands in the same turn as the event, and a worker being
            # stopped would carry on taking deliveries.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(remaining, self._poll)):
                    await self._changed.wait()

    async def reclaim(self, idle: timedelta) -> Delivery | None:
        # A delivery whose taker stopped answering becomes visible again by itself when its
        # lease runs out, and next_ready hands it out like any other.
        check_duration("idle", idle)
        if self._gap is not None:
            await self._gap.gap("Scheduler.reclaim", "")
        return None

    async def wake_at(self, delivery: Delivery, when: datetime) -> None:
        if not isinstance(when, datetime) or when.tzinfo is None:
            raise TypeError(
                f"workflow {delivery.workflow!r}: wake_at needs an aware datetime, got {when!r}"
            )
        params = {
            "workflow": delivery.workflow,
            "receipt": delivery.receipt,
            "when": to_micros(when),
        }
        sql = self._sql["wake_at"]

        def wake_at(raw: sqlite3.Connection) -> None:
            if self._gap is not None:
                self._gap("Scheduler.wake_at", delivery.workflow)
            raw.execute(sql, params)
            if delivery.slot:
                raw.execute(self._sql["return_slot"], params)

        await transaction(self.connection, wake_at)
        self._changed.set()

    async def wake_due(self, now: datetime) -> tuple[str, ...]:
        # A deadline is a score; it comes due without being moved.
        return ()

    async def done(self, delivery: Delivery) -> None:
        params = {"workflow": delivery.workflow, "receipt": delivery.receipt}
        sql = self._sql["done"]

        def done(raw: sqlite3.Connection) -> None:
            if self._gap is not None:
                self._gap("Scheduler.done", delivery.workflow)
            raw.execute(sql, params)
            if delivery.slot:
                raw.execute(self._sql["return_slot"], params)

        await transaction(self.connection, done)
        if delivery.slot:
            self._changed.set()  # a slot came back: a take waiting on a full queue may go

    async def cancel(self, workflow: str) -> None:
        check_workflow(workflow)

        def cancel(raw: sqlite3.Connection) -> None:
            if self._gap is not None:
                self._gap("Scheduler.cancel", workflow)
            self._cancel_in(raw, workflow)

        await transaction(self.connection, cancel)

    def _cancel_in(self, raw: sqlite3.Connection, workflow: str) -> None:
        raw.execute(self._sql["cancel"], {"workflow": workflow})
        raw.execute(self._sql["cancel_slot"], {"workflow": workflow})

    async def scheduled(self, workflow: str) -> datetime | None:
        """When ``workflow`` is next runnable (or its delivery's lease ends), or ``None``."""
        check_workflow(workflow)
        sql = self._sql["scheduled"]
        row = await on_thread(
            self.connection, lambda raw: raw.execute(sql, {"workflow": workflow}).fetchone()
        )
        return None if row is None else from_micros(row[0])
