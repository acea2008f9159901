"""``durable export``, ``durable import`` and ``durable prune``: the commands over
:mod:`durable.transfer`, registered by :mod:`durable.cli`.

Export writes the dump to stdout and import reads it from stdin (or a file), a line at a
time, so neither holds a store in memory. Both show a progress line on stderr when stderr
is a terminal, and nothing there otherwise.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, TextIO

from durable.cli import (
    OK,
    UNSUPPORTED,
    USAGE,
    Exit,
    _open,
    _redacted,
    _store_url,
    _url_argument,
    _when,
)
from durable.interfaces import Lifecycle, Status
from durable.transfer import export_lines, import_lines, parse_age, prune, workflow_ids

__all__ = ["register"]


class _Progress:
    """``\\rexporting 1,200/5,000 workflows`` on stderr, at most ten times a second, and only
    when stderr is a terminal."""

    def __init__(self, doing: str) -> None:
        self._doing = doing
        self._shown = 0.0
        self._on = sys.stderr.isatty()
        self._drawn = False

    def __call__(self, done: int, total: int | None = None) -> None:
        if not self._on:
            return
        now = time.monotonic()
        if now - self._shown < 0.1 and (total is None or done < total):
            return
        self._shown = now
        of = f"/{total:,}" if total is not None else ""
        sys.stderr.write(f"\r{self._doing} {done:,}{of} workflows")
        sys.stderr.flush()
        self._drawn = True

    def close(self) -> None:
        if self._drawn:
            sys.stderr.write("\n")
            sys.stderr.flush()


def _statuses(values: list[str] | None) -> list[Status] | None:
    if not values:
        return None
    chosen: list[Status] = []
    for value in values:
        for name in value.split(","):
            try:
                chosen.append(Status(name.strip()))
            except ValueError:
                known = ", ".join(s.value for s in Status)
                raise Exit(USAGE, f"no status {name.strip()!r}; one of {known}") from None
    return chosen


async def _export(args: argparse.Namespace, out: TextIO) -> int:
    ids: list[str] = list(args.ids)
    if args.url is not None and "://" not in args.url:
        ids.insert(0, args.url)  # an id, with the URL from $DURABLE_STORE
        args.url = None
    url = _store_url(args)
    statuses = _statuses(args.status)
    if statuses is not None and ids:
        raise Exit(USAGE, "give ids or --status, not both")
    progress = _Progress("exporting")
    async with _open(url) as store:
        if statuses is not None and not isinstance(store.checkpointer, Lifecycle):
            raise Exit(
                UNSUPPORTED, f"{_redacted(url)} does not offer lifecycle: export by id instead"
            )
        if not ids:
            try:
                ids = await workflow_ids(store, statuses)
            except ValueError as error:
                raise Exit(UNSUPPORTED, f"{_redacted(url)}: {error}") from None
        try:
            async for line in export_lines(store, ids, progress=lambda n: progress(n, len(ids))):
                out.write(line)
        finally:
            progress.close()
    out.flush()
    return OK


def _read(source: TextIO) -> Iterator[str]:
    yield from source


async def _import(args: argparse.Namespace, out: TextIO) -> int:
    url = _store_url(args)
    progress = _Progress("importing")
    source: TextIO = args.file if args.file is not None else sys.stdin
    try:
        async with _open(url) as store:
            try:
                done = await import_lines(store, _read(source), progress=progress)
            finally:
                progress.close()
    finally:
        if source is not sys.stdin:
            source.close()
    out.write(
        f"imported {done.written} workflows; {done.kept} already there were left as they are\n"
    )
    return OK


def _before(text: str) -> datetime:
    """``30d`` (an age, from now) or an ISO time with its offset (``2026-11-01T00:00Z``)."""
    try:
        return datetime.now(UTC) - parse_age(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither an age (30d, 12h, 90m, 45s, 2w) nor an ISO time with an "
            "offset (2026-11-01T00:00:00Z)"
        ) from None
    if moment.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r} has no offset: add Z or +01:00")
    return moment


async def _prune(args: argparse.Namespace, out: TextIO) -> int:
    url = _store_url(args)
    statuses = _statuses(args.status) or [Status.FINISHED, Status.FAILED, Status.CANCELLED]
    unfinished = [s.value for s in statuses if not s.terminal]
    if unfinished:
        raise Exit(
            USAGE,
            f"prune removes finished, failed or cancelled workflows, never {', '.join(unfinished)}",
        )
    progress = _Progress("pruned")
    async with _open(url) as store:
        if not isinstance(store.checkpointer, Lifecycle):
            raise Exit(
                UNSUPPORTED,
                f"{_redacted(url)} does not offer lifecycle, so it cannot tell finished "
                "workflows; discard them by id",
            )
        try:
            pruned = await prune(
                store, args.finished_before, statuses, batch=args.batch, progress=progress
            )
        finally:
            progress.close()
    names = ", ".join(s.value for s in statuses)
    out.write(
        f"pruned {pruned} workflows ({names}; last updated before {_when(args.finished_before)})\n"
    )
    return OK


def _positive(text: str) -> int:
    number = int(text)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {number}")
    return number


def register(commands: Any) -> None:
    """Add ``export``, ``import`` and ``prune`` to the ``durable`` command's subparsers."""
    export = commands.add_parser(
        "export", help="write workflows (records, inbox, status) to stdout as a dump"
    )
    _url_argument(export)
    export.add_argument("ids", nargs="*", metavar="WORKFLOW", help="only these (default: all)")
    export.add_argument(
        "--status",
        action="append",
        metavar="S[,S...]",
        help="only workflows in these statuses (finished,failed,...)",
    )
    export.set_defaults(run=_export)

    importing = commands.add_parser(
        "import", help="read a dump (from export) into a store; importing twice changes nothing"
    )
    _url_argument(importing)
    importing.add_argument(
        "file",
        nargs="?",
        type=argparse.FileType("r", encoding="utf-8"),
        metavar="FILE",
        help="the dump (default: stdin)",
    )
    importing.set_defaults(run=_import)

    pruning = commands.add_parser(
        "prune", help="discard finished, failed and cancelled workflows last updated before a time"
    )
    _url_argument(pruning)
    pruning.add_argument(
        "--finished-before",
        required=True,
        type=_before,
        metavar="AGE|TIME",
        help="30d, 12h, 90m, 45s or 2w ago, or an ISO time with an offset; compared with "
        "each workflow's updated_at (the store's clock at its last transition)",
    )
    pruning.add_argument(
        "--status",
        action="append",
        metavar="S[,S...]",
        help="which terminal statuses (default: finished,failed,cancelled)",
    )
    pruning.add_argument(
        "--batch",
        type=_positive,
        default=100,
        metavar="N",
        help="rows read from the status index per page (default 100)",
    )
    pruning.set_defaults(run=_prune)
