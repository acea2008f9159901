"""The testing hook: each testbed its own schema in a real server, dropped afterwards.

Which server: the URL the suite was given (``--durable-url``), else ``DURABLE_POSTGRES_URL``,
else ``postgresql://postgres@127.0.0.1:5432/test`` if something answers there, else a
throwaway container if ``testcontainers`` is installed (``pip install
durable-postgres[testcontainers]``). A server named explicitly (the first two) that does not
answer is an error; when none was named and none is found, the hook raises
``unittest.SkipTest`` with the reason, which pytest reports as a skip and the conformance
suite as "could not run". Nothing here imports pytest.

A random schema per testbed isolates tests from each other and from anything else in the
database, and costs a few milliseconds of DDL rather than a database per test.
"""

from __future__ import annotations

import asyncio
import atexit
import gc
import logging
import os
import secrets
import unittest
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import psycopg
from durable.plugins import Gap, Testbed
from psycopg import AsyncCursor
from psycopg_pool import AsyncConnectionPool

from durable_postgres.checkpointer import PostgresEffect
from durable_postgres.durable import PostgresDurable
from durable_postgres.plugin import PostgresOptions, open_postgres, redact, with_option
from durable_postgres.statements import render_sections

__all__ = ["DEFAULT_URL", "ENV_URL", "PostgresProbe", "drop_schema", "find_server", "testbed"]

log = logging.getLogger("durable_postgres.testing")

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
ENV_URL = "DURABLE_POSTGRES_URL"

# Found once per process: probing the loopback port or starting a container per test would
# cost seconds each time nothing answers.
_found: list[str] = []


async def _answers(url: str) -> bool:
    try:
        conn = await psycopg.AsyncConnection.connect(url, connect_timeout=2)
    except psycopg.Error:
        return False
    await conn.close()
    return True


def _start_container() -> str | None:
    try:
        from testcontainers.postgres import PostgresContainer  # type: ignore[import-not-found]
    except ImportError:
        return None
    container = PostgresContainer("postgres:16-alpine", driver=None)
    container.start()
    atexit.register(container.stop)
    url: str = container.get_connection_url()
    return url


async def find_server(url: str | None = None) -> str:
    """The server a testbed uses (see the module docstring), or ``unittest.SkipTest``."""
    named = url or os.environ.get(ENV_URL)
    if named:
        return named
    if _found:
        return _found[0]
    if await _answers(DEFAULT_URL):
        _found.append(DEFAULT_URL)
        return DEFAULT_URL
    try:
        started = await asyncio.to_thread(_start_container)
    except Exception as error:  # a container runtime that is missing or broken
        raise unittest.SkipTest(
            f"no Postgres server answered at {DEFAULT_URL}, and starting one with "
            f"testcontainers failed ({error}); set {ENV_URL} or pass --durable-url"
        ) from error
    if started is None:
        raise unittest.SkipTest(
            f"no Postgres server answered at {DEFAULT_URL}, {ENV_URL} is not set and "
            "testcontainers is not installed; set it, pass --durable-url, or "
            "pip install 'durable-postgres[testcontainers]' (from a clone, until it is on "
            "PyPI: pip install ./packages/durable-core "
            "'./packages/durable-postgres[testcontainers]')"
        )
    _found.append(started)
    return started


class PostgresProbe:
    """The conformance probe: counters in ``probe_counter``, in the testbed's schema, moved by
    an ``INSERT ... ON CONFLICT ... RETURNING`` inside the transact's own transaction."""

    def __init__(self, pool: AsyncConnectionPool[Any], schema: str) -> None:
        self._pool = pool
        self._sql = render_sections("testing.sql", schema)

    async def create(self) -> None:
        async with self._pool.connection() as conn:
            await conn.execute(self._sql["create"])

    def bump(self, workflow: str, counter: str) -> PostgresEffect:
        query = self._sql["bump"]

        async def effect(cursor: AsyncCursor[Any]) -> object:
            await cursor.execute(query, {"workflow": workflow, "counter": counter})
            row = await cursor.fetchone()
            assert row is not None
            return row[0]

        return effect

    def bump_then_fail(self, workflow: str, counter: str) -> PostgresEffect:
        bump = self.bump(workflow, counter)

        async def effect(cursor: AsyncCursor[Any]) -> object:
            await bump(cursor)
            raise RuntimeError(f"the probe fails after moving {counter!r}, by design")

        return effect

    async def count(self, workflow: str, counter: str) -> int:
        async with self._pool.connection() as conn:
            cursor = await conn.execute(
                self._sql["count"], {"workflow": workflow, "counter": counter}
            )
            row = await cursor.fetchone()
        return int(row[0]) if row is not None else 0


