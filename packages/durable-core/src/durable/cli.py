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
3     no such workflow in this store (``arrive``/``send`` without ``--create``, ``discard``
      too), or an SQLite file that does not exist (never created by a reading command)
4     this store cannot do that (``list`` on a store without ``enumerate``, ``start`` on
      one without ``lifecycle``)
5     refused at the confirmation prompt
6     refused by the workflow's state: ``start`` of an id started with another kind or
      input, ``retry`` of a workflow that is neither failed nor cancelled, an ``arrive``
      that lost to an earlier, different value
7     ``result`` of a workflow that failed or was cancelled (its status line on stderr)
8     ``result`` timed out (``--timeout``) before the workflow settled
9     ``doctor`` found something that needs a person (what ``--repair`` repaired does not
      count)
10    ``check`` found an unfinished workflow the new code would break
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
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, TextIO
from urllib.parse import unquote, urlsplit, urlunsplit

import durable
from durable import doctor as durable_doctor
from durable import guards
from durable.children import children_of, parent_of
from durable.cli_schedule import register as register_schedule
from durable.interfaces import (
    Durable,
    Entry,
    Enumerable,
    Inspectable,
    LifecycleNotOffered,
    LimitsNotOffered,
    NotRetryable,
    Observable,
    QueuesNotOffered,
    StartConflict,
    Status,
    StoreUnavailable,
    UnknownWorkflow,
    WorkflowStatus,
)
from durable.plugins import UnknownStore, broken_stores
from durable.run import step_entry
from durable.schedules import UnknownSchedule
from durable.workflows import (
    Kind,
    LifecycleDurable,
    WorkflowCancelled,
    WorkflowFailed,
    Workflows,
)

__all__ = ["STORE_VARIABLE", "main", "status_line"]

OK, FAILED, USAGE, NOT_FOUND, UNSUPPORTED, DECLINED = 0, 1, 2, 3, 4, 5
REFUSED, UNSUCCESSFUL, TIMED_OUT, ATTENTION = 6, 7, 8, 9

STORE_VARIABLE = "DURABLE_STORE"
"""The environment variable that supplies the store URL when a command is given none."""

SHOWN = 200
"""How many characters of a value ``show`` prints on one line before cutting it, or of
one line of a pretty-printed value (``--full`` prints all)."""

SHOWN_LINES = 20
"""How many lines of a pretty-printed value ``show`` prints before cutting it."""

IN_A_LINE = 80
"""How many characters of a finished workflow's value its status line shows."""

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


def _why_not_a_registry(target: object) -> str | None:
    """Why ``target`` is not a registry of workflow kinds (a ``Workflows``, or one ``Kind``)."""
    if isinstance(target, (Workflows, Kind)):
        return None
    return f"not a Workflows registry or a Kind (a {type(target).__name__})"


SERVABLE: tuple[Callable[[object], str | None], ...] = (_why_not_a_body, _why_not_a_registry)
"""The kinds of target ``durable worker`` runs, each a check answering why a target is not
of its kind. A target any of them accepts is handed to ``work`` as it is: a registry of
workflow kinds (``Workflows``), one ``Kind``, or a bare body (a one-kind registry)."""


