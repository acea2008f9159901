"""The server for the Postgres store's own tests, and a fresh schema on it per test.

The server is whatever ``durable_postgres.testing.find_server`` resolves (``DURABLE_POSTGRES_URL``,
then ``postgresql://postgres@127.0.0.1:5432/test`` if it answers, then a testcontainer);
when none answers every test that needs one is skipped with the reason. Tests that need no
server (names, options, URLs) run regardless. Nothing here restarts or reconfigures the
server: loss of connections is produced by terminating this test's own backends.
"""

from __future__ import annotations

import asyncio
import unittest
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest
from durable_postgres import PostgresCheckpointer, PostgresDurable, PostgresEffect
from durable_postgres.testing import find_server, testbed

if TYPE_CHECKING:
    from durable.plugins import Testbed


@pytest.fixture(scope="session")
def server() -> str:
    try:
        return asyncio.run(find_server(None))
    except unittest.SkipTest as skip:
        pytest.skip(str(skip))


@pytest.fixture
async def bed(server: str) -> AsyncIterator[Testbed[PostgresEffect]]:
    """A fresh store in a schema of its own, dropped afterwards."""
    async with testbed(server) as fresh:
        yield fresh


@pytest.fixture
def store(bed: Testbed[PostgresEffect]) -> PostgresDurable:
    durable = bed.durable
    assert isinstance(durable, PostgresDurable)
    return durable


@pytest.fixture
def cp(store: PostgresDurable) -> PostgresCheckpointer:
    return store.checkpointer