LOCK_WAIT = "10s"
"""How long a test schema's ``DROP`` waits for a lock before it ends what holds it."""

_BLOCKERS = """
SELECT DISTINCT a.pid, a.state, left(a.query, 120)
FROM pg_locks l
JOIN pg_class c ON c.oid = l.relation
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_stat_activity a ON a.pid = l.pid
WHERE n.nspname = %s AND a.pid <> pg_backend_pid()
"""


def drop_schema(conninfo: str, schema: str, *, wait: str = LOCK_WAIT) -> None:
    """Drop a test's schema without ever hanging the test run.

    A ``DROP SCHEMA`` waits for every lock on the schema's tables. A connection that a
    cancelled task left checked out of its pool, inside a transaction, holds such locks
    for as long as the process keeps the object; when that process is the test run itself,
    blocked in this very call, nothing would ever release them. So: collect garbage first
    (closing connections nothing refers to), wait at most ``wait``, and if still
    blocked, log who holds the locks, end those backends and drop again. Failures are
    logged, never raised: a schema left behind costs nothing but space.
    """
    gc.collect()
    try:
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
            conn.execute("SELECT set_config('lock_timeout', %s, false)", (wait,))
            drop = f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'
            try:
                conn.execute(drop)
            except psycopg.errors.LockNotAvailable:
                blockers = conn.execute(_BLOCKERS, (schema,)).fetchall()
                log.warning(
                    "dropping the test schema %s waited %s for %s; ending them",
                    schema,
                    wait,
                    blockers,
                )
                for pid, _, _ in blockers:
                    conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
                conn.execute(drop)
    except psycopg.Error as error:
        log.warning("could not drop the test schema %s: %s", schema, error)


async def _drop(server: str, schema: str) -> None:
    conninfo, _ = PostgresOptions.read(server, {})
    await asyncio.to_thread(drop_schema, conninfo, schema)


@asynccontextmanager
async def testbed(
    url: str | None,
    *,
    gap: Gap | None = None,  # noqa: PT028 (a testing hook, not a test)
    **options: Any,
) -> AsyncIterator[Testbed[PostgresEffect]]:
    """A fresh store in a schema of its own; ``reopen`` opens a second pool on it and ``url``
    reaches it from another process. The schema is dropped on exit. ``options`` are
    :func:`open_postgres`'s (``codec``, ``lease``, ...), for the first handle and ``reopen``.
    ``gap`` (a :data:`durable.plugins.Gap`) is awaited by every move of both handles, inside
    its transaction after the lock its statement takes first and before its writes."""
    server = await find_server(url)
    schema = f"durable_test_{secrets.token_hex(6)}"
    store_url = with_option(server, "schema", schema)

    def reopen() -> AbstractAsyncContextManager[PostgresDurable]:
        return open_postgres(store_url, gap=gap, **options)

    try:
        async with open_postgres(store_url, gap=gap, **options) as durable:
            probe = PostgresProbe(durable.pool, schema)
            await probe.create()
            async with durable.pool.connection() as conn:
                version = conn.info.server_version
            yield Testbed(
                durable=durable,
                reopen=reopen,
                url=store_url,
                probe=probe,
                server=f"{redact(server)} (PostgreSQL {version // 10000}.{version % 10000})",
                extras={"schema": schema, "pool": durable.pool},
            )
    finally:
        await _drop(server, schema)