def _servable(spec: str) -> Any:
    target = _import(spec)
    reasons = [check(target) for check in SERVABLE]
    if any(reason is None for reason in reasons):
        return target
    raise Exit(
        USAGE,
        f"{spec} is {'; '.join(r for r in reasons if r)}: durable worker runs a Workflows "
        "registry, a Kind, or an async function taking one Run, like "
        "`async def payout(run): ...`",
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


def _age(text: str) -> timedelta:
    from durable.transfer import parse_age

    try:
        age = parse_age(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    if age <= timedelta(0):
        raise argparse.ArgumentTypeError(f"{text!r} is no time at all: give a positive age")
    return age


def _prune_policy(args: argparse.Namespace) -> Any:
    """``work``'s ``prune`` from ``--prune-finished-before`` and ``--prune-every``."""
    if args.prune_finished_before is None:
        return None
    from durable.transfer import PrunePolicy

    return PrunePolicy(args.prune_finished_before, every=args.prune_every)


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
                "worker: %s%s%s on %s, %d at once, liveness %s, delivery lease %s%s",
                args.body,
                f" as {args.name}" if args.name else "",
                f" serving queue(s) {', '.join(args.queue)}" if args.queue else "",
                _redacted(url),
                args.limit,
                _in_seconds(args.liveness),
                _in_seconds(store.scheduler.lease),
                "" if args.schedules else ", starting no schedule's ticks (--no-schedules)",
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
                    name=args.name,
                    queues=args.queue,
                    schedules=args.schedules,
                    prune=_prune_policy(args),
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


def _existing(url: str) -> str:
    """``url``, unless it names an SQLite file that does not exist: opening it would create
    an empty database, so a mistyped path would answer "no such workflow" and leave a file
    behind. Exit 3 instead, with nothing created."""
    missing = guards.missing_sqlite_file(url)
    # Only where an SQLite store is installed: else opening names the package to install.
    if missing is not None and any("sqlite" in p.schemes for p in durable.stores().values()):
        raise Exit(
            NOT_FOUND,
            f"no store at {_redacted(url)}: the file {str(missing)!r} does not exist "
            "(nothing was created; `durable start` or `--create` makes it)",
        )
    return url


def _registry(spec: str | None) -> Workflows | None:
    """The registry ``--workflows MODULE:NAME`` names, or None when it is not given."""
    if spec is None:
        return None
    target = _import(spec)
    if _why_not_a_registry(target) is not None and _why_not_a_body(target) is not None:
        raise Exit(USAGE, f"--workflows {spec} is not a Workflows, a Kind or a body")
    return Workflows.of(target)  # type: ignore[arg-type]


async def _arrive(args: argparse.Namespace, out: TextIO) -> int:
    value = _json_argument(args.value, "VALUE")
    registry = _registry(args.workflows)
    url = _store_url(args)
    async with _open(url if args.create else _existing(url)) as store:
        recorded = await guards.arrive(
            store, args.workflow, args.key, value, create=args.create, workflows=registry
        )
    out.write(json.dumps(recorded.value) + "\n")
    if not recorded.first:
        raise Exit(
            REFUSED,
            f"{args.workflow}: {args.key!r} already holds {_in_a_line(recorded.value)}, "
            f"written earlier; {_in_a_line(value)} was not written (first writer wins)",
        )
    return OK


async def _send(args: argparse.Namespace, out: TextIO) -> int:
    value = _json_argument(args.value, "VALUE")
    registry = _registry(args.workflows)
    url = _store_url(args)
    async with _open(url if args.create else _existing(url)) as store:
        key = await guards.send(
            store,
            args.workflow,
            value,
            message_id=args.message_id,
            create=args.create,
            workflows=registry,
        )
    out.write(key + "\n")
    return OK


def _cut_line(text: str, full: bool) -> str:
    """``text`` cut to :data:`SHOWN` characters unless ``full``, saying how much was left out."""
    if full or len(text) <= SHOWN:
        return text
    return f"{text[:SHOWN]}... [{len(text) - SHOWN:,} more characters; --full shows them]"


def _cut(value: object, full: bool, margin: str = "    ") -> str:
    """A value as ``show`` prints it, so one large record does not bury the rest.

    A value whose JSON fits in :data:`SHOWN` characters stays on its line. A longer object
    or array (a model's response, say) is pretty-printed over the lines that follow, each
    starting with ``margin``: a JSON line cut to its first :data:`SHOWN_LINES` lines, which
    a reader can follow where a line cut mid-object could not be read at all, with a marker
    saying how many lines were left out (and each line cut like a scalar). A longer scalar
    (a string) is cut at :data:`SHOWN` characters. ``full`` prints everything whole.
    """
    text = json.dumps(value)
    if len(text) <= SHOWN or not isinstance(value, dict | list):
        return _cut_line(text, full)
    lines = json.dumps(value, indent=2).splitlines()
    kept = lines if full else lines[:SHOWN_LINES]
    shown = [kept[0], *(margin + _cut_line(line, full) for line in kept[1:])]
    if len(lines) > len(kept):
        shown.append(f"{margin}... [{len(lines) - len(kept):,} more lines; --full shows them]")
    return "\n".join(shown)


async def _show(args: argparse.Namespace, out: TextIO) -> int:
    url = _existing(_store_url(args))
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
        lifecycle = _offers_lifecycle(store)
        st = (
            await store.status(args.workflow)
            if lifecycle and isinstance(store, LifecycleDurable)
            else None
        )
        held = {entry.key: entry.value for entry in history}
        parent = parent_of(held)
        kids: list[tuple[str, str, str]] = []
        for key, kid, _ in children_of(held):
            found = (
                await store.status(kid)
                if lifecycle and isinstance(store, LifecycleDurable)
                else None
            )
            kids.append((key, kid, "unknown" if found is None else str(found.status)))
    if not history and claim is None and scheduled is None and st is None:
        raise Exit(NOT_FOUND, f"no workflow {args.workflow!r} in {_redacted(url)}")
    inspectable = isinstance(checkpointer, Inspectable)
    observable = isinstance(scheduler, Observable)
    # Inbox messages an ended workflow never read (guards.dead_letters, from what was read).
    dead = guards.unread(history) if st is not None and st.status.terminal else []
    if args.json:
        # Whole values, always: JSON is read by programs, which a cut value would mislead.
        out.write(
            json.dumps(
                {
                    "workflow": args.workflow,
                    "status": None if st is None else status_json(st),
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
                    "dead_letters": [
                        {"key": e.key, "value": e.value, "at": e.at.isoformat()} for e in dead
                    ],
                    "parent": None if parent is None else {"workflow": parent[0], "key": parent[1]},
                    "children": [
                        {"key": key, "workflow": kid, "status": said} for key, kid, said in kids
                    ],
                    # null above means "free", "not scheduled" or "no status" only where the
                    # store can say so; a reader must not take a store's silence for an answer.
                    "unreported": [
                        name
                        for name, known in (
                            ("status", lifecycle),
                            ("claim", inspectable),
                            ("scheduled", observable),
                        )
                        if not known
                    ],
                },
                indent=2,
            )
            + "\n"
        )
        return OK
    if not lifecycle:
        out.write("status: this store does not offer lifecycle\n")
    elif st is None:
        out.write("status: none recorded (never started, and no pass has begun)\n")
    else:
        due = scheduled is not None and scheduled <= datetime.now(UTC)
        out.write(status_line(st, history, due) + "\n")
        out.write(f"kind: {st.kind if st.kind is not None else '-'}\n")
        out.write(f"attempts: {st.attempts}\n")
        out.write(f"input: {_cut(st.input, args.full, margin='  ')}\n")
    if parent is not None:
        out.write(f"parent: {parent[0]} (its child under key {parent[1]!r})\n")
    if kids:
        out.write(f"children: {len(kids)}\n")
        for key, kid, its in kids:
            out.write(f"  {key}  {kid}  {its}\n")
    out.write(f"workflow {args.workflow}\n")
    for entry in history:
        when = entry.at.isoformat(timespec="milliseconds")
        said = step_entry(entry.key, entry.value)
        if said is not None:
            # A step's attempt, as a sentence: "charge: attempt 3 of 5 failed: TimeoutError".
            out.write(f"  {when}  {said}\n")
        else:
            out.write(f"  {when}  {entry.key}  {_cut(entry.value, args.full)}\n")
    if dead:
        out.write(
            f"dead letters: {_plural(len(dead), 'inbox message')} the workflow "
            f"{st.status.value if st is not None else 'ended'} without reading\n"
        )
        for entry in dead:
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
    url = _existing(_store_url(args))
    filtered = args.status is not None or args.kind is not None or args.cursor is not None
    async with _open(url) as store:
        if not _offers_lifecycle(store):
            if filtered:
                raise Exit(
                    UNSUPPORTED,
                    f"{_redacted(url)} does not offer lifecycle, so it cannot list by status, "
                    "kind or cursor; `durable list URL` alone lists ids where the store can",
                )
            checkpointer: object = store.checkpointer
            if not isinstance(checkpointer, Enumerable):
                raise Exit(UNSUPPORTED, f"this store cannot list workflows ({_redacted(url)})")
            found = await checkpointer.workflows(args.limit)
            if args.json:
                out.write(json.dumps({"workflows": found, "cursor": None}, indent=2) + "\n")
                return OK
            for workflow in found:
                out.write(workflow + "\n")
            return OK
        assert isinstance(store, LifecycleDurable)
        page = await store.list(
            status=args.status, kind=args.kind, limit=args.limit, cursor=args.cursor
        )
    if args.json:
        listed = {"workflows": [status_json(st) for st in page.statuses], "cursor": page.cursor}
        out.write(json.dumps(listed, indent=2) + "\n")
        return OK
    rows = [("WORKFLOW", "KIND", "STATUS", "UPDATED")] + [
        (st.workflow, st.kind or "-", st.status.value, _when(st.updated_at)) for st in page.statuses
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for row in rows:
        out.write("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        out.write("\n")
    if page.cursor is not None:
        # On stderr, so that stdout stays a table a script can read to its end.
        sys.stderr.write(f"more: --cursor {page.cursor}\n")
    return OK


# --- the lifecycle -------------------------------------------------------------------------


def _when(moment: datetime | None) -> str:
    """A store time as an operator reads it: to the second, in UTC, saying so."""
    if moment is None:
        return "?"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else ""


def _in_a_line(value: object) -> str:
    text = json.dumps(value)
    return text if len(text) <= IN_A_LINE else text[: IN_A_LINE - 3] + "..."


def status_line(
    st: WorkflowStatus,
    history: Sequence[Entry] = (),
    due: bool = False,
    now: datetime | None = None,
) -> str:
    """One line saying where a workflow is, the first line of ``durable show``.

    ``history`` names the step a running pass is past when no beat has named the one in
    flight (design §2.5); ``due`` says the scheduler holds it runnable, which for a blocked
    workflow means a value has arrived and only a worker's next pass has yet to see it.
    """
    now = now if now is not None else datetime.now(UTC)
    failure = st.failure
    why = f"{failure.type}: {_first_line(failure.message)}" if failure is not None else ""
    if st.status is Status.FAILED:
        attempts = failure.attempts if failure is not None else st.attempts
        return f"failed after {_plural(attempts, 'attempt')}" + (f": {why}" if why else "")
    if st.status is Status.RUNNING:
        where = f"on {st.owner or 'an unnamed worker'}" + (
            f" (pass {st.token})" if st.token is not None else ""
        )
        since = f"since {_when(st.since)}"
        if st.step is not None:
            line = f"running step {st.step!r} {where} {since}"
        elif history:
            last = history[-1]
            after = step_entry(last.key, last.value) or f"step {last.key!r}"
            line = f"running {where} {since}, after {after}"
        else:
            line = f"running {where} {since}"
        if st.until is not None and st.until <= now:
            line += f"; silent since {_when(st.until)}, presumed dead (it will be retried)"
        return line
    if st.status is Status.SLEEPING:
        if failure is not None:
            return f"retrying at {_when(st.until)} after attempt {failure.attempts}: {why}"
        return f"sleeping until {_when(st.until)}"
    if st.status is Status.BLOCKED:
        line = f"blocked on {', '.join(st.keys)}" if st.keys else "blocked"
        return line + (" (a value arrived; waiting for a worker)" if due else "")
    if st.status is Status.FINISHED:
        return f"finished: {_in_a_line(st.value)}"
    if st.status is Status.CANCELLED:
        return f"cancelled at {_when(st.updated_at)}"
    return f"ready since {_when(st.updated_at)}"


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def status_json(st: WorkflowStatus) -> dict[str, object]:
    """Every field of ``st``, times as ISO strings, for ``--json``."""
    return {
        "workflow": st.workflow,
        "status": st.status.value,
        "kind": st.kind,
        "attempts": st.attempts,
        "updated_at": _iso(st.updated_at),
        "started_at": _iso(st.started_at),
        "input": st.input,
        "queue": st.queue,
        "token": st.token,
        "owner": st.owner,
        "since": _iso(st.since),
        "step": st.step,
        "until": _iso(st.until),
        "keys": list(st.keys),
        "value": st.value,
        "failure": None
        if st.failure is None
        else {
            "type": st.failure.type,
            "message": st.failure.message,
            "traceback": st.failure.traceback,
            "attempts": st.failure.attempts,
        },
    }


def _offers_lifecycle(store: Durable[Any]) -> bool:
    from durable.interfaces import Lifecycle

    return isinstance(store, LifecycleDurable) and isinstance(store.checkpointer, Lifecycle)


def _lifecycle(store: Durable[Any], url: str, doing: str) -> LifecycleDurable[Any]:
    """``store`` as one that keeps each workflow's status, or exit 4 saying it does not."""
    if not _offers_lifecycle(store):
        raise Exit(
            UNSUPPORTED,
            f"{_redacted(url)} does not offer lifecycle (kinds, status, outcome), so it cannot "
            f"{doing}; its workflows still run under `durable worker` with a bare body",
        )
    assert isinstance(store, LifecycleDurable)
    return store


async def _start(args: argparse.Namespace, out: TextIO) -> int:
    value = _json_argument(args.input, "INPUT") if args.input is not None else None
    kind: Kind[Any, Any] | str = args.kind
    if args.workflows is not None:
        registry = _import(args.workflows)
        if _why_not_a_registry(registry) is not None and _why_not_a_body(registry) is not None:
            raise Exit(USAGE, f"--workflows {args.workflows} is not a Workflows, a Kind or a body")
        served = Workflows.of(registry)  # type: ignore[arg-type]
        if args.kind not in served:
            known = ", ".join(repr(k.name) for k in served)
            raise Exit(
                USAGE, f"--workflows {args.workflows} has no kind {args.kind!r}; it has {known}"
            )
        kind = served[args.kind]
    url = _store_url(args)
    async with _open(url) as opened:
        store = _lifecycle(opened, url, "start workflows")
        before = await store.status(args.workflow)
        handle = await store.start(kind, args.workflow, value)
        after = await handle.status()
    name = kind if isinstance(kind, str) else kind.name
    again = before is not None and before.kind is not None
    if again:
        out.write(f"already started {args.workflow} ({name}): {status_line(after)}\n")
    else:
        out.write(f"started {args.workflow} ({name}): {after.status.value}\n")
    return OK


async def _cancel(args: argparse.Namespace, out: TextIO) -> int:
    url = _existing(_store_url(args))
    async with _open(url) as opened:
        st = await _lifecycle(opened, url, "cancel workflows").cancel(args.workflow)
    out.write(status_line(st) + "\n")
    return OK


async def _retry(args: argparse.Namespace, out: TextIO) -> int:
    url = _existing(_store_url(args))
    async with _open(url) as opened:
        st = await _lifecycle(opened, url, "retry workflows").retry(args.workflow)
    out.write(status_line(st) + "\n")
    return OK


async def _result(args: argparse.Namespace, out: TextIO) -> int:
    url = _existing(_store_url(args))
    async with _open(url) as opened:
        store = _lifecycle(opened, url, "report results")
        if await store.status(args.workflow) is None:
            raise Exit(NOT_FOUND, f"no workflow {args.workflow!r} in {_redacted(url)}")
        handle = store.handle(args.workflow)
        try:
            value = await handle.result(args.timeout)
        except (WorkflowFailed, WorkflowCancelled):
            raise Exit(UNSUCCESSFUL, status_line(await handle.status())) from None
        except TimeoutError:
            st = await handle.status()
            raise Exit(
                TIMED_OUT,
                f"{args.workflow} did not settle within {_in_seconds(args.timeout)}: "
                f"{status_line(st)}",
            ) from None
    out.write(json.dumps(value) + "\n")
    return OK


async def _discard(args: argparse.Namespace, out: TextIO) -> int:
    url = _existing(_store_url(args))
    async with _open(url) as store:
        # Before asking: a mistyped id is exit 3, not a confirmation of nothing.
        if not await guards.exists(store, args.workflow):
            raise Exit(
                NOT_FOUND, f"no workflow {args.workflow!r} in {_redacted(url)}; nothing discarded"
            )
        if not args.yes:
            if not sys.stdin.isatty():
                raise Exit(DECLINED, "refusing to discard without confirmation; pass --yes")
            prompt = f"discard every record of {args.workflow!r} and cancel its runs? [y/N] "
            answer = await asyncio.to_thread(input, prompt)
            if answer.strip().lower() not in {"y", "yes"}:
                raise Exit(DECLINED, "not discarded")
        await store.discard(args.workflow)
    out.write(f"discarded {args.workflow}\n")
    return OK


# --- the parser ----------------------------------------------------------------------------


async def _doctor(args: argparse.Namespace, out: TextIO) -> int:
    url = _existing(_store_url(args))
    async with _open(url) as store:
        report = await durable_doctor.examine(
            store, repair=args.repair, stale=args.stale, attempts=args.attempts, limit=args.limit
        )
    if args.json:
        out.write(json.dumps(report.as_json(), indent=2) + "\n")
    else:
        out.write(durable_doctor.render(report))
    return ATTENTION if report.attention else OK


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


def _guard_arguments(parser: argparse.ArgumentParser) -> None:
    """``--create`` and ``--workflows``, the guard rails of ``arrive`` and ``send``."""
    parser.add_argument(
        "--create",
        action="store_true",
        help="allow an id the store has never seen, making a new workflow (without it, an "
        "unknown id exits 3 with nothing written)",
    )
    parser.add_argument(
        "--workflows",
        metavar="MODULE:NAME",
        help="the registry whose kind's declared parser checks VALUE before anything is "
        "written (exit 2 naming kind, key, value and the parser's error)",
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
        "4 not supported by this store, 5 not confirmed, 6 refused by the workflow's state, "
        "7 the workflow failed or was cancelled, 8 timed out, 9 doctor: needs attention",
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
        "body",
        metavar="MODULE:NAME",
        help="what to serve: a Workflows registry, a Kind, or a body (an async function of one "
        "Run)",
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
    worker.add_argument(
        "--name",
        metavar="OWNER",
        default=None,
        help="the worker's identity in `durable show` (default: host:pid)",
    )
    worker.add_argument(
        "--queue",
        action="append",
        metavar="NAME",
        default=None,
        help="serve only this queue (repeat for several; default: every queue); needs a "
        "store with the 'queues' capability",
    )
    worker.add_argument(
        "--no-schedules",
        dest="schedules",
        action="store_false",
        help="start no schedule's ticks (default: start the ticks of the schedules whose "
        "kind this worker serves); for a deployment where other workers start them",
    )
    worker.add_argument(
        "--prune-finished-before",
        type=_age,
        default=None,
        metavar="AGE",
        help="also prune, as `durable prune --finished-before AGE` does, workflows ended "
        "longer than AGE ago (30d, 12h, 90m; default: no pruning)",
    )
    worker.add_argument(
        "--prune-every",
        type=_age,
        default=timedelta(hours=1),
        metavar="AGE",
        help="how often to prune, with --prune-finished-before (default 1h)",
    )
    worker.add_argument("--store", metavar="URL", help="deprecated: give the URL first")
    # Refused with a message naming its two successors, rather than "unrecognized".
    worker.add_argument("--lease", help=argparse.SUPPRESS)
    worker.set_defaults(run=_worker)

    arrive = commands.add_parser("arrive", help="supply a value and make the workflow ready")
    _url_argument(arrive)
    for name in ("workflow", "key", "value"):
        arrive.add_argument(name, metavar=name.upper())
    _guard_arguments(arrive)
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
    _guard_arguments(send)
    send.set_defaults(run=_send)

    show = commands.add_parser("show", help="a workflow's timeline, claim and schedule")
    _url_argument(show)
    show.add_argument("workflow", metavar="WORKFLOW")
    show.add_argument("--json", action="store_true", help="as JSON, values whole")
    show.add_argument(
        "--full",
        action="store_true",
        help=f"print values whole (else cut at {SHOWN} characters, or at {SHOWN_LINES} lines "
        "of a long object or array, which is pretty-printed)",
    )
    show.set_defaults(run=_show)

    listing = commands.add_parser(
        "list",
        help="workflows by status and kind, newest first (or bare ids where the store keeps "
        "no status)",
    )
    _url_argument(listing)
    listing.add_argument(
        "--status",
        choices=[s.value for s in Status],
        help="only workflows in this status",
    )
    listing.add_argument("--kind", metavar="KIND", help="only workflows of this kind")
    listing.add_argument(
        "--limit", type=_positive, default=100, metavar="N", help="most rows to print (default 100)"
    )
    listing.add_argument(
        "--cursor",
        metavar="C",
        help="the page after the one that printed `more: --cursor C` (on stderr)",
    )
    listing.add_argument("--json", action="store_true", help="as JSON, with the next cursor")
    listing.set_defaults(run=_list)

    start = commands.add_parser(
        "start", help="start a workflow of a kind on a JSON input (idempotent)"
    )
    _url_argument(start)
    start.add_argument("kind", metavar="KIND")
    start.add_argument("workflow", metavar="WORKFLOW")
    start.add_argument("input", metavar="INPUT", nargs="?", help="JSON (default null)")
    start.add_argument(
        "--workflows",
        metavar="MODULE:NAME",
        help="the registry (or Kind) whose kind's parser checks INPUT before anything is written",
    )
    start.set_defaults(run=_start)

    for name, doing, run in (
        ("cancel", "cancel a workflow: it never runs again; its records are kept", _cancel),
        ("retry", "run a failed or cancelled workflow again with fresh attempts", _retry),
    ):
        command = commands.add_parser(name, help=doing)
        _url_argument(command)
        command.add_argument("workflow", metavar="WORKFLOW")
        command.set_defaults(run=run)

    result = commands.add_parser(
        "result", help="wait for a workflow's outcome and print its value as JSON"
    )
    _url_argument(result)
    result.add_argument("workflow", metavar="WORKFLOW")
    result.add_argument(
        "--timeout",
        type=_seconds,
        default=None,
        metavar="S",
        help="give up (exit 8) after S seconds (default: wait as long as it takes)",
    )
    result.set_defaults(run=_result)

    discard = commands.add_parser("discard", help="forget a workflow and cancel its runs")
    _url_argument(discard)
    discard.add_argument("workflow", metavar="WORKFLOW")
    discard.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    discard.set_defaults(run=_discard)

    register_schedule(commands, STORE_VARIABLE)
    from durable import cli_queue  # per-queue limits: a module of their own

    cli_queue.register(commands, STORE_VARIABLE)
    from durable import cli_transfer  # export, import, prune: a module of their own

    cli_transfer.register(commands)
    from durable import cli_check  # the deploy check: a module of its own

    cli_check.register(commands)
    doctor = commands.add_parser(
        "doctor", help="what is stuck and why; --repair requeues what would never run again"
    )
    _url_argument(doctor)
    doctor.add_argument("--repair", action="store_true", help="make the safe repairs, say which")
    doctor.add_argument("--json", action="store_true", help="as JSON, for scripts")
    doctor.add_argument(
        "--stale",
        type=_seconds,
        default=durable_doctor.STALE,
        metavar="S",
        help="runnable this long untaken is reported (seconds; default "
        f"{durable_doctor.STALE.total_seconds():g})",
    )
    doctor.add_argument(
        "--attempts",
        type=_positive,
        default=durable_doctor.ATTEMPTS,
        metavar="N",
        help=f"this many attempts is failing repeatedly (default {durable_doctor.ATTEMPTS})",
    )
    doctor.add_argument(
        "--limit",
        type=_positive,
        default=durable_doctor.LIMIT,
        metavar="N",
        help=f"most ids listed per finding (default {durable_doctor.LIMIT})",
    )
    doctor.set_defaults(run=_doctor)
    _dashboard(commands)
    return parser


def _dashboard(commands: Any) -> None:
    """``durable dashboard``, from the durable-dashboard package (its own, so that the core
    stays tiny); without it, a stand-in that says how to get it."""
    try:
        command = importlib.import_module("durable_dashboard.command")
    except ImportError:
        missing = commands.add_parser(
            "dashboard", help="a web dashboard (pip install durable-dashboard)"
        )
        missing.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
        missing.set_defaults(run=_no_dashboard)
        return
    command.add_command(commands, _url_argument)


async def _no_dashboard(args: argparse.Namespace, out: TextIO) -> int:
    raise Exit(
        UNSUPPORTED,
        "durable dashboard needs the durable-dashboard package: pip install durable-dashboard",
    )


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
    except (StartConflict, NotRetryable) as error:
        _fail(REFUSED, str(error))
    except (UnknownWorkflow, UnknownSchedule) as error:
        _fail(NOT_FOUND, _one_line(error))
    except (LifecycleNotOffered, QueuesNotOffered, LimitsNotOffered) as error:
        _fail(UNSUPPORTED, _one_line(error))
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
    # Run as ``python -m durable.cli``, this module is ``__main__``: run the one importable
    # as ``durable.cli`` instead, whose ``Exit`` is the one the verbs' own modules
    # (``cli_check``, ``cli_transfer``) raise.
    from durable.cli import main as _main

    try:
        sys.exit(_main())
    except KeyboardInterrupt:  # before asyncio.run started, or after it ended
        sys.exit(130)
