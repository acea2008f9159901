"""What only Postgres can get wrong: many connections, many processes, tuples that move,
connections that drop, and the round trips each guarantee costs."""

from __future__ import annotations

import asyncio
import json
import secrets
import signal
import sys
import tempfile
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from durable.run import Finished, resume
from durable_postgres import (
    ConnectionLost,
    PostgresDurable,
    PostgresEffect,
    migrate,
)
from durable_postgres.migration import SCHEMA_VERSION
from durable_postgres.plugin import PostgresOptions, connect_pool, open_postgres
from durable_postgres.testing import drop_schema
from psycopg import AsyncCursor, pq

if TYPE_CHECKING:
    from durable.plugins import Testbed

pytestmark = pytest.mark.timeout(120)

LONG = timedelta(minutes=5)


def schema_of(bed: Testbed[PostgresEffect]) -> str:
    schema = bed.extras["schema"]
    assert isinstance(schema, str)
    return schema


def url_of(bed: Testbed[PostgresEffect]) -> str:
    assert bed.url is not None
    return bed.url


async def sql(store: PostgresDurable, query: str, *params: object) -> list[tuple[Any, ...]]:
    async with store.pool.connection() as conn:
        cursor = await conn.execute(query.encode(), params)
        return await cursor.fetchall() if cursor.description is not None else []


async def stock_table(store: PostgresDurable, schema: str) -> str:
    table = f'"{schema}".stock'
    await sql(store, f"CREATE TABLE {table} (sku text PRIMARY KEY, reserved int NOT NULL)")
    await sql(store, f"INSERT INTO {table} VALUES ('piano', 0)")
    return table


def reserving(table: str) -> PostgresEffect:
    """The seed's exactly-once example: the application's own UPDATE, in the step's commit."""

    update = f"UPDATE {table} SET reserved = reserved + 1 WHERE sku = %s RETURNING reserved"

    async def reserve(cursor: AsyncCursor[Any]) -> object:
        await cursor.execute(update.encode(), ("piano",))
        row = await cursor.fetchone()
        assert row is not None
        return row[0]

    return reserve


def as_count(value: object) -> int:
    assert isinstance(value, int)
    return value


# -- concurrency --------------------------------------------------------------------------


async def test_fifty_concurrent_claimers_on_eight_connections_have_one_winner(
    bed: Testbed[PostgresEffect],
) -> None:
    async with open_postgres(url_of(bed), min_size=8, max_size=8) as store:
        cp = store.checkpointer
        for round_ in range(5):
            workflow = f"contested-{round_}"
            won = await asyncio.gather(
                *(cp.claim(workflow, liveness=LONG, budget=LONG) for _ in range(50))
            )
            winners = [holder for holder in won if holder is not None]
            assert len(winners) == 1, f"{len(winners)} claimers won {workflow!r}"
        stats = store.pool.get_stats()
        assert stats["pool_size"] == 8
        assert stats.get("requests_waiting", 0) == 0


async def test_order_survives_a_conflict_update_that_rewrites_a_tuple(
    bed: Testbed[PostgresEffect],
) -> None:
    store = pg(bed)
    cp = store.checkpointer
    table = f'"{schema_of(bed)}".workflow_checkpoint'
    holder = await cp.claim("wf", liveness=LONG, budget=LONG)
    assert holder is not None
    for key in ("a", "b", "c"):
        await cp.record(holder, key, key)
    (before,) = await sql(store, f"SELECT ctid::text FROM {table} WHERE key = 'a'")
    assert (await cp.record(holder, "a", "loses")).first is False  # the no-op DO UPDATE
    (after,) = await sql(store, f"SELECT ctid::text FROM {table} WHERE key = 'a'")
    assert before != after, "the losing write was meant to rewrite the tuple"
    async with store.pool.connection() as conn, conn.transaction():
        await conn.execute("SET LOCAL enable_indexscan = off")
        await conn.execute("SET LOCAL enable_bitmapscan = off")
        cursor = await conn.execute(f"SELECT key FROM {table} WHERE workflow = 'wf'".encode())
        heap_order = [key for (key,) in await cursor.fetchall()]
    assert heap_order == ["b", "c", "a"]  # what a store ordering by the heap would return
    assert list(await cp.load("wf")) == ["a", "b", "c"]


