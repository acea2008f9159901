"""Measure every installed store: ``python -m durable_bench [--store NAME] [--steps N]``.

Rows per store, each as p50 and p90 in milliseconds and as a ratio to the raw round trip's
p50 measured in the same run:

* ``raw``: one driver round trip equivalent to a recorded step (``durable_bench.raw``);
* ``record``: ``Checkpointer.record`` of a fresh key under a held claim;
* ``Run.step``: one step inside a pass, the cost a workflow author pays;
* ``100-step pass``: a whole ``resume`` of a fresh workflow with 100 steps (per step);
* ``N workflows``: N concurrent passes, steps per second against raw ops per second
  from N tasks.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import statistics
import sys
import time
import unittest
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import durable
from durable.plugins import StorePlugin
from durable.run import Run, resume


@dataclass
class Row:
    store: str
    name: str
    p50_ms: float
    p90_ms: float
    per_second: float
    ratio: float | None = None
    note: str = ""


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
                rows.append(Row(label, f"raw x{width} tasks", 0, 0, raw_rate))

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
                    )
                )
    return rows


def _raw_module(name: str) -> Any:
    try:
        return importlib.import_module(f"durable_bench.raw.{name}")
    except ModuleNotFoundError:
        return None


def _print(rows: list[Row]) -> None:
    print(f"{'store':<10} {'row':<30} {'p50 ms':>9} {'p90 ms':>9} {'per s':>10} {'x raw':>7}")
    for row in rows:
        ratio = f"{row.ratio:.2f}" if row.ratio is not None else ""
        p50 = f"{row.p50_ms:.3f}" if row.p50_ms else ""
        p90 = f"{row.p90_ms:.3f}" if row.p90_ms else ""
        print(
            f"{row.store:<10} {row.name:<30} {p50:>9} {p90:>9} {row.per_second:>10.0f} {ratio:>7}"
        )


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


def main() -> int:
    parser = argparse.ArgumentParser(prog="durable-bench", description=__doc__.split("\n")[0])
    parser.add_argument("--store", help="comma-separated store names (default: all installed)")
    parser.add_argument("--steps", type=int, default=2000, help="samples per row")
    parser.add_argument("--fanout", type=int, nargs="*", default=[16, 64])
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument(
        "--url",
        action="append",
        default=[],
        metavar="STORE=URL",
        help="hand URL to STORE's testing hook (e.g. postgres=postgresql://...); repeatable",
    )
    args = parser.parse_args()
    code, rows = asyncio.run(_main(args))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=2))
    return code


if __name__ == "__main__":
    sys.exit(main())
