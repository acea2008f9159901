"""Measure every installed store: ``python -m durable_bench [--store NAME] [--steps N]``.

Rows per store, each as p50 and p90 in milliseconds and as a ratio to the raw round trip
measured in the same run:

* ``raw round trip``: one driver round trip equivalent to a recorded step
  (``durable_bench.raw``);
* ``record``: ``Checkpointer.record`` of a fresh key under a held claim;
* ``Run.step``: one step inside a pass, the cost a workflow author pays;
* ``100-step pass``: a whole ``resume`` of a fresh workflow with 100 steps (per step);
* ``N workflows``: N concurrent passes, steps per second against raw ops per second
  from N tasks.

And, on a store that offers lifecycle:

* ``start -> outcome, 5 steps (limit L)``: ``--workflows`` workflows of a 5-step kind
  started, one ``work`` running L passes at once, until every one is listed finished;
  workflows per second, from the first ``start`` to the last outcome;
* ``list 100 failed among N finished``: ``Lifecycle.statuses(status=FAILED, limit=100)``
  over a store holding N finished workflows (``--listing-size``) and 100 failed ones,
  filled through the protocol (admit, begin, settle), as p50 and p90: what
  ``durable list --status failed`` costs, which must not grow with N.

The table is printed with its legend (:data:`LEGEND`), because "x raw" reads the other way
up on the throughput rows: a latency row's ratio is a cost (lower is better), a throughput
row's a rate (higher is better).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import statistics
import sys
import textwrap
import time
import unittest
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import durable
from durable.interfaces import Failure, Lifecycle, Settlement, Status
from durable.plugins import StorePlugin
from durable.run import Run, resume
from durable.worker import work
from durable.workflows import LifecycleDurable, Workflows

LATENCY, THROUGHPUT = "latency", "throughput"


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
            raw_samples: list[float] = []
            record_samples: list[float] = []
            step_samples: list[float] = []

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
                    raw_samples.append(middle - start)
                    record_samples.append(before_step - middle)
                    step_samples.append(end - before_step)

            await resume(store, "bench-step", interleaved)
            await cp.release(holder)
            raw_p50, raw_p90 = _quantiles(raw_samples)
            rows.append(Row(label, "raw round trip", raw_p50, raw_p90, 1000 / raw_p50))
            for name, samples in (("record", record_samples), ("Run.step", step_samples)):
                p50, p90 = _quantiles(samples)
                rows.append(Row(label, name, p50, p90, 1000 / p50, p50 / raw_p50))

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


async def _bench_lifecycle(
    plugin: StorePlugin, label: str, url: str | None, count: int, size: int, samples: int
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
        if size > 0:
            rows.append(await _listing(lifecycle, label, size, samples))
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


def _print(rows: list[Row]) -> None:
    for text in format_table(rows):
        print(text)


async def _main(args: argparse.Namespace) -> tuple[int, list[Row]]:
    installed = durable.stores()
    names = args.store.split(",") if args.store else list(installed)
    urls = dict(item.split("=", 1) for item in args.url)
    rows: list[Row] = []
    failed = False
    for name in names:
        plugin = installed.get(name)
        if plugin is None or plugin.testing is None:
            print(f"{name}: not installed or offers no testing hook", file=sys.stderr)
            failed = True
            continue
        try:
            variants = [(name, urls[name])] if name in urls else VARIANTS.get(name, [(name, None)])
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
    _print(rows)
    return (1 if failed else 0), rows


DEFAULT_STEPS = 2000
DEFAULT_FANOUT = [16, 64]
DEFAULT_WORKFLOWS = 200
DEFAULT_LISTING_SIZE = 100_000

DESCRIPTION = (
    "Measure every installed store (or those named with --store): the raw driver's round "
    "trip, Checkpointer.record, Run.step and a 100-step pass as latencies, and N concurrent "
    "workflows as throughput, each also as a ratio to the raw driver (x raw); on a store "
    "offering lifecycle, workflows per second from start to outcome (one worker, 1 and 16 "
    "passes at once) and the latency of listing 100 failed workflows among many finished "
    "ones. Each store runs "
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
        help="the stores to measure, comma-separated (default: every installed store; "
        "sqlite and redis each run twice, as sqlite and sqlite/normal, redis and "
        "redis/cluster)",
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
    return made


class _Help(argparse.RawDescriptionHelpFormatter):
    """Keeps the line breaks of the description and the legend, which are wrapped here
    (argparse would run the legend's lines together), and wraps each option's help as
    argparse does."""


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    code, rows = asyncio.run(_main(args))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=2))
    return code


if __name__ == "__main__":
    sys.exit(main())
