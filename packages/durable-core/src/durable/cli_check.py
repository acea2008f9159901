"""``durable check [URL] MODULE:NAME``: would the code about to be deployed still read the
records of every unfinished workflow? A read-only dry run (:mod:`durable.check`).

Exits 0 when every unfinished workflow would run on, and ``BROKEN`` (10) when any would
break; the summary table (or ``--json``) goes to stdout, and a progress line to stderr when
it is a terminal.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from durable import check as deploy_check
from durable.cli import (
    OK,
    USAGE,
    Exit,
    _existing,
    _open,
    _positive,
    _servable,
    _store_url,
    _url_argument,
)

__all__ = ["BROKEN", "register"]

BROKEN = 10
"""The exit code of a check that found a workflow the new code would break."""


def register(commands: Any) -> None:
    """Add ``check`` to the ``durable`` command's subparsers."""
    command = commands.add_parser(
        "check",
        help="before a deploy: replay every unfinished workflow against new code, read-only",
        description="Replay every unfinished workflow in the store against MODULE:NAME in a "
        "dry run (no effect runs, nothing is written, no claim is taken) and report each: "
        "fine, a stored value a parser now refuses, a step renamed or reordered, an unknown "
        f"kind. Exits {BROKEN} if any would break (docs/testing.md).",
    )
    _url_argument(command)
    command.add_argument(
        "workflows",
        metavar="MODULE:NAME",
        help="the new code: a Workflows registry, a Kind, or a body",
    )
    command.add_argument("--store", metavar="URL", help="the store URL, instead of first")
    command.add_argument("--json", action="store_true", help="as JSON, for scripts")
    command.add_argument(
        "--page",
        type=_positive,
        default=deploy_check.PAGE,
        metavar="N",
        help=f"status rows read per page (default {deploy_check.PAGE})",
    )
    command.set_defaults(run=_check)


async def _check(args: argparse.Namespace, out: TextIO) -> int:
    if args.store is not None:
        if args.url is not None:
            raise Exit(USAGE, "give the store URL once: first, or as --store")
        args.url = args.store
    if "://" in args.workflows:
        raise Exit(
            USAGE,
            f"{args.workflows!r} is a store URL where MODULE:NAME belongs: "
            f"durable check URL MODULE:NAME",
        )
    url = _existing(_store_url(args))
    registry = _servable(args.workflows)
    shown = sys.stderr.isatty()

    def progress(checked: int) -> None:
        sys.stderr.write(f"\rchecked {checked} unfinished workflows")
        sys.stderr.flush()

    async with _open(url) as store:
        report = await deploy_check.check(
            store, registry, page=args.page, progress=progress if shown else None
        )
    if shown and report.findings:
        sys.stderr.write("\n")
    if args.json:
        out.write(json.dumps(report.as_json(), indent=2, default=repr) + "\n")
    else:
        out.write(deploy_check.render(report))
    return BROKEN if report.broken else OK
