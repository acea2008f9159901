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
import secrets
import sqlite3
from datetime import datetime, timedelta

import aiosqlite
from durable.boundary import check_duration, check_workflow
from durable.clock import Clock
from durable.interfaces import Delivery

from durable_sqlite.connection import (
    check_driver,
    clock_reader,
    create_schema,
    duration_micros,
    from_micros,
    on_thread,
    statements_for,
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
    :class:`~durable_sqlite.SqliteCheckpointer`: SQLite's own when ``None``.
    """

    def __init__(
        self,
        connection: aiosqlite.Connection,
        *,
        lease: timedelta = DEFAULT_LEASE,
        clock: Clock | None = None,
        poll: timedelta = DEFAULT_POLL,
    ) -> None:
        self.connection = check_driver(connection)
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
        await transaction(self.connection, lambda raw: self._make_ready_in(raw, workflow))
        self._changed.set()

    def _make_ready_in(self, raw: sqlite3.Connection, workflow: str) -> None:
        raw.execute(self._sql["make_ready"], {"workflow": workflow, "now": self._now()})

    def _take(self, raw: sqlite3.Connection) -> Delivery | None:
        # Looked at without the write lock first, so an idle poll never queues behind
        # writers on the file.
        if not raw.execute(self._sql["due"], {"now": self._now()}).fetchone()[0]:
            return None
        return within_transaction(self._take_in, raw)

    def _take_in(self, raw: sqlite3.Connection) -> Delivery | None:
        receipt = secrets.token_hex(8)
        params = {"now": self._now(), "lease": self._lease_micros, "receipt": receipt}
        row = raw.execute(self._sql["take"], params).fetchone()
        return None if row is None else Delivery(row[0], receipt)

    async def next_ready(self, within: timedelta) -> Delivery | None:
        check_duration("within", within)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + within.total_seconds()
        while True:
            self._changed.clear()
            delivery = await on_thread(self.connection, self._take)
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
        await transaction(self.connection, lambda raw: raw.execute(sql, params))
        self._changed.set()

    async def wake_due(self, now: datetime) -> tuple[str, ...]:
        # A deadline is a score; it comes due without being moved.
        return ()

    async def done(self, delivery: Delivery) -> None:
        params = {"workflow": delivery.workflow, "receipt": delivery.receipt}
        sql = self._sql["done"]
        await transaction(self.connection, lambda raw: raw.execute(sql, params))

    async def cancel(self, workflow: str) -> None:
        check_workflow(workflow)
        await transaction(self.connection, lambda raw: self._cancel_in(raw, workflow))

    def _cancel_in(self, raw: sqlite3.Connection, workflow: str) -> None:
        raw.execute(self._sql["cancel"], {"workflow": workflow})

    async def scheduled(self, workflow: str) -> datetime | None:
        """When ``workflow`` is next runnable (or its delivery's lease ends), or ``None``."""
        check_workflow(workflow)
        sql = self._sql["scheduled"]
        row = await on_thread(
            self.connection, lambda raw: raw.execute(sql, {"workflow": workflow}).fetchone()
        )
        return None if row is None else from_micros(row[0])
