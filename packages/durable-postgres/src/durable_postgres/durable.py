"""A Postgres checkpointer and scheduler on one pool, each move across them one transaction."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from durable.boundary import check_key, check_message_id, check_workflow
from durable.codec import CheckpointCodec
from durable.interfaces import Admitted, WorkflowStatus
from durable.plugins import Gap
from durable.workflows import Lifecycled
from psycopg_pool import AsyncConnectionPool

from durable_postgres.checkpointer import _INBOX, PostgresCheckpointer
from durable_postgres.connections import Subject
from durable_postgres.scheduler import PostgresScheduler
from durable_postgres.statements import DEFAULT_SCHEMA

__all__ = ["PostgresDurable"]


class PostgresDurable(Lifecycled):
    """:class:`~durable.interfaces.Durable` whose ``arrive``, ``send`` and ``discard`` are each
    one transaction, sent as one pipeline: one round trip and one commit per move. So are the
    lifecycle's three moves that cross both tables (``start``, ``cancel``, ``retry``): the
    status and the queue change together or not at all.

    Atomic only because both stores borrow from one pool, which is why construction refuses
    two that do not (the check is made here rather than documented). On a sharded deployment
    (Citus) sharing a pool is the necessary half and not the sufficient one: the three tables
    must also be distributed by workflow id and co-located, or each move becomes a distributed
    transaction (see ``docs/stores/postgres.md``).
    """

    atomic = True

    def __init__(self, checkpointer: PostgresCheckpointer, scheduler: PostgresScheduler) -> None:
        if checkpointer.pool is not scheduler.pool:
            raise ValueError(
                f"PostgresDurable needs its checkpointer and scheduler on one pool, so that "
                f"each move is one transaction; got {checkpointer!r} on {checkpointer.pool!r} "
                f"and {scheduler!r} on {scheduler.pool!r}. Build both on the same pool, or use "
                "durable.durable.SplitDurable for two stores that cannot share one"
            )
        self._checkpointer = checkpointer
        self._scheduler = scheduler

    @classmethod
    def on(
        cls,
        pool: AsyncConnectionPool[Any],
        *,
        schema: str = DEFAULT_SCHEMA,
        codec: CheckpointCodec[str] | None = None,
        lease: timedelta = timedelta(seconds=30),
        poll: timedelta = timedelta(milliseconds=50),
        prepare: bool = True,
        gap: Gap | None = None,
        group_commit: bool = True,
    ) -> PostgresDurable:
        """Both stores on ``pool``, in ``schema``. The tables must exist (:func:`migrate`).
        ``gap`` is for tests only: every move of both stores awaits it, and each move across
        them awaits it inside its one transaction, between its two halves."""
        return cls(
            PostgresCheckpointer(
                pool,
                schema=schema,
                codec=codec,
                prepare=prepare,
                gap=gap,
                group_commit=group_commit,
            ),
            PostgresScheduler(
                pool, schema=schema, lease=lease, poll=poll, prepare=prepare, gap=gap
            ),
        )

    def __repr__(self) -> str:
        return f"PostgresDurable({self._checkpointer!r}, {self._scheduler!r})"

    @property
    def checkpointer(self) -> PostgresCheckpointer:
        return self._checkpointer

    @property
    def scheduler(self) -> PostgresScheduler:
        return self._scheduler

    @property
    def pool(self) -> AsyncConnectionPool[Any]:
        return self._checkpointer.pool

    async def schema_versions(self) -> tuple[int | None, int]:
        """For ``durable doctor``: the schema's version and the one this release expects."""
        from durable_postgres.migration import SCHEMA_VERSION, schema_version

        return await schema_version(self.pool, schema=self.checkpointer.schema), SCHEMA_VERSION

    async def doctor_findings(self, *, repair: bool, limit: int, stale: timedelta) -> list[Any]:
        """For ``durable doctor``: ``replication``, the standbys of this primary that would
        lose acknowledged commits (fencing tokens among them) if promoted. Nothing to
        repair: the remedy is the server's configuration (``durable_postgres.replication``)."""
        from durable_postgres.replication import replication_finding

        found = await replication_finding(self.pool, self.checkpointer.schema, limit=limit)
        return [] if found is None else [found]

    async def arrive(self, workflow: str, key: str, value: object) -> object:
        check_workflow(workflow)
        check_key(workflow, key)
        cp = self._checkpointer
        encoded = cp._encode(workflow, key, value)
        params = {"workflow": workflow, "key": key, "value": encoded}
        stored, _ = await cp._db.transaction(
            f"arrive of {key!r} on {workflow!r}",
            [(cp._sql.supply, params), (self._scheduler._sql.make_ready, params)],
            repeatable=True,
            subject=Subject(workflow, key, value, encoded),
            move="Durable.arrive",
            split=1,
        )
        assert stored is not None
        return cp._decode(workflow, key, stored[0])

    async def send(self, workflow: str, value: object, *, message_id: str | None = None) -> str:
        check_workflow(workflow)
        check_message_id(workflow, message_id)
        cp = self._checkpointer
        encoded = cp._encode(workflow, _INBOX, value)
        params = {"workflow": workflow, "value": encoded, "message_id": message_id}
        if message_id is not None:
            # One transaction, and repeatable: see PostgresCheckpointer._append_once. A send
            # whose id was already sent still makes the workflow ready, harmlessly.
            return await cp._append_once(
                workflow,
                params,
                [(self._scheduler._sql.make_ready, params)],
                Subject(workflow, _INBOX, value, encoded),
                "Durable.send",
            )
        # Not repeatable, like append: a retry of a send that landed would add a second entry.
        appended, _ = await cp._db.transaction(
            f"send to {workflow!r}",
            [(cp._sql.append, params), (self._scheduler._sql.make_ready, params)],
            repeatable=False,
            subject=Subject(workflow, _INBOX, value, encoded),
            move="Durable.send",
            split=1,
        )
        assert appended is not None
        key: str = appended[0]
        return key

    async def discard(self, workflow: str) -> None:
        check_workflow(workflow)
        cp = self._checkpointer
        await cp._db.transaction(
            f"discard of {workflow!r}",
            [*cp._discarding(workflow), (self._scheduler._sql.cancel, {"workflow": workflow})],
            repeatable=True,
            move="Durable.discard",
            split=3,
        )

    # -- the lifecycle's moves across both tables, each one transaction ---------

    async def _admit_and_queue(
        self, workflow: str, kind: str, input: object, queue: str
    ) -> Admitted:
        """admit and make_ready in one transaction: the queue's statement is conditional on
        the row being ready with exactly this kind and input, so a conflict queues nothing
        and a repeat that finds the workflow still ready queues it (its first queueing cannot
        have been lost here, but the rule is the one every store follows)."""
        cp = self._checkpointer
        params, subject = cp._admitting(workflow, kind, input, queue)
        return await cp._admit(
            params, subject, input, [(cp._life.admit_queue, params)], "Durable.start"
        )

    async def _withdraw_and_cancel(self, workflow: str) -> WorkflowStatus:
        """withdraw and the queue row's removal in one transaction: a cancelled workflow is
        never delivered again, and a delivery already out finds nothing to reinstate."""
        check_workflow(workflow)
        return await self._checkpointer._withdraw(
            workflow, [(self._scheduler._sql.cancel, {"workflow": workflow})], "Durable.cancel"
        )

    async def _readmit_and_queue(self, workflow: str) -> WorkflowStatus:
        """readmit and make_ready as one statement (``readmit_queue``): queued only if the
        retry was allowed."""
        check_workflow(workflow)
        cp = self._checkpointer
        return await cp._readmit(workflow, cp._life.readmit_queue, "Durable.retry")
