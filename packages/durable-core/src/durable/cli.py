"""The ``durable`` command: run a worker and look after workflows without writing code.

Every failure is one line on stderr that says what to do, and the exit code says what kind
of failure it was:

====  =====================================================================
0     done (a worker stopped by SIGINT or SIGTERM also exits 0)
1     the store failed or could not be reached
2     bad usage or input: unknown store scheme, malformed JSON, bad MODULE:BODY
3     no such workflow in this store
4     this store cannot do that (``list`` on a store without ``enumerate``)
5     refused at the confirmation prompt
====  =====================================================================
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, NoReturn, TextIO

import durable
from durable.interfaces import Enumerable, Inspectable, Observable
from durable.plugins import UnknownStore, broken_stores

__all__ = ["main"]

OK, FAILED, USAGE, NOT_FOUND, UNSUPPORTED, DECLINED = 0, 1, 2, 3, 4, 5

log = logging.getLogger("durable.cli")


class Exit(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _json_argument(text: str, what: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise Exit(
            USAGE,
            f"{what} is not valid JSON ({error.msg} at column {error.colno}): {text!r}; "
            "quote strings, e.g. '\"yes\"'",
        ) from None


def _body(spec: str) -> Callable[..., Any]:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise Exit(USAGE, f"expected MODULE:BODY (like orders.workflows:payout), got {spec!r}")
    # The installed script's sys.path[0] is the virtualenv's bin/, not the directory the
    # command was typed in; import from the latter, as uvicorn, celery and gunicorn do.
    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise Exit(USAGE, f"cannot import {module_name!r}: {error}") from None
    target: object = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise Exit(USAGE, f"{module_name!r} has no attribute {attribute!r}") from None
    if not callable(target):
        raise Exit(USAGE, f"{spec} is not callable; it should be an async function of a Run")
    return target


def _seconds(text: str) -> timedelta:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text}")
    return timedelta(seconds=value)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value}")
    return value


async def _stores(args: argparse.Namespace, out: TextIO) -> int:
    installed = durable.stores()
    rows = [
        (
            p.name,
            p.version or "?",
            ", ".join(f"{s}://" for s in p.schemes),
            ", ".join(sorted(p.capabilities)) or "-",
        )
        for p in installed.values()
    ]
    if args.json:
        out.write(
            json.dumps(
                {
                    "stores": [
                        dict(zip(("name", "version", "schemes", "capabilities"), r, strict=True))
                        for r in rows
                    ],
                    "broken": broken_stores(),
                },
                indent=2,
            )
            + "\n"
        )
        return OK
    widths = [
        max(len(r[i]) for r in [("store", "version", "schemes", "capabilities"), *rows])
        for i in range(4)
    ]
    for row in [("store", "version", "schemes", "capabilities"), *rows]:
        out.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        out.write("\n")
    for name, why in broken_stores().items():
        out.write(f"{name}: installed but broken: {why}\n")
    return OK


async def _worker(args: argparse.Namespace, out: TextIO) -> int:
    from durable.worker import work

    body = _body(args.body)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with durable.open(args.store) as store:
        log.info("worker: %s on %s, %d at once", args.body, args.store, args.limit)
        options: dict[str, Any] = {
            "limit": args.limit,
            "stop": stop,
            "grace": args.grace,
            "poll": args.poll,
            "tick": args.tick,
            "retry": args.retry,
        }
        if args.lease is not None:
            options["liveness"] = args.lease
        await work(store, body, **options)
    log.info("worker: stopped")
    return OK


async def _arrive(args: argparse.Namespace, out: TextIO) -> int:
    value = _json_argument(args.value, "VALUE")
    async with durable.open(args.url) as store:
        stored = await store.arrive(args.workflow, args.key, value)
    out.write(json.dumps(stored) + "\n")
    return OK


async def _send(args: argparse.Namespace, out: TextIO) -> int:
    value = _json_argument(args.value, "VALUE")
    async with durable.open(args.url) as store:
        key = await store.send(args.workflow, value, message_id=args.message_id)
    out.write(key + "\n")
    return OK


async def _show(args: argparse.Namespace, out: TextIO) -> int:
    async with durable.open(args.url) as store:
        history = await store.checkpointer.history(args.workflow)
        checkpointer: object = store.checkpointer
        scheduler: object = store.scheduler
        claim = (
            await checkpointer.claimed(args.workflow)
            if isinstance(checkpointer, Inspectable)
            else None
        )
        scheduled = (
            await scheduler.scheduled(args.workflow) if isinstance(scheduler, Observable) else None
        )
    if not history and claim is None and scheduled is None:
        raise Exit(NOT_FOUND, f"no workflow {args.workflow!r} in {args.url}")
    inspectable = isinstance(checkpointer, Inspectable)
    observable = isinstance(scheduler, Observable)
    if args.json:
        out.write(
            json.dumps(
                {
                    "workflow": args.workflow,
                    "records": [
                        {"key": e.key, "value": e.value, "at": e.at.isoformat()} for e in history
                    ],
                    "claim": None
                    if claim is None
                    else {
                        "token": claim.token,
                        "live_until": claim.live_until.isoformat(),
                        "budget_until": claim.budget_until.isoformat(),
                    },
                    "scheduled": None if scheduled is None else scheduled.isoformat(),
                    # null above means "free" or "not scheduled" only where the store can
                    # say so; a reader must not take a store's silence for an answer.
                    "unreported": [
                        name
                        for name, known in (("claim", inspectable), ("scheduled", observable))
                        if not known
                    ],
                },
                indent=2,
            )
            + "\n"
        )
        return OK
    out.write(f"workflow {args.workflow}\n")
    for entry in history:
        when = entry.at.isoformat(timespec="milliseconds")
        out.write(f"  {when}  {entry.key}  {json.dumps(entry.value)}\n")
    if not inspectable:
        out.write("claim: this store cannot report claims\n")
    elif claim is None:
        out.write("claim: free\n")
    else:
        out.write(
            f"claim: held by pass {claim.token} until "
            f"{claim.live_until.isoformat(timespec='seconds')} "
            f"(budget until {claim.budget_until.isoformat(timespec='seconds')})\n"
        )
    if not observable:
        out.write("scheduled: this store cannot report its schedule\n")
    else:
        out.write(
            "scheduled: " + (scheduled.isoformat(timespec="seconds") if scheduled else "no") + "\n"
        )
    return OK


async def _list(args: argparse.Namespace, out: TextIO) -> int:
    async with durable.open(args.url) as store:
        checkpointer: object = store.checkpointer
        if not isinstance(checkpointer, Enumerable):
            raise Exit(UNSUPPORTED, f"this store cannot list workflows ({args.url})")
        found = await checkpointer.workflows(args.limit)
    for workflow in found:
        out.write(workflow + "\n")
    return OK


async def _discard(args: argparse.Namespace, out: TextIO) -> int:
    if not args.yes:
        if not sys.stdin.isatty():
            raise Exit(DECLINED, "refusing to discard without confirmation; pass --yes")
        prompt = f"discard every record of {args.workflow!r} and cancel its runs? [y/N] "
        answer = await asyncio.to_thread(input, prompt)
        if answer.strip().lower() not in {"y", "yes"}:
            raise Exit(DECLINED, "not discarded")
    async with durable.open(args.url) as store:
        await store.discard(args.workflow)
    out.write(f"discarded {args.workflow}\n")
    return OK


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="durable",
        description="Run durable workflows and look after them.",
        epilog="exit codes: 0 ok, 1 store failed, 2 bad usage, 3 no such workflow, "
        "4 not supported by this store, 5 not confirmed",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log more")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    stores = commands.add_parser("stores", help="installed stores, versions and capabilities")
    stores.add_argument("--json", action="store_true")
    stores.set_defaults(run=_stores)

    worker = commands.add_parser("worker", help="run workflows until SIGINT or SIGTERM")
    worker.add_argument("body", metavar="MODULE:BODY", help="the workflow body to run")
    worker.add_argument("--store", required=True, metavar="URL")
    worker.add_argument("--limit", type=_positive, default=8, help="passes at once (8)")
    worker.add_argument("--lease", type=_seconds, metavar="S", help="claim liveness in seconds")
    for name, seconds, meaning in (
        ("grace", 30, "how long passes in flight may finish after a stop signal"),
        ("poll", 1, "longest wait for work before looking again"),
        ("tick", 1, "how often the timer wakes due sleepers"),
        ("retry", 5, "how long a contended, fenced or failed pass is deferred"),
    ):
        worker.add_argument(
            f"--{name}",
            type=_seconds,
            default=timedelta(seconds=seconds),
            metavar="S",
            help=f"{meaning} ({seconds})",
        )
    worker.set_defaults(run=_worker)

    arrive = commands.add_parser("arrive", help="supply a value and make the workflow ready")
    for name in ("url", "workflow", "key", "value"):
        arrive.add_argument(name, metavar=name.upper())
    arrive.set_defaults(run=_arrive)

    send = commands.add_parser("send", help="append an inbox message and make it ready")
    for name in ("url", "workflow", "value"):
        send.add_argument(name, metavar=name.upper())
    send.add_argument(
        "--id",
        dest="message_id",
        metavar="MESSAGE_ID",
        help="send at most once: a send whose id the workflow already holds appends nothing "
        "and prints the first one's key (without it, repeating a send appends a second copy)",
    )
    send.set_defaults(run=_send)

    show = commands.add_parser("show", help="a workflow's timeline, claim and schedule")
    show.add_argument("url", metavar="URL")
    show.add_argument("workflow", metavar="WORKFLOW")
    show.add_argument("--json", action="store_true")
    show.set_defaults(run=_show)

    listing = commands.add_parser("list", help="workflows in the store (where it can list)")
    listing.add_argument("url", metavar="URL")
    listing.add_argument("--limit", type=_positive, default=100)
    listing.set_defaults(run=_list)

    discard = commands.add_parser("discard", help="forget a workflow and cancel its runs")
    discard.add_argument("url", metavar="URL")
    discard.add_argument("workflow", metavar="WORKFLOW")
    discard.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    discard.set_defaults(run=_discard)
    return parser


def _fail(code: int, message: str) -> NoReturn:
    sys.stderr.write(f"durable: {message}\n")
    raise SystemExit(code)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command; returns the exit code (the console script exits with it)."""
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        code: int = asyncio.run(args.run(args, out or sys.stdout))
    except Exit as done:
        _fail(done.code, str(done))
    except UnknownStore as error:
        _fail(USAGE, str(error))
    except (ValueError, TypeError) as error:
        _fail(USAGE, str(error))
    except KeyboardInterrupt:
        return OK
    except Exception as error:
        _fail(FAILED, f"the store failed: {type(error).__name__}: {error}")
    return code


if __name__ == "__main__":
    sys.exit(main())
