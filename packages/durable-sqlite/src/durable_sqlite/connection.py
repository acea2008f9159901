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

import contextlib
import logging
import re
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from functools import cache, partial
from importlib.resources import files
from os import PathLike
from pathlib import Path
from typing import TypeVar, cast

import aiosqlite
from durable.clock import Clock
from durable.interfaces import StoreError, StoreUnavailable

__all__ = [
    "DEFAULT_BUSY_TIMEOUT",
    "SCHEMA_VERSION",
    "TABLES",
    "DatabaseRefused",
    "ForeignTable",
    "NotADatabase",
    "SqliteBusy",
    "Synchronous",
    "configure",
    "connect",
    "create_schema",
]

T = TypeVar("T")

log = logging.getLogger("durable_sqlite.connection")

SCHEMA_VERSION = 2
"""The shape of the tables in ``schema.sql``; stored in ``durable_meta``. Version 1 (the
release before workflow lifecycle) is migrated on open by ``migrate_2.sql``."""

TABLES = (
    "durable_checkpoint",
    "durable_claim",
    "durable_queue",
    "durable_workflow",
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


def _execute(connection: aiosqlite.Connection) -> Callable[..., Awaitable[T]]:
    return cast(Callable[..., Awaitable[T]], connection._execute)


def _over(connection: aiosqlite.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    return work(connection._conn)


async def on_thread(connection: aiosqlite.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    """Run ``work`` over the ``sqlite3`` connection on its own thread: one trip."""
    return await _execute(connection)(_over, connection, work)


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
    connection: aiosqlite.Connection, work: Callable[[sqlite3.Connection], T]
) -> T:
    """Run ``work`` inside one ``BEGIN IMMEDIATE`` transaction, in one trip to the thread.

    ``IMMEDIATE`` takes the write lock at the start, so a transaction that must wait for
    another connection's write waits there, under ``busy_timeout``, rather than failing
    with ``database is locked`` when a read it began with tries to become a write. If
    ``work`` raises, everything it wrote is rolled back.
    """
    return await _execute(connection)(_transact, connection, work)


def _transact(connection: aiosqlite.Connection, work: Callable[[sqlite3.Connection], T]) -> T:
    return within_transaction(work, connection._conn)


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


def _check_tables(raw: sqlite3.Connection) -> None:
    present = {row[0] for row in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    expected = _expected_columns()
    for table in TABLES:
        if table not in present:
            continue
        found = _columns(raw, table)
        if found != expected[table]:
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
    _check_version(raw)
    _check_tables(raw)
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
    _check_tables(raw)
    if before is not None and before < SCHEMA_VERSION:
        _migrate(raw, before)


def _migrate(raw: sqlite3.Connection, version: int) -> None:
    # Version 1 is the only older one; a later migration goes here, each in turn.
    if version == 1:
        sql = statements_for(True, "migrate_2.sql")
        adopted = raw.execute(sql["backfill"]).rowcount
        raw.execute(sql["mark"])
        log.info(
            "migrated the durable store in %s from schema version 1 to 2: %d workflow(s) "
            "given a lifecycle row (no kind; ready, sleeping or blocked by their queue row)",
            _file_of(raw),
            adopted,
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
