"""The peers, measured in the same process and against the same servers as the stores.

``python -m durable_bench --peers`` (``hatch run bench --peers``) adds, beside durable on
Postgres and SQLite:

* DBOS Transact 3.4: a workflow of N trivial ``@DBOS.step`` calls, as an ``async`` workflow
  and as a plain one, on Postgres (a database of its own, :data:`DBOS_DATABASE`) and on
  SQLite (a file in a temporary folder);
* LangGraph: a graph of N trivial nodes in a line, with ``PostgresSaver`` (its own
  database, :data:`LANGGRAPH_DATABASE`) and ``SqliteSaver``, invoked with
  ``durability="sync"`` so that each super-step is written before the next starts, which is
  what a durable step means here.

Each gets a per-step row (a whole N-step run divided by N, the median of a few runs) whose
note says how many times durable's per-step cost it is, and the commits (and, on SQLite, the
statements) it spends per step, read from the server rather than estimated:

* Postgres: ``pg_stat_database.xact_commit`` and the row writes (``tup_inserted`` +
  ``tup_updated`` + ``tup_deleted``) of the system's own database, durable's included
  (:data:`OURS_DATABASE`), so no other client's work is in the count.
  ``pg_stat_statements`` would count statements too, but it needs
  ``shared_preload_libraries``, which a shared server's configuration is not ours to change,
  so the Postgres rows count commits and row writes and say so;
* SQLite: a trace callback on the system's own connection (``sqlite3``'s
  ``set_trace_callback``), which sees every statement, ``BEGIN`` and ``COMMIT`` included.

And a realistic row for each: workflows of 5 steps started and run to a recorded outcome,
per second, one at a time and 16 at once.

The peers' packages live in the ``peers`` hatch environment only; without them these rows
are skipped with the reason printed (:func:`missing`). They are imported by name at run time
so that the default environment, where they are absent, type-checks this module.
"""

from __future__ import annotations

import asyncio
import importlib
import itertools
import logging
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import psycopg
from psycopg import sql

log = logging.getLogger("durable_bench.peers")

PEER_MODULES = (
    "dbos",
    "langgraph.graph",
    "langgraph.checkpoint.postgres",
    "langgraph.checkpoint.sqlite",
)
"""What the peer rows import; all of it comes with the ``peers`` hatch environment."""

SERVER = "postgresql://postgres@127.0.0.1:5432"
"""The Postgres server every Postgres row runs on (no database: each system has its own)."""
OURS_DATABASE = "durable_bench_ours"
DBOS_DATABASE = "durable_bench_dbos"
LANGGRAPH_DATABASE = "durable_bench_langgraph"

REALISTIC_STEPS = 5
REALISTIC_WIDTHS = (1, 16)
STATS_SETTLE = 11.0
"""Seconds a Postgres backend must sit idle before it has surely published its counters:
Postgres 15 flushes a backend's statistics at most once a second, and one that went idle within
a second of its last flush waits ten seconds for the next. Every snapshot waits this long."""


def missing() -> list[str]:
    """The peer modules that are not importable here (empty when the peer rows can run)."""
    absent = []
    for name in PEER_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            absent.append(name)
    return absent


@dataclass(frozen=True, slots=True)
class Spent:
    """What the server counted for one measured stretch, divided per step."""

    commits: float
    writes: float | None = None
    statements: float | None = None

    def describe(self) -> str:
        parts = [f"{self.commits:.1f} commits"]
        if self.statements is not None:
            parts.append(f"{self.statements:.1f} statements")
        if self.writes is not None:
            parts.append(f"{self.writes:.1f} row writes")
        return ", ".join(parts) + " per step"


# -- counting on Postgres ---------------------------------------------------------------------


def ensure_database(name: str) -> str:
    """Create database ``name`` on :data:`SERVER` if it is missing; its URL."""
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True, connect_timeout=5) as conn:
        found = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if found is None:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return f"{SERVER}/{name}"


