"""What the store does to (and refuses to do to) the file it is given."""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path

import aiosqlite
import pytest
from durable.clock import ManualClock
from durable.interfaces import Pass, StoreError
from durable_sqlite import (
    DatabaseRefused,
    ForeignTable,
    NotADatabase,
    SqliteDurable,
    Synchronous,
    configure,
    connect,
)
from durable_sqlite.connection import SCHEMA_VERSION, TABLES


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def siblings(path: Path) -> list[str]:
    """What the directory holding ``path`` holds."""
    return sorted(p.name for p in path.parent.iterdir())


def query(path: Path, sql: str) -> list[tuple[object, ...]]:
    raw = sqlite3.connect(path)
    try:
        return raw.execute(sql).fetchall()
    finally:
        raw.close()


# -- the schema ------------------------------------------------------------------------


async def test_order_survives_vacuum(store: SqliteDurable, path: Path) -> None:
    cp = store.checkpointer
    holder = await cp.claim("wf", liveness=timedelta(minutes=1), budget=timedelta(minutes=5))
    assert holder is not None
    for i in range(30):
        # Interleave a workflow that is then discarded, so that the keeper's rows sit
        # between gaps that a VACUUM renumbering implicit rowids would close.
        await cp.supply("doomed", f"d{i}", i)
        await cp.record(holder, f"{(i * 7) % 30:02d}-step", i)
        if i % 3 == 0:
            await cp.append("wf", f"message {i}")
    await cp.discard("doomed")
    before = await cp.load("wf")
    seqs = query(path, "SELECT seq, key FROM durable_checkpoint ORDER BY seq")
    assert list(before) != sorted(before)  # load order is not key order

    await store.connection.execute("VACUUM")

    assert query(path, "SELECT seq, key FROM durable_checkpoint ORDER BY seq") == seqs
    after = await cp.load("wf")
    assert list(after.items()) == list(before.items())
    assert [e.key for e in await cp.history("wf")] == list(before)
    key = await cp.append("wf", "after vacuum")
    assert list(await cp.load("wf"))[-1] == key


def test_the_rowid_tables_are_the_checkpoint_and_the_lifecycle_and_the_others_have_none(
    tmp_path: Path,
) -> None:
    """durable_workflow keeps a rowid too: its rows carry inputs, values and tracebacks of any
    size, which SQLite advises against in a WITHOUT ROWID table."""
    from durable_sqlite.connection import schema

    raw = sqlite3.connect(tmp_path / "schema.db")
    try:
        for statement in schema():
            raw.execute(statement)
        tables = dict(raw.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'"))
        columns = raw.execute("PRAGMA table_info(durable_checkpoint)").fetchall()
    finally:
        raw.close()
    assert set(tables) == set(TABLES)
    assert ("seq", "INTEGER", 1) in [(c[1], c[2], c[5]) for c in columns]
    assert "WITHOUT ROWID" not in tables["durable_checkpoint"]
    assert "WITHOUT ROWID" not in tables["durable_workflow"]
    # durable_handout has no natural key (two hand-outs may share a microsecond).
    assert "WITHOUT ROWID" not in tables["durable_handout"]
    for table in set(TABLES) - {"durable_checkpoint", "durable_workflow", "durable_handout"}:
        assert tables[table].rstrip().endswith("WITHOUT ROWID"), table


async def test_opening_twice_is_idempotent_and_keeps_what_is_there(path: Path) -> None:
    async with connect(path) as connection:
        await SqliteDurable.over(connection).checkpointer.supply("wf", "k", 1)
    async with connect(path) as connection:
        assert await SqliteDurable.over(connection).checkpointer.load("wf") == {"k": 1}
    assert query(path, "SELECT value FROM durable_meta WHERE name = 'schema_version'") == [
        (SCHEMA_VERSION,)
    ]


@pytest.mark.parametrize(
    ("synchronous", "level"), [(Synchronous.FULL, 2), ("normal", 1), ("FULL", 2)]
)
async def test_the_connection_is_wal_with_a_busy_timeout_and_the_chosen_synchronous(
    path: Path, synchronous: str, level: int
) -> None:
    async with connect(
        path, synchronous=synchronous, busy_timeout=timedelta(seconds=2)
    ) as connection:
        assert list(await connection.execute_fetchall("PRAGMA journal_mode")) == [("wal",)]
        assert list(await connection.execute_fetchall("PRAGMA synchronous")) == [(level,)]
        assert list(await connection.execute_fetchall("PRAGMA busy_timeout")) == [(2000,)]
        assert connection.isolation_level is None


async def test_synchronous_off_is_not_offered(path: Path) -> None:
    with pytest.raises(ValueError, match="does not offer OFF"):
        async with connect(path, synchronous="off"):
            pass
    assert siblings(path) == []


async def test_the_store_shares_a_file_with_the_applications_tables(path: Path) -> None:
    raw = sqlite3.connect(path)
    with raw:
        raw.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total INTEGER)")
        raw.execute("INSERT INTO orders VALUES (1, 100)")
    raw.close()
    async with connect(path) as connection:
        store = SqliteDurable.over(connection)
        holder = await store.checkpointer.claim(
            "wf", liveness=timedelta(minutes=1), budget=timedelta(minutes=5)
        )
        assert holder is not None

        def refund(cursor: sqlite3.Cursor) -> object:
            cursor.execute("UPDATE orders SET total = total - 30 WHERE id = 1")
            return cursor.execute("SELECT total FROM orders WHERE id = 1").fetchone()[0]

        recorded = await store.checkpointer.transact(holder, "refunded", refund)
        assert recorded.value == 70
    assert query(path, "SELECT total FROM orders") == [(70,)]


