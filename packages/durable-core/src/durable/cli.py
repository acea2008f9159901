"""The ``durable`` command: run a worker and look after workflows without writing code.

Every command that touches a store takes its URL first (``durable show URL WORKFLOW``,
``durable worker URL MODULE:BODY``), or from ``DURABLE_STORE`` when it is left out, so a
shell that sets the variable once can type ``durable show wf-1``.

Every failure is one line on stderr that says what to do, and the exit code says what kind
of failure it was:

====  =====================================================================
0     done (a worker stopped by SIGINT or SIGTERM also exits 0)
1     the store failed or could not be reached
2     bad usage or input: unknown store scheme, malformed URL or JSON, bad MODULE:BODY
3     no such workflow in this store
4     this store cannot do that (``list`` on a store without ``enumerate``)
5     refused at the confirmation prompt
====  =====================================================================
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.metadata
import inspect
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any, NoReturn, TextIO
from urllib.parse import unquote, urlsplit, urlunsplit

import durable
from durable.interfaces import Durable, Enumerable, Inspectable, Observable, StoreUnavailable
from durable.plugins import UnknownStore, broken_stores

__all__ = ["STORE_VARIABLE", "main"]

OK, FAILED, USAGE, NOT_FOUND, UNSUPPORTED, DECLINED = 0, 1, 2, 3, 4, 5

STORE_VARIABLE = "DURABLE_STORE"
"""The environment variable that supplies the store URL when a command is given none."""

SHOWN = 200
"""How many characters of a value ``show`` prints before cutting it (``--full`` prints all)."""

BACKOFF_FIRST, BACKOFF_CAP = 0.5, 30.0
"""Seconds a worker waits before its first retry to open an unreachable store, and at most."""

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


def _redacted(url: str) -> str:
    """``url`` with any password (in the user part or a ``password=`` query option) hidden,
    for a log line; the core knows no store's URL grammar beyond this much."""
    parts = urlsplit(url)
    netloc = parts.netloc
    user, at, host = netloc.rpartition("@")
    if at and ":" in user:
        netloc = f"{user.split(':', 1)[0]}:***@{host}"
    query = "&".join(
        "password=***" if unquote(pair.partition("=")[0]) == "password" else pair
        for pair in parts.query.split("&")
        if pair
    )
    if (netloc, query) == (parts.netloc, parts.query):
        return url  # urlunsplit would drop the // of a URL with no host (sqlite:///x.db)
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _store_url(args: argparse.Namespace) -> str:
    """The store URL: the command's first argument, else ``DURABLE_STORE``."""
    url: str | None = args.url or os.environ.get(STORE_VARIABLE) or None
    if url is None:
        raise Exit(
            USAGE,
            f"no store URL: give it first (durable {args.command} sqlite:///orders.db ...) "
            f"or set {STORE_VARIABLE}",
        )
    return url


def _open(url: str) -> contextlib.AbstractAsyncContextManager[Durable[Any]]:
    log.debug("opening %s", _redacted(url))
    return durable.open(url)


# --- what a worker may serve ---------------------------------------------------------------


def _import(spec: str) -> object:
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
    return target


def _why_not_a_body(target: object) -> str | None:
    """Why ``target`` cannot be a workflow body, or ``None`` when it can.

    A body is awaited with one argument, the ``Run``. Anything else would be accepted by
    ``work`` and then fail every pass of every workflow, forever, so it is refused here.
    An async function, a ``functools.partial`` of one, and an object whose ``__call__``
    is one all qualify; a plain function that returns an awaitable does not, since
    nothing short of calling it can tell.
    """
    if not callable(target):
        return f"not callable (a {type(target).__name__})"
    plain = inspect.isroutine(target) or inspect.isclass(target)
    asynchronous = inspect.iscoroutinefunction(target) or (
        not plain and inspect.iscoroutinefunction(type(target).__call__)
    )
    if not asynchronous:
        return f"not an async function (a {type(target).__name__})"
    try:
        signature = inspect.signature(target)
    except (TypeError, ValueError):
        return None  # a builtin or extension without a signature: let the call decide
    try:
        signature.bind(object())
    except TypeError:
        shape = ", ".join(str(p) for p in signature.parameters.values())
        return f"an async function of ({shape}), which cannot be called with the Run alone"
    return None


SERVABLE: tuple[Callable[[object], str | None], ...] = (_why_not_a_body,)
"""The kinds of target ``durable worker`` runs, each a check answering why a target is not
of its kind. A target any of them accepts is handed to ``work`` as it is; a registry of
workflow kinds is added here as one more check."""


def _servable(spec: str) -> Any:
    target = _import(spec)
    reasons = [check(target) for check in SERVABLE]
    if any(reason is None for reason in reasons):
        return target
    raise Exit(
        USAGE,
        f"{spec} is {'; '.join(r for r in reasons if r)}: durable worker runs an async "
        "function taking one Run, like `async def payout(run): ...`",
    )


