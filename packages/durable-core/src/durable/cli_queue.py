"""``durable queue URL limit|limits``: the per-queue limits a store keeps.

Its own module so that the command's code sits beside nothing else; ``durable.cli`` only
registers it (:func:`register`) and maps its errors to exit codes. The limits live in the
store (:class:`~durable.interfaces.Limited`), so one command changes them for every worker
at once, with no restart: the next take on any handle reads them.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any, TextIO

import durable
from durable.interfaces import Limited, LimitsNotOffered, QueueLimit

__all__ = ["VERBS", "QueueUsage", "register"]

VERBS = ("limit", "limits")


class QueueUsage(ValueError):
    """A queue command given the wrong words (a ``ValueError``: exit 2)."""


def register(commands: Any, url_variable: str) -> None:
    """Add ``queue`` to the CLI's ``commands``."""
    command = commands.add_parser(
        "queue",
        help="set and show per-queue limits (concurrency, rate)",
        description="durable queue [URL] limit QUEUE [--concurrent N] [--rate N] | --clear; "
        "durable queue [URL] limits [--json]. Limits are kept in the store and enforced by "
        "every worker on it (docs/queues.md).",
    )
    command.add_argument(
        "words",
        nargs="*",
        metavar="[URL] VERB [QUEUE]",
        help=f"the store (default: ${url_variable}), one of {', '.join(VERBS)}, and the queue",
    )
    command.add_argument(
        "--concurrent", type=int, metavar="N", help="limit: at most N passes of the queue at once"
    )
    command.add_argument(
        "--rate", type=int, metavar="N", help="limit: at most N hand-outs of the queue a second"
    )
    command.add_argument("--clear", action="store_true", help="limit: remove the queue's limit")
    command.add_argument("--json", action="store_true", help="limits: as JSON")
    command.set_defaults(run=_queue, url=None, url_variable=url_variable)


def _shown(limit: QueueLimit) -> str:
    parts = []
    if limit.concurrent is not None:
        parts.append(f"concurrent={limit.concurrent}")
    if limit.rate is not None:
        parts.append(f"rate={limit.rate}/s")
    return " ".join(parts) or "unlimited"


async def _queue(args: argparse.Namespace, out: TextIO) -> int:
    words = list(args.words)
    url = words.pop(0) if words and words[0] not in VERBS else None
    url = url or os.environ.get(args.url_variable) or None
    if url is None:
        raise QueueUsage(
            "no store URL: give it first (durable queue sqlite:///orders.db limits) "
            f"or set {args.url_variable}"
        )
    if not words or words[0] not in VERBS:
        raise QueueUsage(f"durable queue: give one of {', '.join(VERBS)} after the URL")
    verb, rest = words[0], words[1:]
    if verb == "limits" and rest:
        raise QueueUsage(f"durable queue limits takes no queue, got {rest}")
    if verb == "limit":
        if len(rest) != 1:
            raise QueueUsage(f"durable queue limit takes one QUEUE, got {rest or 'none'}")
        given = args.concurrent is not None or args.rate is not None
        if args.clear == given:
            raise QueueUsage(
                "durable queue limit QUEUE needs --concurrent N and/or --rate N, or --clear"
            )
    async with durable.open(url) as store:
        scheduler = store.scheduler
        if not isinstance(scheduler, Limited):
            raise LimitsNotOffered(
                f"the store at {url} keeps no queue limits (no 'limits' capability; "
                "durable stores lists what each store offers)"
            )
        if verb == "limits":
            found = await scheduler.limits()
            held = {queue: await scheduler.held(queue) for queue in found}
            if args.json:
                rows = [
                    {"queue": q, "concurrent": lim.concurrent, "rate": lim.rate, "held": held[q]}
                    for q, lim in found.items()
                ]
                out.write(json.dumps(rows, indent=2) + "\n")
            else:
                out.writelines(f"{q}  {_shown(lim)}  held={held[q]}\n" for q, lim in found.items())
            return 0
        queue = rest[0]
        if args.clear:
            await scheduler.set_limit(queue, None)
            out.write(f"queue {queue}: no limit\n")
        else:
            limit = QueueLimit(args.concurrent, args.rate)
            await scheduler.set_limit(queue, limit)
            out.write(f"queue {queue}: {_shown(limit)}\n")
    return 0
