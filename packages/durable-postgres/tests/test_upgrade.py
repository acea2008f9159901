"""A schema written by the release before the lifecycle upgrades in place, and its workflows
are listed and runnable afterwards.

``fixtures/v1.json`` was written by ``fixtures/write_v1.py`` running the code at main 543208e
(see its docstring): every row of the version-1 tables. Each test recreates that schema from
``fixtures/schema_v1.sql`` (version 1's ``schema.sql``, copied) in a schema of its own, loads
the rows with their times moved to the present, and opens it with this release.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from durable.interfaces import Status
from durable.worker import work
from durable.workflows import Workflows
from durable_postgres import PostgresDurable
from durable_postgres.migration import SCHEMA_VERSION, migrate
from durable_postgres.plugin import PostgresOptions, open_postgres, with_option
from durable_postgres.statements import _placeholders
from durable_postgres.testing import drop_schema
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

FIXTURES = Path(__file__).with_name("fixtures")
LONG = timedelta(minutes=5)
WORKFLOWS = ("v1-blocked", "v1-done", "v1-queued", "v1-sleeping")


def _fixture_body() -> Callable[[Any], Awaitable[object]]:
    spec = importlib.util.spec_from_file_location("durable_pg_write_v1", FIXTURES / "write_v1.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    body: Callable[[Any], Awaitable[object]] = module.body
    return body


async def _restore(conn: psycopg.AsyncConnection[Any], schema: str) -> None:
    """Version 1's schema and the fixture's rows, every time shifted by the same amount so
    that the sleeper's hour starts now."""
    ddl = (FIXTURES / "schema_v1.sql").read_text(encoding="utf-8")
    await conn.execute(sql.SQL(ddl).format(**_placeholders(schema)))
    dump = json.loads((FIXTURES / "v1.json").read_text(encoding="utf-8"))
    shift = datetime.now(UTC) - datetime.fromisoformat(dump["written_at"])

    def moved(value: object) -> object:
        if isinstance(value, str) and value[:2] == "20" and value[10:11] == "T":
            return datetime.fromisoformat(value) + shift
        return value

    await conn.execute(
        sql.SQL("DELETE FROM {}.workflow_schema_version").format(sql.Identifier(schema))
    )
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
                [
                    timedelta(seconds=row[c])
                    if c == "liveness" and row[c] is not None
                    else moved(row[c])
                    for c in columns
                ],
            )
    await conn.execute(
        sql.SQL("SELECT setval({}, (SELECT max(seq) FROM {}.workflow_checkpoint))").format(
            sql.Literal(f'"{schema}".workflow_checkpoint_seq'), sql.Identifier(schema)
        )
    )


@pytest.fixture
async def v1_url(server: str) -> AsyncIterator[str]:
    schema = f"durable_v1_{secrets.token_hex(5)}"
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


async def _versions(durable: PostgresDurable) -> list[int]:
    async with durable.pool.connection() as conn:
        cursor = await conn.execute(
            sql.SQL("SELECT version FROM {}.workflow_schema_version ORDER BY version").format(
                sql.Identifier(durable.checkpointer.schema)
            )
        )
        return [version for (version,) in await cursor.fetchall()]


async def test_two_concurrent_first_opens_upgrade_exactly_once(v1_url: str, server: str) -> None:
    """Two migrators on two pools at once: the advisory lock lets one upgrade, and the other,
    let in after it commits, finds version 2 and changes nothing."""
    schema = v1_url.split("schema=")[1].split("&")[0]
    conninfo, _ = PostgresOptions.read(server, {})
    pools = [AsyncConnectionPool(conninfo, min_size=1, max_size=2, open=False) for _ in range(2)]
    try:
        for pool in pools:
            await pool.open()
        upgraded = await asyncio.gather(*(migrate(pool, schema=schema) for pool in pools))
        assert sorted(upgraded) == [False, True]
        async with open_postgres(v1_url) as durable:
            assert await _versions(durable) == [1, SCHEMA_VERSION]
            statuses = (await durable.checkpointer.statuses()).statuses
            assert sorted(st.workflow for st in statuses) == list(WORKFLOWS)
    finally:
        for pool in pools:
            await pool.close()