async def _pg_counters(database: str) -> tuple[int, int]:
    """``(xact_commit, row writes)`` of ``database``, read from the ``postgres`` database so
    that the reading adds nothing to the counts it reads."""
    await asyncio.sleep(STATS_SETTLE)
    async with await psycopg.AsyncConnection.connect(
        f"{SERVER}/postgres", autocommit=True, connect_timeout=5
    ) as conn:
        cursor = await conn.execute(
            "SELECT xact_commit, tup_inserted + tup_updated + tup_deleted "
            "FROM pg_stat_database WHERE datname = %s",
            (database,),
        )
        row = await cursor.fetchone()
    assert row is not None, f"no statistics for database {database!r}"
    return int(row[0]), int(row[1])


async def pg_spent(database: str, steps: int, run: Callable[[], Awaitable[object]]) -> Spent:
    """Commits and row writes per step of ``run`` in ``database``, less what the same
    database counts while nobody steps for as long (a peer's background pollers)."""
    before = await _pg_counters(database)
    began = time.perf_counter()
    await run()
    took = time.perf_counter() - began
    after = await _pg_counters(database)
    await asyncio.sleep(took)
    idle = await _pg_counters(database)
    commits = (after[0] - before[0]) - (idle[0] - after[0])
    writes = (after[1] - before[1]) - (idle[1] - after[1])
    return Spent(commits / steps, writes=writes / steps)


# -- counting on SQLite -----------------------------------------------------------------------


class StatementCount:
    """A trace callback: every statement a connection runs, and the commits among them
    (each ``COMMIT``, and each write made outside an explicit transaction, which SQLite
    commits on its own)."""

    _WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")

    def __init__(self) -> None:
        self.statements = 0
        self.commits = 0
        self._open = False
        self._lock = threading.Lock()

    def __call__(self, statement: str) -> None:
        # The verb is the first word after any leading comment lines (durable's statements
        # carry their explanation with them). Every traced statement counts, a trigger's
        # included, which SQLite reports as a comment too; none of the three uses triggers.
        code = [line for line in statement.splitlines() if not line.lstrip().startswith("--")]
        words = " ".join(code).split(None, 1)
        verb = words[0].upper() if words else ""
        with self._lock:
            self.statements += 1
            if verb == "BEGIN":
                self._open = True
            elif verb in ("COMMIT", "END"):
                self._open = False
                self.commits += 1
            elif verb == "ROLLBACK":
                self._open = False
            elif not self._open and verb in self._WRITES:
                self.commits += 1

    def reset(self) -> None:
        with self._lock:
            self.statements = self.commits = 0

    def per_step(self, steps: int) -> Spent:
        return Spent(self.commits / steps, statements=self.statements / steps)


# -- the measured shapes ----------------------------------------------------------------------


def _median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


@dataclass
class Contender:
    """One system, set up and ready: ``run(steps)`` runs one workflow of ``steps`` trivial
    steps to its end; ``spent(steps, passes)`` runs ``passes`` of them and returns what the
    server counted per step; ``start_one()`` runs one workflow of
    :data:`REALISTIC_STEPS` steps from its start to its recorded outcome."""

    system: str
    run: Callable[[int], Awaitable[object]]
    spent: Callable[[int, int], Awaitable[Spent | None]]
    start_one: Callable[[], Awaitable[object]]


async def per_step_in_rounds(
    contenders: list[Contender], steps: int, passes: int
) -> dict[str, float]:
    """Each contender's median time per step (ms) over ``passes`` runs of ``steps`` steps,
    taken in rounds (one run of each, in an order that rotates) after one run each to warm
    up: on a shared machine the cost of a commit drifts over minutes, and systems measured
    one after another would compare drifts."""
    for contender in contenders:
        await contender.run(steps)
    samples: dict[str, list[float]] = {c.system: [] for c in contenders}
    for n in range(passes):
        shift = n % len(contenders)
        for contender in contenders[shift:] + contenders[:shift]:
            began = time.perf_counter()
            await contender.run(steps)
            samples[contender.system].append((time.perf_counter() - began) / steps)
    return {system: _median_ms(found) for system, found in samples.items()}