# --- argument types ------------------------------------------------------------------------


def _seconds(text: str) -> timedelta:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0 or value == float("inf"):
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


def _in_seconds(duration: timedelta) -> str:
    return f"{duration.total_seconds():g}s"


# --- commands ------------------------------------------------------------------------------


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


async def _open_when_reachable(
    url: str,
    stack: contextlib.AsyncExitStack,
    stop: asyncio.Event,
    give_up: timedelta | None,
) -> Durable[Any] | None:
    """The opened store, retrying while it cannot be reached; ``None`` if stopped first.

    A worker is usually started by a supervisor alongside the store's server, and either
    may come up first; exiting at once would leave the restart to the supervisor, which
    may not be configured to. What counts as "not reachable yet" is what a store says is an
    outage (:class:`~durable.interfaces.StoreUnavailable`), and the operating system's own
    connection errors (``OSError``), for a store that lets a driver's through. Anything
    else (a malformed URL, a store that is not installed, an SQLite file that is not a
    database) is a mistake waiting cannot mend, and fails at once.
    """
    loop = asyncio.get_running_loop()
    deadline = None if give_up is None else loop.time() + give_up.total_seconds()
    delay = BACKOFF_FIRST
    while True:
        try:
            return await stack.enter_async_context(_open(url))
        except (StoreUnavailable, OSError) as error:
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                assert give_up is not None
                raise Exit(
                    FAILED,
                    f"gave up opening {_redacted(url)} after {_in_seconds(give_up)} "
                    f"(--connect-timeout): {_one_line(error)}",
                ) from None
            wait = delay if left is None else min(delay, left)
            log.warning(
                "worker: cannot open %s: %s; trying again in %.1fs",
                _redacted(url),
                _one_line(error),
                wait,
            )
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):
                    await stop.wait()
            if stop.is_set():
                return None
            delay = min(delay * 2, BACKOFF_CAP)


async def _worker(args: argparse.Namespace, out: TextIO) -> int:
    from durable.worker import work

    if args.lease is not None:
        raise Exit(
            USAGE,
            "--lease is gone, because two settings answered to it: the claim's window is "
            "--liveness S (the worker's), and how long a taken delivery stays with a "
            "worker is the store URL's ?delivery_lease=S; see docs/cli.md",
        )
    if args.store is not None:
        if args.url is not None:
            raise Exit(USAGE, "give the store URL once: first, or (deprecated) as --store")
        log.warning(
            "worker: --store is deprecated; write the URL first: durable worker %s %s",
            _redacted(args.store),
            args.body,
        )
        args.url = args.store
    if "://" in args.body:
        if args.url is None:
            raise Exit(USAGE, f"durable worker {args.body}: MODULE:BODY is missing after the URL")
        raise Exit(
            USAGE,
            f"{args.body!r} is a store URL where MODULE:BODY belongs: the URL comes first, "
            f"durable worker {args.body} {args.url}",
        )
    url = _store_url(args)
    body = _servable(args.body)

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    running: asyncio.Future[None] | None = None
    forced = False

    def stop_or_force() -> None:
        nonlocal forced
        if not stop.is_set():
            stop.set()
            if running is not None:
                log.info(
                    "worker: stopping; taking no more work, passes in flight have %s to "
                    "finish (signal again to stop at once)",
                    _in_seconds(args.grace),
                )
        elif running is not None and not forced:
            forced = True
            log.warning(
                "worker: stopping at once; passes in flight are cancelled and their "
                "deliveries left for the delivery lease to hand out again"
            )
            running.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop_or_force)
    try:
        async with contextlib.AsyncExitStack() as stack:
            store = await _open_when_reachable(url, stack, stop, args.connect_timeout)
            if store is None:
                log.info("worker: stopped before the store could be opened")
                return OK
            log.info(
                "worker: %s on %s, %d at once, liveness %s, delivery lease %s",
                args.body,
                _redacted(url),
                args.limit,
                _in_seconds(args.liveness),
                _in_seconds(store.scheduler.lease),
            )
            running = asyncio.ensure_future(
                work(
                    store,
                    body,
                    limit=args.limit,
                    liveness=args.liveness,
                    budget=args.budget,
                    stop=stop,
                    grace=args.grace,
                    poll=args.poll,
                    tick=args.tick,
                    retry=args.retry,
                )
            )
            try:
                await running
            except asyncio.CancelledError:
                if not forced:
                    raise
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    log.info("worker: stopped")
    return OK


async def _arrive(args: argparse.Namespace, out: TextIO) -> int:
    value = _json_argument(args.value, "VALUE")
    async with _open(_store_url(args)) as store:
        stored = await store.arrive(args.workflow, args.key, value)
    out.write(json.dumps(stored) + "\n")
    return OK


