"""A file written by the previous release upgrades in place, and its workflows run on.

``fixtures/v1.sql`` was written by the code at main 543208e (schema version 1) running
``fixtures/write_v1.py``; see that script's docstring for how, and for its four
workflows. These tests restore it and open it with the current code.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from durable.interfaces import Status, WorkflowStatus
from durable.worker import work
from durable.workflows import Workflows
from durable_sqlite import SqliteDurable, connect
from durable_sqlite.connection import SCHEMA_VERSION

FIXTURES = Path(__file__).parent / "fixtures"
LONG = timedelta(minutes=5)


def fixture_module() -> ModuleType:
    """``write_v1.py``, for its body: the same body the old release ran."""
    spec = importlib.util.spec_from_file_location("durable_sqlite_v1", FIXTURES / "write_v1.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def restore(path: Path, change: Callable[[sqlite3.Connection], None] | None = None) -> None:
    raw = sqlite3.connect(path)
    try:
        raw.executescript((FIXTURES / "v1.sql").read_text(encoding="utf-8"))
        if change is not None:
            change(raw)
            raw.commit()
    finally:
        raw.close()


def query(path: Path, sql: str) -> list[tuple[Any, ...]]:
    raw = sqlite3.connect(path)
    try:
        return raw.execute(sql).fetchall()
    finally:
        raw.close()


async def statuses(store: SqliteDurable) -> dict[str, WorkflowStatus]:
    page = await store.checkpointer.statuses(limit=100)
    assert page.cursor is None
    return {status.workflow: status for status in page.statuses}


def test_the_fixture_is_a_version_1_store() -> None:
    dump = (FIXTURES / "v1.sql").read_text(encoding="utf-8")
    assert "INSERT INTO \"durable_meta\" VALUES('schema_version',1);" in dump
    assert "durable_workflow" not in dump


async def test_two_concurrent_opens_migrate_a_version_1_file_once(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each open migrates under its BEGIN IMMEDIATE: the second, waiting on the write lock,
    finds the current version and does nothing. The first takes the file through every
    version in turn (1 to 2, 2 to 3, then 3 to 4), in its one transaction, said in one line."""
    restore(path)

    async def open_and_hold() -> None:
        async with connect(path):
            await asyncio.sleep(0.05)

    with caplog.at_level(logging.INFO, logger="durable_sqlite.connection"):
        await asyncio.gather(open_and_hold(), open_and_hold())
        async with connect(path):
            pass
    migrated = [r.getMessage() for r in caplog.records if "migrated" in r.getMessage()]
    assert len(migrated) == 1, [r.getMessage() for r in caplog.records]
    assert "from schema version 1 to 4" in migrated[0]
    assert "4 workflow(s)" in migrated[0]
    assert "queue limits added" in migrated[0]
    assert "records now keep the operation" in migrated[0]
    assert query(path, "SELECT value FROM durable_meta WHERE name = 'schema_version'") == [
        (SCHEMA_VERSION,)
    ]
    assert SCHEMA_VERSION == 4  # 1 -> 2 (lifecycle) -> 3 (limits) -> 4 (operations), one open
    assert query(path, "SELECT count(*) FROM durable_workflow") == [(4,)]


async def test_the_old_workflows_are_listed_with_no_kind_and_their_queue_states(
    path: Path,
) -> None:
    restore(path)
    async with connect(path) as connection:
        store = SqliteDurable.over(connection)
        found = await statuses(store)
        assert sorted(found) == ["v1-blocked", "v1-done", "v1-queued", "v1-sleeping"]
        assert all(s.kind is None and s.attempts == 0 for s in found.values())
        assert found["v1-queued"].status is Status.READY
        assert found["v1-sleeping"].status is Status.SLEEPING
        assert found["v1-sleeping"].until == await store.scheduler.scheduled("v1-sleeping")
        # Unqueued: finished or blocked, and the old data cannot say which (migrate_2.sql).
        assert found["v1-blocked"].status is Status.BLOCKED
        assert found["v1-done"].status is Status.BLOCKED
        # Listed by status too, through the index.
        ready = await store.checkpointer.statuses(status=Status.READY)
        assert [s.workflow for s in ready.statuses] == ["v1-queued"]
        # Records and queue are untouched.
        assert await store.checkpointer.load("v1-done") == {"greet": "hello v1-done"}
        # Listed newest first by their last record, as the old release left them.
        order = [s.workflow for s in (await store.checkpointer.statuses()).statuses]
        assert order[0] == "v1-queued"


