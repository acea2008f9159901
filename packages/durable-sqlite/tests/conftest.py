"""Stores for the SQLite tests: each a fresh file in the test's own temporary directory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from durable.clock import ManualClock
from durable_sqlite import SqliteDurable, connect

LEASE = timedelta(seconds=30)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
async def store(path: Path) -> AsyncIterator[SqliteDurable]:
    """A store on SQLite's own clock, as users get it."""
    async with connect(path) as connection:
        yield SqliteDurable.over(connection, lease=LEASE)


@pytest.fixture
async def clocked(path: Path, clock: ManualClock) -> AsyncIterator[SqliteDurable]:
    """A store whose leases and stamps follow ``clock``, so a test moves time by hand."""
    async with connect(path) as connection:
        yield SqliteDurable.over(connection, clock=clock, lease=LEASE)
