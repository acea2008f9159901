"""What a workflow has done, in an SQLite file: :class:`SqliteCheckpointer`.

Every guarantee of :class:`durable.Checkpointer` is a statement in ``statements.sql`` or a
transaction of a few of them, run in one trip to the connection's thread (see
:mod:`durable_sqlite.connection`). Values are encoded and decoded on the event loop;
the thread only ever sees the encodings.
"""

from __future__ import annotations

import inspect
import json
import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

import aiosqlite
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
from durable.clock import Clock
from durable.codec import CheckpointCodec, JsonCodec, encode_value
from durable.interfaces import (
    INBOX_PREFIX,
    SENT_PREFIX,
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

from durable_sqlite.connection import (
    _execute,
    _transact,
    batcher_of,
    check_driver,
    clock_reader,
    duration_micros,
    from_micros,
    numbered,
    on_thread,
    statements_for,
    thread_gap,
    to_micros,
    transaction,
)

__all__ = ["SqliteCheckpointer", "SqliteEffect"]

SqliteEffect = Callable[[sqlite3.Cursor], object]
"""What :meth:`SqliteCheckpointer.transact` commits: a synchronous function handed a
``sqlite3.Cursor`` inside the transaction that will also write the record. Whatever it
writes through that cursor commits with the record or not at all, and its return value
is what gets recorded.

Synchronous because it runs on the connection's own thread, in the middle of the one trip
that carries the whole transaction: there is no event loop to await on there, and nothing
else can use the connection until it returns, so keep it to a few statements. It must
not commit or roll back itself."""


class SqliteCheckpointer:
    """A :class:`~durable.interfaces.Checkpointer` over an SQLite file.

    ``connection`` is an aiosqlite connection made ready by :func:`durable_sqlite.connect`
    (or :func:`durable_sqlite.configure`); a :class:`~durable_sqlite.SqliteScheduler` on the
    same connection makes a :class:`~durable_sqlite.SqliteDurable` whose moves are each one
    commit. ``clock`` is the store's clock for history stamps and leases alike: SQLite's
    own when ``None`` (the default, and what every process on the file then shares), or a
    :class:`~durable.Clock` read inside each transaction (a ``ManualClock`` in tests).

    Also a :class:`~durable.interfaces.Lifecycle` (the ``lifecycle`` capability): each
    workflow's kind, input, status, attempts and outcome in ``durable_workflow``, written by
    ``begin``, ``beat`` and ``settle`` inside the claim's, the renewal's and the release's
    own transactions, so a pass commits no more often than it did without lifecycle.

    ``gap`` is for tests only (a :data:`durable.plugins.Gap`, given by the testing hook):
    each move awaits it inside its transaction, after the reads that decide it and before
    its writes. Build a store with ``gap`` inside the event loop that will use it.
    """

    def __init__(
        self,
        connection: aiosqlite.Connection,
        *,
        codec: CheckpointCodec[Any] | None = None,
        clock: Clock | None = None,
        gap: Gap | None = None,
    ) -> None:
        self.connection = check_driver(connection)
        self._batcher = batcher_of(connection)
        self._gap = thread_gap(gap)
        self.codec: CheckpointCodec[Any] = codec if codec is not None else JsonCodec()
        self.clock = clock
        self._now = clock_reader(clock)
        self._sql = statements_for(clock is None)
        # A step's write binds a tuple (see numbered); the store's clock is bound last,
        # and only when it is a given one (SQLite's own is written into the statement).
        self._record_sql = numbered(self._sql["record"], _RECORD_PARAMETERS)
        self._bind_now = clock is not None
        self._life = statements_for(clock is None, "statuses.sql")

    def __repr__(self) -> str:
        clock = "sqlite" if self.clock is None else repr(self.clock)
        return f"SqliteCheckpointer(codec={self.codec!r}, clock={clock})"

    # -- reads -----------------------------------------------------------------------

    async def load(self, workflow: str) -> dict[str, object]:
        check_workflow(workflow)
        sql, params = self._sql["load"], {"workflow": workflow, "sent": SENT_PREFIX}
        rows = await on_thread(self.connection, lambda raw: raw.execute(sql, params).fetchall())
        decode = self.codec.decode
        return {key: decode(value) for key, value in rows}

    async def history(self, workflow: str) -> list[Entry]:
        check_workflow(workflow)
        sql, params = self._sql["history"], {"workflow": workflow, "sent": SENT_PREFIX}
        rows = await on_thread(self.connection, lambda raw: raw.execute(sql, params).fetchall())
        decode = self.codec.decode
        return [Entry(key, decode(value), from_micros(at), op) for key, value, at, op in rows]

    async def workflows(self, limit: int | None = None) -> list[str]:
        """The ids of the workflows that hold records, sorted; at most ``limit`` of them."""
        if limit is not None and (
            not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0
        ):
            raise ValueError(f"limit must be a positive int or None, got {limit!r}")
        sql = self._sql["workflows"]
        bound = -1 if limit is None else limit
        rows = await on_thread(
            self.connection, lambda raw: raw.execute(sql, {"limit": bound}).fetchall()
        )
        return [row[0] for row in rows]

    async def claimed(self, workflow: str) -> Claimed | None:
        """The live claim on ``workflow`` by the store's clock, or ``None``."""
        check_workflow(workflow)
        sql, now = self._sql["claimed"], self._now
        row = await on_thread(
            self.connection,
            lambda raw: raw.execute(sql, {"workflow": workflow, "now": now()}).fetchone(),
        )
        if row is None:
            return None
        return Claimed(row[0], from_micros(row[1]), from_micros(row[2]))

    # -- the claim ---------------------------------------------------------------------

    async def claim(self, workflow: str, *, liveness: timedelta, budget: timedelta) -> Pass | None:
        check_workflow(workflow)
        params = {
            "workflow": workflow,
            "liveness": duration_micros(check_duration("liveness", liveness, workflow=workflow)),
            "budget": duration_micros(check_duration("budget", budget, workflow=workflow)),
        }
        sql, now = self._sql["claim"], self._now

        def claim(raw: sqlite3.Connection) -> int | None:
            if self._gap is not None:
                self._gap("Checkpointer.claim", workflow)
            row = raw.execute(sql, {**params, "now": now()}).fetchone()
            return None if row is None else int(row[0])

        token = await transaction(self.connection, claim)
        return None if token is None else Pass(workflow, token)

    async def renew(self, holder: Pass) -> Pass:
        sql, now = self._sql["renew"], self._now

        def renew(raw: sqlite3.Connection) -> None:
            if self._gap is not None:
                self._gap("Checkpointer.renew", holder.workflow)
            params = {"workflow": holder.workflow, "token": holder.token, "now": now()}
            if raw.execute(sql, params).fetchone() is None:
                raise self._refusal(raw, holder, "renew")

        await transaction(self.connection, renew)
        return holder

    async def release(self, holder: Pass) -> None:
        sql = self._sql["release"]
        params = {"workflow": holder.workflow, "token": holder.token}

        def release(raw: sqlite3.Connection) -> None:
            if self._gap is not None:
                self._gap("Checkpointer.release", holder.workflow)
            raw.execute(sql, params)

        await transaction(self.connection, release)

    # -- writes ------------------------------------------------------------------------

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        encoded, record = self._record(holder, key, value, None)
        batcher = self._batcher
        if batcher.take():
            try:
                stored = await _execute(self.connection)(_transact, self.connection, record)
            finally:
                batcher.sent()
        else:
            stored = await batcher.write(record)
        return Recorded(self.codec.decode(stored), stored == encoded)

    async def record_as(self, holder: Pass, key: str, value: object, operation: str) -> Recorded:
        """``record``, keeping ``operation`` in the row's ``operation`` column; a key whose
        row names another operation is refused (``KeyReused``) in the same transaction."""
        check_operation(holder.workflow, key, operation)
        # Spelled out rather than shared with record through a coroutine of its own, and
        # a lone write sent from here rather than through GroupCommit.submit: this is
        # every step's write, and each coroutine between a step and the connection's
        # thread costs it twice, going and coming back.
        encoded, record = self._record(holder, key, value, operation)
        batcher = self._batcher
        if batcher.take():
            try:
                stored = await _execute(self.connection)(_transact, self.connection, record)
            finally:
                batcher.sent()
        else:
            stored = await batcher.write(record)
        return Recorded(self.codec.decode(stored), stored == encoded)

    def _record(
        self, holder: Pass, key: str, value: object, operation: str | None
    ) -> tuple[object, Callable[[sqlite3.Connection], object]]:
        """The encoding of a record and the transaction's work that writes it."""
        check_key(holder.workflow, key)
        encoded = encode_value(self.codec, value, workflow=holder.workflow, key=key)
        sql, now, gap, bind_now = self._record_sql, self._now, self._gap, self._bind_now
        params: tuple[object, ...] = (holder.workflow, key, encoded, holder.token, operation)

        def record(raw: sqlite3.Connection) -> object:
            if gap is not None:
                gap("Checkpointer.record", holder.workflow)
            # The given clock is read here, inside the transaction, as every move reads it.
            bound = (*params, now()) if bind_now else params
            if raw.execute(sql, bound).rowcount == 1:
                return encoded  # it won: the common case, settled by the change count
            return self._record_outcome(raw, holder, key, operation)

        return encoded, record

    def _record_outcome(
        self, raw: sqlite3.Connection, holder: Pass, key: str, operation: str | None
    ) -> object:
        """The value a record that inserted nothing meets, or why it was refused: read in
        the record's own transaction, so nothing can have moved in between."""
        params = {"workflow": holder.workflow, "key": key}
        token, budget_until, stored, kept = raw.execute(
            self._sql["record_outcome"], params
        ).fetchone()
        if token != holder.token:
            raise self._fenced(holder, token, budget_until, f"record of {key!r}")
        if operation is not None and kept is not None and kept != operation:
            raise KeyReused(holder.workflow, key, kept, operation)
        # The token matched inside this transaction, so the insert's SELECT yielded its row
        # and only a conflict can have stopped it: the key holds a value. Unless something
        # outside the store dropped the row; never hand that back as a silent None.
        if stored is None:
            raise StoreError(
                f"workflow {holder.workflow!r}, key {key!r}: the record inserted nothing, yet "
                f"{holder} still holds the claim and the key has no value; the file was "
                "changed by something other than durable-sqlite"
            )
        return stored

    async def transact(self, holder: Pass, key: str, effect: SqliteEffect) -> Recorded:
        workflow = holder.workflow
        check_key(workflow, key)
        if not callable(effect):
            raise TypeError(
                f"workflow {workflow!r}, key {key!r}: SqliteCheckpointer.transact takes a "
                f"function of a sqlite3.Cursor, got {effect!r}"
            )
        if inspect.iscoroutinefunction(effect):
            raise TypeError(
                f"workflow {workflow!r}, key {key!r}: the effect {effect!r} is async, but it "
                "runs on the SQLite connection's thread inside the open transaction, where "
                "nothing can be awaited; make it a plain function of the cursor"
            )
        codec = self.codec

        def transact(raw: sqlite3.Connection) -> tuple[object, bool]:
            token = raw.execute(self._sql["token"], {"workflow": workflow}).fetchone()
            if token is None or token[0] != holder.token:
                raise self._refusal(raw, holder, f"transact of {key!r}")
            lookup = {"workflow": workflow, "key": key}
            existing = raw.execute(self._sql["lookup"], lookup).fetchone()
            if existing is not None:
                if existing[1] not in (None, "transact"):
                    raise KeyReused(workflow, key, existing[1], "transact")
                return existing[0], False
            if self._gap is not None:
                self._gap("Checkpointer.transact", workflow)
            cursor = raw.cursor()
            try:
                result = effect(cursor)
            finally:
                cursor.close()
            if inspect.isawaitable(result):
                if inspect.iscoroutine(result):
                    result.close()
                raise TypeError(
                    f"workflow {workflow!r}, key {key!r}: the effect returned an awaitable; "
                    "transact effects run synchronously inside the transaction and their "
                    "return value is recorded, so return the value itself"
                )
            if not raw.in_transaction:
                raise StoreError(
                    f"workflow {workflow!r}, key {key!r}: the transact effect ended the "
                    "transaction itself (COMMIT or ROLLBACK), so its writes may have committed "
                    "without the record and the step is no longer exactly-once; an effect "
                    "must only execute statements on the cursor it is handed"
                )
            encoded = encode_value(codec, result, workflow=workflow, key=key)
            return self._supply_in(raw, workflow, key, encoded, "transact"), True

        stored, first = await transaction(self.connection, transact, alone=True)
        return Recorded(codec.decode(stored), first)

    async def supply(self, workflow: str, key: str, value: object) -> object:
        check_workflow(workflow)
        check_key(workflow, key)
        encoded = encode_value(self.codec, value, workflow=workflow, key=key)

        def supply(raw: sqlite3.Connection) -> Any:
            if self._gap is not None:
                self._gap("Checkpointer.supply", workflow)
            return self._supply_in(raw, workflow, key, encoded)

        stored = await transaction(self.connection, supply)
        return self.codec.decode(stored)

    def _supply_in(
        self,
        raw: sqlite3.Connection,
        workflow: str,
        key: str,
        encoded: object,
        operation: str | None = None,
    ) -> Any:
        params = {
            "workflow": workflow,
            "key": key,
            "value": encoded,
            "now": self._now(),
            "operation": operation,
        }
        return raw.execute(self._sql["supply"], params).fetchone()[0]

    async def append(self, workflow: str, value: object, *, message_id: str | None = None) -> str:
        check_workflow(workflow)
        check_message_id(workflow, message_id)
        encoded = self._encode_entry(workflow, value)
        append = self._append_in
        return await transaction(
            self.connection,
            lambda raw: append(raw, workflow, encoded, message_id, "Checkpointer.append"),
        )

    def _encode_entry(self, workflow: str, value: object) -> object:
        return encode_value(self.codec, value, workflow=workflow, key="<inbox>")

    def _append_in(
        self,
        raw: sqlite3.Connection,
        workflow: str,
        encoded: object,
        message_id: str | None,
        move: str | None = None,
        at: int | None = None,
    ) -> str:
        """The append inside an open transaction: with ``message_id``, the marker is read
        and written in the same transaction as the entry, and SQLite's one writer at a time
        is what makes the first append with an id the only one. ``at`` (microseconds) is
        the entry's time in place of the store's clock (``append_at``)."""
        now = self._now()
        mark = {"workflow": workflow, "sent": SENT_PREFIX, "message_id": message_id}
        if message_id is not None:
            found = raw.execute(self._sql["sent"], mark).fetchone()
            if found is not None:
                return str(found[0])
        if move is not None and self._gap is not None:
            self._gap(move, workflow)
        params = {"workflow": workflow, "value": encoded, "prefix": INBOX_PREFIX, "now": now}
        if at is None:
            key = str(raw.execute(self._sql["append"], params).fetchone()[0])
        else:
            params["at"] = at
            key = str(raw.execute(self._sql["append_at"], params).fetchone()[0])
        if message_id is not None:
            raw.execute(self._sql["append_mark"], {**mark, "key": key, "now": now})
        return key

    # -- writes with a given time (durable.interfaces.Dated, for durable import) -------

    async def supply_at(self, workflow: str, key: str, value: object, at: datetime) -> object:
        check_workflow(workflow)
        check_key(workflow, key)
        check_moment("at", at, workflow=workflow)
        encoded = encode_value(self.codec, value, workflow=workflow, key=key)
        sql = self._sql["supply_at"]
        params = {"workflow": workflow, "key": key, "value": encoded, "at": to_micros(at)}
        stored = await transaction(
            self.connection, lambda raw: raw.execute(sql, params).fetchone()[0]
        )
        return self.codec.decode(stored)

    async def append_at(
        self, workflow: str, value: object, at: datetime, *, message_id: str | None = None
    ) -> str:
        check_workflow(workflow)
        check_message_id(workflow, message_id)
        check_moment("at", at, workflow=workflow)
        encoded = self._encode_entry(workflow, value)
        append, micros = self._append_in, to_micros(at)
        return await transaction(
            self.connection,
            lambda raw: append(raw, workflow, encoded, message_id, None, micros),
        )

    async def backdate(
        self, workflow: str, *, started_at: datetime | None, updated_at: datetime
    ) -> None:
        check_workflow(workflow)
        check_moment("updated_at", updated_at, workflow=workflow)
        if started_at is not None:
            check_moment("started_at", started_at, workflow=workflow)
        sql = self._life["backdate"]
        params = {
            "workflow": workflow,
            "updated": to_micros(updated_at),
            "started": None if started_at is None else to_micros(started_at),
        }
        found = await transaction(self.connection, lambda raw: raw.execute(sql, params).fetchone())
        if found is None:
            raise UnknownWorkflow(f"no workflow {workflow!r} has a status: nothing to backdate")

    async def discard(self, workflow: str) -> None:
        check_workflow(workflow)

        def discard(raw: sqlite3.Connection) -> None:
            if self._gap is not None:
                self._gap("Checkpointer.discard", workflow)
            self._discard_in(raw, workflow)

        await transaction(self.connection, discard)

    async def discard_ended(
        self, workflow: str, *, statuses: frozenset[Status], before: datetime
    ) -> bool:
        check_workflow(workflow)
        check_ended(workflow, statuses, before)
        wanted, until = {s.value for s in statuses}, to_micros(before)

        def discard(raw: sqlite3.Connection) -> bool:
            # One transaction, and SQLite's one writer: the read and the discard are one step.
            found = raw.execute(self._life["ended"], {"workflow": workflow}).fetchone()
            if found is None or found[0] not in wanted or found[1] >= until:
                return False
            self._discard_in(raw, workflow)
            return True

        return await transaction(self.connection, discard)

    def _discard_in(self, raw: sqlite3.Connection, workflow: str) -> None:
        raw.execute(self._sql["forget"], {"workflow": workflow})
        raw.execute(self._life["forget_life"], {"workflow": workflow})
        raw.execute(self._sql["raise_fence"], {"workflow": workflow})

    # -- lifecycle (durable.interfaces.Lifecycle) --------------------------------------
    #
    # Each move is one transaction: begin is the claim statement and the row's upsert,
    # settle the fenced release and the row's update, beat the renewal and the step. So a
    # pass writes no more than it did before lifecycle, and the attempt a pass counts is
    # committed with the claim that starts it.

    async def admit(
        self, workflow: str, kind: str, input: object, *, queue: str = "default"
    ) -> Admitted:
        encoded = self._encode_admission(workflow, kind, input, queue)
        admit = self._admit_in
        try:
            created, row = await transaction(
                self.connection,
                lambda raw: admit(raw, workflow, kind, encoded, queue, "Lifecycle.admit"),
            )
        except _Conflict as conflict:
            raise self._conflict(workflow, kind, input, conflict) from None
        return self._admitted(created, row)

    def _encode_admission(self, workflow: str, kind: str, input: object, queue: str) -> object:
        check_workflow(workflow)
        check_kind(kind)
        if not isinstance(queue, str) or not queue:
            raise ValueError(f"workflow {workflow!r}: queue must be a non-empty str, got {queue!r}")
        return encode_value(self.codec, input, workflow=workflow, key="<input>")

    def _conflict(
        self, workflow: str, kind: str, input: object, conflict: _Conflict
    ) -> StartConflict:
        stored = None if conflict.input is None else self.codec.decode(conflict.input)
        return StartConflict(workflow, kind, input, conflict.kind, stored)

    def _admitted(self, created: bool, row: Sequence[Any]) -> Admitted:
        status = self._decode_status(row)
        return Admitted(status, created, created or status.status is Status.READY)

    def _admit_in(
        self,
        raw: sqlite3.Connection,
        workflow: str,
        kind: str,
        encoded: object,
        queue: str,
        move: str | None = None,
    ) -> tuple[bool, Sequence[Any]]:
        """The admission inside an open transaction: read the row, then insert, adopt, or
        nothing. SQLite's one writer at a time makes the read and the write one step, so
        of any number of concurrent starters exactly one creates the row."""
        life = raw.execute(self._life["life"], {"workflow": workflow}).fetchone()
        if move is not None and self._gap is not None:
            self._gap(move, workflow)
        params = {
            "workflow": workflow,
            "kind": kind,
            "input": encoded,
            "queue": queue,
            "now": self._now(),
        }
        if life is None:
            raw.execute(self._life["admit_insert"], params)
            created = True
        elif life[0] is None:
            raw.execute(self._life["admit_adopt"], params)
            created = True
        elif life[0] == kind and life[1] == encoded:
            created = False
        else:
            raise _Conflict(life[0], life[1])
        return created, self._status_row(raw, workflow)

    async def begin(
        self, workflow: str, *, liveness: timedelta, budget: timedelta, owner: str
    ) -> Began | None:
        check_workflow(workflow)
        if not isinstance(owner, str) or not owner:
            raise ValueError(f"workflow {workflow!r}: owner must be a non-empty str, got {owner!r}")
        params: dict[str, object] = {
            "workflow": workflow,
            "owner": owner,
            "liveness": duration_micros(check_duration("liveness", liveness, workflow=workflow)),
            "budget": duration_micros(check_duration("budget", budget, workflow=workflow)),
        }
        claim, begin_life, read = self._sql["claim"], self._life["begin_life"], self._life["life"]
        clock = self._now

        def begin(raw: sqlite3.Connection) -> tuple[object, ...] | None:
            life = raw.execute(read, {"workflow": workflow}).fetchone()
            if self._gap is not None:
                self._gap("Lifecycle.begin", workflow)
            if life is not None and Status(life[2]).terminal:
                return (None, life[2], life[0], life[1], life[4], None)
            params["now"] = clock()
            taken = raw.execute(claim, params).fetchone()
            if taken is None:
                return None  # a live pass holds it: nothing written
            kind, input, attempts = raw.execute(begin_life, params).fetchone()
            before = Status.READY if life is None else life[2]
            lost = life[3] if life is not None and life[2] == Status.RUNNING else None
            return (int(taken[0]), before, kind, input, attempts, lost)

        began = await transaction(self.connection, begin)
        if began is None:
            return None
        token, before, kind, input, attempts, lost = began
        return Began(
            holder=None if token is None else Pass(workflow, int(str(token))),
            status=Status(str(before)),
            kind=None if kind is None else str(kind),
            input=None if input is None else self.codec.decode(input),
            attempts=int(str(attempts)),
            lost=None if lost is None else str(lost),
        )

    async def beat(self, holder: Pass, step: str | None) -> Pass:
        if step is not None and not isinstance(step, str):
            raise TypeError(f"{holder}: the step in flight must be a str or None, got {step!r}")
        renew, beat_step, clock = self._sql["renew"], self._life["beat_step"], self._now

        def beat(raw: sqlite3.Connection) -> None:
            if self._gap is not None:
                self._gap("Lifecycle.beat", holder.workflow)
            params = {
                "workflow": holder.workflow,
                "token": holder.token,
                "step": step,
                "now": clock(),
            }
            if raw.execute(renew, params).fetchone() is None:
                raise self._refusal(raw, holder, "beat")
            raw.execute(beat_step, params)

        await transaction(self.connection, beat)
        return holder

    async def settle(self, holder: Pass, settlement: Settlement) -> None:
        check_settlement(holder, settlement)
        workflow = holder.workflow
        value = (
            encode_value(self.codec, settlement.value, workflow=workflow, key="<outcome>")
            if settlement.status is Status.FINISHED
            else None
        )
        failure = settlement.failure
        params: dict[str, object] = {
            "workflow": workflow,
            "token": holder.token,
            "status": str(settlement.status),
            "attempts": settlement.attempts,
            "until": None if settlement.until is None else to_micros(settlement.until),
            "waits": json.dumps(list(settlement.keys)) if settlement.keys else None,
            "value": value,
            "failure_type": None if failure is None else failure.type,
            "failure_message": None if failure is None else failure.message,
            "failure_traceback": None if failure is None else failure.traceback,
            "failure_attempts": None if failure is None else failure.attempts,
        }
        release, settle_life, clock = (
            self._life["settle_release"],
            self._life["settle_life"],
            self._now,
        )
        doing = f"settle as {settlement.status}"

        def settle(raw: sqlite3.Connection) -> None:
            if self._gap is not None:
                self._gap("Lifecycle.settle", workflow)
            if raw.execute(release, params).fetchone() is None:
                raise self._refusal(raw, holder, doing)
            raw.execute(settle_life, {**params, "now": clock()})

        await transaction(self.connection, settle)

    async def withdraw(self, workflow: str) -> WorkflowStatus:
        check_workflow(workflow)
        withdraw = self._withdraw_in
        _, row = await transaction(
            self.connection, lambda raw: withdraw(raw, workflow, "Lifecycle.withdraw")
        )
        return self._decode_status(row)

    def _withdraw_in(
        self, raw: sqlite3.Connection, workflow: str, move: str | None = None
    ) -> tuple[bool, Sequence[Any]]:
        """Cancel inside an open transaction; whether it changed anything, and the row."""
        life = raw.execute(self._life["life"], {"workflow": workflow}).fetchone()
        if move is not None and self._gap is not None:
            self._gap(move, workflow)
        if life is None:
            if not raw.execute(self._life["has_records"], {"workflow": workflow}).fetchone()[0]:
                raise _unknown(workflow, "cancel")
        elif Status(life[2]).terminal:
            return False, self._status_row(raw, workflow)
        raw.execute(self._sql["raise_fence"], {"workflow": workflow})
        raw.execute(self._life["withdraw_life"], {"workflow": workflow, "now": self._now()})
        return True, self._status_row(raw, workflow)

    async def readmit(self, workflow: str) -> WorkflowStatus:
        check_workflow(workflow)
        readmit = self._readmit_in
        row = await transaction(
            self.connection, lambda raw: readmit(raw, workflow, "Lifecycle.readmit")
        )
        return self._decode_status(row)

    def _readmit_in(self, raw: sqlite3.Connection, workflow: str, move: str | None = None) -> Any:
        life = raw.execute(self._life["life"], {"workflow": workflow}).fetchone()
        if move is not None and self._gap is not None:
            self._gap(move, workflow)
        if life is None:
            if not raw.execute(self._life["has_records"], {"workflow": workflow}).fetchone()[0]:
                raise _unknown(workflow, "retry")
            # Records but no row: made by arrive or send and never run, so waiting.
            raise NotRetryable(workflow, Status.BLOCKED)
        if life[2] not in (Status.FAILED, Status.CANCELLED):
            raise NotRetryable(workflow, Status(life[2]))
        raw.execute(self._life["readmit_life"], {"workflow": workflow, "now": self._now()})
        return self._status_row(raw, workflow)

    async def status(self, workflow: str) -> WorkflowStatus | None:
        check_workflow(workflow)
        read = self._status_row
        row = await on_thread(self.connection, lambda raw: read(raw, workflow))
        return None if row is None else self._decode_status(row)

    def _status_row(self, raw: sqlite3.Connection, workflow: str) -> Any:
        return raw.execute(self._life["status"], {"workflow": workflow}).fetchone()

    async def statuses(
        self,
        *,
        status: Status | None = None,
        kind: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page:
        """Newest updated first, read backwards from the cursor along one index (by
        status, by kind and status, by neither; a kind alone merges its seven statuses'
        pages), so a page costs the page however many rows the table holds."""
        if not isinstance(limit, int) or isinstance(limit, bool) or limit <= 0:
            raise ValueError(f"limit must be a positive int, got {limit!r}")
        if kind is not None:
            check_kind(kind)
        wanted = None
        if status is not None:
            try:
                wanted = Status(str(status))
            except ValueError:
                known = ", ".join(s.value for s in Status)
                raise ValueError(f"no status {status!r}; a workflow is one of {known}") from None
        at, wf = _after(cursor)
        params = {"status": wanted, "kind": kind, "limit": limit + 1, "at": at, "wf": wf}
        if wanted is None:
            sql = self._life["list_all" if kind is None else "list_kind"]
        else:
            sql = self._life["list_status" if kind is None else "list_kind_status"]
        rows = await on_thread(self.connection, lambda raw: raw.execute(sql, params).fetchall())
        page = rows[:limit]
        more = len(rows) > limit
        return Page(
            tuple(self._decode_status(row) for row in page),
            f"{page[-1][4]}:{page[-1][0]}" if more else None,
        )

    def _decode_status(self, row: Sequence[Any]) -> WorkflowStatus:
        (
            workflow, status, kind, attempts, updated_at, started_at, input, queue,
            token, owner, since, step, until_at, live_until, waits, value,
            failure_type, failure_message, failure_traceback, failure_attempts,
        ) = row  # fmt: skip
        decode = self.codec.decode
        life = Status(status)
        held = life is Status.RUNNING and live_until is not None
        until = live_until if held else (until_at if life is Status.SLEEPING else None)
        return WorkflowStatus(
            workflow=workflow,
            status=life,
            kind=kind,
            attempts=attempts,
            updated_at=from_micros(updated_at),
            started_at=None if started_at is None else from_micros(started_at),
            input=None if input is None else decode(input),
            queue=queue,
            token=token if held else None,
            owner=owner if life is Status.RUNNING else None,
            since=None if since is None or life is not Status.RUNNING else from_micros(since),
            step=step if life is Status.RUNNING else None,
            until=None if until is None else from_micros(until),
            keys=tuple(json.loads(waits)) if waits else (),
            value=None if value is None else decode(value),
            failure=(
                None
                if failure_type is None
                else Failure(
                    failure_type,
                    failure_message or "",
                    failure_traceback or "",
                    failure_attempts or 0,
                )
            ),
        )

    def _refusal(self, raw: sqlite3.Connection, holder: Pass, doing: str) -> Fenced:
        """Why the store refused ``holder``, read in the transaction that refused it."""
        row = raw.execute(self._sql["token"], {"workflow": holder.workflow}).fetchone()
        token, budget_until = (None, None) if row is None else row
        return self._fenced(holder, token, budget_until, doing)

    @staticmethod
    def _fenced(holder: Pass, token: object, budget_until: object, doing: str) -> Fenced:
        if token != holder.token:
            current = "none" if token is None else str(token)
            return Fenced(
                f"{holder} was superseded (the highest token issued is {current}); "
                f"{doing} refused, stop this pass"
            )
        if budget_until is None:
            return Fenced(f"{holder} was released; {doing} refused, stop this pass")
        return Fenced(f"{holder} has spent its budget; {doing} refused, stop this pass")


_RECORD_PARAMETERS = ("workflow", "key", "value", "token", "operation", "now")
"""The order the record statement's parameters are bound in (``now`` only with a given
clock)."""

_FIRST_PAGE = (1 << 62, "")
"""A cursor above every row: (updated_at, workflow) compares below it for any moment
before the year 146,000."""


def _after(cursor: str | None) -> tuple[int, str]:
    """The (updated_at, workflow) a page starts below, from a cursor ``statuses`` issued."""
    if cursor is None:
        return _FIRST_PAGE
    if isinstance(cursor, str):
        at, colon, workflow = cursor.partition(":")
        if colon and at.isdigit():
            return int(at), workflow
    raise ValueError(
        f"{cursor!r} is not a cursor this SQLite store issued; pass the cursor a previous "
        "page returned, or None for the first page"
    )


class _Conflict(Exception):
    """Carries a conflicting admission's stored kind and input encoding off the
    connection's thread (rolling the transaction back), to be decoded on the loop."""

    def __init__(self, kind: str | None, input: object) -> None:
        self.kind, self.input = kind, input


def _unknown(workflow: str, doing: str) -> UnknownWorkflow:
    return UnknownWorkflow(
        f"no workflow {workflow!r} to {doing}: the store has neither a lifecycle row nor "
        "records for it (never started, or discarded)"
    )