async def realistic(start_one: Callable[[], Awaitable[object]], count: int, width: int) -> float:
    """Workflows per second: ``count`` started and run to their outcome, ``width`` at once."""
    gate = asyncio.Semaphore(width)

    async def one() -> None:
        async with gate:
            await start_one()

    began = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(count)))
    return count / (time.perf_counter() - began)


@dataclass
class Measured:
    """One system's figures: per-step milliseconds, what each step spent, and the realistic
    rates by width."""

    system: str
    step_ms: float
    spent: Spent | None
    rates: dict[int, float]


# -- DBOS -------------------------------------------------------------------------------------


class _DbosKinds:
    """DBOS registers functions in a process-wide registry by qualified name, so the
    workflows are decorated once per process and reused across both databases."""

    made: _DbosKinds | None = None

    def __init__(self, dbos: Any) -> None:
        DBOS: Any = dbos.DBOS

        def sync_step(i: int) -> int:
            return i

        def sync_flow(n: int) -> int:
            for i in range(n):
                sync_stepped(i)
            return n

        async def async_step(i: int) -> int:
            return i

        async def async_flow(n: int) -> int:
            for i in range(n):
                await async_stepped(i)
            return n

        # Decorated by call rather than with @, so that the module type-checks where DBOS
        # is not installed (its decorators are Any there).
        sync_stepped: Callable[[int], int] = DBOS.step()(sync_step)
        async_stepped: Callable[[int], Awaitable[int]] = DBOS.step()(async_step)
        self.sync_flow: Callable[[int], int] = DBOS.workflow()(sync_flow)
        self.async_flow: Callable[[int], Awaitable[int]] = DBOS.workflow()(async_flow)

    @classmethod
    def get(cls, dbos: Any) -> _DbosKinds:
        if cls.made is None:
            cls.made = cls(dbos)
        return cls.made


@asynccontextmanager
async def dbos_contenders(backend: str, scratch: Path) -> AsyncIterator[list[Contender]]:
    """DBOS launched on ``backend`` (``postgres`` or ``sqlite``): its async and its sync
    workflow, destroyed on the way out."""
    dbos: Any = importlib.import_module("dbos")
    sqlalchemy: Any = importlib.import_module("sqlalchemy")
    kinds = _DbosKinds.get(dbos)
    if backend == "postgres":
        url = ensure_database(DBOS_DATABASE)
    else:
        url = f"sqlite:///{scratch / 'dbos.sqlite'}"
    logging.getLogger("dbos").setLevel(logging.WARNING)
    dbos.DBOS(config={"name": "durable-bench", "system_database_url": url, "log_level": "WARNING"})
    dbos.DBOS.launch()
    threads = ThreadPoolExecutor(max(REALISTIC_WIDTHS))
    try:
        trace = StatementCount()
        if backend == "sqlite":
            engine = dbos._dbos._dbos_global_instance._sys_db.engine
            engine.dispose()  # later checkouts open connections that carry the callback

            def traced(connection: Any, record: Any) -> None:
                del record
                connection.set_trace_callback(trace)

            sqlalchemy.event.listen(engine.pool, "connect", traced)
        loop = asyncio.get_running_loop()

        def contender(flavour: str) -> Contender:
            async def run(steps: int) -> object:
                if flavour == "async":
                    return await kinds.async_flow(steps)
                return await loop.run_in_executor(threads, kinds.sync_flow, steps)

            async def spent(steps: int, passes: int) -> Spent:
                async def counted() -> None:
                    for _ in range(passes):
                        await run(steps)

                if backend == "postgres":
                    return await pg_spent(DBOS_DATABASE, steps * passes, counted)
                trace.reset()
                await counted()
                return trace.per_step(steps * passes)

            async def start_one() -> object:
                return await run(REALISTIC_STEPS)

            return Contender(f"DBOS {flavour} / {backend}", run, spent, start_one)

        yield [contender("async"), contender("sync")]
    finally:
        threads.shutdown()
        dbos.DBOS.destroy()
        # DBOS makes its own thread pool the event loop's default executor and shuts it
        # down when destroyed; whatever runs on this loop afterwards (the store testbeds'
        # teardown, asyncio.to_thread) needs a default executor that still takes work.
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor())


