"""The conformance probe for the SQLite store: counters in a table of the store's own file.

A probe effect is exactly what a user's transact effect is, a function of the cursor
inside the open transaction, so the suite proves the real mechanism and not a stand-in.
``count`` reads through a connection of its own, so what it sees is what was committed
to the file, not what one connection happens to hold.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import aiosqlite

from durable_sqlite.checkpointer import SqliteEffect
from durable_sqlite.connection import statement, transaction

__all__ = ["SqliteProbe"]

_PROBE = "probe.sql"
_CREATE = statement("create", _PROBE)
_BUMP = statement("bump", _PROBE)
_COUNT = statement("count", _PROBE)


class SqliteProbe:
    """Effects over ``durable_probe`` in the database at ``path``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @staticmethod
    async def install(connection: aiosqlite.Connection) -> None:
        """Create the probe's table (idempotent)."""
        await transaction(connection, lambda raw: raw.execute(_CREATE))

    def bump(self, workflow: str, counter: str) -> SqliteEffect:
        def effect(cursor: sqlite3.Cursor) -> object:
            return cursor.execute(_BUMP, {"workflow": workflow, "counter": counter}).fetchone()[0]

        return effect

    def bump_then_fail(self, workflow: str, counter: str) -> SqliteEffect:
        bump = self.bump(workflow, counter)

        def effect(cursor: sqlite3.Cursor) -> object:
            bump(cursor)
            raise RuntimeError(f"the probe fails after moving {counter!r}, by design")

        return effect

    async def count(self, workflow: str, counter: str) -> int:
        return await asyncio.to_thread(self._count, workflow, counter)

    def _count(self, workflow: str, counter: str) -> int:
        with_uri = f"{self.path.resolve().as_uri()}?mode=ro"
        raw = sqlite3.connect(with_uri, uri=True)
        try:
            row = raw.execute(_COUNT, {"workflow": workflow, "counter": counter}).fetchone()
        finally:
            raw.close()
        return 0 if row is None else int(row[0])
