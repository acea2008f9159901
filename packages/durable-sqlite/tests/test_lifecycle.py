"""The SQLite store's lifecycle beyond the conformance suite: one commit per move across
both halves, listing that walks an index, and a busy file that is an outage."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest
from durable.interfaces import (
    Lifecycle,
    NotRetryable,
    StartConflict,
    Status,
    StoreUnavailable,
    UnknownWorkflow,
)
from durable_sqlite import SqliteDurable, connect
from durable_sqlite.connection import SqliteBusy, schema, statements_for

LIVENESS = timedelta(seconds=30)
BUDGET = timedelta(minutes=5)


def query(path: Path, sql: str, *params: object) -> list[tuple[object, ...]]:
    raw = sqlite3.connect(path)
    try:
        return raw.execute(sql, params).fetchall()
    finally:
        raw.close()


def test_the_checkpointer_is_a_lifecycle(store: SqliteDurable) -> None:
    assert isinstance(store.checkpointer, Lifecycle)


async def test_start_records_and_queues_in_one_commit(store: SqliteDurable, path: Path) -> None:
    admitted = await store._admit_and_queue("o-1", "payout", {"amount": 120}, "default")
    assert admitted.created
    assert admitted.queue
    assert admitted.status.status is Status.READY
    assert query(path, "SELECT kind, status FROM durable_workflow") == [("payout", "ready")]
    assert await store.scheduler.scheduled("o-1") is not None


async def test_a_start_that_fails_after_admitting_leaves_neither_row_nor_queue(
    store: SqliteDurable, path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The admission and the queueing share one transaction: when the second fails, the
    first is rolled back with it, so no crash can leave a started workflow unqueued."""

    def broken(raw: sqlite3.Connection, workflow: str) -> None:
        raise RuntimeError("the disk went away between the two statements")

    monkeypatch.setattr(store.scheduler, "_make_ready_in", broken)
    with pytest.raises(RuntimeError):
        await store._admit_and_queue("o-1", "payout", 1, "default")
    assert query(path, "SELECT count(*) FROM durable_workflow") == [(0,)]
    assert await store.checkpointer.status("o-1") is None


async def test_a_conflicting_start_writes_nothing_anywhere(
    store: SqliteDurable, path: Path
) -> None:
    await store._admit_and_queue("o-1", "payout", 1, "default")
    taken = await store.scheduler.next_ready(timedelta(seconds=1))
    assert taken is not None
    before = (
        query(path, "SELECT * FROM durable_queue"),
        query(path, "SELECT * FROM durable_workflow"),
    )
    with pytest.raises(StartConflict) as refused:
        await store._admit_and_queue("o-1", "refund", 1, "default")
    assert "'payout'" in str(refused.value)
    assert "'refund'" in str(refused.value)
    with pytest.raises(StartConflict):
        await store._admit_and_queue("o-1", "payout", 2, "default")
    after = (
        query(path, "SELECT * FROM durable_queue"),
        query(path, "SELECT * FROM durable_workflow"),
    )
    assert after == before


async def test_cancel_marks_fences_and_unqueues_in_one_commit(
    store: SqliteDurable, path: Path
) -> None:
    cp = store.checkpointer
    await store._admit_and_queue("o-1", "payout", 1, "default")
    began = await cp.begin("o-1", liveness=LIVENESS, budget=BUDGET, owner="host:1")
    assert began is not None
    assert began.holder is not None
    cancelled = await store._withdraw_and_cancel("o-1")
    assert cancelled.status is Status.CANCELLED
    assert await store.scheduler.scheduled("o-1") is None
    assert query(path, "SELECT token FROM durable_claim") == [(began.holder.token + 1,)]
    # Cancelling a terminal workflow changes nothing, the queue included.
    await store.scheduler.make_ready("o-1")
    again = await store._withdraw_and_cancel("o-1")
    assert again.updated_at == cancelled.updated_at
    assert await store.scheduler.scheduled("o-1") is not None


async def test_retry_readies_and_queues_and_refuses_the_rest(store: SqliteDurable) -> None:
    await store._admit_and_queue("o-1", "payout", 1, "default")
    with pytest.raises(NotRetryable):
        await store._readmit_and_queue("o-1")
    await store._withdraw_and_cancel("o-1")
    assert await store.scheduler.scheduled("o-1") is None
    readied = await store._readmit_and_queue("o-1")
    assert (readied.status, readied.attempts) == (Status.READY, 0)
    assert await store.scheduler.scheduled("o-1") is not None
    with pytest.raises(UnknownWorkflow):
        await store._readmit_and_queue("nobody")
    with pytest.raises(UnknownWorkflow):
        await store._withdraw_and_cancel("nobody")


async def test_a_workflow_with_records_and_no_row_can_be_cancelled(store: SqliteDurable) -> None:
    await store.send("o-1", {"hello": 1})
    cancelled = await store._withdraw_and_cancel("o-1")
    assert (cancelled.status, cancelled.kind) == (Status.CANCELLED, None)
    assert await store.scheduler.scheduled("o-1") is None


