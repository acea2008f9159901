"""The SQLite pair: each cross-store move is one commit, and only one connection makes one."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from durable import Checkpointer, Durable, Fenced
from durable.clock import ManualClock
from durable.interfaces import INBOX_PREFIX
from durable.memory import MemoryScheduler
from durable.run import Blocked, Finished, Run, resume
from durable_sqlite import (
    SqliteCheckpointer,
    SqliteDurable,
    SqliteEffect,
    SqliteScheduler,
    connect,
)

SOON = timedelta(milliseconds=50)


@contextmanager
def queue_refuses(path: Path) -> Iterator[None]:
    """Make every write to the queue table fail, from a connection of its own, so that a
    move which reached the queue half must have rolled back its checkpoint half too."""
    raw = sqlite3.connect(path, isolation_level=None)
    for event in ("INSERT", "UPDATE", "DELETE"):
        raw.execute(
            f"CREATE TRIGGER refuse_{event.lower()} BEFORE {event} ON durable_queue "
            "BEGIN SELECT RAISE(ABORT, 'the queue refuses'); END"
        )
    try:
        yield
    finally:
        for event in ("insert", "update", "delete"):
            raw.execute(f"DROP TRIGGER refuse_{event}")
        raw.close()


def test_the_pair_is_atomic_and_meets_the_protocol(store: SqliteDurable) -> None:
    # Spelled as annotations so that the type checker proves the Effect parameter too.
    pair: Durable[SqliteEffect] = store
    checkpointer: Checkpointer[SqliteEffect] = store.checkpointer
    assert pair.atomic is True
    assert isinstance(pair, Durable)
    assert isinstance(checkpointer, Checkpointer)
    assert store.checkpointer.connection is store.scheduler.connection


async def test_arrive_supplies_the_value_and_makes_the_workflow_ready(
    store: SqliteDurable,
) -> None:
    assert await store.arrive("wf", "approved", True) is True
    assert await store.arrive("wf", "approved", False) is True
    assert await store.checkpointer.load("wf") == {"approved": True}
    delivery = await store.scheduler.next_ready(SOON)
    assert delivery is not None
    assert delivery.workflow == "wf"


async def test_send_appends_to_the_inbox_and_makes_the_workflow_ready(
    store: SqliteDurable,
) -> None:
    key = await store.send("wf", {"id": 7})
    assert key.startswith(INBOX_PREFIX)
    assert await store.checkpointer.load("wf") == {key: {"id": 7}}
    delivery = await store.scheduler.next_ready(SOON)
    assert delivery is not None
    assert delivery.workflow == "wf"


async def test_discard_forgets_the_records_fences_the_pass_and_cancels_the_runs(
    store: SqliteDurable,
) -> None:
    holder = await store.checkpointer.claim("wf", liveness=SOON * 100, budget=SOON * 1000)
    assert holder is not None
    await store.send("wf", "message")
    await store.discard("wf")
    assert await store.checkpointer.load("wf") == {}
    assert await store.scheduler.scheduled("wf") is None
    assert await store.scheduler.next_ready(SOON) is None
    with pytest.raises(Fenced, match="superseded"):
        await store.checkpointer.record(holder, "late", 1)


async def test_arrive_is_one_commit(store: SqliteDurable, path: Path) -> None:
    with queue_refuses(path), pytest.raises(sqlite3.IntegrityError, match="queue refuses"):
        await store.arrive("wf", "approved", True)
    assert await store.checkpointer.load("wf") == {}
    assert await store.arrive("wf", "approved", True) is True


async def test_send_is_one_commit(store: SqliteDurable, path: Path) -> None:
    with queue_refuses(path), pytest.raises(sqlite3.IntegrityError, match="queue refuses"):
        await store.send("wf", "message")
    assert await store.checkpointer.load("wf") == {}


async def test_a_send_with_an_id_is_one_commit_marker_included(
    store: SqliteDurable, path: Path
) -> None:
    with queue_refuses(path), pytest.raises(sqlite3.IntegrityError, match="queue refuses"):
        await store.send("wf", "message", message_id="m-1")
    assert await store.checkpointer.load("wf") == {}
    key = await store.send("wf", "message", message_id="m-1")  # no marker was left behind
    assert await store.checkpointer.load("wf") == {key: "message"}


async def test_a_send_with_an_id_repeated_on_other_connections_returns_the_first_key(
    store: SqliteDurable, path: Path
) -> None:
    """SQLite has no connection to lose between a write and its answer; what a message id
    owes here is that a repeat, from this connection or another, appends nothing."""
    first = await store.send("wf", {"order": 1}, message_id="order-1")
    async with connect(path) as a, connect(path) as b:
        others = [SqliteDurable.over(c) for c in (a, b)]
        repeats = await asyncio.gather(
            *(others[i % 2].send("wf", {"order": 1}, message_id="order-1") for i in range(20)),
            *(others[i % 2].send("wf", {"order": 2}, message_id="order-2") for i in range(20)),
        )
    assert set(repeats[:20]) == {first}
    assert len(set(repeats[20:])) == 1
    assert await store.checkpointer.load("wf") == {first: {"order": 1}, repeats[20]: {"order": 2}}
    assert [e.key for e in await store.checkpointer.history("wf")] == [first, repeats[20]]


async def test_discard_is_one_commit(store: SqliteDurable, path: Path) -> None:
    await store.send("wf", "message")
    with queue_refuses(path), pytest.raises(sqlite3.IntegrityError, match="queue refuses"):
        await store.discard("wf")
    assert list((await store.checkpointer.load("wf")).values()) == ["message"]
    assert await store.scheduler.scheduled("wf") is not None


async def test_many_concurrent_moves_on_one_workflow_lose_nothing(store: SqliteDurable) -> None:
    sent = await asyncio.gather(*(store.send("wf", i) for i in range(50)))
    arrived = await asyncio.gather(*(store.arrive("wf", f"k{i % 5}", i) for i in range(50)))
    loaded = await store.checkpointer.load("wf")
    assert sorted(loaded[k] for k in sent) == list(range(50))  # type: ignore[type-var]
    assert {loaded[f"k{i}"] for i in range(5)} == {a for a in arrived}
    delivery = await store.scheduler.next_ready(SOON)
    assert delivery is not None
    assert await store.scheduler.next_ready(SOON) is None  # one entry per workflow


async def test_halves_on_two_connections_are_refused_at_construction(path: Path) -> None:
    async with connect(path) as one, connect(path) as two:
        with pytest.raises(ValueError, match="one connection"):
            SqliteDurable(SqliteCheckpointer(one), SqliteScheduler(two))


async def test_a_half_from_another_store_is_refused_at_construction(path: Path) -> None:
    async with connect(path) as connection:
        with pytest.raises(TypeError, match="SplitDurable"):
            SqliteDurable(SqliteCheckpointer(connection), MemoryScheduler())  # type: ignore[arg-type]


async def test_a_workflow_runs_end_to_end_through_resume(
    clocked: SqliteDurable, clock: ManualClock
) -> None:
    calls: list[str] = []

    async def body(run: Run[SqliteEffect]) -> object:
        async def charge() -> str:
            calls.append("charge")
            return "ch_1"

        charged = await run.step("charge", charge, str)
        approved = await run.awaiting("approval", bool)
        message = await run.receive("note", str)
        return [charged, approved, message]

    assert await resume(clocked, "order-1", body, clock=clock) == Blocked(("approval",))
    await clocked.arrive("order-1", "approval", True)
    assert await resume(clocked, "order-1", body, clock=clock) == Blocked(("note",))
    await clocked.send("order-1", "thanks")
    assert await resume(clocked, "order-1", body, clock=clock) == Finished(["ch_1", True, "thanks"])
    assert calls == ["charge"]
