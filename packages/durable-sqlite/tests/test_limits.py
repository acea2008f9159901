"""Queue limits on SQLite cost a step nothing: the slot is taken in the take's own
transaction and given back in the answer's, so a workflow of a limited queue commits
exactly as often as one of an unlimited queue, and its steps not once more."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from durable import Workflows
from durable.interfaces import QueueLimit
from durable.parsers import exactly
from durable.run import Run
from durable.worker import work
from durable_sqlite import SqliteDurable
from durable_sqlite.connection import on_thread


@pytest.mark.parametrize("limited", [False, True], ids=["unlimited", "limited"])
async def test_a_limited_queue_adds_no_commit_to_a_pass_or_a_step(
    store: SqliteDurable, limited: bool
) -> None:
    """A 5-step workflow from start to outcome commits ten times (start, take, begin, five
    steps, settle, done), with or without a limit and a rate on its queue."""
    kinds = Workflows()

    @kinds.kind("five", queue="payments")
    async def five(run: Run[object], _: object) -> int:
        for i in range(5):
            await run.step(f"s{i}", lambda i=i: i, exactly(int))
        return 5

    if limited:
        await store.scheduler.set_limit("payments", QueueLimit(concurrent=5, rate=100))
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
    assert await store.scheduler.held("payments") == 0
