"""Flat in the store's size: the same operations on a target among few and among many others.

``python -m durable_bench --size N`` measures, on each named store, ``load``, ``Run.step``,
``claim``, ``next_ready`` and ``list(status=...)`` on a target workflow first among
:data:`FEW` other workflows and then among ``N`` of them, and reports the second's p50 over
the first's. An operation that reads an index range of its own stays near 1.0 however many
workflows the store holds; one that scans grows with ``N``.

Each other workflow is what a busy store is mostly made of: one that ran a step, finished,
and still has a row in the queue, scheduled far in the future (the shape a recurring or
sleeping workflow leaves). Writing a million of those through the protocol would take the
better part of an hour on a store that syncs every commit, so one *template* workflow is
taken there through the protocol, and the others are copies of its rows made in bulk under
new ids: ``INSERT ... SELECT`` over a generated series on Postgres and SQLite (one statement
per table, one transaction), ``DUMP``/``RESTORE`` and ``ZADD`` in pipelines on Redis. A copy
is byte for byte what the store wrote, so it is found by the same indexes the store's own
rows are. The memory store, which has nothing to copy in bulk, is filled through the
protocol.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from durable.interfaces import Failure, Lifecycle, Settlement, Status
from durable.plugins import Testbed
from durable.run import Run, resume

FEW = 10
"""Others the target sits among in the small measurement."""
TEMPLATE = "size-template"
OTHER = "size-other-"
LIVENESS = timedelta(minutes=5)
BUDGET = timedelta(minutes=30)
FAR = datetime(2999, 1, 1, tzinfo=UTC)
OPERATIONS = ("load", "Run.step", "claim", "next_ready", "list(status=failed)")


@dataclass(frozen=True, slots=True)
class Flatness:
    """One operation's p50 in milliseconds among :data:`FEW` others and among many."""

    operation: str
    few_ms: float
    many_ms: float
    many: int

    @property
    def ratio(self) -> float:
        return self.many_ms / self.few_ms


def _p50_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def _one(value: object) -> int:
    assert isinstance(value, int)
    return value


async def _take_template(testbed: Testbed[Any]) -> None:
    """The workflow every other one is a copy of: admitted, one step, finished, and queued
    for the far future."""
    store = testbed.durable
    lifecycle = store.checkpointer
    assert isinstance(lifecycle, Lifecycle)
    await lifecycle.admit(TEMPLATE, "bench-size", None)
    began = await lifecycle.begin(TEMPLATE, liveness=LIVENESS, budget=BUDGET, owner="bench")
    assert began is not None
    assert began.holder is not None
    await store.checkpointer.record(began.holder, "s0", 0)
    await lifecycle.settle(began.holder, Settlement(Status.FINISHED, 1, value=1))
    await store.scheduler.make_ready(TEMPLATE)
    delivery = await store.scheduler.next_ready(timedelta(seconds=5))
    if delivery is None or delivery.workflow != TEMPLATE:
        raise RuntimeError(f"the template was not handed out, got {delivery!r}")
    await store.scheduler.wake_at(delivery, FAR)


async def _fill_through_protocol(testbed: Testbed[Any], first: int, last: int) -> None:
    store = testbed.durable
    lifecycle = store.checkpointer
    assert isinstance(lifecycle, Lifecycle)

    async def one(i: int) -> None:
        workflow = f"{OTHER}{i}"
        await lifecycle.admit(workflow, "bench-size", None)
        began = await lifecycle.begin(workflow, liveness=LIVENESS, budget=BUDGET, owner="bench")
        assert began is not None
        assert began.holder is not None
        await store.checkpointer.record(began.holder, "s0", 0)
        await lifecycle.settle(began.holder, Settlement(Status.FINISHED, 1, value=1))

    for start in range(first, last, 256):
        await asyncio.gather(*(one(i) for i in range(start, min(last, start + 256))))
    # The queue rows, far in the future, as the template's: ready, taken, put off.
    for start in range(first, last, 256):
        batch = range(start, min(last, start + 256))
        await asyncio.gather(*(store.scheduler.make_ready(f"{OTHER}{i}") for i in batch))
        for _ in batch:
            delivery = await store.scheduler.next_ready(timedelta(seconds=5))
            assert delivery is not None
            await store.scheduler.wake_at(delivery, FAR)


