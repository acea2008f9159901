"""Group commit: concurrent writes on one connection share a transaction, each its own."""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest
from durable import Fenced, Pass, Recorded
from durable_sqlite import SqliteCheckpointer, connect
from durable_sqlite.connection import batcher_of, group_commit, transaction
from durable_sqlite.plugin import parse_url

WRITES = 50
LIVE = timedelta(seconds=30)
BUDGET = timedelta(minutes=5)


def _insert(n: int) -> object:
    def work(raw: sqlite3.Connection) -> int:
        raw.execute("INSERT INTO t (n) VALUES (?)", (n,))
        if n % 7 == 3:
            raise ValueError(f"work {n} refuses")
        return n

    return work


async def _race(path: Path, *, enabled: bool) -> tuple[list[object], list[int], int]:
    """``WRITES`` works sent at once; their outcomes, the rows left, and the commits made."""
    async with connect(path) as connection:
        await transaction(connection, lambda raw: raw.execute("CREATE TABLE t (n INTEGER)"))
        group_commit(connection, enabled)
        commits: list[str] = []

        def trace(statement: str) -> None:
            if statement.strip().upper() == "COMMIT":
                commits.append(statement)

        await connection.set_trace_callback(trace)

        async def one(n: int) -> object:
            try:
                return await transaction(connection, _insert(n))  # type: ignore[arg-type]
            except ValueError as error:
                return error

        async with asyncio.timeout(30):
            outcomes = await asyncio.gather(*(one(n) for n in range(WRITES)))
        await connection.set_trace_callback(None)  # type: ignore[arg-type]
        rows = await connection.execute_fetchall("SELECT n FROM t ORDER BY n")
        return outcomes, [row[0] for row in rows], len(commits)


@pytest.mark.parametrize("enabled", [True, False], ids=["on", "off"])
async def test_each_work_gets_its_own_outcome_and_only_a_failing_one_is_rolled_back(
    tmp_path: Path, enabled: bool
) -> None:
    outcomes, rows, commits = await _race(tmp_path / "store.db", enabled=enabled)
    refused = [n for n in range(WRITES) if n % 7 == 3]
    for n, outcome in enumerate(outcomes):
        if n in refused:
            assert isinstance(outcome, ValueError), (n, outcome)
            assert str(outcome) == f"work {n} refuses"
        else:
            assert outcome == n, (n, outcome)
    assert rows == [n for n in range(WRITES) if n not in refused]
    if enabled:
        # The first went alone; the rest arrived while it was on its way, and went together.
        assert commits < WRITES // 2, commits
    else:
        assert commits == WRITES - len(refused), commits  # a refused work rolls back


def test_the_url_turns_group_commit_off_and_refuses_a_bad_value() -> None:
    assert parse_url("sqlite:///x.db")[1].group_commit is True
    assert parse_url("sqlite:///x.db?group_commit=0")[1].group_commit is False
    assert "group_commit=0" in parse_url("sqlite:///x.db?group_commit=off")[1].query()
    with pytest.raises(ValueError, match="group_commit"):
        parse_url("sqlite:///x.db?group_commit=maybe")