async def test_a_delivery_out_with_a_taker_migrates_as_ready(path: Path) -> None:
    """A workflow whose delivery a worker of the old release had taken (the receipt set, the
    lease in the future) is ready to run, not sleeping."""
    later = int((datetime.now(UTC) + timedelta(seconds=30)).timestamp() * 1_000_000)

    def taken(raw: sqlite3.Connection) -> None:
        raw.execute(
            "UPDATE durable_queue SET receipt = 'r-1', visible_at = ? WHERE workflow = 'v1-queued'",
            (later,),
        )

    restore(path, taken)
    async with connect(path) as connection:
        found = await statuses(SqliteDurable.over(connection))
    assert found["v1-queued"].status is Status.READY
    assert found["v1-queued"].until is None


async def test_a_failed_migration_leaves_the_file_at_version_1(path: Path) -> None:
    """The migration is in the open's one transaction: a file it cannot finish is left as
    the old release wrote it, and opens once the cause is gone."""

    def squat(raw: sqlite3.Connection) -> None:
        # A row the backfill will meet, in a table of the right shape but with a trigger
        # that refuses every insert: the migration fails half way.
        from durable_sqlite.connection import schema

        for text in schema():
            if "durable_workflow" in text and "INDEX" not in text:
                raw.execute(text)
        raw.execute(
            "CREATE TRIGGER refuse BEFORE INSERT ON durable_workflow "
            "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
        )

    restore(path, squat)
    with pytest.raises(sqlite3.IntegrityError, match="refused by the test"):
        async with connect(path):
            pass
    assert query(path, "SELECT value FROM durable_meta WHERE name = 'schema_version'") == [(1,)]
    assert query(path, "SELECT count(*) FROM durable_workflow") == [(0,)]
    raw = sqlite3.connect(path)
    raw.execute("DROP TRIGGER refuse")
    raw.commit()
    raw.close()
    async with connect(path) as connection:
        assert len(await statuses(SqliteDurable.over(connection))) == 4


async def wait_for(
    store: SqliteDurable, workflow: str, status: Status, within: float = 10.0
) -> WorkflowStatus:
    give_up = asyncio.get_running_loop().time() + within
    while True:
        found = await store.checkpointer.status(workflow)
        if found is not None and found.status is status:
            return found
        if asyncio.get_running_loop().time() > give_up:
            raise AssertionError(f"{workflow} is {found} after {within}s, not {status}")
        await asyncio.sleep(0.02)


async def test_the_old_workflows_run_on_under_the_new_worker(path: Path) -> None:
    """The old body, served as a one-kind registry, finishes what the old release began:
    the queued workflow at once, the blocked one when its value arrives."""
    restore(path)
    v1 = fixture_module()
    kinds = Workflows.of(v1.body)
    async with connect(path) as connection:
        store = SqliteDurable.over(connection)
        stop = asyncio.Event()
        worker = asyncio.ensure_future(
            work(store, kinds, poll=timedelta(milliseconds=20), stop=stop, name="upgrade-test")
        )
        try:
            queued = await wait_for(store, "v1-queued", Status.FINISHED)
            assert queued.value == {"greeting": "hello v1-queued", "message": {"order": 7}}
            assert queued.kind is None  # never started with a kind; ran as the default
            await store.arrive("v1-blocked", "approval", "granted")
            blocked = await wait_for(store, "v1-blocked", Status.FINISHED)
            assert blocked.value == {"greeting": "hello v1-blocked", "approval": "granted"}
            assert blocked.attempts == 1
        finally:
            stop.set()
            await worker
        # The sleeper sleeps on, for a century; the handle reads it like any other.
        sleeping = await store.handle("v1-sleeping").status()
        assert sleeping.status is Status.SLEEPING
        assert sleeping.until is not None
        assert sleeping.until > datetime.now(UTC) + timedelta(days=3650)


