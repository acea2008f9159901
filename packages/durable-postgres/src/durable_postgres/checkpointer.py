"""What a workflow has done, in Postgres: every guarantee one statement or one transaction.

The statements, and the argument for each, are in ``statements.sql``; this module decides
what to send and what the answer means. Postgres wins the ``transact`` row for effects that
live in the same database, which is where applications usually keep their data: the effect
is handed the cursor of the open transaction that will also write the record, so a step's
own ``UPDATE`` and its checkpoint commit together, and that step is exactly-once.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from durable.boundary import (
    check_duration,
    check_ended,
    check_key,
    check_kind,
    check_message_id,
    check_moment,
    check_operation,
    check_settlement,
    check_workflow,
)
from durable.codec import CheckpointCodec, JsonCodec, encode_value
from durable.interfaces import (
    Admitted,
    Began,
    Claimed,
    Entry,
    Failure,
    Fenced,
    KeyReused,
    NotRetryable,
    Page,
    Pass,
    Recorded,
    Settlement,
    StartConflict,
    Status,
    StoreError,
    UnknownWorkflow,
    WorkflowStatus,
)
from durable.plugins import Gap
from psycopg import AsyncConnection, AsyncCursor
from psycopg.pq import TransactionStatus
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from durable_postgres.connections import Connections, EffectFailed, Params, Subject
from durable_postgres.errors import text_fault
from durable_postgres.statements import (
    DEFAULT_SCHEMA,
    check_schema_name,
    statements,
    status_statements,
)

__all__ = ["PostgresCheckpointer", "PostgresEffect"]

PostgresEffect = Callable[[AsyncCursor[Any]], Awaitable[object]]
"""What ``PostgresCheckpointer.transact`` commits: an async function handed a cursor inside the
open transaction that will also write the record. Its return value is recorded. If it raises,
the transaction rolls back and neither its writes nor the record remain.