# -- LangGraph --------------------------------------------------------------------------------


class _Count(TypedDict):
    n: int


def _graph(langgraph: Any, nodes: int, saver: Any) -> Any:
    graph = langgraph.StateGraph(_Count)
    previous = langgraph.START
    for i in range(nodes):
        graph.add_node(f"s{i}", lambda state: {"n": state["n"] + 1})
        graph.add_edge(previous, f"s{i}")
        previous = f"s{i}"
    graph.add_edge(previous, langgraph.END)
    return graph.compile(checkpointer=saver)


@asynccontextmanager
async def langgraph_contender(backend: str, scratch: Path) -> AsyncIterator[Contender]:
    """A LangGraph line of nodes with ``backend``'s saver, invoked with
    ``durability="sync"`` from a pool of threads (the savers are synchronous)."""
    langgraph: Any = importlib.import_module("langgraph.graph")
    trace = StatementCount()
    closers: list[Callable[[], object]] = []
    if backend == "postgres":
        saver_module: Any = importlib.import_module("langgraph.checkpoint.postgres")
        psycopg_pool: Any = importlib.import_module("psycopg_pool")
        rows: Any = importlib.import_module("psycopg.rows")
        url = ensure_database(LANGGRAPH_DATABASE)
        pool = psycopg_pool.ConnectionPool(
            url,
            min_size=1,
            max_size=max(REALISTIC_WIDTHS),
            kwargs={"autocommit": True, "prepare_threshold": 0, "row_factory": rows.dict_row},
            open=True,
        )
        closers.append(pool.close)
        saver = saver_module.PostgresSaver(pool)
    else:
        saver_module = importlib.import_module("langgraph.checkpoint.sqlite")
        connection = sqlite3.connect(scratch / "langgraph.sqlite", check_same_thread=False)
        closers.append(connection.close)
        saver = saver_module.SqliteSaver(connection)
        connection.set_trace_callback(trace)
    threads = ThreadPoolExecutor(max(REALISTIC_WIDTHS))
    closers.insert(0, threads.shutdown)
    try:
        saver.setup()
        graphs: dict[int, Any] = {}
        loop = asyncio.get_running_loop()
        serial = itertools.count()

        def invoke(steps: int) -> object:
            if steps not in graphs:
                graphs[steps] = _graph(langgraph, steps, saver)
            config = {"configurable": {"thread_id": f"bench-{time.time_ns()}-{next(serial)}"}}
            return graphs[steps].invoke({"n": 0}, config, durability="sync")

        async def run(steps: int) -> object:
            return await loop.run_in_executor(threads, invoke, steps)

        async def spent(steps: int, passes: int) -> Spent:
            async def counted() -> None:
                for _ in range(passes):
                    await run(steps)

            if backend == "postgres":
                return await pg_spent(LANGGRAPH_DATABASE, steps * passes, counted)
            trace.reset()
            await counted()
            return trace.per_step(steps * passes)

        async def start_one() -> object:
            return await run(REALISTIC_STEPS)

        invoke(REALISTIC_STEPS)  # compiled outside the timed rows
        yield Contender(f"LangGraph / {backend}", run, spent, start_one)
    finally:
        for close in closers:
            with suppress(Exception):
                close()


def scratch_folder() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="durable-bench-peers-")