async def _fill_postgres(testbed: Testbed[Any], first: int, last: int) -> None:
    from psycopg import sql

    pool = testbed.durable.pool  # type: ignore[attr-defined]
    schema = str(testbed.extras["schema"])
    async with pool.connection() as conn:
        cursor = await conn.execute(
            "SELECT table_name, array_agg(column_name::text ORDER BY ordinal_position) "
            "FROM information_schema.columns WHERE table_schema = %s GROUP BY table_name "
            "HAVING 'workflow' = ANY(array_agg(column_name::text))",
            (schema,),
        )
        tables = await cursor.fetchall()
        async with conn.transaction():
            for table, columns in tables:
                # seq is drawn afresh from its sequence: a copy's records come after every
                # record written before it, as a later workflow's would.
                kept = [c for c in columns if c not in ("workflow", "seq")]
                await conn.execute(
                    sql.SQL(
                        "INSERT INTO {table} (workflow, {columns}) "
                        "SELECT {other} || g, {columns} FROM generate_series(%s::int, %s::int) "
                        "AS g, {table} AS t WHERE t.workflow = %s"
                    ).format(
                        table=sql.Identifier(schema, table),
                        columns=sql.SQL(", ").join(map(sql.Identifier, kept)),
                        other=sql.Literal(OTHER),
                    ),
                    (first, last - 1, TEMPLATE),
                )
        # What autovacuum does to a table that grew: the planner learns the new sizes.
        for table, _ in tables:
            await conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, table)))


async def _fill_sqlite(testbed: Testbed[Any], first: int, last: int) -> None:
    connection = testbed.durable.connection  # type: ignore[attr-defined]
    tables = []
    async with connection.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'durable%'"
    ) as cursor:
        names = [row[0] for row in await cursor.fetchall()]
    for name in names:
        async with connection.execute(f'PRAGMA table_info("{name}")') as cursor:
            columns = [row[1] for row in await cursor.fetchall()]
        if "workflow" in columns:
            tables.append((name, [c for c in columns if c not in ("workflow", "seq")]))
    await connection.execute("BEGIN IMMEDIATE")
    try:
        for name, kept in tables:
            listed = ", ".join(f'"{c}"' for c in kept)
            await connection.execute(
                "WITH RECURSIVE g(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM g WHERE i < ?) "
                f'INSERT INTO "{name}" (workflow, {listed}) '
                f'SELECT ? || i, {listed} FROM g, "{name}" AS t WHERE t.workflow = ?',
                (first, last - 1, OTHER, TEMPLATE),
            )
        await connection.execute("COMMIT")
    except BaseException:
        await connection.execute("ROLLBACK")
        raise
    # One transaction of a million rows leaves a WAL of as many pages, which every read
    # then looks up its pages in; a store grown by small commits has had them checkpointed
    # back into the database long since. Checkpoint, so the copies read as such a store.
    async with connection.execute("PRAGMA wal_checkpoint(TRUNCATE)") as cursor:
        await cursor.fetchall()


async def _fill_redis(testbed: Testbed[Any], first: int, last: int) -> None:
    """Every key of the template's own slot copied with DUMP/RESTORE under the other's tag;
    every shared sorted set that names the template (the status index, the queue) given the
    other's member at the template's score."""
    scheduler: Any = testbed.durable.scheduler
    client, prefix = scheduler.client, scheduler.prefix
    own: list[tuple[str, bytes]] = []
    shared: list[tuple[str, str, float]] = []
    async for raw in client.scan_iter(match=f"{prefix}:*", count=1000):
        key = raw.decode() if isinstance(raw, bytes) else raw
        if f"{{{TEMPLATE}}}" in key:
            own.append((key, await client.dump(key)))
        elif await client.type(key) in (b"zset", "zset"):
            for member, score in await client.zrange(key, 0, -1, withscores=True):
                text = member.decode() if isinstance(member, bytes) else member
                if TEMPLATE in text:
                    shared.append((key, text, score))
    for start in range(first, last, 2000):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(last, start + 2000)):
            other = f"{OTHER}{i}"
            for key, dumped in own:
                pipe.restore(key.replace(f"{{{TEMPLATE}}}", f"{{{other}}}"), 0, dumped)
            for key, member, score in shared:
                pipe.zadd(key, {member.replace(TEMPLATE, other): score})
        await pipe.execute()


FILLS: dict[str, Callable[[Testbed[Any], int, int], Awaitable[None]]] = {
    "postgres": _fill_postgres,
    "sqlite": _fill_sqlite,
    "redis": _fill_redis,
}


async def _prepare_targets(testbed: Testbed[Any]) -> None:
    """The targets the operations read: a workflow of ten records, and a failed one."""
    store = testbed.durable
    lifecycle = store.checkpointer
    assert isinstance(lifecycle, Lifecycle)

    async def ten(run: Run[Any]) -> None:
        for i in range(10):
            await run.step(f"s{i}", lambda i=i: i, _one)

    await resume(store, "size-target", ten)
    await lifecycle.admit("size-failed", "bench-size", None)
    began = await lifecycle.begin("size-failed", liveness=LIVENESS, budget=BUDGET, owner="bench")
    assert began is not None
    assert began.holder is not None
    failure = Failure("bench.Failed", "on purpose", "", 1)
    await lifecycle.settle(began.holder, Settlement(Status.FAILED, 1, failure=failure))


