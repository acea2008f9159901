"""The SQLite pair, whose moves across the two halves are each one commit."""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from typing import Any

import aiosqlite
from durable.boundary import check_key, check_message_id, check_workflow
from durable.clock import Clock
from durable.codec import CheckpointCodec, encode_value
from durable.interfaces import Admitted, Status, WorkflowStatus
from durable.plugins import Gap
from durable.workflows import Lifecycled

from durable_sqlite.checkpointer import SqliteCheckpointer, _Conflict
from durable_sqlite.connection import SCHEMA_VERSION, _version, on_thread, transaction
from durable_sqlite.scheduler import DEFAULT_LEASE, DEFAULT_POLL, SqliteScheduler

__all__ = ["SqliteDurable"]


class SqliteDurable(Lifecycled):
    """A :class:`SqliteCheckpointer` and a :class:`SqliteScheduler` on one connection.

    ``atomic``: ``arrive``, ``send`` and ``discard`` each write both tables in one
    transaction, so no process ever sees a value recorded without its wakeup, or a
    workflow discarded with its runs still queued. The lifecycle's moves that cross both
    halves are one transaction too: ``start`` records the kind and input and queues the
    workflow, ``cancel`` marks it cancelled, raises its fence and unqueues it, ``retry``
    makes it ready and queues it, each in one commit, so no crash leaves a started
    workflow unqueued or a cancelled one queued. That needs both halves on one
    connection (one transaction can only span one connection), which is why the
    constructor checks it rather than the documentation asking for it: two connections
    on the same file would be two commits with a crash-sized gap between them.
    """

    atomic = True

    def __init__(self, checkpointer: SqliteCheckpointer, scheduler: SqliteScheduler) -> None:
        if not isinstance(checkpointer, SqliteCheckpointer) or not isinstance(
            scheduler, SqliteScheduler
        ):
            raise TypeError(
                "SqliteDurable pairs a SqliteCheckpointer with a SqliteScheduler, got "
                f"{checkpointer!r} and {scheduler!r}; compose other stores with "
                "durable.SplitDurable"
            )
        if checkpointer.connection is not scheduler.connection:
            raise ValueError(
                "SqliteDurable needs its checkpointer and scheduler on one connection, so "
                "that each move is one transaction; these two have a connection each (even "
                "on one file that is two commits). Build both halves over the same "
                "connection, e.g. SqliteDurable.over(connection)"
            )
        self._checkpointer = checkpointer
        self._scheduler = scheduler

    async def schema_versions(self) -> tuple[int | None, int]:
        """For ``durable doctor``: the file's schema version and the one this release
        expects (opening a file migrates it, so they differ only for a file opened elsewhere
        by an older release since)."""
        return await on_thread(self.connection, _version), SCHEMA_VERSION

    @classmethod
    def over(
        cls,
        connection: aiosqlite.Connection,
        *,
        codec: CheckpointCodec[Any] | None = None,
        clock: Clock | None = None,
        lease: timedelta = DEFAULT_LEASE,
        poll: timedelta = DEFAULT_POLL,
        gap: Gap | None = None,
    ) -> SqliteDurable:
        """Both halves over ``connection``, sharing ``clock`` (SQLite's own when ``None``).
        ``gap`` is for tests only: every move of both halves, and each move across them
        (between its two halves, inside the one transaction), awaits it."""
        return cls(
            SqliteCheckpointer(connection, codec=codec, clock=clock, gap=gap),
            SqliteScheduler(connection, lease=lease, clock=clock, poll=poll, gap=gap),
        )

    def __repr__(self) -> str:
        return f"SqliteDurable({self._checkpointer!r}, {self._scheduler!r})"

    @property
    def connection(self) -> aiosqlite.Connection:
        return self._checkpointer.connection

    @property
    def checkpointer(self) -> SqliteCheckpointer:
        return self._checkpointer

    @property
    def scheduler(self) -> SqliteScheduler:
        return self._scheduler

    async def arrive(self, workflow: str, key: str, value: object) -> object:
        check_workflow(workflow)
        check_key(workflow, key)
        cp, sched = self._checkpointer, self._scheduler
        encoded = encode_value(cp.codec, value, workflow=workflow, key=key)

        def arrive(raw: sqlite3.Connection) -> object:
            stored = cp._supply_in(raw, workflow, key, encoded)
            if cp._gap is not None:
                cp._gap("Durable.arrive", workflow)
            sched._make_ready_in(raw, workflow)
            return stored

        stored = await transaction(self.connection, arrive)
        sched._changed.set()
        return cp.codec.decode(stored)

    async def send(self, workflow: str, value: object, *, message_id: str | None = None) -> str:
        check_workflow(workflow)
        check_message_id(workflow, message_id)
        cp, sched = self._checkpointer, self._scheduler
        encoded = cp._encode_entry(workflow, value)

        def send(raw: sqlite3.Connection) -> str:
            key = cp._append_in(raw, workflow, encoded, message_id)
            if cp._gap is not None:
                cp._gap("Durable.send", workflow)
            sched._make_ready_in(raw, workflow)
            return key

        key = await transaction(self.connection, send)
        sched._changed.set()
        return key

    async def discard(self, workflow: str) -> None:
        check_workflow(workflow)
        cp, sched = self._checkpointer, self._scheduler

        def discard(raw: sqlite3.Connection) -> None:
            cp._discard_in(raw, workflow)
            if cp._gap is not None:
                cp._gap("Durable.discard", workflow)
            sched._cancel_in(raw, workflow)

        await transaction(self.connection, discard)

    # -- lifecycle: the three moves across both halves, one commit each ----------------

    async def _admit_and_queue(
        self, workflow: str, kind: str, input: object, queue: str
    ) -> Admitted:
        cp, sched = self._checkpointer, self._scheduler
        encoded = cp._encode_admission(workflow, kind, input, queue)

        def admit(raw: sqlite3.Connection) -> tuple[bool, Any]:
            created, row = cp._admit_in(raw, workflow, kind, encoded, queue)
            if cp._gap is not None:
                cp._gap("Durable.start", workflow)
            # Queued when new, and again when a repeat finds it still ready: harmless here
            # (the first start's commit queued it), and what a repeated start promises.
            if created or row[1] == Status.READY:
                sched._make_ready_in(raw, workflow)
            return created, row

        try:
            created, row = await transaction(self.connection, admit)
        except _Conflict as conflict:
            raise cp._conflict(workflow, kind, input, conflict) from None
        admitted = cp._admitted(created, row)
        if admitted.queue:
            sched._changed.set()
        return admitted

    async def _withdraw_and_cancel(self, workflow: str) -> WorkflowStatus:
        check_workflow(workflow)
        cp, sched = self._checkpointer, self._scheduler

        def withdraw(raw: sqlite3.Connection) -> Any:
            changed, row = cp._withdraw_in(raw, workflow)
            if cp._gap is not None:
                cp._gap("Durable.cancel", workflow)
            if changed:
                sched._cancel_in(raw, workflow)
            return row

        return cp._decode_status(await transaction(self.connection, withdraw))

    async def _readmit_and_queue(self, workflow: str) -> WorkflowStatus:
        check_workflow(workflow)
        cp, sched = self._checkpointer, self._scheduler

        def readmit(raw: sqlite3.Connection) -> Any:
            row = cp._readmit_in(raw, workflow)
            if cp._gap is not None:
                cp._gap("Durable.retry", workflow)
            sched._make_ready_in(raw, workflow)
            return row

        row = await transaction(self.connection, readmit)
        sched._changed.set()
        return cp._decode_status(row)