# -- version 2 to 4: limits (3), then each record keeps the operation that wrote it (4) -------
#
# ``fixtures/v2.sql`` was written by the code at main a321884 (schema version 2) running
# ``fixtures/write_v2.py``; see its docstring. Its records have no operation column.


def fixture_v2() -> ModuleType:
    spec = importlib.util.spec_from_file_location("durable_sqlite_v2", FIXTURES / "write_v2.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def restore_v2(path: Path) -> None:
    raw = sqlite3.connect(path)
    try:
        raw.executescript((FIXTURES / "v2.sql").read_text(encoding="utf-8"))
    finally:
        raw.close()


def test_the_v2_fixture_is_a_version_2_store_without_operations() -> None:
    dump = (FIXTURES / "v2.sql").read_text(encoding="utf-8")
    assert "INSERT INTO \"durable_meta\" VALUES('schema_version',2);" in dump
    assert "durable_workflow" in dump
    assert "operation" not in dump


async def test_a_version_2_file_gains_operations_and_its_records_read_as_before(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Opening adds the limit tables and the column and marks version 4, once; every old
    record reads as it did, with no operation, and is refused to no operation; a record
    written now keeps its own."""
    restore_v2(path)
    with caplog.at_level(logging.INFO, logger="durable_sqlite.connection"):
        async with connect(path), connect(path) as connection:
            store = SqliteDurable.over(connection)
            cp = store.checkpointer
            assert await cp.load("v2-blocked") == {"greet": "hello v2-blocked"}
            old = await cp.history("v2-sleeping")
            assert [(e.key, e.operation) for e in old] == [("greet", None), ("nap", None)]
            holder = await cp.claim("v2-sleeping", liveness=LONG, budget=LONG)
            assert holder is not None
            # Written before operations: nothing to refuse it by.
            kept = await cp.record_as(holder, "greet", "other", "awaiting")
            assert (kept.value, kept.first) == ("hello v2-sleeping", False)
            await cp.record_as(holder, "later", 1, "step")
            assert (await cp.history("v2-sleeping"))[-1].operation == "step"
            await cp.release(holder)
    migrated = [r.getMessage() for r in caplog.records if "migrated" in r.getMessage()]
    assert len(migrated) == 1, migrated
    assert "from schema version 2 to 4" in migrated[0]
    assert query(path, "SELECT value FROM durable_meta WHERE name = 'schema_version'") == [(4,)]
    for table in ("durable_limit", "durable_slot", "durable_handout", "durable_priority"):
        assert query(path, f"SELECT count(*) FROM {table}") == [(0,)], table


async def test_a_workflow_the_old_release_left_blocked_finishes_on_the_new_one(
    path: Path,
) -> None:
    """The old release's body, served by the new worker, replays the old step (no
    operation) and finishes once its approval arrives."""
    restore_v2(path)
    module = fixture_v2()
    async with connect(path) as connection:
        store = SqliteDurable.over(connection)
        await store.arrive("v2-blocked", "approval", "yes")
        stop = asyncio.Event()
        worker = asyncio.create_task(
            work(store, module.registry, stop=stop, poll=timedelta(milliseconds=20))
        )
        try:
            done = await wait_for(store, "v2-blocked", Status.FINISHED)
        finally:
            stop.set()
            async with asyncio.timeout(30):
                await worker
    assert done.value == {"greeting": "hello v2-blocked", "approval": "yes"}
