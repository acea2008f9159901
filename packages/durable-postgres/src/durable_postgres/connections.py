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

import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import psycopg
import psycopg.errors
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
    """Borrowing from one pool for one schema, with errors translated into the store's own."""

    __slots__ = ("pool", "prepare", "schema")

    def __init__(
        self, pool: AsyncConnectionPool[Any], schema: str, *, prepare: bool = True
    ) -> None:
        self.pool = pool
        self.schema = schema
        self.prepare = prepare

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
    ) -> Row | None:
        """The first row of one statement (``None`` if it returned none)."""

        async def work(conn: AsyncConnection[TupleRow]) -> Row | None:
            cursor = await conn.execute(query, params, prepare=self.prepare)
            return await cursor.fetchone() if cursor.description is not None else None

        return await self.run(doing, work, repeatable=repeatable, subject=subject)

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
    ) -> list[Row | None]:
        """Several statements as one transaction, sent together: one round trip, one commit.
        Returns each statement's first row (``None`` for one that returned none)."""

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


def _lost(conn: AsyncConnection[TupleRow] | None) -> bool:
    return conn is not None and (conn.closed or conn.broken)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