@pytest.mark.parametrize(
    ("name", "index"),
    [
        ("list_all", "durable_workflow_updated"),
        ("list_status", "durable_workflow_status"),
        ("list_kind_status", "durable_workflow_kind"),
        ("list_kind", "durable_workflow_kind"),
    ],
)
def test_each_listing_walks_an_index_from_its_cursor(name: str, index: str) -> None:
    """So a page of failed workflows costs the page, however many finished ones there are:
    the plan searches the index from the cursor and sorts nothing (the kind-only merge
    sorts its seven pages, at most seven times the limit)."""
    raw = sqlite3.connect(":memory:")
    try:
        for text in schema():
            raw.execute(text)
        params = {"at": 1 << 62, "wf": "", "limit": 11, "status": "failed", "kind": "payout"}
        sql = statements_for(True, "statuses.sql")[name]
        plan = [row[3] for row in raw.execute("EXPLAIN QUERY PLAN " + sql, params)]
    finally:
        raw.close()
    searches = [step for step in plan if step.startswith("SEARCH") and index in step]
    assert searches, plan
    assert all("(updated_at,workflow)<(?,?)" in step for step in searches), plan
    assert not any(step.startswith("SCAN durable_workflow") for step in plan), plan
    if name != "list_kind":
        assert not any("TEMP B-TREE" in step for step in plan), plan


async def test_150_failed_among_2000_finished_page_newest_first_by_cursor(
    store: SqliteDurable,
) -> None:
    cp = store.checkpointer
    raw_rows = [(f"f-{i:04}", "payout", "finished", i) for i in range(2000)]
    raw_rows += [(f"x-{i:03}", "payout", "failed", 10_000 + i) for i in range(150)]

    def fill(raw: sqlite3.Connection) -> None:
        raw.executemany(
            "INSERT INTO durable_workflow (workflow, kind, status, updated_at) VALUES (?, ?, ?, ?)",
            raw_rows,
        )

    from durable_sqlite.connection import transaction

    await transaction(store.connection, fill)
    first = await cp.statuses(status=Status.FAILED, limit=100)
    assert [s.workflow for s in first.statuses] == [f"x-{i:03}" for i in range(149, 49, -1)]
    assert first.cursor is not None
    rest = await cp.statuses(status=Status.FAILED, limit=100, cursor=first.cursor)
    assert [s.workflow for s in rest.statuses] == [f"x-{i:03}" for i in range(49, -1, -1)]
    assert rest.cursor is None
    with pytest.raises(ValueError, match="not a cursor"):
        await cp.statuses(cursor="yesterday")


async def test_a_busy_file_is_an_outage_that_wrote_nothing(path: Path) -> None:
    """Another connection holding the write lock past the busy timeout is SqliteBusy, a
    StoreUnavailable: the worker waits it out and never counts it as an attempt."""
    async with connect(path, busy_timeout=timedelta(milliseconds=100)) as connection:
        store = SqliteDurable.over(connection)
        holder = sqlite3.connect(path, isolation_level=None)
        try:
            holder.execute("BEGIN IMMEDIATE")
            with pytest.raises(SqliteBusy) as busy:
                await store._admit_and_queue("o-1", "payout", 1, "default")
            holder.execute("ROLLBACK")
        finally:
            holder.close()
        assert isinstance(busy.value, StoreUnavailable)
        assert "busy" in str(busy.value)
        assert await store.checkpointer.status("o-1") is None
        await store._admit_and_queue("o-1", "payout", 1, "default")


async def test_lifecycle_adds_no_commit_to_a_pass_or_a_step(store: SqliteDurable) -> None:
    """The design's promise, counted on the connection: begin, beat and settle are the
    claim's, renewal's and release's own transactions. A 5-step workflow from start to
    outcome under a running worker commits ten times (start, take, begin, five steps,
    settle, done), exactly what make_ready, take, claim, five steps, release and done did
    before lifecycle."""
    from durable import Workflows
    from durable.parsers import exactly
    from durable.run import Run
    from durable.worker import work
    from durable_sqlite.connection import on_thread

    kinds = Workflows()

    @kinds.kind("five")
    async def five(run: Run[object], _: object) -> int:
        for i in range(5):
            await run.step(f"s{i}", lambda i=i: i, exactly(int))
        return 5

    commits: list[str] = []

    def trace(statement: str) -> None:
        if statement.strip().upper() == "COMMIT":
            commits.append(statement)

    stop = asyncio.Event()
    worker = asyncio.ensure_future(work(store, kinds, poll=timedelta(milliseconds=20), stop=stop))
    await asyncio.sleep(0.2)  # past the worker's start-up (its scheduler.prepare commits once)
    await on_thread(store.connection, lambda raw: raw.set_trace_callback(trace))
    try:
        handle = await store.start(five, "wf-1")
        assert await handle.result(timeout=10) == 5
        for _ in range(500):  # the worker answers the delivery just after the settle
            if await store.scheduler.scheduled("wf-1") is None:
                break
            await asyncio.sleep(0.01)
    finally:
        await on_thread(store.connection, lambda raw: raw.set_trace_callback(None))
        stop.set()
        await worker
    assert len(commits) == 10, commits
