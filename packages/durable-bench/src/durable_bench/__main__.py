"""Measure every installed store: ``python -m durable_bench [--store NAME] [--steps N]``.

Rows per store, each as p50 and p90 in milliseconds and as a ratio to the raw round trip
measured in the same run:

* ``raw round trip``: one driver round trip equivalent to a recorded step
  (``durable_bench.raw``);
* ``record``: ``Checkpointer.record`` of a fresh key under a held claim;
* ``Run.step``: one step inside a pass, the cost a workflow author pays;
* ``Run.step, retry policy`` and ``Run.step, reconcile probe``: a step that opts in, which
  records its attempt's intent before the effect: one write more than a plain step, the
  cost of opting in (sampled in the same loop as ``Run.step``);
* ``Run.step, telemetry off`` and ``Run.step, telemetry on``: the same, in passes of
  :data:`TRACED_BATCH` steps taken in turn with ``durable.telemetry`` off and on (an SDK
  tracer provider whose exporter drops every span, and a meter provider with a reader), when
  ``opentelemetry-sdk`` is installed; the second's note is its p50 over the first's;
* ``100-step pass``: a whole ``resume`` of a fresh workflow with 100 steps (per step);
* ``N workflows``: N concurrent passes, steps per second against raw ops per second
  from N tasks.

And for Redis, when ``redis-server`` is on ``PATH`` (``--replica-ports`` to pick where):

* ``Run.step, replica, wait off`` and ``Run.step, replica, wait_replicas=1``: a primary
  with one replica started for the purpose on loopback, ``Run.step`` in passes of
  :data:`TRACED_BATCH` steps taken in turn without and with ``wait_replicas=1`` (each
  write confirmed by the replica before it is acknowledged); the second's note is its
  p50 over the first's, the price of a fence that survives failover.

And, on a store that offers lifecycle:

* ``start -> outcome, 5 steps (limit L)``: ``--workflows`` workflows of a 5-step kind
  started, one ``work`` running L passes at once, until every one is listed finished;
  workflows per second, from the first ``start`` to the last outcome;
* ``child start -> outcome, 1 step``: a parent's ``Run.child`` of a one-step child, from
  its ``start_child`` to the outcome read in the parent's body, one parent at a time
  (at most :data:`CHILD_SAMPLES`), as p50 and p90;
* ``list 100 failed among N finished``: ``Lifecycle.statuses(status=FAILED, limit=100)``
  over a store holding N finished workflows (``--listing-size``) and 100 failed ones,
  filled through the protocol (admit, begin, settle), as p50 and p90: what
  ``durable list --status failed`` costs, which must not grow with N;
* ``prune N ended workflows``: ``durable.transfer.prune`` of N finished workflows of three
  records each (``--prune-size``), filled through the protocol: workflows discarded per
  second, one commit each;
* ``Run.step, no prune`` and ``Run.step, beside a prune``: one pass's steps taken before
  and after a prune of another N, and while it runs in the same process on a second
  handle (its own connection or pool, where the testing hook can open one), as a worker
  beside ``durable prune`` would; the second's label says its p50 over the first's. A
  prune holds no lock longer than one workflow's discard, so a step beside it waits for
  at most one discard's commit (and, in one process, for the event loop it shares).
* ``durable check over N unfinished (per workflow)``: :func:`durable.check.check` over a
  store holding N unfinished workflows (``--check-size``, 10,000 by default), each with two
  recorded steps and blocked on a third key, filled through the protocol: the time from one
  workflow's finding to the next, as p50 and p90, and workflows checked per second. The
  check pages through the store, so this is what one more unfinished workflow costs a
  deploy, and it should not grow with N.

The table is printed with its legend (:data:`LEGEND`), because "x raw" reads the other way
up on the throughput rows: a latency row's ratio is a cost (lower is better), a throughput
row's a rate (higher is better).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import textwrap
import time
import unittest
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import durable
from durable import telemetry
from durable.check import check
from durable.interfaces import Failure, Lifecycle, Limited, QueueLimit, Settlement, Status
from durable.plugins import StorePlugin
from durable.run import Run, StepContext, resume
from durable.transfer import prune
from durable.worker import work
from durable.workflows import LifecycleDurable, Workflows

from durable_bench import peers, size

LATENCY, THROUGHPUT, SIZE = "latency", "throughput", "size"


@dataclass
class Row:
    """One line of the table. ``ratio`` is against the raw driver measured in the same run:
    p50 over raw p50 on a latency row, rate over raw rate on a throughput row."""

    store: str
    name: str
    p50_ms: float
    p90_ms: float
    per_second: float
    ratio: float | None = None
    note: str = ""
    kind: str = LATENCY
    # The peers' rows (--peers): how many times better durable does than the row's system
    # (its time per step over ours, or our rate over its), and what a step spent, as the
    # server counted it (None where it was not counted).
    advantage: float | None = None
    commits_per_step: float | None = None
    statements_per_step: float | None = None
    writes_per_step: float | None = None
    # A flat-in-size row (--size): its p50 with the target among a few others; p50_ms is
    # the same operation among many, and ratio the second over the first.
    few_ms: float | None = None


def _quantiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p50 = statistics.median(ordered)
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    return p50 * 1000, p90 * 1000


async def _timed(op: Callable[[int], Awaitable[object]], n: int, offset: int = 0) -> list[float]:
    samples = []
    for i in range(n):
        start = time.perf_counter()
        await op(offset + i)
        samples.append(time.perf_counter() - start)
    return samples


async def _throughput(op: Callable[[int], Awaitable[object]], tasks: int, each: int) -> float:
    async def one(t: int) -> None:
        for i in range(each):
            await op(t * each + i)

    start = time.perf_counter()
    await asyncio.gather(*(one(t) for t in range(tasks)))
    return tasks * each / (time.perf_counter() - start)


def _one(value: object) -> int:
    assert isinstance(value, int)
    return value


_RETRY = durable.RetryPolicy(max_attempts=3)
"""The opt-in step's policy; its one attempt succeeds, so the row is the cost of opting in."""


def _not_done(context: StepContext) -> None:
    """A reconcile probe; never asked in the bench (no attempt is ever left unfinished)."""


