"""The pool as the stores use it: one round trip where one will do, and a lost connection
survived rather than passed on.

Every operation borrows a connection for exactly one statement, or for one transaction whose
statements are sent together in a pipeline, and runs it in autocommit so that a single statement
is a single round trip (no ``BEGIN``, no ``COMMIT``). Transactions run at READ COMMITTED
whatever the server's default, because the fencing arguments in ``statements.sql`` are made
for it: a statement that waited on a row lock re-reads the row, and each statement of a
transaction reads what committed before it began. A pool handed in with other settings is
switched for the duration of the borrow and switched back, so sharing the application's own
pool costs nothing in speed. Statements are prepared on first use on each connection.

Connection loss is answered here rather than at every call site. Postgres commits a transaction
whole or not at all, so a write on a connection that dropped either landed or did not; what is
left to do is to get rid of the dead connections and, for an operation whose repetition is
harmless by construction (a read, a first-writer-wins write, a fenced claim, an answer by
receipt), try once more. The pool is checked on the first failure rather than on every
borrow: a check on every borrow is a second round trip on every step, paid to detect something
that happens when a server restarts.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar, cast

import psycopg
import psycopg.errors
from durable.group import GroupCommit, Waiting
from durable.plugins import Gap
from psycopg import AsyncConnection, IsolationLevel
from psycopg.pq import TransactionStatus
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool, PoolClosed, PoolTimeout

from durable_postgres.errors import (
    ConnectionLost,
    PostgresUnavailable,
    SchemaMissing,
    StoreClosed,
    UnstorableName,
    UnstorableValue,
    text_fault,
)
from durable_postgres.statements import render_sections, statements

__all__ = ["Connections", "EffectFailed", "Params", "Subject"]

log = logging.getLogger("durable_postgres")

T = TypeVar("T")
READ_COMMITTED = IsolationLevel.READ_COMMITTED
_BEGIN = b"BEGIN ISOLATION LEVEL READ COMMITTED"
_COMMIT = b"COMMIT"
Params = Mapping[str, object]
Row = tuple[Any, ...]


class Subject:
    """What an operation writes, kept so that a value Postgres refuses can be blamed by name."""

    __slots__ = ("encoded", "key", "value", "workflow")

    def __init__(self, workflow: str, key: str, value: object = None, encoded: str = "") -> None:
        self.workflow = workflow
        self.key = key
        self.value = value
        self.encoded = encoded

    def refusal(self, error: BaseException) -> Exception:
        for what, text in (("workflow id", self.workflow), ("record key", self.key)):
            fault = text_fault(text)
            if fault is not None:
                return UnstorableName(f"the {what} {text!r} cannot be stored: {fault}")
        fault = text_fault(self.encoded) or f"the server refused it ({error})"
        return UnstorableValue(self.workflow, self.key, self.value, fault)


class EffectFailed(Exception):
    """Carries an exception raised by a caller's ``transact`` effect out through the store.

    The store translates the errors of its own statements (a missing table, a value the
    column refuses) into its own types; an effect's errors are the caller's and must reach
    the caller untouched, so they travel marked and are raised as they were. A lost
    connection is the exception: it is lost whoever was talking on it.
    """

    def __init__(self, error: Exception) -> None:
        super().__init__(error)
        self.error = error


class Connections:
    """Borrowing from one pool for one schema, with errors translated into the store's own.

    ``gap`` is for tests only (a :data:`durable.plugins.Gap`, from the testing hook): an
    operation naming its ``move`` then runs as an explicit transaction that takes the
    ``lock`` named (a statement of ``testing.sql``: the row the move's own statement locks
    first), awaits ``gap(move, workflow)``, and sends its statements, the gap falling before
    the statement at index ``split``. Without a gap, ``move``, ``lock`` and ``split`` are
    ignored and nothing else is sent.
    """

    __slots__ = (
        "batches",
        "gap",
        "group_commit",
        "history_query",
        "locks",
        "pool",
        "prepare",
        "reads",
        "schema",
        "single",
        "writes",
    )

    def __init__(
        self,
        pool: AsyncConnectionPool[Any],
        schema: str,
        *,
        prepare: bool = True,
        gap: Gap | None = None,
        group_commit: bool = True,
    ) -> None:
        self.pool = pool
        self.schema = schema
        self.prepare = prepare
        self.gap = gap
        self.group_commit = group_commit
        self.writes = _Writes(self)
        """Group commit of the fenced, repeatable writes (:meth:`grouped`)."""
        self.reads = _Reads(self)
        """The history reads of passes that start together, grouped (:meth:`history`)."""
        self.locks: Mapping[str, bytes] = {}
        # The single-row statements a batch may carry, and their multi-row forms.
        single = statements(schema)
        self.history_query = single.history
        self.single = {
            single.record: "record",
            single.renew: "renew",
            single.release: "release",
            single.claim: "claim",
        }
        self.batches = render_sections("batches.sql", schema)
        if gap is not None:
            self.locks = render_sections("testing.sql", schema)

    @staticmethod
    async def _adjusted(
        conn: AsyncConnection[TupleRow], work: Callable[[AsyncConnection[TupleRow]], Awaitable[T]]
    ) -> T:
        """``work`` on a connection whose pool was built with other settings, switched to
        ours for the duration (both are client-side settings: no round trip)."""
        saved = (conn.autocommit, conn.isolation_level)
        await conn.set_autocommit(True)
        await conn.set_isolation_level(READ_COMMITTED)
        try:
            return await work(conn)
        finally:
            if not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE:
                await conn.set_isolation_level(saved[1])
                await conn.set_autocommit(saved[0])

    async def run(
        self,
        doing: str,
        work: Callable[[AsyncConnection[TupleRow]], Awaitable[T]],
        *,
        repeatable: bool,
        subject: Subject | None = None,
    ) -> T:
        """``work`` on a borrowed connection, retried once after a lost connection if
        ``repeatable``; every failure the store can name is raised as its own type."""
        for attempt in (1, 2):
            conn: AsyncConnection[TupleRow] | None = None
            effect_error: Exception | None = None
            try:
                async with self.pool.connection() as conn:
                    if conn.autocommit and conn.isolation_level == READ_COMMITTED:
                        return await work(conn)
                    return await self._adjusted(conn, work)
            except EffectFailed as failed:
                effect_error = failed.error
            except PoolClosed as error:
                raise StoreClosed(
                    f"{doing}: this store's pool is closed (the block that opened it has "
                    "ended, or the pool was closed); use the store while it is open"
                ) from error
            except PoolTimeout as error:
                raise PostgresUnavailable(
                    f"{doing}: no connection came free in the pool within {self.pool.timeout:g}s; "
                    f"either the server is down or all {self.pool.max_size} connections are in "
                    "use (raise max_size, or the pool timeout)"
                ) from error
            except (UnicodeEncodeError, psycopg.DataError) as error:
                if subject is None:
                    raise
                raise subject.refusal(error) from error
            except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName) as error:
                raise SchemaMissing(
                    f"{doing}: the durable tables are not in schema {self.schema!r} of this "
                    f"database; run `await durable_postgres.migrate(pool, schema={self.schema!r})` "
                    "first (durable.open does it for you)"
                ) from error
            except psycopg.OperationalError as error:
                if not _lost(conn):
                    raise
                if repeatable and attempt == 1:
                    log.warning("connection lost while %s: %s; retrying", doing, _first_line(error))
                    await self._check_pool()
                    continue
                raise await self._lost(doing, error, repeatable) from error
            # Outside the except clauses, so the effect's exception keeps its own context.
            assert effect_error is not None
            if isinstance(effect_error, psycopg.OperationalError) and _lost(conn):
                raise await self._lost(doing, effect_error, False) from effect_error
            raise effect_error
        raise AssertionError("unreachable")  # pragma: no cover

    async def _lost(self, doing: str, error: BaseException, repeatable: bool) -> ConnectionLost:
        log.warning("connection lost while %s: %s; checking the pool", doing, _first_line(error))
        await self._check_pool()
        outcome = (
            "it was retried on a fresh connection and failed again"
            if repeatable
            else "it either committed or did not, never half; it is not retried, "
            "since repeating it could write twice"
        )
        return ConnectionLost(
            f"{doing}: the connection to Postgres was lost ({_first_line(error)}); "
            f"{outcome}. The pool has been checked, so the next call gets a fresh "
            "connection once the server answers"
        )

    async def _check_pool(self) -> None:
        try:
            await self.pool.check()
        except Exception as error:  # a failed check must not mask the loss being reported
            log.warning("checking the pool failed: %s", error)

    async def one(
        self,
        doing: str,
        query: bytes,
        params: Params,
        *,
        repeatable: bool,
        subject: Subject | None = None,
        move: str | None = None,
        lock: str | None = None,
    ) -> Row | None:
        """The first row of one statement (``None`` if it returned none)."""
        if self.gap is not None and move is not None:
            rows = await self.gapped(
                doing, [(query, params)], move, lock, 0, repeatable=repeatable, subject=subject
            )
            return rows[0]
        return await self._one(doing, query, params, repeatable=repeatable, subject=subject)

    async def _one(
        self,
        doing: str,
        query: bytes,
        params: Params,
        *,
        repeatable: bool,
        subject: Subject | None = None,
    ) -> Row | None:
        async def work(conn: AsyncConnection[TupleRow]) -> Row | None:
            cursor = await conn.execute(query, params, prepare=self.prepare)
            return await cursor.fetchone() if cursor.description is not None else None

        return await self.run(doing, work, repeatable=repeatable, subject=subject)

    async def grouped(
        self,
        doing: str,
        query: bytes,
        params: Params,
        *,
        subject: Subject | None = None,
        move: str,
        lock: str,
    ) -> Row | None:
        """The first row of one fenced, repeatable write, sent with the others of this
        store that arrive while one is on its way: group commit.

        A write that arrives when none of this store's is on its way goes at once, alone,
        by :meth:`one`: a lone write never waits for company. Writes that arrive meanwhile
        wait for it and then go together, on one connection: ``BEGIN``, one multi-row
        statement per kind (``batches.sql``), ``COMMIT``, one round trip and one commit. Each
        row decides its own verdict as its single-row statement would alone: the fence and
        first-writer-wins are applied row by row, so a stale write's row returns nothing (its
        caller raises ``Fenced``) and writes nothing, while the others' land. A caller is
        answered only once the ``COMMIT`` has returned. If the multi-row batch errors, it is
        sent again as a pipeline of the single-row statements.
        The statements are sent in the order of their workflows, so that two batches (of two
        processes) take the workflows' locks in one order and cannot deadlock each other.

        A statement that fails (a value the server refuses, a deadlock with another
        transaction, a lost connection) makes the server skip the rest, ``COMMIT``
        included, so nothing of the batch is written; every write in it is then sent again
        alone, where it meets its own fate. That is safe because only writes whose
        repetition is harmless come here (first-writer-wins records, renewals, releases,
        and fenced claims).
        """
        if self.gap is not None or not self.group_commit:
            return await self.one(
                doing, query, params, repeatable=True, subject=subject, move=move, lock=lock
            )
        return cast(Row | None, await self.writes.submit(_Write(doing, query, params, subject)))

    async def _multirow(self, ordered: Sequence[_Write]) -> list[Row | _AskAgain | None]:
        """Send ``ordered`` (records, renewals, releases, claims) as one multi-row statement
        per kind, in one transaction and one round trip (a batch of one kind is that one
        statement in autocommit; of several, a pipeline ``BEGIN``, the statements in the
        order renewals, records, releases, claims, ``COMMIT``), and return each write's own
        verdict: the row its single-row statement would have returned, ``None`` where it
        was fenced (or, for a claim, found the workflow held), or :data:`_ASK_AGAIN` for a
        record that lost its key to a write that committed while the statement ran (see
        ``batches.sql``), to be asked again alone.

        Raises on anything else the batch cannot decide (a kind it does not carry, an error
        from the server), and then nothing of it was written: the caller falls back.
        """
        records: list[int] = []
        renewals: list[int] = []
        releases: list[int] = []
        claims: list[int] = []
        for index, write in enumerate(ordered):
            kind = self.single.get(write.query)
            if kind == "record":
                records.append(index)
            elif kind == "renew":
                renewals.append(index)
            elif kind == "release":
                releases.append(index)
            elif kind == "claim":
                claims.append(index)
            else:
                raise ValueError("a write that has no multi-row form")
        steps: list[tuple[bytes, Params]] = []
        if renewals:
            steps.append(
                (
                    self.batches["renew_batch"],
                    {
                        "workflow": [ordered[i].params["workflow"] for i in renewals],
                        "token": [ordered[i].params["token"] for i in renewals],
                    },
                )
            )
        if records:
            rows = []
            for i in records:
                params = ordered[i].params
                rows.append(
                    (
                        i,
                        params["workflow"],
                        params["token"],
                        params["key"],
                        params["value"],
                        params["operation"],
                    )
                )
            steps.append(
                (
                    self.batches["record_batch"],
                    {"rows": json.dumps(rows, ensure_ascii=False, check_circular=False)},
                )
            )

        if releases:
            # After the records: a record its pass sent before letting go lands first.
            released = [
                (i, ordered[i].params["workflow"], ordered[i].params["token"]) for i in releases
            ]
            steps.append(
                (
                    self.batches["release_batch"],
                    {"rows": json.dumps(released, ensure_ascii=False, check_circular=False)},
                )
            )
        if claims:
            # Last: a workflow released in this batch is free for a claim in it.
            claimed = [
                (
                    i,
                    ordered[i].params["workflow"],
                    _interval(ordered[i].params["liveness"]),
                    _interval(ordered[i].params["budget"]),
                )
                for i in claims
            ]
            steps.append(
                (
                    self.batches["claim_batch"],
                    {"rows": json.dumps(claimed, ensure_ascii=False, check_circular=False)},
                )
            )

        async def work(conn: AsyncConnection[TupleRow]) -> list[list[Row]]:
            if len(steps) == 1:
                # One statement in autocommit is its own transaction: one round trip and
                # one commit without BEGIN, COMMIT or a pipeline, all or nothing as well.
                query, params = steps[0]
                cursor = await conn.execute(query, params, prepare=self.prepare)
                return [await cursor.fetchall()]
            try:
                async with conn.pipeline():
                    await conn.execute(_BEGIN)
                    cursors = [
                        await conn.execute(query, params, prepare=self.prepare)
                        for query, params in steps
                    ]
                    await conn.execute(_COMMIT)
            except BaseException:
                if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
                    await conn.rollback()
                raise
            return [await cursor.fetchall() for cursor in cursors]

        results = await self.run(f"group commit of {len(ordered)} writes", work, repeatable=False)
        verdicts: list[Row | _AskAgain | None] = [None] * len(ordered)
        if renewals:
            renewed = {(workflow, token) for workflow, token in results[0]}
            for i in renewals:
                params = ordered[i].params
                if (params["workflow"], params["token"]) in renewed:
                    verdicts[i] = (params["token"],)
        if records:
            for n, known, value, operation in results[1 if renewals else 0]:
                verdicts[n] = (value, operation) if known else _ASK_AGAIN
        if claims:
            tokens: dict[str, int] = {workflow: token for workflow, token in results[-1]}
            for i in claims:
                token = tokens.get(str(ordered[i].params["workflow"]))
                verdicts[i] = None if token is None else (token,)
        return verdicts

    async def history(self, workflow: str) -> list[Row]:
        """The rows of ``history`` for ``workflow``, read with the others of this store that
        arrive while one is on its way: one ``history_batch`` for all of them.

        The reads of passes that start together (each after its claim) would each borrow a
        connection for one statement; grouped, they cost one. A read that finds none on its
        way goes at once, alone. Each caller gets exactly its own workflow's rows, from a
        statement that began after its call, as a read of its own would. If the grouped read
        fails, each goes again alone and meets its own fate.
        """
        doing = f"history of {workflow!r}"
        if not self.group_commit or self.gap is not None:
            return await self.rows(doing, self.history_query, {"workflow": workflow})
        return cast(list[Row], await self.reads.submit(_Read(workflow)))

    async def rows(self, doing: str, query: bytes, params: Params) -> list[Row]:
        """Every row of one read."""

        async def work(conn: AsyncConnection[TupleRow]) -> list[Row]:
            cursor = await conn.execute(query, params, prepare=self.prepare)
            return await cursor.fetchall()

        return await self.run(doing, work, repeatable=True)

    async def transaction(
        self,
        doing: str,
        steps: Sequence[tuple[bytes, Params]],
        *,
        repeatable: bool,
        subject: Subject | None = None,
        move: str | None = None,
        lock: str | None = None,
        split: int = 0,
    ) -> list[Row | None]:
        """Several statements as one transaction, sent together: one round trip, one commit.
        Returns each statement's first row (``None`` for one that returned none)."""
        if self.gap is not None and move is not None:
            return await self.gapped(
                doing, steps, move, lock, split, repeatable=repeatable, subject=subject
            )

        async def work(conn: AsyncConnection[TupleRow]) -> list[Row | None]:
            # BEGIN and COMMIT as statements of the pipeline rather than a psycopg
            # transaction block, which syncs after its BEGIN: this way the whole transaction
            # is one flush and one Sync. A statement that fails makes the server skip the rest,
            # COMMIT included, up to that Sync; the transaction is then rolled back here.
            try:
                async with conn.pipeline():
                    await conn.execute(_BEGIN)
                    cursors = [
                        await conn.execute(query, params, prepare=self.prepare)
                        for query, params in steps
                    ]
                    await conn.execute(_COMMIT)
            except BaseException:
                if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
                    await conn.rollback()
                raise
            return [
                await cursor.fetchone() if cursor.description is not None else None
                for cursor in cursors
            ]

        return await self.run(doing, work, repeatable=repeatable, subject=subject)

    async def gapped(
        self,
        doing: str,
        steps: Sequence[tuple[bytes, Params]],
        move: str,
        lock: str | None,
        split: int,
        *,
        repeatable: bool,
        subject: Subject | None = None,
    ) -> list[Row | None]:
        """``steps`` as one transaction with the test's gap inside it (see the class)."""
        gap = self.gap
        assert gap is not None
        workflow = str(steps[0][1].get("workflow", "")) if steps else ""

        async def work(conn: AsyncConnection[TupleRow]) -> list[Row | None]:
            rows: list[Row | None] = []
            async with conn.transaction():
                if lock is not None:
                    await conn.execute(self.locks[lock], {"workflow": workflow})
                for index, (query, params) in enumerate(steps):
                    if index == split:
                        await gap(move, workflow)
                    cursor = await conn.execute(query, params, prepare=self.prepare)
                    rows.append(await cursor.fetchone() if cursor.description is not None else None)
            return rows

        return await self.run(doing, work, repeatable=repeatable, subject=subject)


