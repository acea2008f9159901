"""A file written by the release before queue limits (schema version 2) upgrades in place
to the current version (4: limits, then operations), and its workflows run on under a
limit set after the upgrade.

``fixtures/v2.sql`` was written by the code at main a321884 running
``fixtures/write_v2.py`` (see its docstring); these tests restore it and open it with the
current code.
"""

from __future__ import annotations

import asyncio
import importlib.util
import logging
import sqlite3
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import durable
import pytest
from durable.interfaces import Limited, QueueLimit, Status
from durable.worker import work
from durable_sqlite import connect
from durable_sqlite.connection import SCHEMA_VERSION

FIXTURES = Path(__file__).parent / "fixtures"


def fixture_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("durable_sqlite_v2", FIXTURES / "write_v2.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def restore(path: Path) -> None:
    raw = sqlite3.connect(path)
    try:
        raw.executescript((FIXTURES / "v2.sql").read_text(encoding="utf-8"))
    finally:
        raw.close()


def query(path: Path, sql: str) -> list[tuple[Any, ...]]:
    raw = sqlite3.connect(path)
    try:
        return raw.execute(sql).fetchall()
    finally:
        raw.close()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    found = tmp_path / "store.db"
    restore(found)
    return found


def test_the_fixture_is_a_version_2_store_without_limit_tables() -> None:
    dump = (FIXTURES / "v2.sql").read_text(encoding="utf-8")
    assert "INSERT INTO \"durable_meta\" VALUES('schema_version',2);" in dump
    assert "durable_slot" not in dump
    assert "durable_limit" not in dump


async def test_opening_a_version_2_file_migrates_it_to_4_once(
    path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Opened twice at once: one migration, logged once; the file is at version 4 with the
    four limit tables empty, the records' operation column added (NULL on every old
    record), and every workflow row as it was."""
    before = query(path, "SELECT * FROM durable_workflow ORDER BY workflow")

    async def open_and_hold() -> None:
        async with connect(path):
            await asyncio.sleep(0.05)

    with caplog.at_level(logging.INFO, logger="durable_sqlite.connection"):
        await asyncio.gather(open_and_hold(), open_and_hold())
    migrated = [r.getMessage() for r in caplog.records if "migrated" in r.getMessage()]
    assert len(migrated) == 1, migrated
    assert "from schema version 2 to 4" in migrated[0], migrated
    assert SCHEMA_VERSION == 4
    assert query(path, "SELECT value FROM durable_meta WHERE name = 'schema_version'") == [(4,)]
    assert query(path, "SELECT count(*), count(operation) FROM durable_checkpoint") == [(3, 0)]
    for table in ("durable_limit", "durable_slot", "durable_handout", "durable_priority"):
        assert query(path, f"SELECT count(*) FROM {table}") == [(0,)], table
    assert query(path, "SELECT * FROM durable_workflow ORDER BY workflow") == before


async def test_the_old_workflows_run_on_under_a_limit_set_after_the_upgrade(path: Path) -> None:
    """The three charges the old release started and never ran finish under the new worker
    with their queue limited to 1 and a rate of 50: at no moment do two hold a slot."""
    charges = fixture_module().charges
    async with durable.open(f"sqlite:///{path}") as store:
        limits = cast(Limited, store.scheduler)
        rows_of: Any = store.checkpointer
        await limits.set_limit("payments", QueueLimit(concurrent=1, rate=50))
        stop = asyncio.Event()
        seen: list[int] = []
        worker = asyncio.create_task(
            work(store, charges, poll=timedelta(milliseconds=20), stop=stop, limit=4)
        )
        try:
            async with asyncio.timeout(20):
                while True:
                    seen.append(await limits.held("payments"))
                    rows = [await rows_of.status(f"v2-charge-{i}") for i in range(3)]
                    if all(r is not None and r.status is Status.FINISHED for r in rows):
                        break
                    await asyncio.sleep(0.005)
        finally:
            stop.set()
            await worker
        assert max(seen) <= 1, seen
        for i in range(3):
            row = await rows_of.status(f"v2-charge-{i}")
            assert row is not None, row
            assert row.value == f"charged {10 + i}", row
        assert await limits.held("payments") == 0