async def test_a_connection_left_in_a_transaction_is_refused_clearly(path: Path) -> None:
    async with connect(path) as connection:
        store = SqliteDurable.over(connection)
        await connection.execute("BEGIN")
        with pytest.raises(Exception, match="transaction open that durable did not start"):
            await store.checkpointer.supply("wf", "k", 1)
        await connection.execute("ROLLBACK")
        assert await store.checkpointer.supply("wf", "k", 1) == 1


STATE = (
    "SELECT workflow, token, live_until, budget_until FROM durable_claim",
    "SELECT seq, workflow, key, value FROM durable_checkpoint ORDER BY seq",
)


async def held_back(connection: aiosqlite.Connection, path: Path) -> bool:
    """Whether the store's connection sees writes another connection does not: writes it
    has made that are not committed yet."""
    for sql in STATE:
        async with connection.execute(sql) as cursor:
            own = [tuple(row) for row in await cursor.fetchall()]
        if own != query(path, sql):
            return True
    return False


async def each_write_lands(
    connection: aiosqlite.Connection, path: Path, holder: Pass, clock: ManualClock
) -> list[str]:
    """Renew, record, supply, append and release, in turn: each that returns must already
    be in the file as another connection reads it. What each did: "landed", or its error."""
    cp = SqliteDurable.over(connection, clock=clock).checkpointer
    writes: list[Callable[[], Awaitable[object]]] = [
        lambda: cp.renew(holder),
        lambda: cp.record(holder, "step", 1),
        lambda: cp.supply("wf", "approval", True),
        lambda: cp.append("wf", "hello"),
        lambda: cp.release(holder),
    ]
    done: list[str] = []
    for write in writes:
        clock.advance(timedelta(seconds=1))  # so that renew moves the deadline
        try:
            await write()
        except StoreError as refused:
            done.append(str(refused))
            break
        assert not await held_back(connection, path), f"write {len(done) + 1} not committed"
        done.append("landed")
    return done


async def claimed(connection: aiosqlite.Connection, clock: ManualClock) -> Pass:
    cp = SqliteDurable.over(connection, clock=clock).checkpointer
    holder = await cp.claim("wf", liveness=timedelta(seconds=5), budget=timedelta(minutes=1))
    assert holder is not None
    return holder


async def application_rows(connection: aiosqlite.Connection) -> None:
    """A table of the application's, on the store's connection: 500 rows to read or update."""
    await connection.execute("CREATE TABLE numbers (n INTEGER)")
    await connection.executemany("INSERT INTO numbers VALUES (?)", [(n,) for n in range(500)])


async def test_a_write_that_returned_is_in_the_file_even_on_a_connection_not_in_autocommit(
    path: Path,
) -> None:
    """``configure`` takes a connection opened some other way, such as aiosqlite's own
    default, whose sqlite3 module opens transactions implicitly and waits for a commit."""
    clock = ManualClock()
    async with aiosqlite.connect(path) as connection:
        assert connection.isolation_level is not None
        await configure(connection)
        holder = await claimed(connection, clock)
        assert not await held_back(connection, path)
        assert await each_write_lands(connection, path, holder, clock) == ["landed"] * 5