async def test_a_version_1_schema_is_listed_and_runnable_after_the_upgrade(v1_url: str) -> None:
    async with open_postgres(v1_url, poll=timedelta(milliseconds=20)) as durable:
        assert await _versions(durable) == [1, SCHEMA_VERSION]
        page = await durable.checkpointer.statuses(limit=10)
        found = {st.workflow: st for st in page.statuses}
        assert sorted(found) == list(WORKFLOWS)
        assert {st.kind for st in found.values()} == {None}
        assert found["v1-queued"].status is Status.READY
        assert found["v1-sleeping"].status is Status.SLEEPING
        sleeping_until = found["v1-sleeping"].until
        assert sleeping_until is not None
        assert sleeping_until > datetime.now(UTC) + timedelta(minutes=50)
        # Not queued: finished or waiting, which version 1 does not tell apart; blocked is the
        # answer that strands neither (see migrate_backfill_2).
        assert found["v1-blocked"].status is Status.BLOCKED
        assert found["v1-done"].status is Status.BLOCKED
        assert [st.workflow for st in (await durable.list(status="ready")).statuses] == [
            "v1-queued"
        ]

        stop = asyncio.Event()
        registry = Workflows.of(_fixture_body())
        worker = asyncio.create_task(
            work(durable, registry, poll=timedelta(milliseconds=20), stop=stop)
        )
        try:
            queued = await _until_settled(durable, "v1-queued")
            assert queued.status is Status.FINISHED
            assert queued.value == {"greeting": "hello from v1-queued", "message": {"order": 7}}
            await durable.arrive("v1-blocked", "approval", "ops")
            blocked = await _until_settled(durable, "v1-blocked")
            assert blocked.status is Status.FINISHED
            assert blocked.value == {"greeting": "hello from v1-blocked", "approved_by": "ops"}
            assert (await durable.checkpointer.status("v1-sleeping")).status is Status.SLEEPING  # type: ignore[union-attr]
        finally:
            stop.set()
            await asyncio.wait_for(worker, 10)


async def _until_settled(durable: PostgresDurable, workflow: str) -> Any:
    for _ in range(500):
        current = await durable.checkpointer.status(workflow)
        if current is not None and current.status in (Status.FINISHED, Status.FAILED):
            return current
        await asyncio.sleep(0.02)
    raise AssertionError(f"{workflow} did not settle: {current}")


# -- version 2 to 4: limits (3), then each record keeps the operation that wrote it (4) -------
#
# ``fixtures/schema_v2.sql`` is version 2's ``schema.sql`` exactly as main a321884 shipped it
# (the last release before limits and operations). Each test creates it in a schema of its
# own, marks it version 2 as that release's migrate did, and writes records as that
# release's record and supply statements did (workflow, key, value; the time and the order
# by default).

V2_RECORDS = (
    ("v2-sleeping", "greet", '"hello v2-sleeping"'),
    ("v2-sleeping", "nap", '"2126-01-01T00:00:00+00:00"'),
    ("v2-blocked", "greet", '"hello v2-blocked"'),
)


@pytest.fixture
async def v2_url(server: str) -> AsyncIterator[str]:
    schema = f"durable_v2_{secrets.token_hex(5)}"
    conninfo, _ = PostgresOptions.read(server, {})
    async with (
        await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn,
        conn.transaction(),
    ):
        ddl = (FIXTURES / "schema_v2.sql").read_text(encoding="utf-8")
        await conn.execute(sql.SQL(ddl).format(**_placeholders(schema)))
        await conn.execute(
            sql.SQL("INSERT INTO {}.workflow_schema_version (version) VALUES (2)").format(
                sql.Identifier(schema)
            )
        )
        for row in V2_RECORDS:
            await conn.execute(
                sql.SQL(
                    "INSERT INTO {}.workflow_checkpoint (workflow, key, value) VALUES ({})"
                ).format(sql.Identifier(schema), sql.SQL(", ").join(sql.Placeholder() * 3)),
                row,
            )
    try:
        yield with_option(server, "schema", schema)
    finally:
        await asyncio.to_thread(drop_schema, conninfo, schema)


async def test_a_version_2_schema_gains_operations_and_its_records_read_as_before(
    v2_url: str,
) -> None:
    """Opening adds the limit tables and the column and marks version 4; every old record
    reads as it did, with no operation, and is refused to no operation; a record written now
    keeps its own."""
    assert SCHEMA_VERSION == 4
    async with open_postgres(v2_url) as durable:
        assert await _versions(durable) == [2, 4]
        async with durable.pool.connection() as conn:
            for table in ("queue_limit", "queue_slot", "queue_handout", "workflow_priority"):
                cursor = await conn.execute(
                    sql.SQL("SELECT count(*) FROM {}.{}").format(
                        sql.Identifier(durable.checkpointer.schema), sql.Identifier(table)
                    )
                )
                assert await cursor.fetchone() == (0,), table
        cp = durable.checkpointer
        assert await cp.load("v2-blocked") == {"greet": "hello v2-blocked"}
        old = await cp.history("v2-sleeping")
        assert [(e.key, e.operation) for e in old] == [("greet", None), ("nap", None)]
        holder = await cp.claim("v2-sleeping", liveness=timedelta(minutes=1), budget=LONG)
        assert holder is not None
        kept = await cp.record_as(holder, "greet", "other", "awaiting")
        assert (kept.value, kept.first) == ("hello v2-sleeping", False)
        await cp.record_as(holder, "later", 1, "step")
        assert (await cp.history("v2-sleeping"))[-1].operation == "step"
        await cp.release(holder)
        assert await migrate(durable.pool, schema=cp.schema) is False
