"""The lifecycle where only Postgres can get it wrong: statements that wait for each other's
row locks, text the server refuses, and listings that must read an index.

The lifecycle's requirements themselves are certified by the conformance suite
(``--durable-store=postgres``, area ``lifecycle``); these are the Postgres-shaped cases."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from durable.interfaces import Failure, Settlement, Status
from durable_postgres import PostgresDurable, PostgresEffect
from durable_postgres.plugin import PostgresOptions
from durable_postgres.statements import status_statements

if TYPE_CHECKING:
    from durable.plugins import Testbed

pytestmark = pytest.mark.timeout(60)

LONG = timedelta(minutes=5)


async def test_a_begin_that_waited_on_a_cancel_takes_nothing(
    store: PostgresDurable, bed: Testbed[PostgresEffect], server: str
) -> None:
    """begin reads the status without a lock (the lock order is claim row, then status
    row), so a cancel can commit while begin waits for the claim row. begin's status upsert
    sees the newest row and refuses the cancelled one, and the claim it took is given back:
    a cancelled workflow never reads running."""
    cp = store.checkpointer
    await store._admit_and_queue("w", "payout", {"amount": 5}, "default")
    life = status_statements(cp.schema)
    conninfo, _ = PostgresOptions.read(server, {})
    async with await psycopg.AsyncConnection.connect(conninfo) as cancelling:
        # The cancel's own two statements, left uncommitted: the claim row is now locked.
        await cancelling.execute(life.withdraw_fence, {"workflow": "w"})
        await cancelling.execute(life.withdraw_mark, {"workflow": "w"})
        beginning = asyncio.ensure_future(
            cp.begin("w", liveness=LONG, budget=LONG, owner="worker:1")
        )
        await asyncio.sleep(0.3)
        assert not beginning.done(), "begin should wait for the cancel's claim row"
        await cancelling.commit()
    began = await asyncio.wait_for(beginning, 10)
    assert began is not None
    assert began.holder is None
    assert began.status is Status.CANCELLED
    after = await cp.status("w")
    assert after is not None
    assert after.status is Status.CANCELLED
    assert after.attempts == 0
    assert await cp.claimed("w") is None


async def test_racing_begins_take_one_pass_and_count_one_attempt(store: PostgresDurable) -> None:
    """Two begins racing for a released workflow serialise on the claim row: one pass, one
    attempt."""
    cp = store.checkpointer
    await store._admit_and_queue("w", "payout", None, "default")
    results = await asyncio.gather(
        *(cp.begin("w", liveness=LONG, budget=LONG, owner=f"worker:{n}") for n in range(8))
    )
    taken = [began for began in results if began is not None]
    assert len(taken) == 1
    assert taken[0].attempts == 1
    after = await cp.status("w")
    assert after is not None
    assert after.attempts == 1
    assert after.status is Status.RUNNING
    assert after.token == taken[0].holder.token if taken[0].holder else False


async def test_a_failure_whose_text_postgres_cannot_hold_is_still_recorded(
    store: PostgresDurable,
) -> None:
    """An exception's message is the body's: a NUL in it must not turn a failed pass into a
    store error, or the workflow would never be marked failed."""
    cp = store.checkpointer
    began = await cp.begin("w", liveness=LONG, budget=LONG, owner="worker:1")
    assert began is not None
    assert began.holder is not None
    failure = Failure("app.Broken", "bad byte \x00 here", "Traceback \x00", 1)
    await cp.settle(began.holder, Settlement(Status.FAILED, 1, failure=failure))
    after = await cp.status("w")
    assert after is not None
    assert after.status is Status.FAILED
    assert after.failure == Failure("app.Broken", "bad byte \ufffd here", "Traceback \ufffd", 1)


@pytest.mark.parametrize(
    ("query", "params", "index"),
    [
        ("list_status", {"status": "failed", "kind": None}, "workflow_status_status"),
        ("list_kind_status", {"status": "failed", "kind": "k"}, "workflow_status_kind"),
        ("list_kind", {"status": None, "kind": "k"}, None),
        ("list_all", {"status": None, "kind": None}, "workflow_status_updated"),
    ],
)
async def test_each_listing_reads_its_index(
    store: PostgresDurable, query: str, params: dict[str, object], index: str | None
) -> None:
    """The cost of a page is the page: each of the four listings is an index scan from the
    cursor, never a scan of every workflow (2000 finished, 5 failed, a tenth of kind k,
    statistics fresh)."""
    cp = store.checkpointer
    schema = cp.schema
    async with store.pool.connection() as conn:
        await conn.execute(
            f"""INSERT INTO "{schema}".workflow_status (workflow, kind, status, updated_at)
            SELECT 'w-' || n, CASE WHEN n % 10 = 0 THEN 'k' ELSE 'other' END,
                   CASE WHEN n % 400 = 0 THEN 'failed' ELSE 'finished' END,
                   clock_timestamp() - n * interval '1 second'
            FROM generate_series(1, 2000) AS n""".encode()
        )
        await conn.execute(f'ANALYZE "{schema}".workflow_status'.encode())
        statement = getattr(status_statements(schema), query)
        cursor = await conn.execute(
            b"EXPLAIN (FORMAT JSON) " + statement,
            {**params, "at": "infinity", "after": "", "limit": 11},
        )
        row = await cursor.fetchone()
    assert row is not None
    plan = json.dumps(row[0])
    assert '"Relation Name": "workflow_status"' not in _seq_scans(row[0]), plan
    assert '"Relation Name": "workflow_claim"' not in _seq_scans(row[0]), plan
    if index is not None:
        assert f'"Index Name": "{index}"' in plan, plan


def _seq_scans(plan: Any) -> str:
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("Node Type") == "Seq Scan":
                found.append(json.dumps(node))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(plan)
    return "".join(found)


@pytest.mark.parametrize("query", ["list_status", "list_kind_status", "list_kind"])
async def test_the_plan_cached_for_a_prepared_listing_reads_only_its_rows(
    store: PostgresDurable, query: str
) -> None:
    """The store's statements are prepared, and Postgres may cache one plan for every value
    of a prepared statement's parameters (a generic plan: it does so once such a plan looks
    no dearer than the ones it made for the values seen, as on a small table). That plan
    must still start from the filtered column's index, with nothing read and then filtered
    away: a plan that walks every workflow newest first and filters by status is fine on
    the small table it was cached on and reads a million rows once the table has grown."""
    cp = store.checkpointer
    schema = cp.schema
    numbered = {"kind": "$1", "status": "$2", "at": "$3", "after": "$4", "limit": "$5"}
    statement = getattr(status_statements(schema), query).decode()
    for name, number in numbered.items():
        statement = statement.replace(f"%({name})s", number)
    async with store.pool.connection() as conn:
        await conn.execute(
            f"""INSERT INTO "{schema}".workflow_status (workflow, kind, status, updated_at)
            SELECT 'w-' || n, CASE WHEN n % 10 = 0 THEN 'k' ELSE 'other' END,
                   CASE WHEN n % 10000 = 0 THEN 'failed' ELSE 'finished' END,
                   clock_timestamp() - n * interval '1 second'
            FROM generate_series(1, 50000) AS n""".encode()
        )
        await conn.execute(f'ANALYZE "{schema}".workflow_status'.encode())
        await conn.execute(b"SET plan_cache_mode = force_generic_plan")
        await conn.execute(
            f"PREPARE listing (text, text, timestamptz, text, int) AS {statement}".encode()
        )
        cursor = await conn.execute(
            b"EXPLAIN (FORMAT JSON) EXECUTE listing ('k', 'failed', 'infinity', '', 11)"
        )
        row = await cursor.fetchone()
        await conn.execute(b"DEALLOCATE listing")
        await conn.execute(b"RESET plan_cache_mode")
    assert row is not None
    scans: list[dict[str, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("Relation Name") == "workflow_status":
                scans.append(node)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(row[0])
    plan = json.dumps(row[0])
    assert len(scans) == 1, plan
    assert scans[0]["Node Type"] == "Index Scan", plan
    assert "Filter" not in scans[0], plan
