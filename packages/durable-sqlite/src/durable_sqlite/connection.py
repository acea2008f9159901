"""The connection every SQLite store half shares, and the one way work reaches it.

aiosqlite runs a ``sqlite3`` connection on a thread of its own and hands each call to that
thread through a queue; every ``await connection.execute(...)`` is one trip there and
back, and that trip, not SQLite, is most of what a small write costs. A durable write of
several statements is a transaction (``BEGIN IMMEDIATE``, the statements, ``COMMIT``), so
issuing them one ``await`` at a time would cost a trip each, and would let another task's
statements land between them on the same connection, where they would join the open
transaction. Instead each transaction here is one plain function, and
:func:`transaction` sends the whole function to the thread in a single trip. The thread
runs queued functions one at a time, so two tasks' transactions on one connection never
interleave and no lock is needed: the queue is the lock.

Even a write that is one statement gets its ``BEGIN IMMEDIATE`` and ``COMMIT``, though
SQLite would run it as a transaction of its own without them. A lone statement's
transaction commits only once no other writing statement on its connection is unfinished,
so an ``INSERT``/``UPDATE ... RETURNING`` whose rows the application is still reading on a
shared connection would hold back a write the store had already reported done, and a
connection not in autocommit mode would never commit it at all. ``COMMIT`` either commits
or fails, and the store says so (:func:`within_transaction`). The two statements cost
about 9 µs a step on the connection's thread, measured on the machine
``docs/stores/sqlite.md`` reports on.

That function-on-the-thread call is aiosqlite's ``Connection._execute``, which has no
public spelling; it has kept its shape since aiosqlite 0.17 and :func:`check_driver`
refuses, with a clear message, a release that changed it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import sqlite3
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import cache, partial
from importlib.resources import files
from os import PathLike
from pathlib import Path
from typing import Any, TypeVar, cast

import aiosqlite
import durable.group
from durable.clock import Clock
from durable.group import Waiting
from durable.interfaces import StoreError, StoreUnavailable
from durable.plugins import Gap

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "SCHEMA_VERSION",
    "TABLES",
    "DatabaseRefused",
    "ForeignTable",
    "GroupCommit",
    "NotADatabase",
    "SqliteBusy",
    "Synchronous",
    "ThreadGap",
    "configure",
    "connect",
    "create_schema",
    "group_commit",
]

T = TypeVar("T")

log = logging.getLogger("durable_sqlite.connection")

SCHEMA_VERSION = 4
"""The shape of the tables in ``schema.sql``; stored in ``durable_meta``. Version 1 (the
release before workflow lifecycle) is migrated on open by ``migrate_2.sql``, version 2
(the release before queue limits) by ``migrate_3.sql``, and version 3 (the release before
each record kept its operation) by ``migrate_4.sql``."""

ADDED_IN: dict[int, dict[str, tuple[str, ...]]] = {4: {"durable_checkpoint": ("operation",)}}
"""Columns a version added to a table that an older file holds without them: such a file's
table is the store's own, missing only what its migration adds, and is not refused."""

TABLES = (
    "durable_checkpoint",
    "durable_claim",
    "durable_queue",
    "durable_workflow",
    "durable_limit",
    "durable_slot",
    "durable_handout",
    "durable_priority",
    "durable_meta",
)
"""The tables the store owns. Any other table in the file is the application's."""

DEFAULT_BUSY_TIMEOUT = timedelta(seconds=5)
"""How long a write waits for another connection's write to finish before failing."""

_MINIMUM_SQLITE = (3, 35, 0)  # RETURNING, on which every upsert here relies

IN_MEMORY = (
    "an in-memory SQLite database cannot be a durable store: it is gone when its connection "
    "closes, so nothing survives the crash a durable store exists for, and no other "
    "connection or process can reach it to resume the work. Name a file "
    "(sqlite:///orders.db) or, for tests, use the memory:// store"
)


