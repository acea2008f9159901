"""The Postgres store's raw round trip: one ``INSERT ... ON CONFLICT ... RETURNING``.

The floor a recorded step is measured against, and the least a caller can ask of psycopg to
make one row durable and learn what it holds: one prepared statement in autocommit, on a
connection borrowed from the pool. It runs on the store's own pool (the testbed's), into a
table of its own shaped like the checkpoint table, in the testbed's schema, so that the
floor has the store's settings by construction: the same server, the same pool and its
sizing, autocommit, and prepared statements. What a recorded step adds over it is the fence
check inside the same statement and the codec, never another round trip.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from durable.plugins import Testbed
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

_CREATE = sql.SQL(
    "CREATE TABLE IF NOT EXISTS {table} (workflow text NOT NULL, key text NOT NULL, "
    "value text NOT NULL, PRIMARY KEY (workflow, key))"
)
_INSERT = sql.SQL(
    "INSERT INTO {table} (workflow, key, value) VALUES ('bench', %s, %s) "
    "ON CONFLICT (workflow, key) DO UPDATE SET key = EXCLUDED.key RETURNING value"
)


@asynccontextmanager
async def raw_op(testbed: Testbed[Any]) -> AsyncIterator[Callable[[int], Awaitable[None]]]:
    pool = getattr(testbed.durable, "pool", None)
    if not isinstance(pool, AsyncConnectionPool):
        raise TypeError(f"the postgres raw op needs a PostgresDurable, got {testbed.durable!r}")
    schema = testbed.extras.get("schema")
    if not isinstance(schema, str):
        raise TypeError("the postgres testbed names no schema (Testbed.extras['schema'])")
    table = sql.Identifier(schema, "bench_raw")
    insert = _INSERT.format(table=table).as_bytes()
    async with pool.connection() as conn:
        await conn.execute(_CREATE.format(table=table).as_bytes())

    async def op(i: int) -> None:
        async with pool.connection() as conn:
            cursor = await conn.execute(insert, (f"k{i}", str(i)), prepare=True)
            await cursor.fetchone()

    yield op