async def test_concurrent_appends_from_several_connections_all_land_in_order(
    bed: Testbed[PostgresEffect],
) -> None:
    url = url_of(bed)
    async with (
        open_postgres(url, max_size=4) as one,
        open_postgres(url, max_size=4) as two,
        open_postgres(url, max_size=4) as three,
    ):
        stores = [pg(bed), one, two, three]
        sent: dict[int, list[str]] = {}

        async def sender(n: int) -> None:
            cp = stores[n % 4].checkpointer
            sent[n] = [await cp.append("inbox", {"sender": n, "i": i}) for i in range(25)]

        await asyncio.gather(*(sender(n) for n in range(16)))
    keys = [key for keys in sent.values() for key in keys]
    assert len(set(keys)) == 16 * 25
    loaded = await pg(bed).checkpointer.load("inbox")
    assert list(loaded) == sorted(keys)
    for n, keys_of_n in sent.items():
        assert keys_of_n == sorted(keys_of_n)  # each sender's own appends keep their order
        assert [loaded[key] for key in keys_of_n] == [{"sender": n, "i": i} for i in range(25)]


# -- processes ----------------------------------------------------------------------------

_KILLED_INSIDE_TRANSACT = """
import asyncio, sys
from datetime import timedelta
import durable

async def main(url, table):
    async with durable.open(url) as store:
        cp = store.checkpointer
        holder = await cp.claim(
            "order-1", liveness=timedelta(seconds=1), budget=timedelta(minutes=5)
        )
        assert holder is not None

        async def reserve(cursor):
            await cursor.execute(
                f"UPDATE {table} SET reserved = reserved + 1 WHERE sku = %s RETURNING reserved",
                ("piano",),
            )
            await cursor.execute("SELECT pg_backend_pid()")
            (pid,) = await cursor.fetchone()
            print(pid, flush=True)
            await asyncio.sleep(3600)

        await cp.transact(holder, "reserved", reserve)

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


async def test_a_process_killed_inside_transact_leaves_neither_the_update_nor_the_record(
    bed: Testbed[PostgresEffect],
) -> None:
    store = pg(bed)
    table = await stock_table(store, schema_of(bed))
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _KILLED_INSIDE_TRANSACT,
        url_of(bed),
        table,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert child.stdout is not None
    line = await asyncio.wait_for(child.stdout.readline(), 30)
    assert line, (await child.communicate())[1].decode()
    backend = int(line)
    # The child's UPDATE is done and uncommitted: the row is locked, the count unchanged.
    ((state,),) = await sql(store, "SELECT state FROM pg_stat_activity WHERE pid = %s", backend)
    assert state == "idle in transaction"
    assert await sql(store, f"SELECT reserved FROM {table}") == [(0,)]
    child.send_signal(signal.SIGKILL)
    await child.wait()
    for _ in range(100):  # the server notices the closed socket and rolls back
        if not await sql(store, "SELECT 1 FROM pg_stat_activity WHERE pid = %s", backend):
            break
        await asyncio.sleep(0.05)
    assert await sql(store, f"SELECT reserved FROM {table}") == [(0,)]
    assert await store.checkpointer.load("order-1") == {}
    await asyncio.sleep(1.1)  # the killed pass's liveness runs out
    outcome = await resume(
        store, "order-1", lambda run: run.transact("reserved", reserving(table), as_count)
    )
    assert outcome == Finished(1)
    assert await sql(store, f"SELECT reserved FROM {table}") == [(1,)]


_MIGRATES = """
import asyncio, json, sys, time
from durable_postgres import migrate
from durable_postgres.plugin import PostgresOptions, connect_pool

async def main(url, schema, start):
    conninfo, options = PostgresOptions.read(url, {"min_size": 1, "max_size": 1})
    pool = await connect_pool(conninfo, options)
    try:
        await asyncio.sleep(max(0.0, start - time.time()))
        print(json.dumps(await migrate(pool, schema=schema)), flush=True)
    finally:
        await pool.close()

asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
"""


async def test_migrate_raced_by_eight_processes_creates_the_schema_once(server: str) -> None:
    schema = f"durable_race_{secrets.token_hex(4)}"
    start = time.time() + 3.0  # every child connected and waiting by then
    children = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _MIGRATES,
            server,
            schema,
            str(start),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(8)
    ]
    try:
        finished = await asyncio.gather(*(child.communicate() for child in children))
        for child, (_, err) in zip(children, finished, strict=True):
            assert child.returncode == 0, err.decode()
        created = [json.loads(out) for out, _ in finished]
        assert sorted(created) == [False] * 7 + [True]
        conninfo, _ = PostgresOptions.read(server, {})
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
            cursor = await conn.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = %s", (schema,)
            )
            assert await cursor.fetchone() == (9,)  # five tables and four for limits (3)
            cursor = await conn.execute(
                f'SELECT version FROM "{schema}".workflow_schema_version'.encode()
            )
            assert await cursor.fetchall() == [(4,)]
            assert SCHEMA_VERSION == 4
    finally:
        conninfo, _ = PostgresOptions.read(server, {})
        await asyncio.to_thread(drop_schema, conninfo, schema)


async def test_migrate_twice_changes_nothing(bed: Testbed[PostgresEffect]) -> None:
    store = pg(bed)
    assert await migrate(store.pool, schema=schema_of(bed)) is False
    assert await migrate(store.pool, schema=schema_of(bed)) is False


# -- exactly once -------------------------------------------------------------------------


async def test_the_seeds_exactly_once_example_run_ten_times_moves_the_row_once(
    bed: Testbed[PostgresEffect],
) -> None:
    store = pg(bed)
    table = await stock_table(store, schema_of(bed))

    async def order(run: Any) -> int:
        reserved: int = await run.transact("reserved", reserving(table), as_count)
        return reserved

    outcomes = [await resume(store, "order-1", order) for _ in range(10)]
    assert outcomes == [Finished(1)] * 10
    assert await sql(store, f"SELECT reserved FROM {table}") == [(1,)]


# -- connection loss ----------------------------------------------------------------------


def conninfo_of(store: PostgresDurable) -> str:
    conninfo = store.pool.conninfo
    assert isinstance(conninfo, str)
    return conninfo


async def terminate(store: PostgresDurable, pid: int) -> None:
    async with await psycopg.AsyncConnection.connect(conninfo_of(store), autocommit=True) as other:
        await other.execute("SELECT pg_terminate_backend(%s)", (pid,))


async def blocked_on_a_lock(store: PostgresDurable, schema: str) -> int:
    """The backend whose statement on the schema's checkpoint table waits on a lock."""
    for _ in range(200):
        waiting = await sql(
            store,
            "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s",
            f'%"{schema}".workflow_checkpoint%',
        )
        if waiting:
            pid: int = waiting[0][0]
            return pid
        await asyncio.sleep(0.02)
    raise AssertionError("the statement never blocked")


async def test_a_transaction_whose_connection_is_terminated_mid_effect_commits_nothing(
    bed: Testbed[PostgresEffect],
) -> None:
    store = pg(bed)
    table = await stock_table(store, schema_of(bed))
    cp = store.checkpointer
    holder = await cp.claim("order-1", liveness=LONG, budget=LONG)
    assert holder is not None
    reserve = reserving(table)

    async def cut_off(cursor: AsyncCursor[Any]) -> object:
        moved = await reserve(cursor)
        await cursor.execute("SELECT pg_backend_pid()")
        row = await cursor.fetchone()
        assert row is not None
        await terminate(store, row[0])
        await cursor.execute("SELECT 1")  # the connection is gone by now
        return moved

    with pytest.raises(ConnectionLost, match="either committed or did not"):
        await cp.transact(holder, "reserved", cut_off)
    assert await sql(store, f"SELECT reserved FROM {table}") == [(0,)]
    assert await cp.load("order-1") == {}
    # The store recovers on the next call.
    assert (await cp.transact(holder, "reserved", reserve)).value == 1
    assert await sql(store, f"SELECT reserved FROM {table}") == [(1,)]


async def test_a_pool_whose_connections_all_drop_recovers_on_the_next_calls(
    bed: Testbed[PostgresEffect],
) -> None:
    """What a server restart looks like to the pool, produced without restarting anything:
    every backend of this pool is terminated while its connections sit idle."""
    name = f"durable-test-{secrets.token_hex(3)}"
    url = url_of(bed) + f"&application_name={name}"
    async with open_postgres(url, min_size=4, max_size=4) as store:
        cp = store.checkpointer
        await asyncio.gather(*(cp.supply("wf", f"k{i}", i) for i in range(8)))
        killed = await sql(
            store,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid()",
            name,
        )
        assert len(killed) >= 3
        await asyncio.sleep(0.2)
        loaded = await asyncio.gather(*(cp.load("wf") for _ in range(8)))
        assert all(len(records) == 8 for records in loaded)
        holder = await cp.claim("wf", liveness=LONG, budget=LONG)
        assert holder is not None
        assert (await cp.record(holder, "after", 1)).first is True


