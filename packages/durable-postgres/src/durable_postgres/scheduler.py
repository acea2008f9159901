"""When a workflow may run, in Postgres: one visibility-scored row per workflow.

The queue is a table rather than LISTEN/NOTIFY or a second system, because a row is what
``PostgresDurable`` can write in the same transaction as the record a wakeup is for. A row is
runnable once its ``visible_at`` has passed; taking it pushes ``visible_at`` out by the lease
and stamps a fresh receipt in the same statement, with ``FOR UPDATE SKIP LOCKED`` so that many
takers share the table without queueing behind each other. A taker that dies lets the row
become visible again when its lease runs out: the score is the timer, which is why ``reclaim``
and ``wake_due`` have nothing to do here. The receipt is what lets ``wake_at`` and ``done``
answer for their own delivery and nothing newer: ``make_ready`` clears it and ``cancel``
deletes the row.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from durable.boundary import check_duration, check_workflow
from durable.interfaces import Delivery
from psycopg_pool import AsyncConnectionPool

from durable_postgres.connections import Connections
from durable_postgres.migration import migrate
from durable_postgres.statements import DEFAULT_SCHEMA, check_schema_name, statements

__all__ = ["PostgresScheduler"]

_FIRST_PAUSE = 0.002  # seconds: the first wait of an empty next_ready, doubled up to poll


class PostgresScheduler:
    """A :class:`~durable.interfaces.Scheduler` over ``workflow_queue``.

    ``lease`` is how long a taken delivery stays hidden. ``poll`` bounds how long an empty
    ``next_ready`` sleeps between looks (it starts at a few milliseconds and doubles), which is
    the most a wakeup can wait for an idle worker to notice it. Times are the server's clock,
    except the moments a caller names (``wake_at``), which are compared with it.
    """

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        *,
        schema: str = DEFAULT_SCHEMA,
        lease: timedelta = timedelta(seconds=30),
        poll: timedelta = timedelta(milliseconds=50),
        prepare: bool = True,
    ) -> None:
        self.schema = check_schema_name(schema)
        self.pool = pool
        self._lease = check_duration("lease", lease)
        self._poll = check_duration("poll", poll).total_seconds()
        self._sql = statements(schema)
        self._db = Connections(pool, schema, prepare=prepare)

    def __repr__(self) -> str:
        return f"PostgresScheduler(schema={self.schema!r}, lease={self._lease!r})"

    @property
    def lease(self) -> timedelta:
        return self._lease

    async def prepare(self) -> None:
        """Create the durable tables if they are missing (see :func:`migrate`)."""
        await migrate(self.pool, schema=self.schema)

    async def make_ready(self, workflow: str) -> None:
        check_workflow(workflow)
        await self._db.one(
            f"make_ready of {workflow!r}",
            self._sql.make_ready,
            {"workflow": workflow},
            repeatable=True,
        )

    async def _take(self) -> Delivery | None:
        # Repeatable: a take whose answer was lost leaves its row hidden for one lease, after
        # which it is delivered again. Nothing made ready is lost.
        row = await self._db.one(
            "taking a ready workflow", self._sql.take, {"lease": self._lease}, repeatable=True
        )
        return Delivery(row[0], str(row[1])) if row is not None else None

    async def next_ready(self, within: timedelta) -> Delivery | None:
        check_duration("within", within)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + within.total_seconds()
        pause = _FIRST_PAUSE
        while True:
            delivery = await self._take()
            if delivery is not None:
                return delivery
            remaining = give_up - loop.time()
            if remaining <= 0:
                return None
            await asyncio.sleep(min(pause, remaining))
            pause = min(pause * 2, self._poll)

    async def reclaim(self, idle: timedelta) -> Delivery | None:
        """Nothing to do: a delivery whose taker went quiet becomes visible again when its
        lease runs out, and ``next_ready`` takes it like any other."""
        check_duration("idle", idle)
        return None

    async def wake_at(self, delivery: Delivery, when: datetime) -> None:
        if not isinstance(when, datetime) or when.tzinfo is None:
            raise TypeError(
                f"workflow {delivery.workflow!r}: wake_at needs an aware datetime, got {when!r}"
            )
        receipt = _receipt(delivery)
        if receipt is None:
            return
        await self._db.one(
            f"wake_at of {delivery.workflow!r}",
            self._sql.wake_at,
            {"workflow": delivery.workflow, "receipt": receipt, "when": when},
            repeatable=True,
        )

    async def wake_due(self, now: datetime) -> tuple[str, ...]:
        """Nothing to move: a scheduled row becomes runnable by its ``visible_at`` alone."""
        return ()

    async def done(self, delivery: Delivery) -> None:
        receipt = _receipt(delivery)
        if receipt is None:
            return
        await self._db.one(
            f"done of {delivery.workflow!r}",
            self._sql.done,
            {"workflow": delivery.workflow, "receipt": receipt},
            repeatable=True,
        )

    async def cancel(self, workflow: str) -> None:
        check_workflow(workflow)
        await self._db.one(
            f"cancel of {workflow!r}", self._sql.cancel, {"workflow": workflow}, repeatable=True
        )

    async def scheduled(self, workflow: str) -> datetime | None:
        """When ``workflow`` is next runnable (or hidden until, while a delivery is out), or
        ``None`` if it is not queued."""
        check_workflow(workflow)
        rows = await self._db.rows(
            f"reading the queue of {workflow!r}", self._sql.scheduled, {"workflow": workflow}
        )
        return rows[0][0].astimezone(UTC) if rows else None


def _receipt(delivery: Delivery) -> int | None:
    """The receipt as the queue stores it; one this store never issued matches nothing."""
    try:
        return int(delivery.receipt)
    except (TypeError, ValueError):
        return None