async def _send(args: argparse.Namespace, out: TextIO) -> int:
    value = _json_argument(args.value, "VALUE")
    async with _open(_store_url(args)) as store:
        key = await store.send(args.workflow, value, message_id=args.message_id)
    out.write(key + "\n")
    return OK


def _cut(value: object, full: bool) -> str:
    """A value as JSON on one line, cut to :data:`SHOWN` characters unless ``full``, with
    a marker saying how much was left out, so one large record does not bury the rest."""
    text = json.dumps(value)
    if full or len(text) <= SHOWN:
        return text
    return f"{text[:SHOWN]}... [{len(text) - SHOWN:,} more characters; --full shows them]"


async def _show(args: argparse.Namespace, out: TextIO) -> int:
    url = _store_url(args)
    async with _open(url) as store:
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
        raise Exit(NOT_FOUND, f"no workflow {args.workflow!r} in {_redacted(url)}")
    inspectable = isinstance(checkpointer, Inspectable)
    observable = isinstance(scheduler, Observable)
    if args.json:
        # Whole values, always: JSON is read by programs, which a cut value would mislead.
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
        out.write(f"  {when}  {entry.key}  {_cut(entry.value, args.full)}\n")
    if not inspectable:
        out.write("claim: this store cannot report claims\n")
    elif claim is None:
        out.write("claim: free\n")
    else:
        out.write(
            f"claim: held by pass {claim.token}, liveness until "
            f"{claim.live_until.isoformat(timespec='seconds')}, budget until "
            f"{claim.budget_until.isoformat(timespec='seconds')}\n"
        )
    if not observable:
        out.write("scheduled: this store cannot report its schedule\n")
    else:
        out.write(
            "scheduled: " + (scheduled.isoformat(timespec="seconds") if scheduled else "no") + "\n"
        )
    return OK


async def _list(args: argparse.Namespace, out: TextIO) -> int:
    url = _store_url(args)
    async with _open(url) as store:
        checkpointer: object = store.checkpointer
        if not isinstance(checkpointer, Enumerable):
            raise Exit(UNSUPPORTED, f"this store cannot list workflows ({_redacted(url)})")
        found = await checkpointer.workflows(args.limit)
    for workflow in found:
        out.write(workflow + "\n")
    return OK


async def _discard(args: argparse.Namespace, out: TextIO) -> int:
    url = _store_url(args)
    if not args.yes:
        if not sys.stdin.isatty():
            raise Exit(DECLINED, "refusing to discard without confirmation; pass --yes")
        prompt = f"discard every record of {args.workflow!r} and cancel its runs? [y/N] "
        answer = await asyncio.to_thread(input, prompt)
        if answer.strip().lower() not in {"y", "yes"}:
            raise Exit(DECLINED, "not discarded")
    async with _open(url) as store:
        await store.discard(args.workflow)
    out.write(f"discarded {args.workflow}\n")
    return OK


# --- the parser ----------------------------------------------------------------------------


def _versions() -> str:
    def version(distribution: str) -> str:
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            return "(not installed as a distribution)"

    lines = [f"durable-core {version('durable-core')}"]
    for plugin in durable.stores().values():
        made_by = plugin.distribution or "unknown distribution"
        lines.append(f"  store {plugin.name}: {made_by} {plugin.version or '?'}")
    for name, why in broken_stores().items():
        lines.append(f"  store {name}: installed but broken: {why}")
    return "\n".join(lines) + "\n"


class _Version(argparse.Action):
    """``--version``: computed when asked for, since it loads every store plugin."""

    def __init__(self, option_strings: Sequence[str], dest: str, **_: Any) -> None:
        super().__init__(
            option_strings,
            dest=argparse.SUPPRESS,
            default=argparse.SUPPRESS,
            nargs=0,
            help="print durable-core's version and each installed store's, and exit",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        sys.stdout.write(_versions())
        parser.exit()


class _Command(argparse.ArgumentParser):
    """A command's parser, which lets options sit between its positionals
    (``durable show URL --json WORKFLOW``): with the URL optional, a plain parse would give
    the first positional to WORKFLOW and refuse the one after the option."""

    _intermixing = False

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        if self._intermixing:  # the intermixed parse calls this for each of its passes
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False


def _url_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "url",
        nargs="?",
        metavar="URL",
        help=f"the store (like sqlite:///orders.db); default: ${STORE_VARIABLE}",
    )