async def test_a_write_cut_off_in_flight_is_retried_and_lands_once(
    bed: Testbed[PostgresEffect],
) -> None:
    store = pg(bed)
    cp = store.checkpointer
    schema = schema_of(bed)
    holder = await cp.claim("wf", liveness=LONG, budget=LONG)
    assert holder is not None
    async with await psycopg.AsyncConnection.connect(conninfo_of(store)) as blocker:
        # Hold the claim row, so the record's fenced insert waits on its FOR SHARE.
        await blocker.execute(
            f'SELECT 1 FROM "{schema}".workflow_claim WHERE workflow = %s FOR UPDATE'.encode(),
            ("wf",),
        )
        recording = asyncio.create_task(cp.record(holder, "k", "v"))
        await terminate(store, await blocked_on_a_lock(store, schema))
        await asyncio.sleep(0.2)
        assert not recording.done()  # retried on a fresh connection, waiting again
        await blocker.rollback()
    assert (await recording).first is True
    assert [entry.key for entry in await cp.history("wf")] == ["k"]
    assert await cp.load("wf") == {"k": "v"}


async def test_an_append_cut_off_in_flight_is_not_retried_and_never_half_written(
    bed: Testbed[PostgresEffect],
) -> None:
    store = pg(bed)
    cp = store.checkpointer
    schema = schema_of(bed)
    async with await psycopg.AsyncConnection.connect(conninfo_of(store)) as blocker:
        await blocker.execute(f'LOCK TABLE "{schema}".workflow_checkpoint IN SHARE MODE'.encode())
        appending = asyncio.create_task(cp.append("wf", "message"))
        await terminate(store, await blocked_on_a_lock(store, schema))
        with pytest.raises(ConnectionLost, match="not retried"):
            await appending
        await blocker.rollback()
    assert await cp.load("wf") == {}
    key = await cp.append("wf", "message")  # and the next call works
    assert await cp.load("wf") == {key: "message"}


# -- round trips --------------------------------------------------------------------------


async def test_each_guarantee_is_one_round_trip(bed: Testbed[PostgresEffect]) -> None:
    """Counted on the wire: libpq's trace of the one connection, one Sync per round trip."""
    conninfo, options = PostgresOptions.read(url_of(bed), {"min_size": 1, "max_size": 1})
    pool = await connect_pool(conninfo, options)
    try:
        store = PostgresDurable.on(pool, schema=schema_of(bed))
        cp = store.checkpointer

        async def everything(n: int) -> None:
            holder = await cp.claim(f"wf-{n}", liveness=LONG, budget=LONG)
            assert holder is not None
            await cp.record(holder, "k", 1)
            await cp.supply(f"wf-{n}", "s", 1)
            await cp.append(f"wf-{n}", 1)
            await store.arrive(f"wf-{n}", "a", 1)
            await store.send(f"wf-{n}", 1)
            await cp.append(f"wf-{n}", 1, message_id="m-1")
            await store.send(f"wf-{n}", 1, message_id="m-2")
            await store.send(f"wf-{n}", 1, message_id="m-2")
            await store.discard(f"wf-{n}")

        await everything(0)  # prepares every statement on the connection
        with tempfile.TemporaryFile("w+") as trace:
            async with pool.connection() as conn:
                conn.pgconn.trace(trace.fileno())
                conn.pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
            await everything(1)
            async with pool.connection() as conn:
                conn.pgconn.untrace()
            trace.seek(0)
            syncs = [
                line for line in trace if line.startswith("F\t") and line.strip().endswith("Sync")
            ]
        assert len(syncs) == 10, (
            "claim, record, supply, append, arrive, send, append and two sends with an id, discard"
        )
    finally:
        await pool.close()


def pg(bed: Testbed[PostgresEffect]) -> PostgresDurable:
    assert isinstance(bed.durable, PostgresDurable)
    return bed.durable
