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

from durable.boundary import check_duration, check_queues, check_workflow
from durable.interfaces import Delivery, QueueLimit
from durable.plugins import Gap
from psycopg import AsyncConnection
from psycopg.rows import TupleRow
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
    except the moments a caller names (``wake_at``), which are compared with it. ``gap`` is
    for tests only, as for :class:`~durable_postgres.PostgresCheckpointer`.
    """

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        *,
        schema: str = DEFAULT_SCHEMA,
        lease: timedelta = timedelta(seconds=30),
        poll: timedelta = timedelta(milliseconds=50),
        prepare: bool = True,
        gap: Gap | None = None,
    ) -> None:
        self.schema = check_schema_name(schema)
        self.pool = pool
        self._lease = check_duration("lease", lease)
        self._poll = check_duration("poll", poll).total_seconds()
        self._sql = statements(schema)
        self._gap = gap
        self._db = Connections(pool, schema, prepare=prepare, gap=gap)

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
            move="Scheduler.make_ready",
            lock="lock_queue",
        )

    async def _take(self, queues: list[str] | None = None) -> Delivery | None:
        # Repeatable: a take whose answer was lost leaves its row hidden for one lease, after
        # which it is delivered again. Nothing made ready is lost.
        params: dict[str, Any] = {"lease": self._lease}
        if queues is not None:
            params["queues"] = queues
        row = await self._db.one(
            "taking a ready workflow",
            self._sql.take if queues is None else self._sql.take_in,
            params,
            repeatable=True,
            move="Scheduler.next_ready",
        )
        if row is not None and row[0] is not None:
            return Delivery(row[0], str(row[1]))
        if row is None or not row[2]:
            return None
        return await self._take_limited(queues)

    async def _take_limited(self, queues: list[str] | None) -> Delivery | None:
        """The take when a limit or a priority is kept: choose (row-locked), then, for a
        limited queue, count again under the queue's advisory lock and take the slot and the
        hand-out in the same transaction. A taker that finds the queue full after all takes
        nothing this time (and looks again at its next poll)."""
        sql = self._sql

        async def work(conn: AsyncConnection[TupleRow]) -> Delivery | None:
            async with conn.transaction():
                found = await (
                    await conn.execute(sql.take_candidate, {"queues": queues})
                ).fetchone()
                if found is None:
                    return None
                workflow, queue, concurrent, rate = found
                params = {"workflow": workflow, "queue": queue, "lease": self._lease}
                if concurrent is not None or rate is not None:
                    await conn.execute(sql.lock_limit, params)
                    room = await (await conn.execute(sql.limit_room, params)).fetchone()
                    if room is not None and not room[0]:
                        return None
                taken = await (await conn.execute(sql.take_row, params)).fetchone()
                assert taken is not None  # the row is locked by this transaction
                receipt = taken[0]
                if concurrent is not None:
                    await conn.execute(sql.take_slot, {**params, "receipt": receipt})
                if rate is not None:
                    await conn.execute(sql.count_handout, params)
                    await conn.execute(sql.prune_handouts, params)
                return Delivery(workflow, str(receipt), concurrent is not None)

        # Repeatable as the plain take is: a lost answer leaves the row hidden for one lease
        # and its slot live for as long, after which both come back.
        return await self._db.run("taking a ready workflow under limits", work, repeatable=True)

    async def set_limit(self, queue: str, limit: QueueLimit | None) -> None:
        """Keep ``limit`` for ``queue`` in the schema, for every pool and process on it."""
        (queue,) = check_queues([queue])
        if limit is not None and not isinstance(limit, QueueLimit):
            raise TypeError(f"queue {queue!r}: a limit is a QueueLimit or None, got {limit!r}")
        if limit is None or limit.unlimited:
            await self._db.one(
                f"removing the limit of queue {queue!r}",
                self._sql.clear_limit,
                {"queue": queue},
                repeatable=True,
            )
            return
        await self._db.one(
            f"setting the limit of queue {queue!r}",
            self._sql.set_limit,
            {"queue": queue, "concurrent": limit.concurrent, "rate": limit.rate},
            repeatable=True,
        )

    async def limits(self) -> dict[str, QueueLimit]:
        rows = await self._db.rows("reading the queue limits", self._sql.limits, {})
        return {row[0]: QueueLimit(row[1], row[2]) for row in rows}

    async def held(self, queue: str) -> int:
        (queue,) = check_queues([queue])
        rows = await self._db.rows(
            f"counting the slots of queue {queue!r}", self._sql.held, {"queue": queue}
        )
        return int(rows[0][0])

    async def hold(self, delivery: Delivery, liveness: timedelta) -> bool:
        check_duration("liveness", liveness, workflow=delivery.workflow)
        receipt = _receipt(delivery)
        if receipt is None:
            return False
        row = await self._db.one(
            f"holding the slot of {delivery.workflow!r}",
            self._sql.hold,
            {"workflow": delivery.workflow, "receipt": receipt, "liveness": liveness},
            repeatable=True,
        )
        return row is not None

    async def prioritize(self, workflow: str, priority: int) -> None:
        check_workflow(workflow)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise TypeError(f"workflow {workflow!r}: a priority is an int, got {priority!r}")
        await self._db.one(
            f"keeping the priority of {workflow!r}",
            self._sql.prioritize if priority else self._sql.unprioritize,
            {"workflow": workflow, "priority": priority},
            repeatable=True,
        )

    async def next_ready(self, within: timedelta) -> Delivery | None:
        return await self._next_ready(None, within)

    async def next_ready_in(self, queues: frozenset[str], within: timedelta) -> Delivery | None:
        return await self._next_ready(sorted(check_queues(queues)), within)

    async def _next_ready(self, queues: list[str] | None, within: timedelta) -> Delivery | None:
        check_duration("within", within)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + within.total_seconds()
        pause = _FIRST_PAUSE
        while True:
            delivery = await self._take(queues)
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
        if self._gap is not None:
            await self._gap("Scheduler.reclaim", "")
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
            move="Scheduler.wake_at",
            lock="lock_queue",
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
            move="Scheduler.done",
            lock="lock_queue",
        )

    async def cancel(self, workflow: str) -> None:
        check_workflow(workflow)
        await self._db.one(
            f"cancel of {workflow!r}",
            self._sql.cancel,
            {"workflow": workflow},
            repeatable=True,
            move="Scheduler.cancel",
            lock="lock_queue",
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
