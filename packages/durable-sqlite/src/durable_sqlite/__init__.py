"""durable_sqlite: the embedded store. One file, no server, every guarantee in one local commit.

::

    import durable

    async with durable.open("sqlite:///orders.db") as store:
        await store.arrive("order-1", "approved", True)

or, to share the file with the application's own tables (which is what lets a
``transact`` effect commit with its record)::

    from durable_sqlite import SqliteDurable, connect

    async with connect("orders.db") as connection:
        store = SqliteDurable.over(connection)
"""

from durable_sqlite.checkpointer import SqliteCheckpointer, SqliteEffect
from durable_sqlite.connection import (
    DatabaseRefused,
    ForeignTable,
    NotADatabase,
    SqliteBusy,
    Synchronous,
    configure,
    connect,
)
from durable_sqlite.durable import SqliteDurable
from durable_sqlite.probe import SqliteProbe
from durable_sqlite.scheduler import SqliteScheduler

__all__ = [
    "DatabaseRefused",
    "ForeignTable",
    "NotADatabase",
    "SqliteBusy",
    "SqliteCheckpointer",
    "SqliteDurable",
    "SqliteEffect",
    "SqliteProbe",
    "SqliteScheduler",
    "Synchronous",
    "configure",
    "connect",
]