class Synchronous(StrEnum):
    """How hard a commit pushes to the disk before it returns.

    ``FULL`` (the default) syncs the write-ahead log at every commit, so a write that
    returned survives power loss and an operating-system crash: what "durable before it
    returns" means. ``NORMAL`` syncs only at checkpoints, so a returned write survives the
    process crashing but may be lost with the machine; it costs a fraction of ``FULL``.
    """

    FULL = "FULL"
    NORMAL = "NORMAL"

    @classmethod
    def parse(cls, value: object) -> Synchronous:
        if isinstance(value, Synchronous):
            return value
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                return cls(value.upper())
        raise ValueError(
            f"synchronous must be 'full' or 'normal', got {value!r}: a durable store does not "
            "offer OFF, which loses returned writes when the process dies"
        )


class DatabaseRefused(StoreError):
    """The file cannot hold a durable store; it has been left as it was."""


class NotADatabase(DatabaseRefused):
    """The path names something that is not an SQLite database (or cannot be opened)."""


class ForeignTable(DatabaseRefused):
    """The database has a table of a name the store owns, with another shape."""


class SqliteBusy(StoreUnavailable):
    """Another connection held the file's write lock for the whole busy timeout.

    A :class:`~durable.interfaces.StoreUnavailable`: the transaction that waited wrote
    nothing, and trying again later is the answer, so a worker waits it out and never
    counts it as an attempt of the workflow whose pass met it.
    """


# -- SQL ---------------------------------------------------------------------------------


def _read(resource: str) -> str:
    return files("durable_sqlite").joinpath(resource).read_text(encoding="utf-8")


def split_script(script: str) -> list[str]:
    """The complete statements of ``script``, in order, each with its comments."""
    statements: list[str] = []
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    leftover = [line for line in pending.splitlines() if line.strip()]
    if any(not line.lstrip().startswith("--") for line in leftover):
        raise ValueError(f"an incomplete statement ends the script: {pending!r}")
    return statements


@cache
def schema() -> tuple[str, ...]:
    """The statements of ``schema.sql``."""
    return tuple(split_script(_read("schema.sql")))


@cache
def statements(resource: str = "statements.sql") -> dict[str, str]:
    """Every statement of ``resource`` by its ``-- name:`` line."""
    named: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []

    def close() -> None:
        # A block runs to the next "-- name:", so comments that head the next section
        # (and blank lines) trail it; they are not part of the statement.
        while lines and (not lines[-1].strip() or lines[-1].lstrip().startswith("--")):
            lines.pop()
        if name is not None:
            text = "".join(lines).strip()
            if not sqlite3.complete_statement(text):
                raise ValueError(f"statement {name!r} in {resource} is incomplete")
            named[name] = text

    for line in _read(resource).splitlines(keepends=True):
        if line.startswith("-- name:"):
            close()
            name = line.removeprefix("-- name:").strip()
            lines = []
        elif name is not None:
            lines.append(line)
    close()
    return named


def statement(name: str, resource: str = "statements.sql") -> str:
    return statements(resource)[name]


# -- time ----------------------------------------------------------------------------------

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def to_micros(moment: datetime) -> int:
    """``moment`` (aware) as integer microseconds since the Unix epoch."""
    return (moment - _EPOCH) // _MICROSECOND


def from_micros(micros: int) -> datetime:
    """The aware UTC moment ``micros`` microseconds after the Unix epoch."""
    return _EPOCH + timedelta(microseconds=micros)


def duration_micros(duration: timedelta) -> int:
    return duration // _MICROSECOND


def clock_reader(clock: Clock | None) -> Callable[[], int | None]:
    """What a transaction binds as ``:now``: a given clock's reading, or ``None`` where the
    statements read SQLite's clock themselves (see :func:`statements_for`)."""
    if clock is None:
        return _no_reading

    def read(clock: Clock = clock) -> int:
        return to_micros(clock.now())

    return read


def _no_reading() -> None:
    return None


_NOW = re.compile(r":now\b")


@cache
def statements_for(sqlite_clock: bool, resource: str = "statements.sql") -> dict[str, str]:
    """The statements of ``resource`` for one choice of the store's clock.

    The statements name the moment ``:now``. With SQLite's own clock (the default, a store
    given no :class:`Clock`), ``:now`` is written out as the ``now`` statement in a
    subquery, so each statement reads the clock itself at the moment it writes, for no
    extra statement; SQLite holds ``'now'`` fixed within one statement, so every use of it
    in one statement agrees. With a given clock, ``:now`` is bound to its reading, taken on
    the connection's thread inside the transaction. Either way one clock stamps history
    and measures every lease.
    """
    named = statements(resource)
    if not sqlite_clock:
        return dict(named)
    reading = "(" + statements()["now"].rstrip().removesuffix(";") + ")"
    return {name: _NOW.sub(reading, text) for name, text in named.items()}