class _AskAgain:
    """A record whose winner its batch could not read: it is asked again alone."""


_ASK_AGAIN = _AskAgain()


class _Write(Waiting):
    """One write waiting for a group commit; its caller awaits :attr:`future`."""

    __slots__ = ("doing", "params", "query", "subject")

    def __init__(self, doing: str, query: bytes, params: Params, subject: Subject | None) -> None:
        super().__init__()
        self.doing = doing
        self.query = query
        self.params = params
        self.subject = subject

    def order(self) -> str:
        return str(self.params.get("workflow", ""))


class _Writes(GroupCommit[_Write]):
    """Group commit of one store's fenced, repeatable writes: see :meth:`Connections.grouped`."""

    __slots__ = ("db",)

    def __init__(self, db: Connections) -> None:
        super().__init__()
        self.db = db

    async def alone(self, write: _Write) -> Row | None:
        return await self.db._one(
            write.doing, write.query, write.params, repeatable=True, subject=write.subject
        )

    async def together(self, batch: list[_Write]) -> None:
        db = self.db
        ordered = sorted(batch, key=_Write.order)
        try:
            verdicts = await db._multirow(ordered)
        except Exception as error:
            log.debug(
                "a multi-row group commit of %d writes failed (%s); sending them as a "
                "pipeline of single-row statements",
                len(batch),
                error,
            )
        else:
            again = []
            for write, verdict in zip(ordered, verdicts, strict=True):
                if isinstance(verdict, _AskAgain):
                    again.append(write)
                else:
                    write.answer(verdict)
            if again:
                await asyncio.gather(*(self.answer_alone(write) for write in again))
            return
        try:
            rows = await db.transaction(
                f"group commit of {len(ordered)} writes",
                [(write.query, write.params) for write in ordered],
                repeatable=False,
            )
        except Exception as error:
            log.debug("a group commit of %d writes failed (%s); each goes alone", len(batch), error)
            await asyncio.gather(*(self.answer_alone(write) for write in ordered))
            return
        for write, row in zip(ordered, rows, strict=True):
            write.answer(row)


