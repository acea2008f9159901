"""A worker process for the payout service: ``python -m durable_examples.worker URL``.

``durable worker URL MODULE:NAME`` serves kinds that need nothing but their ``Run`` and
input. These need their dependencies built over the store they run on (the stock adapter
speaks the store's own language, and the fulfilment graph records into the same
checkpointer) and a gateway, so this module opens the store, builds them, and hands the
registry (:func:`~durable_examples.service.payout_workflows`: ``payout`` and
``payout-message``) to the same ``durable.worker.work`` loop the command uses. It stops
like the command does: SIGINT or SIGTERM stops it taking work, passes in flight get
``--grace`` seconds to finish, and it exits 0. It logs one line per pass outcome.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

import durable
from durable.worker import work

from durable_examples.gate import Gate
from durable_examples.gateway import Gateway
from durable_examples.service import SETTLEMENT, payout_workflows
from durable_examples.stock import stock_for

__all__ = ["main", "run_worker"]

log = logging.getLogger("durable_examples.worker")


def _seconds(text: str) -> timedelta:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text}")
    return timedelta(seconds=value)


async def run_worker(
    url: str,
    gateway: Path,
    *,
    gate: Path | None = None,
    liveness: timedelta = timedelta(seconds=2),
    retry: timedelta = timedelta(milliseconds=500),
    settlement: timedelta = SETTLEMENT,
    grace: timedelta = timedelta(seconds=10),
    stop: asyncio.Event | None = None,
    with_parent: bool = False,
) -> None:
    """Work the payout service on ``url`` until ``stop`` is set (or SIGINT/SIGTERM).

    ``liveness`` is how soon this worker's death is noticed by the others (each claim is
    renewed every third of it); ``retry`` is how long a contended, fenced or failed pass
    waits before it is tried again. Both are short here so a demo finishes in seconds.
    ``with_parent`` also stops it when its standard input closes: a demo's workers then
    outlive no demo, even one that was itself killed.
    """
    stop = stop if stop is not None else asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    watching = asyncio.ensure_future(_stop_at_end_of_input(stop)) if with_parent else None
    try:
        await _work(url, gateway, gate, liveness, retry, settlement, grace, stop)
    finally:
        if watching is not None:
            watching.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watching
    log.info("payout worker stopped")


async def _work(
    url: str,
    gateway: Path,
    gate: Path | None,
    liveness: timedelta,
    retry: timedelta,
    settlement: timedelta,
    grace: timedelta,
    stop: asyncio.Event,
) -> None:
    async with durable.open(url) as store:
        stock = stock_for(store)
        await stock.prepare()
        kinds = payout_workflows(
            stock,
            Gateway(gateway),
            store.checkpointer,
            settlement=settlement,
            gate=Gate(gate) if gate is not None else None,
            liveness=liveness,
        )
        log.info("payout worker on %s", url)
        await work(
            store,
            kinds,
            limit=8,
            liveness=liveness,
            poll=timedelta(milliseconds=200),
            tick=timedelta(milliseconds=200),
            retry=retry,
            stop=stop,
            grace=grace,
        )


async def _stop_at_end_of_input(stop: asyncio.Event) -> None:
    """Set ``stop`` once standard input reaches its end (the parent closed it or died)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    transport, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), sys.stdin
    )
    try:
        while await reader.read(4096):
            pass
    finally:
        transport.close()
    log.info("standard input closed (the parent is gone); stopping")
    stop.set()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m durable_examples.worker", description="Run the payout service."
    )
    # The store URL comes first, as for `durable worker URL MODULE:BODY`; --store is the
    # old spelling, still read.
    parser.add_argument(
        "url", nargs="?", metavar="URL", help="the store to work (default: $DURABLE_STORE)"
    )
    parser.add_argument("--store", help=argparse.SUPPRESS)
    parser.add_argument(
        "--gateway", required=True, type=Path, metavar="PATH", help="the gateway's ledger file"
    )
    parser.add_argument("--gate", type=Path, metavar="DIR", help="a demo gate directory")
    parser.add_argument(
        "--liveness", type=_seconds, default=timedelta(seconds=2), metavar="S", help="(2)"
    )
    parser.add_argument("--settlement", type=_seconds, default=SETTLEMENT, metavar="S", help="(2)")
    parser.add_argument(
        "--with-parent", action="store_true", help="stop when standard input closes"
    )
    args = parser.parse_args(argv)
    url = args.url or args.store or os.environ.get("DURABLE_STORE")
    if not url:
        parser.error("give the store URL first, or set DURABLE_STORE")
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s [%(process)d] %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        asyncio.run(
            run_worker(
                url,
                args.gateway,
                gate=args.gate,
                liveness=args.liveness,
                settlement=args.settlement,
                with_parent=args.with_parent,
            )
        )
    except KeyboardInterrupt:
        # Only before run_worker has installed its own handlers (which stop it gently):
        # nothing was taken yet, so there is nothing to say but that it stopped.
        log.info("interrupted while starting; stopped")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