def _operations(testbed: Testbed[Any]) -> dict[str, Callable[[], Awaitable[None]]]:
    """Each operation but ``Run.step`` as one timed call on ``testbed``'s targets (its
    untimed aftermath, a release or a done, is part of the call: the same on both sides)."""
    store = testbed.durable
    cp = store.checkpointer
    lifecycle = store.checkpointer
    assert isinstance(lifecycle, Lifecycle)

    async def load() -> None:
        assert len(await cp.load("size-target")) >= 10

    async def claim() -> None:
        holder = await cp.claim("size-claim", liveness=LIVENESS, budget=BUDGET)
        assert holder is not None
        await cp.release(holder)

    async def next_ready() -> None:
        await store.scheduler.make_ready("size-queue")
        delivery = await store.scheduler.next_ready(timedelta(seconds=5))
        if delivery is None or delivery.workflow != "size-queue":
            raise RuntimeError(f"the queued target was not handed out, got {delivery!r}")
        await store.scheduler.done(delivery)

    async def listing() -> None:
        page = await lifecycle.statuses(status=Status.FAILED, limit=100)
        assert any(s.workflow == "size-failed" for s in page.statuses), page

    return {"load": load, "claim": claim, "next_ready": next_ready, "list(status=failed)": listing}


async def _measure(
    few: Testbed[Any], many: Testbed[Any], samples: int
) -> dict[str, tuple[float, float]]:
    """Each operation's p50 (ms) on the two testbeds, sampled in turn so that both see the
    same machine: on a shared one the cost of a commit drifts over seconds, and two
    measurements taken minutes apart would compare drifts rather than sizes."""
    clock = time.perf_counter
    found: dict[str, tuple[float, float]] = {}
    small_ops, big_ops = _operations(few), _operations(many)
    for name in OPERATIONS:
        if name == "Run.step":
            continue
        timed: tuple[list[float], list[float]] = ([], [])
        for i in range(samples):
            # Alternate which goes first, so neither always runs on a cache the other warmed.
            for side in (0, 1) if i % 2 else (1, 0):
                op = (small_ops, big_ops)[side][name]
                start = clock()
                await op()
                timed[side].append(clock() - start)
        found[name] = (_p50_ms(timed[0]), _p50_ms(timed[1]))

    stepped: tuple[list[float], list[float]] = ([], [])

    async def outer(run_few: Run[Any]) -> None:
        async def inner(run_many: Run[Any]) -> None:
            for i in range(samples):
                for side in (0, 1) if i % 2 else (1, 0):
                    run = (run_few, run_many)[side]
                    start = clock()
                    await run.step(f"s{i}", lambda i=i: i, _one)
                    stepped[side].append(clock() - start)

        await resume(many.durable, "size-step", inner)

    await resume(few.durable, "size-step", outer)
    found["Run.step"] = (_p50_ms(stepped[0]), _p50_ms(stepped[1]))
    return found


async def _drop_redis(testbed: Testbed[Any]) -> None:
    """Unlink the copies in pipelines: the testing hook's teardown unlinks key by key,
    which is minutes for a million workflows' keys."""
    scheduler: Any = testbed.durable.scheduler
    client, prefix = scheduler.client, scheduler.prefix
    batch: list[Any] = []
    async for key in client.scan_iter(match=f"{prefix}:{{{OTHER}*", count=5000):
        batch.append(key)
        if len(batch) >= 5000:
            await client.unlink(*batch)
            batch = []
    if batch:
        await client.unlink(*batch)


async def flatness(
    few: Testbed[Any],
    many: Testbed[Any],
    store: str,
    count: int,
    samples: int,
    say: Callable[[str], None],
) -> list[Flatness]:
    """The five operations with the target among :data:`FEW` others (on ``few``) and among
    ``count`` (on ``many``), two testbeds of one store measured in turn."""
    fill = FILLS.get(store, _fill_through_protocol)
    for testbed, others in ((few, FEW), (many, count)):
        await _take_template(testbed)
        began = time.perf_counter()
        await fill(testbed, 0, others)
        say(f"size: {store}: {others} others created in {time.perf_counter() - began:.1f} s")
        await _prepare_targets(testbed)
    try:
        measured = await _measure(few, many, samples)
    finally:
        if store == "redis":
            await _drop_redis(many)
    return [Flatness(op, *measured[op], count) for op in OPERATIONS]