class _Read(Waiting):
    """One history read waiting for a grouped read."""

    __slots__ = ("workflow",)

    def __init__(self, workflow: str) -> None:
        super().__init__()
        self.workflow = workflow


class _Reads(GroupCommit[_Read]):
    """History reads of one store grouped: see :meth:`Connections.history`. A read commits
    nothing, so the gate of writes is reused only for its who-waits-for-whom."""

    __slots__ = ("db",)

    def __init__(self, db: Connections) -> None:
        super().__init__()
        self.db = db

    async def alone(self, write: _Read) -> list[Row]:
        return await self.db.rows(
            f"history of {write.workflow!r}", self.db.history_query, {"workflow": write.workflow}
        )

    async def together(self, batch: list[_Read]) -> None:
        workflows = sorted({read.workflow for read in batch})
        try:
            rows = await self.db.rows(
                f"history of {len(workflows)} workflows",
                self.db.batches["history_batch"],
                {"workflows": workflows},
            )
        except Exception as error:
            log.debug(
                "a grouped read of %d histories failed (%s); each goes alone", len(batch), error
            )
            await asyncio.gather(*(self.answer_alone(read) for read in batch))
            return
        found: dict[str, list[Row]] = {}
        for row in rows:
            found.setdefault(row[0], []).append(row[1:])
        for read in batch:
            read.answer(found.get(read.workflow, []))


def _interval(duration: object) -> str:
    """``duration`` (a ``timedelta``) as interval text, as psycopg writes one: days, seconds
    and microseconds apart, signed, read alike whatever the server's ``IntervalStyle``."""
    if not isinstance(duration, timedelta):
        raise TypeError(f"a claim's liveness and budget are timedeltas, got {duration!r}")
    days, seconds, micros = duration.days, duration.seconds, duration.microseconds
    return f"{days:+d} day {seconds:+d} second {micros:+d} microsecond"


def _lost(conn: AsyncConnection[TupleRow] | None) -> bool:
    return conn is not None and (conn.closed or conn.broken)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