It must leave the transaction as it found it: no ``COMMIT`` or ``ROLLBACK`` of its own (use
``async with cursor.connection.transaction():`` for a savepoint it can roll back to), and no
database error swallowed without rolling back to such a savepoint."""

_INBOX = "<inbox>"
_INPUT = "<input>"
_VALUE = "<value>"
_FIRST_PAGE = "infinity"


class PostgresCheckpointer:
    """A :class:`~durable.interfaces.Checkpointer` over the tables :func:`migrate` creates,
    and a :class:`~durable.interfaces.Lifecycle` (each workflow's kind, input, status,
    attempts and outcome in ``workflow_status``, see ``statuses.sql``).

    ``pool`` may be the application's own pool: sharing it is what lets a ``transact`` effect
    touch the application's tables. ``schema`` names where the durable tables live, so one
    database can hold several deployments. ``codec`` must encode to ``str``, which is stored
    exactly as encoded. ``prepare=False`` turns off prepared statements, for a pooler that
    cannot keep them (PgBouncer older than 1.21 in transaction mode). ``gap`` is for tests
    only (a :data:`durable.plugins.Gap`, from the testing hook): each move then awaits it
    inside its transaction, after the lock its statement takes first and before its writes.
    ``group_commit`` (on by default) sends the records and renewals that arrive while one is
    on its way together, in one transaction and one commit (see ``Connections.grouped``).
    """

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        *,
        schema: str = DEFAULT_SCHEMA,
        codec: CheckpointCodec[str] | None = None,
        prepare: bool = True,
        gap: Gap | None = None,
        group_commit: bool = True,
    ) -> None:
        self.schema = check_schema_name(schema)
        self.pool = pool
        self.codec: CheckpointCodec[str] = codec if codec is not None else JsonCodec()
        self._sql = statements(schema)
        self._life = status_statements(schema)
        self._gap = gap
        self._db = Connections(pool, schema, prepare=prepare, gap=gap, group_commit=group_commit)

    def __repr__(self) -> str:
        return f"PostgresCheckpointer(schema={self.schema!r}, codec={self.codec!r})"

    # -- encodings -------------------------------------------------------------

    def _encode(self, workflow: str, key: str, value: object) -> str:
        encoded = encode_value(self.codec, value, workflow=workflow, key=key)
        if not isinstance(encoded, str):
            raise TypeError(
                f"workflow {workflow!r}, key {key!r}: PostgresCheckpointer stores text, but "
                f"the codec {self.codec!r} encoded {type(encoded).__name__}; use a codec that "
                "encodes to str"
            )
        return encoded

    def _decode(self, workflow: str, key: str, stored: str) -> object:
        try:
            return self.codec.decode(stored)
        except Exception as error:
            raise StoreError(
                f"workflow {workflow!r}, key {key!r}: the stored value does not decode with "
                f"{self.codec!r} ({error}); was it written with another codec?"
            ) from error

    def _recorded(self, workflow: str, key: str, stored: str, encoded: str) -> Recorded:
        # The store holds both encodings, so it answers who won: equal encodings are a tie,
        # and a tie counts as first.
        return Recorded(self._decode(workflow, key, stored), stored == encoded)

    # -- reads -----------------------------------------------------------------

    async def load(self, workflow: str) -> dict[str, object]:
        check_workflow(workflow)
        rows = await self._db.rows(f"load of {workflow!r}", self._sql.load, {"workflow": workflow})
        return {key: self._decode(workflow, key, value) for key, value in rows}

    async def history(self, workflow: str) -> list[Entry]:
        check_workflow(workflow)
        rows = await self._db.history(workflow)
        return [
            Entry(key, self._decode(workflow, key, value), at.astimezone(UTC), operation)
            for key, value, at, operation in rows
        ]

    async def workflows(self, limit: int | None = None) -> list[str]:
        """Every workflow id that holds records, sorted, at most ``limit`` of them."""
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise ValueError(f"limit must be a positive int or None, got {limit!r}")
        rows = await self._db.rows("listing workflows", self._sql.workflows, {"limit": limit})
        return [workflow for (workflow,) in rows]

    async def claimed(self, workflow: str) -> Claimed | None:
        """The live claim on ``workflow``, or ``None`` when no pass holds it (for operators)."""
        check_workflow(workflow)
        rows = await self._db.rows(
            f"reading the claim of {workflow!r}", self._sql.claimed, {"workflow": workflow}
        )
        if not rows:
            return None
        token, live_until, budget_until = rows[0]
        return Claimed(token, live_until.astimezone(UTC), budget_until.astimezone(UTC))

    # -- the claim ---------------------------------------------------------------

    async def claim(self, workflow: str, *, liveness: timedelta, budget: timedelta) -> Pass | None:
        check_workflow(workflow)
        check_duration("liveness", liveness, workflow=workflow)
        check_duration("budget", budget, workflow=workflow)
        # Repeatable: a claim whose answer was lost either took the workflow (and the retry
        # finds it held, so the claim lapses with its liveness) or did not (and the retry
        # takes it). Never two live passes.
        # Grouped: passes that start together claim in one commit.
        row = await self._db.grouped(
            f"claim of {workflow!r}",
            self._sql.claim,
            {"workflow": workflow, "liveness": liveness, "budget": budget},
            move="Checkpointer.claim",
            lock="lock_claim",
        )
        return Pass(workflow, row[0]) if row is not None else None

    async def renew(self, holder: Pass) -> Pass:
        row = await self._db.grouped(
            f"renewal of {holder}",
            self._sql.renew,
            _holding(holder),
            move="Checkpointer.renew",
            lock="lock_claim",
        )
        if row is None:
            raise await self._refusal(holder, "renew")
        return holder

    async def release(self, holder: Pass) -> None:
        # Grouped: passes that end together let go in one commit, after their last records.
        await self._db.grouped(
            f"release of {holder}",
            self._sql.release,
            _holding(holder),
            move="Checkpointer.release",
            lock="lock_claim",
        )

    async def _refusal(self, holder: Pass, doing: str) -> Fenced:
        """Word the refusal of a guarded statement that returned no row (the statement has
        already decided; this only reads why)."""
        row = await self._db.one(
            f"reading the fence of {holder.workflow!r}",
            self._sql.fence,
            {"workflow": holder.workflow},
            repeatable=True,
        )
        return _fenced(holder, doing, row)

    # -- writes ------------------------------------------------------------------

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        return await self._record(holder, key, value, None)

    async def record_as(self, holder: Pass, key: str, value: object, operation: str) -> Recorded:
        """``record``, keeping ``operation`` in the row's ``operation`` column. The statement
        that finds the key taken hands back the operation there with the value, so the
        refusal (``KeyReused``) is decided by the same write that decided the winner."""
        check_operation(holder.workflow, key, operation)
        return await self._record(holder, key, value, operation)

    async def _record(
        self, holder: Pass, key: str, value: object, operation: str | None
    ) -> Recorded:
        workflow = holder.workflow
        check_key(workflow, key)
        encoded = self._encode(workflow, key, value)
        # Repeatable: first-writer-wins, so a retry of a write that did land finds its own
        # encoding stored and answers first=True, as the lost answer would have.
        row = await self._db.grouped(
            f"record of {key!r} on {workflow!r}",
            self._sql.record,
            {
                "workflow": workflow,
                "token": holder.token,
                "key": key,
                "value": encoded,
                "operation": operation,
            },
            subject=Subject(workflow, key, value, encoded),
            move="Checkpointer.record",
            lock="share_claim",
        )
        if row is None:
            raise await self._refusal(holder, f"record of {key!r}")
        kept = row[1]
        if operation is not None and kept is not None and kept != operation:
            raise KeyReused(workflow, key, kept, operation)
        return self._recorded(workflow, key, row[0], encoded)

    async def transact(self, holder: Pass, key: str, effect: PostgresEffect) -> Recorded:
        """Run ``effect`` with a cursor inside one transaction that also records its result.

        Inside one READ COMMITTED transaction: one statement reads the token and the key (the
        effect runs only if this pass still holds the workflow and the key is empty), then the
        effect, then one statement records the result under the same fence as
        :meth:`record`. If that last one finds the pass fenced or the key supplied meanwhile,
        the transaction is rolled back, so the effect's writes never outlive a record that is
        not theirs. The first read takes no lock, so an effect that stalls never blocks a
        newer pass's claim.

        Not retried after a lost connection: the effect is the caller's code, and the next
        call (which finds the record if the commit landed) is the caller's to make.
        """
        workflow = holder.workflow
        check_key(workflow, key)
        if not callable(effect):
            raise TypeError(
                f"workflow {workflow!r}, key {key!r}: PostgresCheckpointer.transact takes an "
                f"async function of a cursor, got {effect!r}"
            )
        doing = f"transact of {key!r} on {workflow!r}"
        guard = {"workflow": workflow, "token": holder.token, "key": key}
        prepare = self._db.prepare

        async def fetch(conn: AsyncConnection[TupleRow], query: bytes, params: Params) -> Any:
            cursor = await conn.execute(query, params, prepare=prepare)
            return await cursor.fetchone()

        async def refusal(conn: AsyncConnection[TupleRow]) -> Fenced:
            # On this connection: borrowing a second one while holding this could wait on
            # a pool with nothing left to lend.
            row = await fetch(conn, self._sql.fence, {"workflow": workflow})
            return _fenced(holder, f"transact of {key!r}", row)

        async def work(conn: AsyncConnection[TupleRow]) -> Recorded:
            try:
                async with conn.transaction():
                    return await attempt(conn)
            except _NotTheRecord as refused:
                return refused.recorded

        async def attempt(conn: AsyncConnection[TupleRow]) -> Recorded:
            token, stored, kept = await fetch(conn, self._sql.transact_check, guard)
            if token != holder.token:
                raise await refusal(conn)
            if kept is not None and kept != "transact":
                raise KeyReused(workflow, key, kept, "transact")
            if stored is not None:
                return Recorded(self._decode(workflow, key, stored), False)
            if self._gap is not None:
                await self._gap("Checkpointer.transact", workflow)
            result = await _perform(effect, conn, workflow, key)
            encoded = self._encode(workflow, key, result)
            try:
                row = await fetch(conn, self._sql.transact_record, {**guard, "value": encoded})
            except (UnicodeEncodeError, psycopg.DataError) as error:
                raise Subject(workflow, key, result, encoded).refusal(error) from error
            if row is None:
                # Fenced, or supplied from outside while the effect ran: either way the
                # effect's result is not the record, so nothing of this transaction may
                # commit. Read which it was first, in this same transaction.
                token, stored, _ = await fetch(conn, self._sql.transact_check, guard)
                if token != holder.token:
                    raise await refusal(conn)
                raise _NotTheRecord(Recorded(self._decode(workflow, key, stored), False))
            return Recorded(self._decode(workflow, key, encoded), True)

        return await self._db.run(doing, work, repeatable=False)

    async def supply(self, workflow: str, key: str, value: object) -> object:
        check_workflow(workflow)
        check_key(workflow, key)
        encoded = self._encode(workflow, key, value)
        row = await self._db.one(
            f"supply of {key!r} on {workflow!r}",
            self._sql.supply,
            {"workflow": workflow, "key": key, "value": encoded},
            repeatable=True,
            subject=Subject(workflow, key, value, encoded),
            move="Checkpointer.supply",
        )
        assert row is not None
        return self._decode(workflow, key, row[0])

    async def append(self, workflow: str, value: object, *, message_id: str | None = None) -> str:
        check_workflow(workflow)
        check_message_id(workflow, message_id)
        encoded = self._encode(workflow, _INBOX, value)
        params = {"workflow": workflow, "value": encoded, "message_id": message_id}
        subject = Subject(workflow, _INBOX, value, encoded)
        if message_id is not None:
            return await self._append_once(workflow, params, [], subject, "Checkpointer.append")
        # Not repeatable: a retry of an append that did land would add a second entry.
        row = await self._db.one(
            f"append to {workflow!r}",
            self._sql.append,
            params,
            repeatable=False,
            subject=subject,
            move="Checkpointer.append",
        )
        assert row is not None
        key: str = row[0]
        return key

    async def _append_once(
        self,
        workflow: str,
        params: Params,
        after: Sequence[tuple[bytes, Params]],
        subject: Subject,
        move: str,
    ) -> str:
        """An append with a message id, and the statements of ``after`` (a ``make_ready``),
        as one transaction: ``append_once`` then ``sent`` for the key, whoever wrote it.

        Repeatable, unlike an append without an id: a retry after a lost connection finds
        the marker its first attempt committed and answers with that entry's key. ``sent``
        finds no marker only when a discard removed it between the two statements; the
        transaction is then run again, and appends afresh to the discarded workflow, as an
        append arriving just after that discard would have.
        """
        once = self._sql.append_once if "at" not in params else self._sql.append_once_at
        steps: list[tuple[bytes, Params]] = [
            (once, params),
            (self._sql.sent, params),
            *after,
        ]
        while True:
            rows = await self._db.transaction(
                f"append to {workflow!r} with message id {params['message_id']!r}",
                steps,
                repeatable=True,
                subject=subject,
                move=move,
                # Checkpointer.append's gap comes first; Durable.send's between the halves.
                split=0 if not after else 2,
            )
            if rows[1] is not None:
                key: str = rows[1][0]
                return key

    # -- writes with a given time (durable.interfaces.Dated, for durable import) -------

    async def supply_at(self, workflow: str, key: str, value: object, at: datetime) -> object:
        check_workflow(workflow)
        check_key(workflow, key)
        check_moment("at", at, workflow=workflow)
        encoded = self._encode(workflow, key, value)
        row = await self._db.one(
            f"supply of {key!r} on {workflow!r} at {at.isoformat()}",
            self._sql.supply_at,
            {"workflow": workflow, "key": key, "value": encoded, "at": at},
            repeatable=True,
            subject=Subject(workflow, key, value, encoded),
        )
        assert row is not None
        return self._decode(workflow, key, row[0])

    async def append_at(
        self, workflow: str, value: object, at: datetime, *, message_id: str | None = None
    ) -> str:
        check_workflow(workflow)
        check_message_id(workflow, message_id)
        check_moment("at", at, workflow=workflow)
        encoded = self._encode(workflow, _INBOX, value)
        params = {"workflow": workflow, "value": encoded, "message_id": message_id, "at": at}
        subject = Subject(workflow, _INBOX, value, encoded)
        if message_id is not None:
            return await self._append_once(workflow, params, [], subject, "Checkpointer.append")
        row = await self._db.one(
            f"append to {workflow!r} at {at.isoformat()}",
            self._sql.append_at,
            params,
            repeatable=False,
            subject=subject,
        )
        assert row is not None
        key: str = row[0]
        return key

    async def backdate(
        self, workflow: str, *, started_at: datetime | None, updated_at: datetime
    ) -> None:
        check_workflow(workflow)
        check_moment("updated_at", updated_at, workflow=workflow)
        if started_at is not None:
            check_moment("started_at", started_at, workflow=workflow)
        row = await self._db.one(
            f"backdate of {workflow!r}",
            self._life.backdate,
            {"workflow": workflow, "updated": updated_at, "started": started_at},
            repeatable=True,
        )
        if row is None:
            raise UnknownWorkflow(f"no workflow {workflow!r} has a status: nothing to backdate")

    async def discard(self, workflow: str) -> None:
        check_workflow(workflow)
        await self._db.transaction(
            f"discard of {workflow!r}",
            self._discarding(workflow),
            repeatable=True,
            move="Checkpointer.discard",
            lock="lock_claim",
        )

    async def discard_ended(
        self, workflow: str, *, statuses: frozenset[Status], before: datetime
    ) -> bool:
        """One transaction: the fence, then the status row locked only if it has ended (see
        ``ended`` in statuses.sql), then the rest of a discard; rolled back, fence and all,
        when the row has not ended."""
        check_workflow(workflow)
        check_ended(workflow, statuses, before)
        params: dict[str, object] = {
            "workflow": workflow,
            "statuses": sorted(s.value for s in statuses),
            "before": before,
        }
        prepare = self._db.prepare
        first, *rest = self._discarding(workflow)

        async def work(conn: AsyncConnection[TupleRow]) -> bool:
            try:
                async with conn.transaction():
                    await conn.execute(first[0], first[1], prepare=prepare)
                    cursor = await conn.execute(self._life.ended, params, prepare=prepare)
                    if await cursor.fetchone() is None:
                        raise _NotEnded
                    for query, values in rest:
                        await conn.execute(query, values, prepare=prepare)
            except _NotEnded:
                return False
            return True

        return await self._db.run(f"prune of {workflow!r}", work, repeatable=True)

    def _discarding(self, workflow: str) -> list[tuple[bytes, dict[str, object]]]:
        """The statements of a discard, in order: the fence first (see ``raise_fence``), then
        the write lock (``order_writes``), then the delete."""
        params: dict[str, object] = {"workflow": workflow}
        return [
            (self._sql.raise_fence, params),
            (self._sql.order_writes, params),
            (self._sql.forget, params),
            (self._life.forget_status, params),
        ]

    # -- the lifecycle -----------------------------------------------------------

    def _admitting(
        self, workflow: str, kind: str, input: object, queue: str
    ) -> tuple[dict[str, object], Subject]:
        """The parameters of an admit, checked and encoded before any round trip."""
        check_workflow(workflow)
        check_kind(kind)
        if not isinstance(queue, str) or not queue:
            raise ValueError(f"workflow {workflow!r}: queue must be a non-empty str, got {queue!r}")
        encoded = self._encode(workflow, _INPUT, input)
        params: dict[str, object] = {
            "workflow": workflow,
            "kind": kind,
            "input": encoded,
            "queue": queue,
        }
        return params, Subject(workflow, _INPUT, input, encoded)

    def _admitted(
        self,
        params: dict[str, object],
        wrote: tuple[Any, ...] | None,
        read: tuple[Any, ...] | None,
        input: object,
    ) -> Admitted:
        """What the admit's write and its fresh read mean: created, a repeat, or a conflict
        (``StartConflict``; the conditional statements wrote nothing)."""
        workflow = str(params["workflow"])
        if read is None:  # a discard between the two statements; the caller starts over
            raise _AdmitAgain
        current = self._status_of(read)
        if wrote is not None:
            return Admitted(current, created=True, queue=True)
        if current.kind != params["kind"] or read[2] != params["input"]:
            raise StartConflict(workflow, str(params["kind"]), input, current.kind, current.input)
        return Admitted(current, created=False, queue=current.status is Status.READY)

    async def admit(
        self, workflow: str, kind: str, input: object, *, queue: str = "default"
    ) -> Admitted:
        """Record kind, input and queue, as ``Lifecycle.admit`` says, in one transaction of
        two statements: the conditional insert, then a read in a snapshot of its own, which
        sees a concurrent winner's row after the insert waited for it. Repeatable: a start
        whose answer was lost finds its own row and is a repeat."""
        params, subject = self._admitting(workflow, kind, input, queue)
        return await self._admit(params, subject, input, (), "Lifecycle.admit")

    async def _admit(
        self,
        params: dict[str, object],
        subject: Subject,
        input: object,
        after: Sequence[tuple[bytes, dict[str, object]]],
        move: str,
    ) -> Admitted:
        workflow = params["workflow"]
        while True:
            rows = await self._db.transaction(
                f"start of {workflow!r} as {params['kind']!r}",
                [(self._life.admit_write, params), (self._life.status, params), *after],
                repeatable=True,
                subject=subject,
                move=move,
                lock=None if after else "lock_status",
                split=2 if after else 0,
            )
            try:
                return self._admitted(params, rows[0], rows[1], input)
            except _AdmitAgain:
                continue

    async def begin(
        self, workflow: str, *, liveness: timedelta, budget: timedelta, owner: str
    ) -> Began | None:
        """claim, and in the same statement the status (see ``begin`` in ``statuses.sql``).

        Not retried after a lost connection, unlike ``claim``: a begin that landed counted an
        attempt, and its repetition would find the workflow held and answer None; the
        ``ConnectionLost`` lets the worker defer the delivery instead, and the claim lapses
        with its liveness.
        """
        check_workflow(workflow)
        check_duration("liveness", liveness, workflow=workflow)
        check_duration("budget", budget, workflow=workflow)
        if not isinstance(owner, str):
            raise TypeError(f"workflow {workflow!r}: owner must be a str, got {owner!r}")
        row = await self._db.one(
            f"begin of {workflow!r}",
            self._life.begin,
            {"workflow": workflow, "liveness": liveness, "budget": budget, "owner": owner},
            repeatable=False,
            move="Lifecycle.begin",
            lock="lock_claim",
        )
        assert row is not None
        token, before, last_owner, kind, stored_input, attempts, new_kind, new_input, count = row
        previous = Status(before) if before is not None else Status.READY
        if token is not None and count is not None:
            lost = last_owner if previous is Status.RUNNING else None
            return Began(
                Pass(workflow, token),
                previous,
                new_kind,
                self._input(workflow, new_input),
                count,
                lost,
            )
        if token is not None:
            # A cancel (or another terminal move) committed while this statement waited for
            # the claim row: the claim was taken but the status refused it. Give it back.
            await self.release(Pass(workflow, token))
            current = await self.status(workflow)
            assert current is not None
            return Began(None, current.status, current.kind, current.input, current.attempts, None)
        if previous.terminal:
            return Began(None, previous, kind, self._input(workflow, stored_input), attempts, None)
        return None

    def _input(self, workflow: str, stored: str | None) -> object:
        return self._decode(workflow, _INPUT, stored) if stored is not None else None

    async def beat(self, holder: Pass, step: str | None) -> Pass:
        """renew and the step in flight, one statement."""
        if step is not None and not isinstance(step, str):
            raise TypeError(f"{holder}: step must be a str or None, got {step!r}")
        row = await self._db.one(
            f"beat of {holder}",
            self._life.beat,
            {**_holding(holder), "step": step},
            repeatable=True,
            move="Lifecycle.beat",
            lock="lock_claim",
        )
        if row is None:
            raise await self._refusal(holder, "renew")
        return holder

    async def settle(self, holder: Pass, settlement: Settlement) -> None:
        """The outcome and the release, one fenced statement (``settle`` in ``statuses.sql``).

        Not retried after a lost connection: a settle that landed raised the token, so its
        repetition would be refused as fenced and report a recorded outcome as lost. The
        ``ConnectionLost`` (a ``StoreUnavailable``) goes to the worker, which defers the
        delivery; the next pass finds the outcome if the settle landed (a terminal workflow
        is never begun again) and runs the workflow again if it did not.
        """
        check_settlement(holder, settlement)
        workflow = holder.workflow
        value: str | None = None
        subject = None
        if settlement.status is Status.FINISHED:
            value = self._encode(workflow, _VALUE, settlement.value)
            subject = Subject(workflow, _VALUE, settlement.value, value)
        failure = settlement.failure
        params: dict[str, object] = {
            **_holding(holder),
            "status": str(settlement.status),
            "attempts": settlement.attempts,
            "until": settlement.until if settlement.status is Status.SLEEPING else None,
            "waits": list(settlement.keys),
            "value": value,
            "failure_type": failure.type if failure else None,
            "failure_message": failure.message if failure else None,
            "failure_traceback": failure.traceback if failure else None,
            "failure_attempts": failure.attempts if failure else None,
        }
        for name in ("failure_type", "failure_message", "failure_traceback"):
            text = params[name]
            if isinstance(text, str) and text_fault(text) is not None:
                # An exception's text is the body's, and Postgres text cannot hold a NUL or a
                # lone surrogate: the failure is still recorded, with those replaced.
                params[name] = _storable(text)
        row = await self._db.one(
            f"settle of {holder} as {settlement.status}",
            self._life.settle,
            params,
            repeatable=False,
            subject=subject,
            move="Lifecycle.settle",
            lock="lock_claim",
        )
        if row is None:
            raise await self._refusal(holder, f"settle as {settlement.status}")

    async def withdraw(self, workflow: str) -> WorkflowStatus:
        """Cancel, one transaction: the fence raised, then the status (``withdraw_*``)."""
        check_workflow(workflow)
        return await self._withdraw(workflow, (), "Lifecycle.withdraw")

    async def _withdraw(
        self, workflow: str, after: Sequence[tuple[bytes, dict[str, object]]], move: str
    ) -> WorkflowStatus:
        params: dict[str, object] = {"workflow": workflow}
        rows = await self._db.transaction(
            f"cancel of {workflow!r}",
            [
                (self._life.withdraw_fence, params),
                (self._life.withdraw_mark, params),
                *after,
                (self._life.status, params),
            ],
            repeatable=True,
            move=move,
            lock=None if after else "lock_claim",
            split=2 if after else 0,
        )
        read = rows[-1]
        if read is None:
            raise UnknownWorkflow(
                f"no workflow {workflow!r}: it has neither a status nor records; nothing was "
                "cancelled"
            )
        return self._status_of(read)

    async def readmit(self, workflow: str) -> WorkflowStatus:
        """Retry, one transaction: the conditional update, then the read."""
        check_workflow(workflow)
        return await self._readmit(workflow, self._life.readmit, "Lifecycle.readmit")

    async def _readmit(self, workflow: str, statement: bytes, move: str) -> WorkflowStatus:
        params: dict[str, object] = {"workflow": workflow}
        wrote, read = await self._db.transaction(
            f"retry of {workflow!r}",
            [(statement, params), (self._life.status, params)],
            repeatable=False,
            move=move,
            lock="lock_status",
        )
        if read is None:
            held = await self._db.one(
                f"reading whether {workflow!r} exists",
                self._life.has_records,
                params,
                repeatable=True,
            )
            if held is not None and held[0]:
                # Made by a send or an arrive and never run: waiting, not retryable.
                raise NotRetryable(workflow, Status.BLOCKED)
            raise UnknownWorkflow(
                f"no workflow {workflow!r} to retry: it has neither a status nor records "
                "(never started, or discarded)"
            )
        current = self._status_of(read)
        if wrote is None:
            raise NotRetryable(workflow, current.status)
        return current

    async def status(self, workflow: str) -> WorkflowStatus | None:
        check_workflow(workflow)
        row = await self._db.one(
            f"status of {workflow!r}",
            self._life.status,
            {"workflow": workflow},
            repeatable=True,
        )
        return self._status_of(row) if row is not None else None

    async def statuses(
        self,
        *,
        status: Status | None = None,
        kind: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page:
        """Newest updated first, read from one of four indexes backwards from the cursor
        (``"<updated_at in µs since the epoch>:<workflow>"``), one more row than asked for to
        know whether a page follows."""
        wanted = Status(status) if status is not None else None
        if kind is not None:
            check_kind(kind)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be a positive int, got {limit!r}")
        at, after = _from_cursor(cursor)
        params: dict[str, object] = {
            "status": str(wanted) if wanted is not None else None,
            "kind": kind,
            "at": at,
            "after": after,
            "limit": limit + 1,
        }
        if wanted is None:
            query = self._life.list_all if kind is None else self._life.list_kind
        else:
            query = self._life.list_status if kind is None else self._life.list_kind_status
        rows = await self._db.rows("listing workflows by status", query, params)
        page = tuple(self._status_of(row) for row in rows[:limit])
        more = len(rows) > limit
        return Page(page, _cursor_of(page[-1]) if more and page else None)

    def _status_of(self, row: tuple[Any, ...]) -> WorkflowStatus:
        (
            workflow,
            kind,
            stored_input,
            queue,
            status,
            attempts,
            owner,
            since,
            step,
            until_at,
            waits,
            value,
            failure_type,
            failure_message,
            failure_traceback,
            failure_attempts,
            started_at,
            updated_at,
            token,
            live_until,
        ) = row
        current = Status(status)
        running = current is Status.RUNNING
        failure = (
            Failure(failure_type, failure_message or "", failure_traceback or "", failure_attempts)
            if failure_type is not None
            else None
        )
        return WorkflowStatus(
            workflow=workflow,
            status=current,
            kind=kind,
            attempts=attempts,
            updated_at=updated_at.astimezone(UTC),
            started_at=_utc(started_at),
            input=self._input(workflow, stored_input),
            queue=queue,
            token=token if running else None,
            owner=owner if running else None,
            since=_utc(since) if running else None,
            step=step if running else None,
            until=_utc(live_until) if running else _utc(until_at),
            keys=tuple(waits or ()),
            value=self._decode(workflow, _VALUE, value) if value is not None else None,
            failure=failure,
        )


class _AdmitAgain(Exception):
    """A discard removed the row between an admit's two statements: run the admit again."""


