"""durable_postgres: the PostgreSQL store for durable, over psycopg 3.

A step's own ``UPDATE`` and its checkpoint commit in one transaction, so that step is
exactly-once; every other guarantee of the contract is one statement or one transaction::

    from durable_postgres import PostgresDurable, migrate

    async with AsyncConnectionPool(url, kwargs={"autocommit": True}, open=False) as pool:
        await migrate(pool)
        store = PostgresDurable.on(pool)

or simply ``async with durable.open("postgresql://user@host/db") as store``.
"""

import typing as _typing

from durable.plugins import lazy_exports as _lazy_exports

if _typing.TYPE_CHECKING:
    from durable_postgres.checkpointer import PostgresCheckpointer, PostgresEffect
    from durable_postgres.durable import PostgresDurable
    from durable_postgres.errors import (
        ConnectionLost,
        InvalidSchemaName,
        PostgresUnavailable,
        SchemaMissing,
        StoreClosed,
        UnstorableName,
        UnstorableValue,
    )
    from durable_postgres.migration import SCHEMA_VERSION, migrate
    from durable_postgres.plugin import open_postgres
    from durable_postgres.scheduler import PostgresScheduler
    from durable_postgres.statements import DEFAULT_SCHEMA, check_schema_name
else:
    # Imported when first used, so that loading the entry point (every durable command
    # does) does not import psycopg.
    __getattr__, __dir__ = _lazy_exports(
        __name__,
        {
            "ConnectionLost": "durable_postgres.errors",
            "DEFAULT_SCHEMA": "durable_postgres.statements",
            "InvalidSchemaName": "durable_postgres.errors",
            "PostgresCheckpointer": "durable_postgres.checkpointer",
            "PostgresDurable": "durable_postgres.durable",
            "PostgresEffect": "durable_postgres.checkpointer",
            "PostgresScheduler": "durable_postgres.scheduler",
            "PostgresUnavailable": "durable_postgres.errors",
            "SCHEMA_VERSION": "durable_postgres.migration",
            "SchemaMissing": "durable_postgres.errors",
            "StoreClosed": "durable_postgres.errors",
            "UnstorableName": "durable_postgres.errors",
            "UnstorableValue": "durable_postgres.errors",
            "check_schema_name": "durable_postgres.statements",
            "migrate": "durable_postgres.migration",
            "open_postgres": "durable_postgres.plugin",
        },
    )

__all__ = [
    "DEFAULT_SCHEMA",
    "SCHEMA_VERSION",
    "ConnectionLost",
    "InvalidSchemaName",
    "PostgresCheckpointer",
    "PostgresDurable",
    "PostgresEffect",
    "PostgresScheduler",
    "PostgresUnavailable",
    "SchemaMissing",
    "StoreClosed",
    "UnstorableName",
    "UnstorableValue",
    "check_schema_name",
    "migrate",
    "open_postgres",
]