def numbered(text: str, names: tuple[str, ...]) -> str:
    """``text`` with each ``:name`` of ``names`` written ``?N``, ``N`` its place in
    ``names`` counting from 1, so that the statement binds a tuple in that order.

    A dict of named parameters makes sqlite3 ask the statement for each parameter's name
    and look it up in the dict, which costs a recorded step about 1.5 µs on the
    connection's thread against a tuple (on the machine ``docs/performance.md`` reports
    on); only the statement every step runs is worth spelling this way. Every named
    parameter must be in ``names``: one left over would bind nothing, so it is refused.
    A substitution in the text, for the store's own statements, which hold no ``:name``
    inside a string literal.
    """
    for number, name in enumerate(names, start=1):
        text = re.sub(rf":{name}\b", f"?{number}", text)
    code = "\n".join(line.split("--", 1)[0] for line in text.splitlines())
    left = re.findall(r"(?<![\w:]):[A-Za-z_]\w*", code)
    if left:
        raise ValueError(f"named parameters {left} are not among {names}")
    return text


# -- the worker thread -----------------------------------------------------------------------


def check_driver(connection: object) -> aiosqlite.Connection:
    """``connection`` as an aiosqlite connection this package can drive, or a clear error."""
    if not isinstance(connection, aiosqlite.Connection):
        raise TypeError(
            f"the SQLite stores take an aiosqlite.Connection (from durable_sqlite.connect), "
            f"got {connection!r}"
        )
    execute: object = getattr(connection, "_execute", None)
    if not callable(execute):
        raise StoreError(
            f"aiosqlite {aiosqlite.__version__} no longer has Connection._execute, which "
            "durable-sqlite uses to run a whole transaction on the connection's thread in "
            "one trip; install an aiosqlite release between 0.20 and 0.22"
        )
    return connection


_Execute = Callable[..., Awaitable[Any]]
"""aiosqlite's ``Connection._execute``, typed once here: a step goes through it, and
spelling the alias inside :func:`_execute` would build it anew on every call."""


def _execute(connection: aiosqlite.Connection) -> _Execute:
    return cast(_Execute, connection._execute)