def _storable(text: str) -> str:
    return text.replace("\x00", "\ufffd").encode("utf-8", "replace").decode("utf-8")


def _utc(moment: datetime | None) -> datetime | None:
    return moment.astimezone(UTC) if moment is not None else None


def _cursor_of(last: WorkflowStatus) -> str:
    moment = last.updated_at
    micros = (moment - _EPOCH) // timedelta(microseconds=1)
    return f"{micros}:{last.workflow}"


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _from_cursor(cursor: str | None) -> tuple[str, str]:
    """The cursor as the listing's parameters: the first page starts above every row."""
    if cursor is None:
        return _FIRST_PAGE, ""
    micros, sep, after = cursor.partition(":") if isinstance(cursor, str) else ("", "", "")
    if not sep or not micros.lstrip("-").isdigit():
        raise ValueError(
            f"cursor {cursor!r} is not one this store handed out; pass the cursor of the "
            "previous page exactly, or None for the first page"
        )
    moment = _EPOCH + timedelta(microseconds=int(micros))
    return moment.isoformat(), after


class _NotTheRecord(Exception):
    """Rolls a transact back (its effect included) while answering with the stored value."""

    def __init__(self, recorded: Recorded) -> None:
        super().__init__(recorded)
        self.recorded = recorded


def _holding(holder: Pass) -> dict[str, object]:
    return {"workflow": holder.workflow, "token": holder.token}