async def test_an_unfinished_read_of_the_applications_holds_back_no_write(path: Path) -> None:
    """The application shares the connection and is midway through a query's rows."""
    clock = ManualClock()
    async with connect(path) as connection:
        holder = await claimed(connection, clock)
        await application_rows(connection)
        async with connection.execute("SELECT n FROM numbers") as cursor:
            assert await cursor.fetchone() is not None  # and 499 rows still to come
            assert await each_write_lands(connection, path, holder, clock) == ["landed"] * 5
            assert len(list(await cursor.fetchall())) == 499


async def test_an_unfinished_write_of_the_applications_makes_the_store_refuse_not_return(
    path: Path,
) -> None:
    """SQLite commits nothing on a connection while a writing statement on it is unfinished
    (here an ``UPDATE ... RETURNING`` whose rows the application is still reading). A store
    write must then fail, saying why, rather than return uncommitted; its rollback undoes
    the application's statement too, and the error says that as well."""
    clock = ManualClock()
    async with connect(path) as connection:
        holder = await claimed(connection, clock)
        await application_rows(connection)
        async with connection.execute("UPDATE numbers SET n = n + 1 RETURNING n") as cursor:
            assert await cursor.fetchone() is not None
            (refused,) = await each_write_lands(connection, path, holder, clock)
        assert "writing statement of the application's is unfinished" in refused
        assert "undid that statement's changes too" in refused
        assert query(path, "SELECT sum(n) FROM numbers") == [(sum(range(500)),)]
        assert not connection.in_transaction
        assert not await held_back(connection, path)


# -- bad input ---------------------------------------------------------------------------


async def test_a_path_in_a_missing_directory_is_refused_and_nothing_is_made(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "no" / "such" / "store.db"
    with pytest.raises(NotADatabase, match="does not exist"):
        async with connect(missing):
            pass
    assert siblings(tmp_path / "anything") == []


async def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NotADatabase, match="is a directory"):
        async with connect(tmp_path):
            pass


async def test_a_file_that_is_not_a_database_is_refused_and_left_untouched(
    tmp_path: Path,
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("groceries: milk, eggs\n" * 200)
    before = digest(notes)
    with pytest.raises(NotADatabase, match="is not an SQLite database"):
        async with connect(notes):
            pass
    assert digest(notes) == before
    assert siblings(notes) == ["notes.txt"]


@pytest.mark.parametrize("table", TABLES)
async def test_a_database_with_a_foreign_table_of_the_same_name_is_refused_and_left_untouched(
    tmp_path: Path, table: str
) -> None:
    theirs = tmp_path / "theirs.db"
    raw = sqlite3.connect(theirs)
    with raw:
        raw.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, note TEXT)")
        raw.execute(f"INSERT INTO {table} (note) VALUES ('mine')")
    raw.close()
    before = digest(theirs)
    with pytest.raises(ForeignTable, match=f"already has a table named {table}") as refused:
        async with connect(theirs):
            pass
    assert "has not been changed" in str(refused.value)
    assert digest(theirs) == before
    assert siblings(theirs) == ["theirs.db"]
    assert query(theirs, "PRAGMA journal_mode") == [("delete",)]


async def test_a_file_from_a_newer_schema_is_refused(path: Path) -> None:
    async with connect(path):
        pass
    raw = sqlite3.connect(path)
    with raw:
        raw.execute("UPDATE durable_meta SET value = ? WHERE name = 'schema_version'", (99,))
    raw.close()
    with pytest.raises(DatabaseRefused, match="newer durable-sqlite"):
        async with connect(path):
            pass


@pytest.mark.parametrize("where", [":memory:", ""])
async def test_an_in_memory_database_is_refused(where: str) -> None:
    with pytest.raises(DatabaseRefused, match="memory:// store"):
        async with connect(where):
            pass


async def test_a_trigger_that_swallows_records_is_reported_not_taken_for_a_value(
    path: Path,
) -> None:
    """A record that inserts nothing while its pass holds the claim can only mean that
    something else in the file (here an application's trigger) dropped the row."""
    async with connect(path) as connection:
        cp = SqliteDurable.over(connection).checkpointer
        await connection.execute(
            "CREATE TRIGGER swallow BEFORE INSERT ON durable_checkpoint "
            "BEGIN SELECT RAISE(IGNORE); END"
        )
        holder = await cp.claim("wf", liveness=timedelta(seconds=5), budget=timedelta(minutes=1))
        assert holder is not None
        with pytest.raises(StoreError, match=r"workflow 'wf', key 'step'.*no value"):
            await cp.record(holder, "step", 1)
