"""durable_postgres: the PostgreSQL store for durable, over psycopg 3.

A step's own ``UPDATE`` and its checkpoint commit in one transaction, so that step is
exactly-once; every other guarantee of the contract is one statement or one transaction::

    from durable_postgres import PostgresDurable, migrate

    async with AsyncConnectionPool(url, kwargs={"autocommit": True}, open=False) as pool:
        await migrate(pool)
        store = PostgresDurable.on(pool)

or simply ``async with durable.open("postgresql://user@host/db") as store``.
"""

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
from durable_postgres.migrate import SCHEMA_VERSION, migrate
from durable_postgres.plugin import open_postgres
from durable_postgres.scheduler import PostgresScheduler
from durable_postgres.statements import DEFAULT_SCHEMA, check_schema_name

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
