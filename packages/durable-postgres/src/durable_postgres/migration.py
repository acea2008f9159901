"""Creating the durable tables, once, however many workers start at the same moment.

``CREATE ... IF NOT EXISTS`` is idempotent one statement at a time but not under a race: two
sessions that both find a table missing both try to create it, and one of them fails on a
unique violation in the catalog. So the whole of ``schema.sql`` runs in one transaction that
first takes a transaction-scoped advisory lock keyed by the schema name: the first worker
creates everything and commits, and the rest, let in one at a time, find the version row and
change nothing.

Upgrading is the same transaction under the same lock: it reads the applied version, runs the
idempotent DDL (which adds what a newer version has), and when the schema was at version 1
backfills one status row per existing workflow (``migrate_backfill_2`` in ``statuses.sql``)
before marking version 2. A second migrator, let in after the first commits, finds version 2
and changes nothing; one that lost its connection midway rolled back whole.
"""

from __future__ import annotations

from typing import Any

import psycopg.errors
from durable.interfaces import StoreError
from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from durable_postgres.connections import Connections
from durable_postgres.statements import (
    DEFAULT_SCHEMA,
    schema_ddl,
    statements,
    status_statements,
)

__all__ = ["SCHEMA_VERSION", "migrate", "schema_version"]

SCHEMA_VERSION = 4
"""The version of ``schema.sql`` this release creates and expects: 1 was the release before
the workflow lifecycle, 2 adds ``workflow_status``, 3 adds the queue limit tables
(``queue_limit``, ``queue_slot``, ``queue_handout``, ``workflow_priority``; created empty by
the idempotent DDL, nothing to backfill), 4 adds ``workflow_checkpoint.operation`` (the
idempotent DDL adds the column to an older table; no backfill: NULL is what an older record
means). An older schema is taken to 4 by the one idempotent DDL, in one transaction."""


async def migrate(pool: AsyncConnectionPool[Any], *, schema: str = DEFAULT_SCHEMA) -> bool:
    """Create the durable tables in ``schema`` unless they are there already.

    Returns ``True`` when this call created them (or upgraded them from an older version) and
    ``False`` when they were already there (so of many concurrent callers exactly one sees
    ``True``). An already-migrated schema costs
    one short transaction and runs no DDL, so a role without ``CREATE`` privileges can open a
    schema an administrator migrated. ``schema`` must be a plain lowercase identifier.
    """
    sql = statements(schema)  # validates the name before anything is sent
    ddl = schema_ddl(schema)
    lifecycle = status_statements(schema)

    async def work(conn: AsyncConnection[TupleRow]) -> bool:
        async with conn.transaction():
            await conn.execute(sql.migrate_lock)
            version: int | None = None
            present = await (await conn.execute(sql.migrate_present)).fetchone()
            if present is not None and present[0]:
                applied = await (await conn.execute(sql.migrate_applied)).fetchone()
                version = applied[0] if applied is not None else None
                if version is not None and version > SCHEMA_VERSION:
                    raise StoreError(
                        f"schema {schema!r} is at version {version}, newer than the "
                        f"{SCHEMA_VERSION} this durable-postgres knows; upgrade durable-postgres"
                    )
                if version == SCHEMA_VERSION:
                    return False
            try:
                await conn.execute(ddl)
            except psycopg.errors.InsufficientPrivilege as error:
                raise StoreError(
                    f"creating the durable tables in schema {schema!r} was refused: "
                    f"{error.diag.message_primary}; grant this role CREATE on the database "
                    f"(or have an administrator run migrate once with schema={schema!r})"
                ) from error
            if version is not None and version < 2:
                await conn.execute(lifecycle.migrate_backfill_2)
            await conn.execute(sql.migrate_mark, {"version": SCHEMA_VERSION})
            return True

    return await Connections(pool, schema).run(
        f"migrating schema {schema!r}", work, repeatable=True
    )


async def schema_version(
    pool: AsyncConnectionPool[Any], *, schema: str = DEFAULT_SCHEMA
) -> int | None:
    """The version ``schema`` is migrated to, or ``None`` when the tables are not there;
    below :data:`SCHEMA_VERSION`, :func:`migrate` has work to do (``durable doctor`` says so)."""
    sql = statements(schema)

    async def work(conn: AsyncConnection[TupleRow]) -> int | None:
        present = await (await conn.execute(sql.migrate_present)).fetchone()
        if present is None or not present[0]:
            return None
        applied = await (await conn.execute(sql.migrate_applied)).fetchone()
        return None if applied is None else applied[0]

    return await Connections(pool, schema).run(
        f"reading the schema version of {schema!r}", work, repeatable=True
    )
