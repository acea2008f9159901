"""A schema written by the release before queue limits (version 2) upgrades in place to the
current version (4: limits, then operations), and its workflows run on under a limit set
after the upgrade.

``fixtures/v2.json`` was written by ``fixtures/write_v2.py`` running the code at main
a321884 (see its docstring): every row of the version-2 tables. Each test recreates that
schema from ``fixtures/schema_v2.sql`` (version 2's ``schema.sql``, copied) in a schema of
its own, loads the rows, and opens it with this release.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import secrets
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from durable.interfaces import QueueLimit, Status
from durable.worker import work
from durable.workflows import Workflows
from durable_postgres.migration import SCHEMA_VERSION
from durable_postgres.plugin import PostgresOptions, open_postgres, with_option
from durable_postgres.statements import _placeholders
from durable_postgres.testing import drop_schema
from psycopg import sql

FIXTURES = Path(__file__).with_name("fixtures")
CHARGES = ("v2-charge-0", "v2-charge-1", "v2-charge-2")


def _charges() -> Workflows:
    spec = importlib.util.spec_from_file_location("durable_pg_write_v2", FIXTURES / "write_v2.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found: Workflows = module.charges
    return found


def _value(column: str, value: object) -> object:
    if column == "liveness" and value is not None:
        return timedelta(seconds=float(str(value)))
    if isinstance(value, str) and value[:2] == "20" and value[10:11] == "T":
        return datetime.fromisoformat(value)
    return value


async def _restore(conn: psycopg.AsyncConnection[Any], schema: str) -> None:
    ddl = (FIXTURES / "schema_v2.sql").read_text(encoding="utf-8")
    await conn.execute(sql.SQL(ddl).format(**_placeholders(schema)))
    dump = json.loads((FIXTURES / "v2.json").read_text(encoding="utf-8"))
    for table, rows in dump["tables"].items():
        for row in rows:
            columns = list(row)
            await conn.execute(
                sql.SQL("INSERT INTO {}.{} ({}) VALUES ({})").format(
                    sql.Identifier(schema),
                    sql.Identifier(table),
                    sql.SQL(", ").join(map(sql.Identifier, columns)),
                    sql.SQL(", ").join(sql.Placeholder() * len(columns)),
                ),
                [_value(c, row[c]) for c in columns],
            )


@pytest.fixture
async def v2_url(server: str) -> AsyncIterator[str]:
    schema = f"durable_v2_{secrets.token_hex(5)}"
    conninfo, _ = PostgresOptions.read(server, {})
    async with (
        await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn,
        conn.transaction(),
    ):
        await _restore(conn, schema)
    try:
        yield with_option(server, "schema", schema)
    finally:
        await asyncio.to_thread(drop_schema, conninfo, schema)


async def test_a_version_2_schema_upgrades_to_4_and_runs_on_under_a_limit(v2_url: str) -> None:
    """Opened by this release: versions 2 and 4 applied, the four limit tables there and
    empty, the records' operation column there, the status rows as they were; the three
    charges the old release started run to the end with their queue limited to 1, never two
    slots held at once."""
    async with open_postgres(v2_url, poll=timedelta(milliseconds=20)) as store:
        schema = store.checkpointer.schema
        async with store.pool.connection() as conn:
            versions = await (
                await conn.execute(
                    sql.SQL("SELECT version FROM {}.workflow_schema_version ORDER BY 1").format(
                        sql.Identifier(schema)
                    )
                )
            ).fetchall()
            assert [v for (v,) in versions] == [2, SCHEMA_VERSION]
            assert SCHEMA_VERSION == 4
            cursor = await conn.execute(
                "SELECT count(*) FROM information_schema.columns WHERE table_schema = %s"
                " AND table_name = 'workflow_checkpoint' AND column_name = 'operation'",
                (schema,),
            )
            assert await cursor.fetchone() == (1,)
            for table in ("queue_limit", "queue_slot", "queue_handout", "workflow_priority"):
                cursor = await conn.execute(
                    sql.SQL("SELECT count(*) FROM {}.{}").format(
                        sql.Identifier(schema), sql.Identifier(table)
                    )
                )
                assert await cursor.fetchone() == (0,), table
        for workflow in CHARGES:
            row = await store.checkpointer.status(workflow)
            assert row is not None, workflow
            assert (row.status, row.queue) == (Status.READY, "payments"), row
        await store.scheduler.set_limit("payments", QueueLimit(concurrent=1))
        stop = asyncio.Event()
        worker = asyncio.create_task(
            work(store, _charges(), poll=timedelta(milliseconds=20), stop=stop, limit=4)
        )
        held: list[int] = []
        try:
            async with asyncio.timeout(20):
                for workflow in CHARGES:
                    while True:
                        row = await store.checkpointer.status(workflow)
                        if row is not None and row.status is Status.FINISHED:
                            break
                        held.append(await store.scheduler.held("payments"))
                        await asyncio.sleep(0.01)
        finally:
            stop.set()
            await worker
        assert max(held, default=0) <= 1, held
        for i, workflow in enumerate(CHARGES):
            row = await store.checkpointer.status(workflow)
            assert row is not None, workflow
            assert row.value == f"charged {10 + i}", row