_WORKER_DURATIONS: tuple[tuple[str, float, str], ...] = (
    (
        "liveness",
        30,
        "how long a pass's claim outlives its last renewal (renewed every third of it); "
        "a dead worker's claim lapses this long after it died",
    ),
    ("budget", 900, "longest one pass may run, whatever its renewals"),
    ("grace", 30, "how long passes in flight may finish after a stop signal"),
    ("poll", 1, "longest wait for work before looking again"),
    ("tick", 1, "how often the timer wakes due sleepers"),
    ("retry", 5, "how long a contended, fenced or failed pass is deferred"),
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="durable",
        description="Run durable workflows and look after them. Every command that opens a "
        f"store takes its URL first, or from ${STORE_VARIABLE}.",
        epilog="exit codes: 0 ok, 1 store failed, 2 bad usage, 3 no such workflow, "
        "4 not supported by this store, 5 not confirmed",
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="-v: debug lines of durable's own loggers; -vv: of the drivers' too",
    )
    parser.add_argument("--version", action=_Version)
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_Command
    )

    stores = commands.add_parser("stores", help="installed stores, versions and capabilities")
    stores.add_argument("--json", action="store_true")
    stores.set_defaults(run=_stores)

    worker = commands.add_parser(
        "worker",
        help="run workflows until SIGINT or SIGTERM",
        description="Run passes of MODULE:BODY for whatever the store delivers, until SIGINT "
        "or SIGTERM (a second signal stops it at once). How long a dead worker's workflow "
        "waits is --liveness and the store URL's ?delivery_lease= (docs/cli.md).",
    )
    _url_argument(worker)
    worker.add_argument(
        "body", metavar="MODULE:BODY", help="the workflow body: an async function of one Run"
    )
    worker.add_argument(
        "--limit", type=_positive, default=8, metavar="N", help="passes at once (default 8)"
    )
    for name, seconds, meaning in _WORKER_DURATIONS:
        worker.add_argument(
            f"--{name}",
            type=_seconds,
            default=timedelta(seconds=seconds),
            metavar="S",
            help=f"{meaning} (seconds; default {seconds:g})",
        )
    worker.add_argument(
        "--connect-timeout",
        type=_seconds,
        default=None,
        metavar="S",
        help="give up (exit 1) if the store cannot be opened within S seconds "
        "(default: keep trying, with backoff)",
    )
    worker.add_argument("--store", metavar="URL", help="deprecated: give the URL first")
    # Refused with a message naming its two successors, rather than "unrecognized".
    worker.add_argument("--lease", help=argparse.SUPPRESS)
    worker.set_defaults(run=_worker)

    arrive = commands.add_parser("arrive", help="supply a value and make the workflow ready")
    _url_argument(arrive)
    for name in ("workflow", "key", "value"):
        arrive.add_argument(name, metavar=name.upper())
    arrive.set_defaults(run=_arrive)

    send = commands.add_parser("send", help="append an inbox message and make it ready")
    _url_argument(send)
    for name in ("workflow", "value"):
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
    _url_argument(show)
    show.add_argument("workflow", metavar="WORKFLOW")
    show.add_argument("--json", action="store_true", help="as JSON, values whole")
    show.add_argument(
        "--full", action="store_true", help=f"print values whole (else cut at {SHOWN} characters)"
    )
    show.set_defaults(run=_show)

    listing = commands.add_parser("list", help="workflows in the store (where it can list)")
    _url_argument(listing)
    listing.add_argument(
        "--limit", type=_positive, default=100, metavar="N", help="most ids to print (default 100)"
    )
    listing.set_defaults(run=_list)

    discard = commands.add_parser("discard", help="forget a workflow and cancel its runs")
    _url_argument(discard)
    discard.add_argument("workflow", metavar="WORKFLOW")
    discard.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    discard.set_defaults(run=_discard)
    return parser


def _ours(name: str) -> bool:
    return name == "durable" or name.startswith(("durable.", "durable_"))


class _OursOrInfo(logging.Filter):
    """Lets through every record at INFO and above, and DEBUG only from durable's own
    loggers (``durable``, ``durable_*``): a driver's DEBUG (aiosqlite logs every call)
    would bury the lines ``-v`` is asked for."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.INFO or _ours(record.name)


_handler: logging.Handler | None = None


def _configure_logging(verbosity: int) -> None:
    global _handler
    root = logging.getLogger()
    if _handler is not None:  # main() called again in one process (tests)
        root.removeHandler(_handler)
    _handler = logging.StreamHandler(sys.stderr)
    _handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    if verbosity == 1:
        _handler.addFilter(_OursOrInfo())
    root.addHandler(_handler)
    root.setLevel(logging.DEBUG if verbosity else logging.INFO)


def _fail(code: int, message: str) -> NoReturn:
    sys.stderr.write(f"durable: {message}\n")
    raise SystemExit(code)


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the command; returns the exit code (the console script exits with it)."""
    args = _parser().parse_args(argv)
    _configure_logging(args.verbose)
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
        _fail(FAILED, f"the store failed: {type(error).__name__}: {_one_line(error)}")
    return code


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # before asyncio.run started, or after it ended
        sys.exit(130)