def _over(connection: aiosqlite.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    return work(connection._conn)


async def on_thread(connection: aiosqlite.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    """Run ``work`` over the ``sqlite3`` connection on its own thread: one trip."""
    return cast(T, await _execute(connection)(_over, connection, work))


def within_transaction(work: Callable[[sqlite3.Connection], T], raw: sqlite3.Connection) -> T:
    """Run ``work`` inside one ``BEGIN IMMEDIATE`` transaction, on the connection's thread."""
    if raw.in_transaction:
        raise StoreError(
            "the SQLite connection has a transaction open that durable did not start; "
            "commit or roll it back before using the store (durable_sqlite.connect opens "
            "connections in autocommit mode so that none is left open implicitly)"
        )
    try:
        raw.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as error:
        raise _busy_or(error) from error
    try:
        result = work(raw)
        raw.execute("COMMIT")
    except BaseException as error:
        if _still_open(raw):
            raw.execute("ROLLBACK")
        if isinstance(error, sqlite3.OperationalError) and "statements in progress" in str(error):
            raise StoreError(
                "durable could not commit on this SQLite connection because a writing "
                "statement of the application's is unfinished on it (an INSERT, UPDATE or "
                "DELETE ... RETURNING whose rows are still being read); the rollback that "
                "followed undid that statement's changes too. Read such a statement to its "
                "end before the store writes, or give the store a connection of its own"
            ) from error
        if isinstance(error, sqlite3.OperationalError) and _is_busy(error):
            raise _busy_or(error) from error
        raise
    return result


def _is_busy(error: sqlite3.OperationalError) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    if code is not None:
        return (code & 0xFF) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
    return "locked" in str(error) or "busy" in str(error)


def _busy_or(error: sqlite3.OperationalError) -> Exception:
    if not _is_busy(error):
        return error
    return SqliteBusy(
        f"the SQLite file is busy: another connection held its write lock for the whole "
        f"busy timeout ({error}); nothing was written, try again (a worker waits this out)"
    )


def _still_open(raw: sqlite3.Connection) -> bool:
    # A statement that failed may already have ended the transaction (SQLite rolls back
    # on some errors by itself), and a second ROLLBACK would mask the first error.
    return raw.in_transaction


async def transaction(
    connection: aiosqlite.Connection,
    work: Callable[[sqlite3.Connection], T],
    *,
    alone: bool = False,
) -> T:
    """Run ``work`` inside one ``BEGIN IMMEDIATE`` transaction, in one trip to the thread.

    ``IMMEDIATE`` takes the write lock at the start, so a transaction that must wait for
    another connection's write waits there, under ``busy_timeout``, rather than failing
    with ``database is locked`` when a read it began with tries to become a write. If
    ``work`` raises, everything it wrote is rolled back, and nothing else's.

    With group commit on (the default, see :func:`group_commit`), works that arrive while
    an earlier transaction of this connection is on its way share one transaction and
    one commit, each inside a savepoint of its own (:class:`GroupCommit`); a work that
    arrives when nothing is on its way goes at once, alone. ``alone=True`` keeps a work
    out of any batch: one that runs the application's code (a ``transact`` effect), which
    could end the transaction it shares with other callers' writes.
    """
    if alone:
        return cast(T, await _execute(connection)(_transact, connection, work))
    return await batcher_of(connection).write(work)  # alone too while group commit is off


def batcher_of(connection: aiosqlite.Connection) -> GroupCommit:
    """The one :class:`GroupCommit` of ``connection``, made on first use.

    A store half looks it up once and keeps it: a step's write then goes straight to
    :meth:`GroupCommit.write` instead of finding it again in a weak dictionary, which
    builds a weak reference for every lookup. :func:`group_commit` turns this same object
    on and off, so a kept one follows it.
    """
    batcher = _batchers.get(connection)
    if batcher is None:
        batcher = _batchers[connection] = GroupCommit(connection)
    return batcher


def _transact(connection: aiosqlite.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    return within_transaction(work, connection._conn)


# -- group commit ------------------------------------------------------------------------------


class _Work(Waiting):
    """One work waiting for a batch of the connection's :class:`GroupCommit`."""

    __slots__ = ("work",)

    def __init__(self, work: Callable[[sqlite3.Connection], Any]) -> None:
        super().__init__()
        self.work = work


class GroupCommit(durable.group.GroupCommit[_Work]):
    """Writes of one connection that arrive together, sent in one trip and one commit.

    A commit under ``synchronous=FULL`` is a sync of the write-ahead log, and a trip to
    the connection's thread is most of what a small write costs (see the module's
    docstring); concurrent passes on one process each paid both. Here a work that
    arrives while nothing of this connection is on its way goes at once, alone, exactly
    as without group commit: a lone write never waits for company. Works that arrive
    while one is on its way wait for it, and then go together: one trip, one
    ``BEGIN IMMEDIATE``, each work inside ``SAVEPOINT``/``RELEASE``, one ``COMMIT``.

    Each verdict stays its own. A work reads what the works before it in the batch
    wrote, as it would had they committed just before it (the same order the thread's
    queue would have run them in), so a fence check or a first-writer-wins insert
    decides exactly as it would have alone. A work that raises (a stale token's
    :class:`~durable.interfaces.Fenced`, a bad value) is rolled back to its savepoint and
    its error goes to its caller only; the others commit. A caller is answered only after
    the ``COMMIT`` returned, so a recorded write is durable when its ``await`` returns.
    If the commit itself fails, nothing of the batch was written and every caller in it
    gets that error. If a work's failure ended the whole transaction (SQLite rolls back
    by itself on a full disk or an I/O error), the works before it, rolled back with it,
    are run again in a fresh transaction: nothing they said has been answered yet.
    """

    __slots__ = ("__weakref__", "connection", "enabled")

    def __init__(self, connection: aiosqlite.Connection) -> None:
        super().__init__()
        self.connection = connection
        self.enabled = True

    def write(self, work: Callable[[sqlite3.Connection], T]) -> Awaitable[T]:
        """``work`` in a transaction of its own, or in the next batch when group commit is
        on: :func:`transaction` for a store half that keeps its batcher. A plain function
        handing back the awaitable, so that a step's write pays no coroutine of its own."""
        if not self.enabled:
            return cast(Awaitable[T], _execute(self.connection)(_transact, self.connection, work))
        return cast(Awaitable[T], self.submit(_Work(work)))

    def take(self) -> bool:
        """Whether a write may go at once and alone, sent by its caller (:func:`_transact`
        by :func:`_execute`), who then calls :meth:`sent` once it is back, however it
        ended: see :meth:`durable.group.GroupCommit.take`. ``False`` also while group
        commit is off, which sends the caller to :meth:`write`."""
        return self.enabled and super().take()

    async def alone(self, write: _Work) -> Any:
        return await _execute(self.connection)(_transact, self.connection, write.work)

    async def together(self, batch: list[_Work]) -> None:
        """The batch in one trip and one transaction; each caller's future answered."""
        outcomes: list[tuple[bool, object]] = await _execute(self.connection)(
            _run_batch, self.connection, [write.work for write in batch]
        )
        for write, (ok, value) in zip(batch, outcomes, strict=True):
            # A caller that was cancelled hears nothing; its write stands or not regardless.
            if ok:
                write.answer(value)
            else:
                write.fail(cast(BaseException, value))


_batchers: weakref.WeakKeyDictionary[aiosqlite.Connection, GroupCommit] = (
    weakref.WeakKeyDictionary()
)


def group_commit(connection: aiosqlite.Connection, enabled: bool) -> None:
    """Turn group commit on or off for every store half over ``connection``.

    On by default. Off, each write is its own transaction and its own commit, as before
    this release (``sqlite:///orders.db?group_commit=0``). The guarantees are the same
    either way; only how many writes share a commit differs.
    """
    check_driver(connection)
    batcher_of(connection).enabled = enabled


_SAVEPOINT = "SAVEPOINT durable_write"
_ROLLBACK_TO = "ROLLBACK TO durable_write"
_RELEASE = "RELEASE durable_write"


def _run_batch(
    connection: aiosqlite.Connection, works: list[Callable[[sqlite3.Connection], Any]]
) -> list[tuple[bool, object]]:
    """On the connection's thread: every work in one transaction, each in a savepoint;
    ``(True, result)`` or ``(False, error)`` for each, in order."""
    raw = connection._conn
    outcomes: list[tuple[bool, object]] = [(False, None)] * len(works)
    remaining = list(range(len(works)))
    while remaining:
        remaining = _attempt(raw, works, remaining, outcomes)
    return outcomes


def _attempt(
    raw: sqlite3.Connection,
    works: list[Callable[[sqlite3.Connection], Any]],
    remaining: list[int],
    outcomes: list[tuple[bool, object]],
) -> list[int]:
    """One transaction over ``remaining``; the works to run again (none once committed)."""
    if raw.in_transaction:
        raise StoreError(_FOREIGN_TRANSACTION)
    try:
        raw.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as error:
        raise _busy_or(error) from error
    written: list[int] = []
    try:
        for position, index in enumerate(remaining):
            raw.execute(_SAVEPOINT)
            try:
                value = works[index](raw)
            except BaseException as error:  # Fenced is an Interruption, no Exception
                outcomes[index] = (False, _mapped(error) if isinstance(error, Exception) else error)
                if not _still_open(raw):
                    # SQLite rolled the whole transaction back: the works before this one
                    # are undone too, and go again in a fresh one.
                    return written + remaining[position + 1 :]
                raw.execute(_ROLLBACK_TO)
                raw.execute(_RELEASE)
            else:
                raw.execute(_RELEASE)
                outcomes[index] = (True, value)
                written.append(index)
        raw.execute("COMMIT")
    except BaseException as error:
        if _still_open(raw):
            raw.execute("ROLLBACK")
        if isinstance(error, Exception):
            mapped = _mapped(error)
            if mapped is not error:
                raise mapped from error
        raise
    return []


_FOREIGN_TRANSACTION = (
    "the SQLite connection has a transaction open that durable did not start; "
    "commit or roll it back before using the store (durable_sqlite.connect opens "
    "connections in autocommit mode so that none is left open implicitly)"
)


def _mapped(error: Exception) -> Exception:
    """``error`` as :func:`within_transaction` would raise it."""
    if isinstance(error, sqlite3.OperationalError) and "statements in progress" in str(error):
        mapped = StoreError(
            "durable could not commit on this SQLite connection because a writing "
            "statement of the application's is unfinished on it (an INSERT, UPDATE or "
            "DELETE ... RETURNING whose rows are still being read); the rollback that "
            "followed undid that statement's changes too. Read such a statement to its "
            "end before the store writes, or give the store a connection of its own"
        )
        mapped.__cause__ = error
        return mapped
    if isinstance(error, sqlite3.OperationalError) and _is_busy(error):
        busy = _busy_or(error)
        busy.__cause__ = error
        return busy
    return error


class ThreadGap:
    """A test's :data:`durable.plugins.Gap`, awaited from inside a transaction.

    A transaction here is one function run on the connection's thread, so a gap between a
    move's reads and its writes has to be taken there: calling this object blocks the
    thread, with the ``BEGIN IMMEDIATE`` write lock held, while the event loop the store
    was opened on runs ``gap(move, workflow)``. Another connection's write meanwhile waits
    for the lock (under its busy timeout), and this connection's other work waits its turn
    in the thread's queue, which is what a held move must show. What the gap raises is
    raised in the transaction, which then rolls back. Only testbeds build one: a store
    opened without ``gap=`` has ``None`` in its place and checks nothing else.
    """

    __slots__ = ("gap", "loop")

    def __init__(self, gap: Gap) -> None:
        self.gap = gap
        self.loop = asyncio.get_running_loop()

    def __call__(self, move: str, workflow: str) -> None:
        asyncio.run_coroutine_threadsafe(self._awaited(move, workflow), self.loop).result()

    async def _awaited(self, move: str, workflow: str) -> None:
        await self.gap(move, workflow)


def thread_gap(gap: Gap | None) -> ThreadGap | None:
    """``gap`` made callable from the connection's thread; ``None`` stays ``None``."""
    return None if gap is None else ThreadGap(gap)


# -- opening ---------------------------------------------------------------------------------


@cache
def _expected_columns() -> dict[str, tuple[tuple[str, str, int, int], ...]]:
    raw = sqlite3.connect(":memory:")
    try:
        for text in schema():
            raw.execute(text)
        return {table: _columns(raw, table) for table in TABLES}
    finally:
        raw.close()


def _columns(raw: sqlite3.Connection, table: str) -> tuple[tuple[str, str, int, int], ...]:
    # (name, declared type, not null, position in the primary key)
    rows = raw.execute(f"PRAGMA table_xinfo({table})").fetchall()
    return tuple((row[1], str(row[2]).upper(), row[3], row[5]) for row in rows)


def _file_of(raw: sqlite3.Connection) -> str:
    for row in raw.execute("PRAGMA database_list"):
        if row[1] == "main":
            return str(row[2]) or ":memory:"
    return "?"


def _older(table: str, version: int | None) -> tuple[tuple[str, str, int, int], ...] | None:
    """The table's columns as a file of ``version`` holds them, when a later version added
    some; ``None`` when it has the current shape (or no version is known)."""
    if version is None:
        return None
    added = {c for v, tables in ADDED_IN.items() if v > version for c in tables.get(table, ())}
    if not added:
        return None
    return tuple(c for c in _expected_columns()[table] if c[0] not in added)


def _check_tables(raw: sqlite3.Connection, version: int | None = None) -> None:
    present = {row[0] for row in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    expected = _expected_columns()
    for table in TABLES:
        if table not in present:
            continue
        found = _columns(raw, table)
        if found != expected[table] and found != _older(table, version):
            have = ", ".join(f"{c[0]} {c[1]}".strip() for c in found) or "none"
            want = ", ".join(f"{c[0]} {c[1]}".strip() for c in expected[table])
            raise ForeignTable(
                f"{_file_of(raw)} already has a table named {table} that durable-sqlite did "
                f"not create (its columns: {have}; durable's: {want}). The file has not been "
                "changed; point the store at another file, or rename that table"
            )


def _version(raw: sqlite3.Connection) -> int | None:
    """The file's schema version, or ``None`` for a file the store has not been created in."""
    present = raw.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'durable_meta'"
    ).fetchone()
    if present is None:
        return None
    try:
        row = raw.execute("SELECT value FROM durable_meta WHERE name = 'schema_version'").fetchone()
    except sqlite3.OperationalError:
        return None  # somebody else's durable_meta: _check_tables refuses it by name
    return row[0] if row is not None and isinstance(row[0], int) else None


def _check_version(raw: sqlite3.Connection) -> int | None:
    version = _version(raw)
    if version is not None and version > SCHEMA_VERSION:
        raise DatabaseRefused(
            f"{_file_of(raw)} holds a durable store of schema version {version}, written by a "
            f"newer durable-sqlite than this one (which knows version {SCHEMA_VERSION}); "
            "upgrade durable-sqlite"
        )
    return version


def _into_wal(raw: sqlite3.Connection, busy_timeout: timedelta) -> object:
    """Put the file in WAL mode, waiting out a concurrent opener.

    A file already in WAL needs nothing (and the check takes no lock). Switching does: when
    two processes open a new file at once, one converting while the other reads, SQLite
    answers ``database is locked`` at once instead of calling the busy handler (that is how
    it avoids a deadlock between the two), so the switch is retried here until the busy
    timeout has passed.
    """
    mode = raw.execute("PRAGMA journal_mode").fetchone()[0]
    if str(mode).lower() == "wal":
        return mode
    give_up = time.monotonic() + busy_timeout.total_seconds()
    pause = 0.001
    while True:
        try:
            return raw.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() >= give_up:
                raise
        time.sleep(pause)  # on the connection's own thread, never the event loop's
        pause = min(pause * 2, 0.05)


def _configure(synchronous: Synchronous, busy_timeout: timedelta, raw: sqlite3.Connection) -> None:
    if sqlite3.sqlite_version_info < _MINIMUM_SQLITE:
        raise StoreError(
            f"durable-sqlite needs SQLite {'.'.join(map(str, _MINIMUM_SQLITE))} or newer "
            f"(for RETURNING); this Python links SQLite {sqlite3.sqlite_version}"
        )
    raw.execute(f"PRAGMA busy_timeout = {duration_micros(busy_timeout) // 1000:d}")
    # Everything up to the journal mode only reads, so a file that is refused here is
    # left exactly as it was, byte for byte.
    try:
        raw.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except sqlite3.DatabaseError as error:
        raise NotADatabase(
            f"{_file_of(raw)} is not an SQLite database ({error}); durable-sqlite has not "
            "written to it. Point the store at a new file or at an SQLite database"
        ) from error
    # A newer release's file is refused by its version before its tables are compared:
    # their shape may have moved on, and "upgrade durable-sqlite" is the useful answer.
    _check_tables(raw, _check_version(raw))
    if _file_of(raw) == ":memory:":
        raise DatabaseRefused(IN_MEMORY)
    mode = _into_wal(raw, busy_timeout)
    if str(mode).lower() != "wal":
        raise DatabaseRefused(
            f"{_file_of(raw)} could not be put in WAL mode (SQLite kept {mode!r}); "
            "durable-sqlite needs WAL so that readers never block its writer"
        )
    raw.execute(f"PRAGMA synchronous = {synchronous.value}")
    within_transaction(_create, raw)


def _create(raw: sqlite3.Connection) -> None:
    """Create what is missing and migrate an older file, in the caller's one transaction.

    Run under ``BEGIN IMMEDIATE``, so two processes opening one file at once do this one
    after the other: the second finds the tables made and the version current, and does
    nothing. A migration that fails rolls back whole, leaving the file at its old version.
    """
    # Checked again under the write lock: another process may have made the file since.
    before = _check_version(raw)
    for text in schema():
        raw.execute(text)
    _check_tables(raw, before)
    if before is not None and before < SCHEMA_VERSION:
        _migrate(raw, before)


def _migrate(raw: sqlite3.Connection, version: int) -> None:
    # Each older version in turn, in the one transaction of the open, said in one line.
    was, done = version, []
    if version == 1:
        sql = statements_for(True, "migrate_2.sql")
        adopted = raw.execute(sql["backfill"]).rowcount
        raw.execute(sql["mark"])
        done.append(
            f"{adopted} workflow(s) given a lifecycle row (no kind; ready, sleeping or blocked "
            "by their queue row)"
        )
        version = 2
    if version == 2:
        raw.execute(statements_for(True, "migrate_3.sql")["mark"])
        done.append("queue limits added (no queue limited yet)")
        version = 3
    if version == 3:
        sql = statements_for(True, "migrate_4.sql")
        raw.execute(sql["add_operation"])
        raw.execute(sql["mark"])
        done.append(
            "records now keep the operation that wrote them (older records read as written "
            "before operations)"
        )
        version = 4
    log.info(
        "migrated the durable store in %s from schema version %d to %d: %s",
        _file_of(raw),
        was,
        version,
        "; ".join(done),
    )


async def create_schema(connection: aiosqlite.Connection) -> None:
    """Create the store's tables where they are missing (idempotent), refusing foreign ones."""
    await transaction(connection, _create)


async def configure(
    connection: aiosqlite.Connection,
    *,
    synchronous: Synchronous | str = Synchronous.FULL,
    busy_timeout: timedelta = DEFAULT_BUSY_TIMEOUT,
) -> None:
    """Make an open aiosqlite connection ready to carry the store.

    Sets ``busy_timeout``, checks that the file is an SQLite database whose ``durable_*``
    tables (if any) are the store's own, switches the file to WAL (a persistent property of
    the file: readers then never block the writer), sets ``synchronous`` for this
    connection, and creates the schema if it is missing. Idempotent. A file refused by
    the checks is not written to.
    """
    check_driver(connection)
    await on_thread(
        connection, partial(_configure, Synchronous.parse(synchronous), _positive(busy_timeout))
    )


def _positive(busy_timeout: object) -> timedelta:
    if not isinstance(busy_timeout, timedelta) or busy_timeout <= timedelta(0):
        raise ValueError(f"busy_timeout must be a positive timedelta, got {busy_timeout!r}")
    return busy_timeout


def check_path(path: str | PathLike[str]) -> Path:
    """``path`` as a file a store may be opened on, or a clear error before anything is made."""
    text = str(path)
    if text in ("", ":memory:") or text.startswith("file::memory:"):
        raise DatabaseRefused(IN_MEMORY)
    resolved = Path(text).expanduser()
    if resolved.is_dir():
        raise NotADatabase(f"{resolved} is a directory; name a database file inside it")
    if not resolved.parent.is_dir():
        raise NotADatabase(
            f"cannot open {resolved}: the directory {resolved.parent} does not exist. "
            "durable-sqlite creates the database file but not its directory; create it first"
        )
    return resolved


@asynccontextmanager
async def connect(
    path: str | PathLike[str],
    *,
    synchronous: Synchronous | str = Synchronous.FULL,
    busy_timeout: timedelta = DEFAULT_BUSY_TIMEOUT,
) -> AsyncIterator[aiosqlite.Connection]:
    """Open ``path`` (created if missing, in a directory that exists) ready for the store::

        async with durable_sqlite.connect("orders.db") as connection:
            durable = SqliteDurable.over(connection)

    The connection is in autocommit mode (``isolation_level=None``): the store issues its
    own ``BEGIN IMMEDIATE``, and the sqlite3 module's implicit transactions would otherwise
    hold the write lock between statements. Closed on exit. If the file is refused, a
    file this call created is removed again and a file that was there is left as it was.
    """
    mode = Synchronous.parse(synchronous)
    timeout = _positive(busy_timeout)
    file = check_path(path)
    existed = file.exists()
    connection = await aiosqlite.connect(
        file, isolation_level=None, timeout=timeout.total_seconds()
    )
    try:
        await configure(connection, synchronous=mode, busy_timeout=timeout)
    except BaseException:
        await connection.close()
        if not existed:
            _remove_if_empty(file)
        raise
    try:
        yield connection
    finally:
        await connection.close()


def _remove_if_empty(file: Path) -> None:
    with contextlib.suppress(OSError):
        if file.stat().st_size == 0:
            file.unlink()
            for suffix in ("-wal", "-shm", "-journal"):
                Path(f"{file}{suffix}").unlink(missing_ok=True)