async def test_works_before_one_that_ended_the_transaction_run_again_and_commit(
    tmp_path: Path,
) -> None:
    """A work whose failure ended the whole transaction (as SQLite does by itself on a full
    disk) takes the works before it in the batch down with it; they run again in a fresh
    transaction and commit, and only the failing work's caller hears of the failure."""
    async with connect(tmp_path / "store.db") as connection:
        await transaction(connection, lambda raw: raw.execute("CREATE TABLE t (n INTEGER)"))
        runs: list[int] = []

        def insert(n: int) -> object:
            def work(raw: sqlite3.Connection) -> int:
                runs.append(n)
                raw.execute("INSERT INTO t (n) VALUES (?)", (n,))
                if n == 5:
                    raw.execute("ROLLBACK")  # the whole transaction, not the savepoint
                    raise OSError("disk full")
                return n

            return work

        async def one(n: int) -> object:
            try:
                return await transaction(connection, insert(n))  # type: ignore[arg-type]
            except OSError as error:
                return error

        async with asyncio.timeout(30):
            outcomes = await asyncio.gather(*(one(n) for n in range(10)))
        assert isinstance(outcomes[5], OSError)
        assert [o for n, o in enumerate(outcomes) if n != 5] == [0, 1, 2, 3, 4, 6, 7, 8, 9]
        rows = await connection.execute_fetchall("SELECT n FROM t ORDER BY n")
        assert [row[0] for row in rows] == [0, 1, 2, 3, 4, 6, 7, 8, 9]
        assert runs.count(5) == 1, runs
        assert runs.count(2) == 2, f"the works rolled back with work 5 ran again: {runs}"


async def _steps(path: Path, *, enabled: bool) -> tuple[list[object], int]:
    """``WRITES`` step records sent at once by as many passes, with a stale token and a
    key written twice among them; each write's outcome, and the commits made."""
    async with connect(path) as connection:
        group_commit(connection, enabled)
        store = SqliteCheckpointer(connection)
        holders = []
        for n in range(WRITES):
            holder = await store.claim(f"wf{n}", liveness=LIVE, budget=BUDGET)
            assert holder is not None
            holders.append(holder)
        holders[3] = Pass("wf3", holders[3].token + 1)  # never issued: fenced
        holders[9] = holders[8]  # the same key of wf8, written twice
        commits: list[str] = []

        def trace(statement: str) -> None:
            if statement.strip().upper() == "COMMIT":
                commits.append(statement)

        await connection.set_trace_callback(trace)

        async def one(n: int) -> object:
            try:
                return await store.record_as(holders[n], "s", n, "step")
            except Fenced as error:
                return error

        async with asyncio.timeout(30):
            outcomes = await asyncio.gather(*(one(n) for n in range(WRITES)))
        await connection.set_trace_callback(None)  # type: ignore[arg-type]
        return outcomes, len(commits)


@pytest.mark.parametrize("enabled", [True, False], ids=["on", "off"])
async def test_steps_recorded_at_once_share_commits_and_each_keeps_its_verdict(
    tmp_path: Path, enabled: bool
) -> None:
    """A step's write goes alone by its own path when nothing is on its way (a lone writer
    never waits for company); those that arrive meanwhile still join the next batch, and
    fencing and first-writer-wins decide each as they would alone."""
    outcomes, commits = await _steps(tmp_path / "store.db", enabled=enabled)
    for n, outcome in enumerate(outcomes):
        if n == 3:
            assert isinstance(outcome, Fenced), outcome
        elif n == 9:
            assert outcome == Recorded(8, first=False), outcome  # wf8's own write came first
        else:
            assert outcome == Recorded(n, first=True), (n, outcome)
    if enabled:
        assert commits < WRITES // 2, commits
    else:
        assert commits == WRITES - 1, commits  # the fenced write rolls back


async def test_a_lone_step_write_commits_at_once_by_itself(tmp_path: Path) -> None:
    async with connect(tmp_path / "store.db") as connection:
        store = SqliteCheckpointer(connection)
        holder = await store.claim("wf", liveness=LIVE, budget=BUDGET)
        assert holder is not None
        batcher = batcher_of(connection)
        statements: list[str] = []
        await connection.set_trace_callback(statements.append)
        assert await store.record_as(holder, "s", 1, "step") == Recorded(1, first=True)
        await connection.set_trace_callback(None)  # type: ignore[arg-type]
        assert len(statements) == 3, statements  # no SAVEPOINT: it went alone
        assert statements[0] == "BEGIN IMMEDIATE"
        assert "INSERT INTO durable_checkpoint" in statements[1]
        assert statements[2] == "COMMIT"
        assert not batcher.busy, "the connection's turn was handed back"
        assert not batcher.pending