VARIANTS: dict[str, list[tuple[str, str | None]]] = {
    # SQLite twice: FULL (the store's default: durable across power loss, one fsync per
    # commit) and NORMAL (durable across a process crash; the commit is a thread hop and
    # a write to the WAL, so what the store adds shows most there).
    "sqlite": [("sqlite", None), ("sqlite/normal", "sqlite://?synchronous=normal")],
    # Redis on one node and on a Redis Cluster the testing hook starts on loopback ports.
    "redis": [("redis", None), ("redis/cluster", "redis+cluster://")],
}


async def _bench_store(
    plugin: StorePlugin, label: str, steps: int, fanouts: list[int], url: str | None
) -> list[Row]:
    assert plugin.testing is not None
    rows: list[Row] = []
    async with plugin.testing(url) as testbed:
        store = testbed.durable
        cp = store.checkpointer
        raw_module = _raw_module(plugin.name)
        if raw_module is None:
            raise LookupError(f"no durable_bench.raw.{plugin.name} module")
        async with raw_module.raw_op(testbed) as raw:
            await _timed(raw, 50, offset=10_000_000)  # warm up connections and caches
            holder = await cp.claim(
                "bench-record", liveness=timedelta(minutes=5), budget=timedelta(minutes=30)
            )
            assert holder is not None
            # Raw, record and Run.step are sampled in turn within one loop, so that all three
            # see the same machine: on a shared VM the cost of a thread hop or a syscall
            # drifts over seconds, and rows measured one after another would compare drifts.
            # The opt-in steps (a retry policy, a reconcile probe) are sampled in the same
            # loop, after the plain one, so the cost of opting in (one extra write per
            # attempt: the intent) reads against a plain step measured alongside it.
            raw_samples: list[float] = []
            record_samples: list[float] = []
            step_samples: list[float] = []
            retry_samples: list[float] = []
            reconcile_samples: list[float] = []

            async def interleaved(run: Run[Any]) -> None:
                clock = time.perf_counter
                for i in range(steps):
                    start = clock()
                    await raw(i)
                    middle = clock()
                    await cp.record(holder, f"k{i}", i)
                    before_step = clock()
                    await run.step(f"s{i}", lambda i=i: i, _one)
                    end = clock()
                    await run.step(f"r{i}", lambda i=i: i, _one, retry=_RETRY)
                    retried = clock()
                    await run.step(f"c{i}", lambda i=i: i, _one, reconcile=_not_done)
                    reconciled = clock()
                    raw_samples.append(middle - start)
                    record_samples.append(before_step - middle)
                    step_samples.append(end - before_step)
                    retry_samples.append(retried - end)
                    reconcile_samples.append(reconciled - retried)

            await resume(store, "bench-step", interleaved)
            await cp.release(holder)
            raw_p50, raw_p90 = _quantiles(raw_samples)
            rows.append(Row(label, "raw round trip", raw_p50, raw_p90, 1000 / raw_p50))
            for name, samples in (
                ("record", record_samples),
                ("Run.step", step_samples),
                ("Run.step, retry policy (+1 write)", retry_samples),
                ("Run.step, reconcile probe (+1 write)", reconcile_samples),
            ):
                p50, p90 = _quantiles(samples)
                rows.append(Row(label, name, p50, p90, 1000 / p50, p50 / raw_p50))

            rows.extend(await _bench_telemetry(store, label, steps, raw_p50))

            async def hundred(run: Run[Any]) -> None:
                for i in range(100):
                    await run.step(f"s{i}", lambda i=i: i, _one)

            passes = []
            for n in range(5):
                start = time.perf_counter()
                await resume(store, f"bench-100-{n}", hundred)
                passes.append((time.perf_counter() - start) / 100)
            p50, p90 = _quantiles(passes)
            rows.append(Row(label, "100-step pass (per step)", p50, p90, 1000 / p50, p50 / raw_p50))

            for width in fanouts:
                each = max(10, steps // width)
                raw_rate = await _throughput(raw, width, each)
                rows.append(Row(label, f"raw x{width} tasks", 0, 0, raw_rate, kind=THROUGHPUT))

                async def workflow_pass(t: int, width: int = width, each: int = each) -> None:
                    async def body(run: Run[Any]) -> None:
                        for i in range(each):
                            await run.step(f"s{i}", lambda i=i: i, _one)

                    await resume(store, f"bench-fan-{width}-{t}", body)

                start = time.perf_counter()
                await asyncio.gather(*(workflow_pass(t) for t in range(width)))
                rate = width * each / (time.perf_counter() - start)
                rows.append(
                    Row(
                        label,
                        f"{width} workflows concurrently",
                        0,
                        0,
                        rate,
                        rate / raw_rate,
                        "ratio = steps/s over raw ops/s",
                        THROUGHPUT,
                    )
                )
    return rows


LIFECYCLE_STEPS = 5
LIFECYCLE_LIMITS = (1, 16)
FILL_AT_ONCE = 64
LIVENESS = timedelta(minutes=5)
BUDGET = timedelta(minutes=30)


async def _bench_replica(steps: int, within: range | None) -> list[Row]:
    """``Run.step`` against a primary with one replica, writes unconfirmed and confirmed
    (``wait_replicas=1``), in alternating passes on one server; no rows without the
    ``redis-server`` binary."""
    from durable_redis.plugin import open_redis
    from durable_redis.servers import binaries_available, start_replicated

    if not binaries_available():
        return []
    samples: dict[bool, list[float]] = {False: [], True: []}

    def body_of(waiting: bool) -> Callable[[Run[Any]], Awaitable[None]]:
        async def body(run: Run[Any]) -> None:
            clock = time.perf_counter
            for i in range(TRACED_BATCH):
                start = clock()
                await run.step(f"s{i}", lambda i=i: i, _one)
                samples[waiting].append(clock() - start)

        return body

    with start_replicated(replicas=1, sentinels=0, within=within) as servers:
        base = f"{servers.primary.url}?prefix=bench-replica"
        async with (
            open_redis(base) as plain,
            open_redis(f"{base}&wait_replicas=1&wait_timeout=5") as confirmed,
        ):
            for n in range(max(steps // TRACED_BATCH, 1)):
                for waiting in (False, True) if n % 2 else (True, False):
                    store = confirmed if waiting else plain
                    await resume(store, f"bench-replica-{int(waiting)}-{n}", body_of(waiting))
    off_p50, off_p90 = _quantiles(samples[False])
    on_p50, on_p90 = _quantiles(samples[True])
    return [
        Row("redis/replica", "Run.step, replica, wait off", off_p50, off_p90, 1000 / off_p50),
        Row(
            "redis/replica",
            "Run.step, replica, wait_replicas=1",
            on_p50,
            on_p90,
            1000 / on_p50,
            note=f"{on_p50 / off_p50:.2f}x off",
        ),
    ]


TRACED_BATCH = 20
"""Steps per pass of the telemetry rows; passes with telemetry off and on alternate."""


async def _bench_telemetry(
    store: durable.Durable[Any], label: str, steps: int, raw_p50: float
) -> list[Row]:
    """``Run.step`` with ``durable.telemetry`` off and on, in alternating passes (the hook is
    read once per pass); no rows when ``opentelemetry-sdk`` is not installed."""
    try:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import (
            SimpleSpanProcessor,
            SpanExporter,
            SpanExportResult,
        )
    except ImportError:
        return []

    class Dropped(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            del spans
            return SpanExportResult.SUCCESS

    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(Dropped()))
    meter_provider = MeterProvider(metric_readers=[InMemoryMetricReader()])
    saved = telemetry.hook, telemetry._decided, telemetry._explicit
    samples: dict[bool, list[float]] = {False: [], True: []}

    def body_of(on: bool) -> Callable[[Run[Any]], Awaitable[None]]:
        async def body(run: Run[Any]) -> None:
            clock = time.perf_counter
            for i in range(TRACED_BATCH):
                start = clock()
                await run.step(f"s{i}", lambda i=i: i, _one)
                samples[on].append(clock() - start)

        return body

    try:
        hook = telemetry.Telemetry(tracer_provider, meter_provider)
        for n in range(max(steps // TRACED_BATCH, 1)):
            # Each pair in both orders, so neither always runs on a cache the other warmed.
            for on in (False, True) if n % 2 else (True, False):
                telemetry.hook = hook if on else None
                await resume(store, f"bench-telemetry-{int(on)}-{n}", body_of(on))
    finally:
        telemetry.hook, telemetry._decided, telemetry._explicit = saved
        tracer_provider.shutdown()
        meter_provider.shutdown()
    off_p50, off_p90 = _quantiles(samples[False])
    on_p50, on_p90 = _quantiles(samples[True])
    return [
        Row(label, "Run.step, telemetry off", off_p50, off_p90, 1000 / off_p50, off_p50 / raw_p50),
        Row(
            label,
            "Run.step, telemetry on",
            on_p50,
            on_p90,
            1000 / on_p50,
            on_p50 / raw_p50,
            f"{on_p50 / off_p50:.2f}x off",
        ),
    ]


async def _start_to_outcome(store: LifecycleDurable[Any], label: str, count: int) -> list[Row]:
    """Workflows per second from ``start`` to a recorded outcome, one worker, by limit."""
    kinds = Workflows()

    @kinds.kind("bench-five")
    async def five(run: Run[Any], _: object) -> int:
        for i in range(LIFECYCLE_STEPS):
            await run.step(f"s{i}", lambda i=i: i, _one)
        return LIFECYCLE_STEPS

    rows = []
    for limit in LIFECYCLE_LIMITS:
        stop = asyncio.Event()
        begun = time.perf_counter()
        for i in range(count):
            await store.start(five, f"bench-life-{limit}-{i}")
        worker = asyncio.ensure_future(
            work(store, kinds, limit=limit, poll=timedelta(milliseconds=50), stop=stop)
        )
        try:
            while await _finished(store, f"bench-life-{limit}-") < count:
                if worker.done():
                    worker.result()  # the worker stopped: say why
                await asyncio.sleep(0.01)
            rate = count / (time.perf_counter() - begun)
        finally:
            stop.set()
            await worker
        rows.append(
            Row(
                label,
                f"start -> outcome, {LIFECYCLE_STEPS} steps (limit {limit})",
                0,
                0,
                rate,
                note="workflows per second",
                kind=THROUGHPUT,
            )
        )
    return rows


CHILD_SAMPLES = 50
"""At most this many parents, one after another, for the child start -> outcome row."""


async def _child_start_to_outcome(store: LifecycleDurable[Any], label: str, count: int) -> Row:
    """Latency from a parent's ``start_child`` to the child's outcome in the parent's body.

    One parent at a time (``min(count, CHILD_SAMPLES)`` of them), one worker: each sample
    spans the child's start, the parent's settle (blocked, claim released), the child's
    pass (one step), its outcome arriving in the parent, and the parent's next pass
    replaying to the outcome. Timed in the bodies, from the first pass's ``start_child`` to
    the pass that reads the outcome, so the parent's own start is not in it."""
    kinds = Workflows()
    started: dict[str, float] = {}
    samples: list[float] = []

    @kinds.kind("bench-child")
    async def child(run: Run[Any], _: object) -> int:
        return await run.step("s", lambda: 1, _one)

    @kinds.kind("bench-parent")
    async def parent(run: Run[Any], _: object) -> int:
        started.setdefault(run.workflow, time.perf_counter())
        value = await run.child(child, "c", parse=_one)
        if run.workflow in started:
            samples.append(time.perf_counter() - started.pop(run.workflow))
        return value

    stop = asyncio.Event()
    worker = asyncio.ensure_future(
        work(store, kinds, limit=16, poll=timedelta(milliseconds=10), stop=stop)
    )
    try:
        for i in range(max(1, min(count, CHILD_SAMPLES))):
            handle = await store.start(parent, f"bench-parent-{i}")
            while not worker.done():
                found = await store.status(handle.workflow)
                if found is not None and found.status is Status.FINISHED:
                    break
                await asyncio.sleep(0.005)
            if worker.done():
                worker.result()  # the worker stopped: say why
    finally:
        stop.set()
        await worker
    p50, p90 = _quantiles(samples)
    return Row(
        label,
        "child start -> outcome, 1 step",
        p50,
        p90,
        1000 / p50,
        note="start_child to the outcome in the parent, one worker (poll 10 ms)",
    )


QUEUE_LIMIT = 4
"""The concurrency limit of the limited-queue row's queue."""

QUEUE_PASS = 0.05
"""Seconds each pass of the limited-queue row takes, so the limit allows 80 a second."""


async def _limited_queue(store: LifecycleDurable[Any], label: str, count: int) -> Row:
    """Passes per second through a queue limited to :data:`QUEUE_LIMIT` at once, each pass
    :data:`QUEUE_PASS` seconds, served by two workers of 16 each: beside the most the
    limit allows (``QUEUE_LIMIT / QUEUE_PASS``), how much of it the store's slot counting
    keeps. A measure, not a promise: the conformance suite proves the limit is never
    passed, this row says what is left of it."""
    scheduler = store.scheduler
    assert isinstance(scheduler, Limited)
    kinds = Workflows()

    @kinds.kind("bench-limited", queue="bench-limited")
    async def limited(run: Run[Any], _: object) -> None:
        await asyncio.sleep(QUEUE_PASS)

    await scheduler.set_limit("bench-limited", QueueLimit(concurrent=QUEUE_LIMIT))
    passes = max(QUEUE_LIMIT * 4, min(count, 160))
    stop = asyncio.Event()
    try:
        for i in range(passes):
            await store.start(limited, f"bench-limited-{i}")
        begun = time.perf_counter()
        workers = [
            asyncio.ensure_future(
                work(store, kinds, limit=16, poll=timedelta(milliseconds=10), stop=stop)
            )
            for _ in range(2)
        ]
        try:
            while await _finished(store, "bench-limited-") < passes:
                for worker in workers:
                    if worker.done():
                        worker.result()  # the worker stopped: say why
                await asyncio.sleep(0.01)
            rate = passes / (time.perf_counter() - begun)
        finally:
            stop.set()
            await asyncio.gather(*workers)
    finally:
        await scheduler.set_limit("bench-limited", None)
    allowed = QUEUE_LIMIT / QUEUE_PASS
    return Row(
        label,
        f"limited queue ({QUEUE_LIMIT} at once, {QUEUE_PASS * 1000:g} ms passes)",
        0,
        0,
        rate,
        note=f"passes per second; the limit allows {allowed:g} ({rate / allowed:.0%} of it)",
        kind=THROUGHPUT,
    )


async def _finished(store: LifecycleDurable[Any], prefix: str) -> int:
    """How many of the workflows named ``prefix...`` are listed finished (every page)."""
    counted, cursor = 0, None
    while True:
        page = await store.list(status=Status.FINISHED, limit=1000, cursor=cursor)
        counted += sum(1 for s in page.statuses if s.workflow.startswith(prefix))
        cursor = page.cursor
        if cursor is None:
            return counted


async def _fill(lifecycle: Lifecycle, prefix: str, count: int, failed: bool) -> None:
    """``count`` workflows taken to their end through the protocol, 64 at a time."""
    end = (
        Settlement(Status.FAILED, 1, failure=Failure("bench.Failed", "on purpose", "", 1))
        if failed
        else Settlement(Status.FINISHED, 1, value=1)
    )

    async def one(i: int) -> None:
        workflow = f"{prefix}{i}"
        await lifecycle.admit(workflow, "bench-listed", None)
        began = await lifecycle.begin(workflow, liveness=LIVENESS, budget=BUDGET, owner="bench")
        assert began is not None
        assert began.holder is not None
        await lifecycle.settle(began.holder, end)

    for first in range(0, count, FILL_AT_ONCE):
        await asyncio.gather(*(one(i) for i in range(first, min(count, first + FILL_AT_ONCE))))


async def _listing(lifecycle: Lifecycle, label: str, size: int, samples: int) -> Row:
    await _fill(lifecycle, "bench-done-", size, failed=False)
    await _fill(lifecycle, "bench-failed-", 100, failed=True)

    async def page(_: int) -> None:
        listed = await lifecycle.statuses(status=Status.FAILED, limit=100)
        assert len(listed.statuses) == 100

    await _timed(page, 5)  # warm up
    p50, p90 = _quantiles(await _timed(page, samples))
    return Row(
        label, f"list 100 failed among {size} finished", p50, p90, 1000 / p50, note="one page"
    )


PRUNED_RECORDS = 3
"""Records each pruned workflow holds (its steps), so a prune deletes rows, not only a status."""


async def _fill_ended(lifecycle: Lifecycle, prefix: str, count: int) -> None:
    """``count`` finished workflows of :data:`PRUNED_RECORDS` records each, 64 at a time."""

    async def one(i: int) -> None:
        workflow = f"{prefix}{i}"
        await lifecycle.admit(workflow, "bench-pruned", None)
        began = await lifecycle.begin(workflow, liveness=LIVENESS, budget=BUDGET, owner="bench")
        assert began is not None
        assert began.holder is not None
        checkpointer: Any = lifecycle
        for n in range(PRUNED_RECORDS):
            await checkpointer.record(began.holder, f"s{n}", n)
        await lifecycle.settle(began.holder, Settlement(Status.FINISHED, 1, value=1))

    for first in range(0, count, FILL_AT_ONCE):
        await asyncio.gather(*(one(i) for i in range(first, min(count, first + FILL_AT_ONCE))))


CHECKED_KIND = "bench-checked"


async def _checked_body(run: Run[Any], order: object) -> object:
    """What the deploy check replays: two recorded steps, then a wait nobody answers."""
    await run.step("reserved", _nothing, _one)
    await run.step("charged", _nothing, _one)
    return await run.awaiting("shipped", _one)


async def _nothing() -> int:
    return 1


async def _fill_unfinished(lifecycle: Lifecycle, checkpointer: Any, count: int) -> None:
    """``count`` workflows of :data:`CHECKED_KIND` with two steps recorded, each blocked on
    ``shipped``, written through the protocol, 64 at a time."""

    async def one(i: int) -> None:
        workflow = f"bench-unfinished-{i}"
        await lifecycle.admit(workflow, CHECKED_KIND, {"order": i})
        began = await lifecycle.begin(workflow, liveness=LIVENESS, budget=BUDGET, owner="bench")
        assert began is not None
        assert began.holder is not None
        await checkpointer.record(began.holder, "reserved", 1)
        await checkpointer.record(began.holder, "charged", 1)
        await lifecycle.settle(began.holder, Settlement(Status.BLOCKED, 1, keys=("shipped",)))

    for first in range(0, count, FILL_AT_ONCE):
        await asyncio.gather(*(one(i) for i in range(first, min(count, first + FILL_AT_ONCE))))


async def _prune_rows(
    store: LifecycleDurable[Any], label: str, size: int, pruner: durable.Durable[Any]
) -> list[Row]:
    """Prune's throughput, then ``Run.step`` alone and beside a running prune (on
    ``pruner``, a second handle on the same store where the testing hook gives one)."""
    lifecycle = store.checkpointer
    assert isinstance(lifecycle, Lifecycle)
    await _fill_ended(lifecycle, "bench-prune-a-", size)
    later = datetime.now(UTC) + timedelta(minutes=1)
    start = time.perf_counter()
    pruned = await prune(store, later, [Status.FINISHED])
    took = time.perf_counter() - start
    assert pruned >= size, f"pruned {pruned} of {size}"
    rows = [
        Row(
            label,
            f"prune {size} ended workflows",
            0,
            0,
            pruned / took,
            note=f"workflows discarded per second ({PRUNED_RECORDS} records each)",
            kind=THROUGHPUT,
        )
    ]
    await _fill_ended(lifecycle, "bench-prune-b-", size)
    alone: list[float] = []
    beside: list[float] = []
    running: list[asyncio.Task[int]] = []

    async def steps(run: Run[Any]) -> None:
        clock = time.perf_counter
        i = 0

        async def take(into: list[float]) -> None:
            nonlocal i
            start = clock()
            await run.step(f"s{i}", lambda i=i: i, _one)
            into.append(clock() - start)
            i += 1

        for _ in range(PRUNE_STEPS):
            await take(alone)
        running.append(asyncio.create_task(prune(pruner, datetime.now(UTC) + timedelta(minutes=1))))
        await asyncio.sleep(0)
        while not running[0].done():
            await take(beside)
        for _ in range(PRUNE_STEPS):
            await take(alone)

    await resume(store, "bench-beside-prune", steps)
    await running[0]
    p50, p90 = _quantiles(alone)
    rows.append(Row(label, "Run.step, no prune", p50, p90, 1000 / p50))
    if beside:
        q50, q90 = _quantiles(beside)
        note = f"{len(beside)} steps while it ran"
        name = f"Run.step, beside a prune (p50 x{q50 / p50:.2f} of no prune)"
        rows.append(Row(label, name, q50, q90, 1000 / q50, note=note))
    return rows


PRUNE_STEPS = 200
"""``Run.step`` samples taken alone before the prune starts, and again after it ends."""


async def _deploy_check(store: LifecycleDurable[Any], label: str, size: int) -> Row:
    """``durable check`` over ``size`` unfinished workflows: per-workflow p50 and p90 from
    the check's own progress calls, and workflows per second over the whole check."""
    checkpointer: Any = store.checkpointer
    await _fill_unfinished(checkpointer, checkpointer, size)
    registry = Workflows()
    registry.kind(CHECKED_KIND)(_checked_body)
    marks: list[float] = []
    began = time.perf_counter()
    report = await check(store, registry, progress=lambda _: marks.append(time.perf_counter()))
    took = time.perf_counter() - began
    fine = report.counts()["fine"]
    if fine != size:
        raise AssertionError(f"the deploy check found {fine} of {size} workflows fine: {report}")
    gaps = [b - a for a, b in zip([began, *marks], marks, strict=False)]
    p50, p90 = _quantiles(gaps)
    return Row(
        label,
        f"durable check over {size} unfinished (per workflow)",
        p50,
        p90,
        size / took,
        note=f"{took:.2f} s in all, paged",
    )


async def _bench_lifecycle(
    plugin: StorePlugin,
    label: str,
    url: str | None,
    count: int,
    size: int,
    samples: int,
    prune_size: int = 0,
    check_size: int = 0,
) -> list[Row]:
    if "lifecycle" not in plugin.capabilities:
        return []
    assert plugin.testing is not None
    async with plugin.testing(url) as testbed:
        store = testbed.durable
        lifecycle = store.checkpointer
        if not isinstance(store, LifecycleDurable) or not isinstance(lifecycle, Lifecycle):
            return []
        rows = await _start_to_outcome(store, label, count) if count > 0 else []
        if count > 0:
            rows.append(await _child_start_to_outcome(store, label, count))
        if count > 0 and isinstance(store.scheduler, Limited):
            rows.append(await _limited_queue(store, label, count))
        if size > 0:
            rows.append(await _listing(lifecycle, label, size, samples))
        if prune_size > 0:
            if testbed.reopen is None:
                rows.extend(await _prune_rows(store, label, prune_size, store))
            else:
                async with testbed.reopen() as pruner:
                    rows.extend(await _prune_rows(store, label, prune_size, pruner))
    if check_size > 0:
        # A store of its own, so the listing's finished workflows are not in the way.
        async with plugin.testing(url) as testbed:
            store = testbed.durable
            if isinstance(store, LifecycleDurable):
                rows.append(await _deploy_check(store, label, check_size))
    return rows


PEER_STEPS = 100
PEER_PASSES = 5


@asynccontextmanager
async def _ours_beside_peers(name: str, count: int) -> AsyncIterator[peers.Contender]:
    """durable on ``name`` (``postgres`` or ``sqlite``) as a contender of the peer rows.

    On Postgres the store's testbed lives in a database of its own
    (:data:`peers.OURS_DATABASE`) so that the server's per-database counters are ours alone;
    on SQLite a trace callback on the store's connection counts its statements. Its
    ``start_one`` is a stand-in: the start -> outcome rows of durable are
    :func:`_start_to_outcome`'s (``start``, then a worker), measured by the caller."""
    plugin = durable.stores()[name]
    assert plugin.testing is not None
    url = peers.ensure_database(peers.OURS_DATABASE) if name == "postgres" else None
    async with plugin.testing(url) as testbed:
        store = testbed.durable
        trace = peers.StatementCount()
        connection = getattr(store, "connection", None)
        if connection is not None:
            await connection.set_trace_callback(trace)

        async def run(steps: int) -> None:
            async def body(run: Run[Any]) -> None:
                for i in range(steps):
                    await run.step(f"s{i}", lambda i=i: i, _one)

            await resume(store, f"peers-{steps}-{time.time_ns()}", body)

        async def spent(steps: int, passes: int) -> peers.Spent:
            async def counted() -> None:
                for _ in range(passes):
                    await run(steps)

            if name == "postgres":
                return await peers.pg_spent(peers.OURS_DATABASE, steps * passes, counted)
            trace.reset()
            await counted()
            return trace.per_step(steps * passes)

        async def start_one() -> None:
            await run(peers.REALISTIC_STEPS)

        contender = peers.Contender(f"durable / {name}", run, spent, start_one)
        contender.store = store  # type: ignore[attr-defined]
        yield contender


def _compared(advantage: float) -> str:
    if advantage >= 1:
        return f"durable {advantage:.1f}x faster"
    return f"durable {1 / advantage:.1f}x slower" if advantage > 0 else "durable: no figure"


async def _bench_peers(steps: int, passes: int, count: int) -> list[Row]:
    """durable, DBOS Transact and LangGraph side by side on Postgres and SQLite (the module
    docstring of :mod:`durable_bench.peers` says what each row runs and counts)."""
    absent = peers.missing()
    if absent:
        print(
            "peers: skipped, not installed here: " + ", ".join(absent) + " (they come with "
            "the peers environment: hatch run bench --peers)",
            file=sys.stderr,
        )
        return []
    rows: list[Row] = []
    with peers.scratch_folder() as folder:
        for backend in ("postgres", "sqlite"):
            async with AsyncExitStack() as stack:
                ours_contender = await stack.enter_async_context(_ours_beside_peers(backend, count))
                contenders = [ours_contender]
                contenders.extend(
                    await stack.enter_async_context(peers.dbos_contenders(backend, Path(folder)))
                )
                contenders.append(
                    await stack.enter_async_context(
                        peers.langgraph_contender(backend, Path(folder))
                    )
                )
                step_ms = await peers.per_step_in_rounds(contenders, steps, passes)
                measured = []
                for contender in contenders:
                    spent = await contender.spent(steps, passes)
                    rates: dict[int, float] = {}
                    if contender is ours_contender:
                        store = contender.store  # type: ignore[attr-defined]
                        if isinstance(store, LifecycleDurable) and count > 0:
                            for row in await _start_to_outcome(store, backend, count):
                                limit = int(row.name.rsplit("limit ", 1)[1].rstrip(")"))
                                rates[limit] = row.per_second
                    elif count > 0:
                        for width in peers.REALISTIC_WIDTHS:
                            rates[width] = await peers.realistic(contender.start_one, count, width)
                    measured.append(
                        peers.Measured(contender.system, step_ms[contender.system], spent, rates)
                    )
            ours = measured[0]
            for m in measured:
                spent = m.spent
                advantage = m.step_ms / ours.step_ms
                rows.append(
                    Row(
                        f"peers/{backend}",
                        f"{m.system}: {steps}-step run (per step)",
                        m.step_ms,
                        0,
                        1000 / m.step_ms,
                        note=(spent.describe() if spent else "")
                        + ("" if m is ours else f"; {_compared(advantage)}"),
                        advantage=advantage,
                        commits_per_step=spent.commits if spent else None,
                        statements_per_step=spent.statements if spent else None,
                        writes_per_step=spent.writes if spent else None,
                    )
                )
            for width in peers.REALISTIC_WIDTHS:
                for m in measured:
                    rate = m.rates.get(width)
                    if rate is None:
                        continue
                    ours_rate = ours.rates.get(width)
                    advantage = ours_rate / rate if ours_rate else 0.0
                    rows.append(
                        Row(
                            f"peers/{backend}",
                            f"{m.system}: start -> outcome, {peers.REALISTIC_STEPS} steps "
                            f"({width} at once)",
                            0,
                            0,
                            rate,
                            note="workflows per second"
                            + ("" if m is ours else f"; {_compared(advantage)}"),
                            kind=THROUGHPUT,
                            advantage=advantage,
                        )
                    )
    return rows


async def _bench_size(names: list[str], urls: dict[str, str], many: int, samples: int) -> list[Row]:
    """The flat-in-size rows (:mod:`durable_bench.size`): each operation's p50 with the
    target among a few others and among ``many``, and the second over the first."""
    installed = durable.stores()
    rows: list[Row] = []
    for name in names:
        plugin = installed.get(name)
        if plugin is None or plugin.testing is None or "lifecycle" not in plugin.capabilities:
            print(f"size: {name} offers no lifecycle or testing hook; skipped", file=sys.stderr)
            continue
        try:
            async with (
                plugin.testing(urls.get(name)) as few,
                plugin.testing(urls.get(name)) as lots,
            ):
                found = await size.flatness(
                    few, lots, name, many, samples, lambda text: print(text, file=sys.stderr)
                )
        except unittest.SkipTest as error:
            print(f"size: {name} could not run: {error}", file=sys.stderr)
            continue
        for flat in found:
            rows.append(
                Row(
                    f"{name}/size",
                    f"{flat.operation}, among {size.FEW} -> {flat.many}",
                    flat.many_ms,
                    0,
                    1000 / flat.many_ms,
                    flat.ratio,
                    note=f"p50 among {flat.many} over p50 among {size.FEW}",
                    kind=SIZE,
                    few_ms=flat.few_ms,
                )
            )
    return rows


def _raw_module(name: str) -> Any:
    try:
        return importlib.import_module(f"durable_bench.raw.{name}")
    except ModuleNotFoundError:
        return None


_MEANINGS = (
    "x raw, on latency rows (those with p50 and p90): the row's p50 over the raw driver's "
    "round trip p50, so what durable costs per step relative to the bare driver; lower is "
    "better, 1.00 is no overhead.",
    "x raw, on throughput rows (N workflows concurrently): steps per second over the raw "
    "driver's operations per second from as many tasks; higher is better, 1.00 is as fast "
    "as the bare driver.",
    "Times are in milliseconds; per s is operations (or steps) per second, and workflows "
    "per second on the start -> outcome rows.",
)

LEGEND = [
    line
    for meaning in _MEANINGS
    for line in textwrap.wrap(meaning, width=76, subsequent_indent="  ")
]
"""What the ratio column means, printed under the table and in ``--help``."""

_HEADINGS = ("store", "row", "p50 ms", "p90 ms", "per s", "x raw")


def format_table(rows: list[Row]) -> list[str]:
    """The rows as aligned text, heading first and the legend last.

    Each column is as wide as its widest cell, so a long label (``redis/cluster``,
    ``100-step pass (per step)``) pushes its column out rather than the row out of line.
    """
    cells = [
        (
            row.store,
            row.name,
            f"{row.p50_ms:.3f}" if row.p50_ms else "",
            f"{row.p90_ms:.3f}" if row.p90_ms else "",
            f"{row.per_second:.0f}",
            f"{row.ratio:.2f}" if row.ratio is not None else "",
        )
        for row in rows
    ]
    widths = [max(len(c) for c in column) for column in zip(_HEADINGS, *cells, strict=False)]

    def line(values: tuple[str, ...]) -> str:
        left = [f"{v:<{w}}" for v, w in zip(values[:2], widths[:2], strict=True)]
        right = [f"{v:>{w}}" for v, w in zip(values[2:], widths[2:], strict=True)]
        return "  ".join(left + right).rstrip()

    heading = line(_HEADINGS)
    return [heading, "-" * len(heading), *(line(c) for c in cells), "", *LEGEND]


def format_size(rows: list[Row]) -> list[str]:
    """The flat-in-size rows as their own table: p50 among few, among many, and the ratio."""
    cells = [
        (
            r.store.removesuffix("/size"),
            r.name,
            f"{r.few_ms or 0:.3f}",
            f"{r.p50_ms:.3f}",
            f"{r.ratio:.2f}",
        )
        for r in rows
        if r.kind == SIZE and r.ratio is not None
    ]
    if not cells:
        return []
    headings = ("store", "operation, among few -> many", "few ms", "many ms", "many/few")
    widths = [max(len(c) for c in column) for column in zip(headings, *cells, strict=False)]

    def line(values: tuple[str, ...]) -> str:
        left = [f"{v:<{w}}" for v, w in zip(values[:2], widths[:2], strict=True)]
        right = [f"{v:>{w}}" for v, w in zip(values[2:], widths[2:], strict=True)]
        return "  ".join(left + right).rstrip()

    heading = line(headings)
    return ["", "Flat in size (p50):", heading, "-" * len(heading), *(line(c) for c in cells)]


def format_peer_notes(rows: list[Row]) -> list[str]:
    """What each peer row's system spent per step and how durable compares, one line each."""
    noted = [r for r in rows if r.store.startswith("peers/") and r.note]
    if not noted:
        return []
    return ["", "Peers:", *(f"  {r.store}  {r.name}: {r.note}" for r in noted)]


def _print(rows: list[Row]) -> None:
    table = [r for r in rows if r.kind != SIZE]
    for text in format_table(table) + format_peer_notes(rows) + format_size(rows):
        print(text)


async def _main(args: argparse.Namespace) -> tuple[int, list[Row]]:
    installed = durable.stores()
    names = [] if args.store == "none" else args.store.split(",") if args.store else list(installed)
    urls = dict(item.split("=", 1) for item in args.url)
    rows: list[Row] = []
    failed = False
    if args.size:  # a mode of its own: the table holds the size rows alone
        rows = await _bench_size(names, urls, args.size, max(10, min(args.steps, 200)))
        _print(rows)
        return 0, rows
    for name in names:
        plugin = installed.get(name)
        if plugin is None or plugin.testing is None:
            print(f"{name}: not installed or offers no testing hook", file=sys.stderr)
            failed = True
            continue
        try:
            variants = [(name, urls[name])] if name in urls else VARIANTS.get(name, [(name, None)])
            if name == "redis" and args.replica_ports != "none":
                rows.extend(await _bench_replica(args.steps, _ports(args.replica_ports)))
            for label, url in variants:
                rows.extend(await _bench_store(plugin, label, args.steps, args.fanout, url))
                rows.extend(
                    await _bench_lifecycle(
                        plugin,
                        label,
                        url,
                        args.workflows,
                        args.listing_size,
                        max(10, min(args.steps, 200)),
                        args.prune_size,
                        args.check_size,
                    )
                )
        except unittest.SkipTest as error:  # a testing hook's way to say: no server here
            print(f"{name}: could not run: {error}", file=sys.stderr)
        except Exception as error:
            print(f"{name}: failed: {type(error).__name__}: {error}", file=sys.stderr)
            failed = True
        except BaseException as error:  # pytest.skip, which is no Exception
            if type(error).__name__ != "Skipped":
                raise
            print(f"{name}: could not run: {error}", file=sys.stderr)
    if args.peers:
        rows.extend(await _bench_peers(args.peer_steps, args.peer_passes, args.workflows))
    _print(rows)
    return (1 if failed else 0), rows


DEFAULT_STEPS = 2000
DEFAULT_FANOUT = [16, 64]
DEFAULT_WORKFLOWS = 200
DEFAULT_LISTING_SIZE = 100_000
DEFAULT_PRUNE_SIZE = 1000
DEFAULT_CHECK_SIZE = 10_000

DESCRIPTION = (
    "Measure every installed store (or those named with --store): the raw driver's round "
    "trip, Checkpointer.record, Run.step (plain, and with a retry policy or a reconcile "
    "probe, which add one write) and a 100-step pass as latencies, and N concurrent "
    "workflows as throughput, each also as a ratio to the raw driver (x raw); on a store "
    "offering lifecycle, workflows per second from start to outcome (one worker, 1 and 16 "
    "passes at once), the latency from a parent starting a child to its outcome, and "
    "the latency of listing 100 failed workflows among many finished "
    "ones, what durable check costs per workflow over many unfinished ones, (on a store "
    "offering limits) passes per second through a queue limited to 4 at once against the "
    "80 a second the limit allows, and prune's throughput and Run.step beside a running "
    "prune. Each store runs "
    "on its testing hook's default server unless --url names one; a store without a server "
    "is reported as could not run."
)


def parser() -> argparse.ArgumentParser:
    """The command line; every option's help ends with its default."""
    made = argparse.ArgumentParser(
        prog="python -m durable_bench",
        description=textwrap.fill(DESCRIPTION, width=79),
        epilog="How to read the table:\n" + "\n".join(f"  {line}" for line in LEGEND),
        formatter_class=_Help,
    )
    made.add_argument(
        "--store",
        metavar="NAME[,NAME...]",
        help="the stores to measure, comma-separated, or none for no store rows (default: "
        "every installed store; sqlite and redis each run twice, as sqlite and "
        "sqlite/normal, redis and redis/cluster)",
    )
    made.add_argument(
        "--steps",
        type=int,
        default=DEFAULT_STEPS,
        metavar="N",
        help=f"samples per latency row (default: {DEFAULT_STEPS})",
    )
    made.add_argument(
        "--fanout",
        type=int,
        nargs="*",
        default=DEFAULT_FANOUT,
        metavar="N",
        help="numbers of concurrent workflows, one pair of throughput rows each; none for "
        f"no throughput rows (default: {' '.join(map(str, DEFAULT_FANOUT))})",
    )
    made.add_argument(
        "--workflows",
        type=int,
        default=DEFAULT_WORKFLOWS,
        metavar="N",
        help="workflows started for each start -> outcome row; 0 for none "
        f"(default: {DEFAULT_WORKFLOWS})",
    )
    made.add_argument(
        "--listing-size",
        type=int,
        default=DEFAULT_LISTING_SIZE,
        metavar="N",
        help="finished workflows the failed ones are listed among (filling 100000 takes "
        "minutes on a store that syncs every commit); 0 for no listing row "
        f"(default: {DEFAULT_LISTING_SIZE})",
    )
    made.add_argument(
        "--peers",
        action="store_true",
        help="also measure DBOS Transact and LangGraph beside durable on Postgres and "
        "SQLite, in this process; their packages come with the peers hatch environment, "
        "which the command hands itself to when they are not importable here (default: off)",
    )
    made.add_argument(
        "--peer-steps",
        type=int,
        default=PEER_STEPS,
        metavar="N",
        help=f"steps of each peer-row run (default: {PEER_STEPS})",
    )
    made.add_argument(
        "--peer-passes",
        type=int,
        default=PEER_PASSES,
        metavar="N",
        help=f"runs per peer row, the median taken (default: {PEER_PASSES})",
    )
    made.add_argument(
        "--size",
        type=int,
        default=0,
        metavar="N",
        help="instead of the usual rows, measure load, Run.step, claim, next_ready and "
        "list(status=failed) with the target among 10 others and among N others, "
        "bulk-created, on each named store (--steps samples each, at most 200); 0 for "
        "the usual rows (default: 0)",
    )
    made.add_argument(
        "--plot",
        metavar="PATH",
        help="with --peers, also draw the peer rows into this PNG (needs matplotlib, "
        "which the peers environment has) (default: none)",
    )
    made.add_argument(
        "--prune-size",
        type=int,
        default=DEFAULT_PRUNE_SIZE,
        metavar="N",
        help="ended workflows pruned for the prune rows (twice: once alone, once beside "
        f"Run.step); 0 for no prune rows (default: {DEFAULT_PRUNE_SIZE})",
    )
    made.add_argument(
        "--check-size",
        type=int,
        default=DEFAULT_CHECK_SIZE,
        metavar="N",
        help="unfinished workflows the deploy check (durable check) reads; 0 for no check "
        f"row (default: {DEFAULT_CHECK_SIZE})",
    )
    made.add_argument(
        "--json",
        metavar="PATH",
        help="also write the rows to this file as JSON (default: none)",
    )
    made.add_argument(
        "--url",
        action="append",
        default=[],
        metavar="STORE=URL",
        help="hand URL to STORE's testing hook, e.g. postgres=postgresql://host/db; "
        "repeatable (default: each store's testing default)",
    )
    made.add_argument(
        "--replica-ports",
        default="",
        metavar="FIRST-LAST",
        help="loopback ports for the Redis primary and replica of the replica rows, or "
        "'none' for no replica rows (default: any free ports)",
    )
    return made


def _ports(text: str) -> range | None:
    if not text:
        return None
    first, _, last = text.partition("-")
    return range(int(first), int(last or first) + 1)


class _Help(argparse.RawDescriptionHelpFormatter):
    """Keeps the line breaks of the description and the legend, which are wrapped here
    (argparse would run the legend's lines together), and wraps each option's help as
    argparse does."""


PEERS_ENV = "DURABLE_BENCH_IN_PEERS_ENV"
"""Set in the environment the command hands itself to, so that it never hands over twice."""


def _hand_to_peers_env(argv: list[str]) -> int | None:
    """Run this command again in the ``peers`` hatch environment when ``--peers`` was asked
    and the peers' packages are not importable here: the default environment (and every
    published package) stays free of them. ``None`` when this process should carry on."""
    if not peers.missing() or os.environ.get(PEERS_ENV):
        return None
    hatch = shutil.which("hatch")
    if hatch is None:
        return None
    print("peers: running in the peers hatch environment", file=sys.stderr)
    env = {**os.environ, PEERS_ENV: "1"}
    for leaked in ("VIRTUAL_ENV", "HATCH_ENV_ACTIVE"):
        env.pop(leaked, None)
    command = [hatch, "-e", "peers", "run", "python", "-m", "durable_bench", *argv]
    return subprocess.run(command, env=env, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.peers:
        handed = _hand_to_peers_env(sys.argv[1:] if argv is None else argv)
        if handed is not None:
            return handed
    code, rows = asyncio.run(_main(args))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=2))
    if args.plot:
        from durable_bench import plot

        try:
            plot.render([asdict(r) for r in rows], Path(args.plot))
        except (ImportError, ValueError) as error:
            print(f"plot: not drawn: {error}", file=sys.stderr)
            return code or 1
    return code


if __name__ == "__main__":
    sys.exit(main())
