"""``hatch run demo``: the payout workflow, run by a real worker from submission to payout.

Submits two orders, runs a worker, approves the large one once it is waiting for approval,
and prints each workflow's timeline. The store is SQLite in ``.durable-demo/`` under the
working directory by default, so running the demo again resumes from that file: finished
orders are reported as finished and nothing is charged twice. ``--store URL`` picks another
store (``memory://``, ``postgresql://...``, ``redis://...``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from contextlib import suppress
from datetime import timedelta
from pathlib import Path
from typing import Any

import durable
from durable.interfaces import Durable
from durable.worker import work
from durable_examples.payout import APPROVAL_THRESHOLD, Gateway, payout

ORDERS = {
    "order-1001": {"id": "order-1001", "amount": 120},
    "order-1002": {"id": "order-1002", "amount": 4_500},
}
DONE_KEYS = ("paid", "refused")


def default_store() -> str:
    if "sqlite" in durable.stores():
        folder = Path(".durable-demo")
        folder.mkdir(exist_ok=True)
        return f"sqlite:///{folder / 'demo.db'}"
    return "memory://"


async def _finished(store: Durable[Any], workflow: str) -> bool:
    records = await store.checkpointer.load(workflow)
    return any(key in records for key in DONE_KEYS)


async def _run(url: str, out: Any) -> int:
    gateway = Gateway()
    async with durable.open(url) as store:
        print(f"store: {url}", file=out)
        for workflow, order in ORDERS.items():
            if await store.checkpointer.load(workflow):
                print(f"{workflow}: already submitted, resuming it", file=out)
                await store.scheduler.make_ready(workflow)
            else:
                await store.send(workflow, order)
                print(f"{workflow}: submitted ({order['amount']})", file=out)

        worker = asyncio.ensure_future(
            work(
                store,
                payout(gateway),
                limit=4,
                poll=timedelta(milliseconds=100),
                tick=timedelta(milliseconds=100),
                retry=timedelta(milliseconds=500),
            )
        )
        try:
            pending = set(ORDERS)
            for _ in range(600):  # at most a minute
                for workflow in sorted(pending):
                    if await _finished(store, workflow):
                        pending.discard(workflow)
                        continue
                    records = await store.checkpointer.load(workflow)
                    # A person approves a large order once it has been charged and is
                    # waiting out its settlement window.
                    large = ORDERS[workflow]["amount"] > APPROVAL_THRESHOLD
                    if large and "settlement" in records and "approval" not in records:
                        await store.arrive(workflow, "approval", True)
                        print(f"{workflow}: approved by a person", file=out)
                if not pending:
                    break
                await asyncio.sleep(0.1)
            else:
                print(f"gave up waiting for {sorted(pending)}", file=out)
                return 1
        finally:
            worker.cancel()
            with suppress(asyncio.CancelledError):
                await worker

        print(f"\ngateway calls this run: {gateway.calls}", file=out)
        for workflow in ORDERS:
            print(f"\n{workflow}", file=out)
            for entry in await store.checkpointer.history(workflow):
                print(f"  {entry.at.isoformat(timespec='milliseconds')}  "
                      f"{entry.key:<40} {entry.value!r}", file=out)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="durable-demo", description=__doc__.split("\n")[0])
    parser.add_argument("--store", help="store URL (default: SQLite under .durable-demo/)")
    parser.add_argument("--verbose", action="store_true", help="log every pass outcome")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(message)s",
    )
    return asyncio.run(_run(args.store or default_store(), sys.stdout))


if __name__ == "__main__":
    sys.exit(main())
