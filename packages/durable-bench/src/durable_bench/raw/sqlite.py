"""The SQLite store's raw round trip: one ``INSERT`` and its ``COMMIT`` through aiosqlite.

The floor a recorded step is measured against, and the least a caller can ask of aiosqlite
to make one row durable: one ``await connection.execute`` in autocommit mode, which is one
trip to the connection's thread and one commit.

It runs on the store's own connection, into a table of its own in the store's file, so
that the floor has the same settings as the store by construction (WAL, the testbed's
``synchronous`` and ``busy_timeout``) and, as much as that, the same thread. A trip to an
aiosqlite thread costs anything from about 15 to 80 microseconds on a small virtual
machine depending on whether the operating system keeps that thread's CPU awake, and that
choice is made per thread; a floor measured on a second connection would be measuring a
different thread's luck.

The testbed decides ``synchronous``: the bench compares like with like whichever it is.
``sqlite://?synchronous=normal`` given to the testing hook is how a run asks for
``NORMAL``, the setting the SQLite target is stated for.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiosqlite
from durable.plugins import Testbed

_CREATE = (
    "CREATE TABLE IF NOT EXISTS bench_raw (workflow TEXT NOT NULL, key TEXT NOT NULL, "
    "value TEXT NOT NULL, PRIMARY KEY (workflow, key)) WITHOUT ROWID"
)
_INSERT = "INSERT INTO bench_raw (workflow, key, value) VALUES ('bench', ?, ?)"


@asynccontextmanager
async def raw_op(testbed: Testbed[Any]) -> AsyncIterator[Callable[[int], Awaitable[None]]]:
    connection = getattr(testbed.durable, "connection", None)
    if not isinstance(connection, aiosqlite.Connection):
        raise TypeError(f"the sqlite raw op needs a SqliteDurable, got {testbed.durable!r}")
    if connection.isolation_level is not None:
        raise ValueError("the store's connection is not in autocommit mode")
    await connection.execute(_CREATE)
    # A fresh key every call, whatever i the harness passes (it reuses them across rows),
    # so that every call is an insert and a commit, never a constraint failure.
    fresh = itertools.count()

    async def op(i: int) -> None:
        await connection.execute(_INSERT, (f"k{next(fresh)}", str(i)))

    yield op
