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
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

import durable
from durable.plugins import StorePlugin, Testbed
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


async def _bench_store(plugin: StorePlugin, steps: int, fanouts: list[int]) -> list[Row]:
    assert plugin.testing is not None
    rows: list[Row] = []
    async with plugin.testing(None) as testbed:
        store = testbed.durable
        cp = store.checkpointer
        raw_module = _raw_module(plugin.name)
        if raw_module is None:
            raise LookupError(f"no durable_bench.raw.{plugin.name} module")
        async with raw_module.raw_op(testbed) as raw:
            await _timed(raw, 50, offset=10_000_000)  # warm up connections and caches
            raw_samples = await _timed(raw, steps)
            raw_p50, raw_p90 = _quantiles(raw_samples)
            rows.append(Row(plugin.name, "raw round trip", raw_p50, raw_p90, 1000 / raw_p50))

            holder = await cp.claim("bench-record", liveness=timedelta(minutes=5),
                                    budget=timedelta(minutes=30))
            assert holder is not None

            async def record(i: int) -> None:
                await cp.record(holder, f"k{i}", i)

            await _timed(record, 50, offset=10_000_000)
            p50, p90 = _quantiles(await _timed(record, steps))
            rows.append(Row(plugin.name, "record", p50, p90, 1000 / p50, p50 / raw_p50))
            await cp.release(holder)

            step_samples: list[float] = []

            async def stepping(run: Run[Any]) -> None:
                for i in range(steps):
                    start = time.perf_counter()
                    await run.step(f"s{i}", lambda i=i: i, _one)  # type: ignore[misc]
                    step_samples.append(time.perf_counter() - start)

            await resume(store, "bench-step", stepping)
            p50, p90 = _quantiles(step_samples)
            rows.append(Row(plugin.name, "Run.step", p50, p90, 1000 / p50, p50 / raw_p50))

            async def hundred(run: Run[Any]) -> None:
                for i in range(100):
                    await run.step(f"s{i}", lambda i=i: i, _one)  # type: ignore[misc]

            passes = []
            for n in range(5):
                start = time.perf_counter()
                await resume(store, f"bench-100-{n}", hundred)
                passes.append((time.perf_counter() - start) / 100)
            p50, p90 = _quantiles(passes)
            rows.append(Row(plugin.name, "100-step pass (per step)", p50, p90, 1000 / p50,
                            p50 / raw_p50))

            for width in fanouts:
                each = max(10, steps // width)
                raw_rate = await _throughput(raw, width, each)
                rows.append(Row(plugin.name, f"raw x{width} tasks", 0, 0, raw_rate))

                async def workflow_pass(t: int, width: int = width, each: int = each) -> None:
                    async def body(run: Run[Any]) -> None:
                        for i in range(each):
                            await run.step(f"s{i}", lambda i=i: i, _one)  # type: ignore[misc]

                    await resume(store, f"bench-fan-{width}-{t}", body)

                start = time.perf_counter()
                await asyncio.gather(*(workflow_pass(t) for t in range(width)))
                rate = width * each / (time.perf_counter() - start)
                rows.append(Row(plugin.name, f"{width} workflows concurrently", 0, 0, rate,
                                rate / raw_rate, "ratio = steps/s over raw ops/s"))
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
        print(f"{row.store:<10} {row.name:<30} {p50:>9} {p90:>9} {row.per_second:>10.0f} "
              f"{ratio:>7}")


async def _main(args: argparse.Namespace) -> int:
    installed = durable.stores()
    names = args.store.split(",") if args.store else list(installed)
    rows: list[Row] = []
    failed = False
    for name in names:
        plugin = installed.get(name)
        if plugin is None or plugin.testing is None:
            print(f"{name}: not installed or offers no testing hook", file=sys.stderr)
            failed = True
            continue
        try:
            rows.extend(await _bench_store(plugin, args.steps, args.fanout))
        except Exception as error:
            print(f"{name}: could not run: {type(error).__name__}: {error}", file=sys.stderr)
            failed = True
        except BaseException as error:  # pytest.skip from a testing hook: no server here
            if type(error).__name__ != "Skipped":
                raise
            print(f"{name}: could not run: {error}", file=sys.stderr)
    _print(rows)
    if args.json:
        with open(args.json, "w") as out:
            json.dump([asdict(r) for r in rows], out, indent=2)
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="durable-bench", description=__doc__.split("\n")[0])
    parser.add_argument("--store", help="comma-separated store names (default: all installed)")
    parser.add_argument("--steps", type=int, default=2000, help="samples per row")
    parser.add_argument("--fanout", type=int, nargs="*", default=[16, 64])
    parser.add_argument("--json", help="also write the rows to this file")
    return asyncio.run(_main(parser.parse_args()))


if __name__ == "__main__":
    sys.exit(main())