async def _perform(
    effect: PostgresEffect, conn: AsyncConnection[TupleRow], workflow: str, key: str
) -> object:
    """Run the caller's effect on ``conn``, its failures marked as the caller's own."""
    try:
        async with conn.cursor() as cursor:
            pending = effect(cursor)
            if not inspect.isawaitable(pending):
                raise TypeError(
                    f"workflow {workflow!r}, key {key!r}: the effect returned {pending!r}, not "
                    "an awaitable; PostgresCheckpointer.transact takes an async function of a "
                    "cursor"
                )
            result = await pending
    except Exception as error:
        raise EffectFailed(error) from error
    _check_left_open(conn, workflow, key)
    return result


def _check_left_open(conn: AsyncConnection[TupleRow], workflow: str, key: str) -> None:
    status = conn.info.transaction_status
    if status == TransactionStatus.INERROR:
        raise StoreError(
            f"workflow {workflow!r}, key {key!r}: the effect left its transaction aborted (it "
            "caught a database error without rolling back); nothing was committed. To recover "
            "from an error inside an effect, wrap the statement in "
            "`async with cursor.connection.transaction():`, which is a savepoint there"
        )
    if status != TransactionStatus.INTRANS:
        raise StoreError(
            f"workflow {workflow!r}, key {key!r}: the effect ended the transaction it was "
            "handed (a COMMIT or ROLLBACK of its own), so its writes could not be committed with "
            "the record; leave the transaction to transact"
        )


def _fenced(holder: Pass, doing: str, row: tuple[Any, ...] | None) -> Fenced:
    if row is None:
        return Fenced(
            f"{holder} was never issued (the workflow has no claim); {doing} refused, "
            "stop this pass"
        )
    token, _released, spent = row
    if token != holder.token:
        return Fenced(
            f"{holder} was superseded (the highest token issued is {token}); {doing} refused, "
            "stop this pass"
        )
    if spent:
        return Fenced(f"{holder} has spent its budget; {doing} refused, stop this pass")
    return Fenced(f"{holder} was refused; {doing} refused, stop this pass")


class _NotEnded(Exception):
    """Rolls a ``discard_ended`` back: the workflow has not ended (or is gone)."""
