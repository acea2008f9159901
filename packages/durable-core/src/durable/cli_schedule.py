"""``durable schedule URL create|list|pause|resume|delete``: the schedules of a store.

Its own module so that the command's code sits beside nothing else; ``durable.cli`` only
registers it (:func:`register`) and maps its errors to exit codes.
"""

from __future__ import annotations

import argparse
import json
import os
from datetime import timedelta
from typing import Any, TextIO

import durable
from durable.schedules import Missed, Schedule, Schedules

__all__ = ["VERBS", "ScheduleUsage", "register"]

VERBS = ("create", "list", "pause", "resume", "delete")


class ScheduleUsage(ValueError):
    """A schedule command given the wrong words (a ``ValueError``: exit 2)."""


def register(commands: Any, url_variable: str) -> None:
    """Add ``schedule`` to the CLI's ``commands``."""
    command = commands.add_parser(
        "schedule",
        help="create, list, pause, resume and delete schedules",
        description="durable schedule [URL] create NAME --kind KIND (--cron EXPR | --every S) "
        "[--input JSON] [--zone ZONE] [--missed skip|once|each]; durable schedule [URL] list "
        "[--json]; durable schedule [URL] pause|resume|delete NAME. Workers start the ticks "
        "(docs/schedules.md).",
    )
    command.add_argument(
        "words",
        nargs="*",
        metavar="[URL] VERB [NAME]",
        help=f"the store (default: ${url_variable}), one of {', '.join(VERBS)}, and the name",
    )
    command.add_argument("--kind", metavar="KIND", help="create: the kind each tick starts")
    command.add_argument("--cron", metavar="EXPR", help="create: a cron expression")
    command.add_argument(
        "--every", type=float, metavar="S", help="create: an interval in whole seconds"
    )
    command.add_argument("--input", metavar="JSON", help="create: each tick's input (JSON)")
    command.add_argument("--zone", default="UTC", help="create: the cron's time zone (UTC)")
    command.add_argument(
        "--missed",
        choices=[m.value for m in Missed],
        default=Missed.SKIP.value,
        help="create: ticks missed while no worker ran (default skip)",
    )
    command.add_argument("--json", action="store_true", help="list: as JSON")
    command.set_defaults(run=_schedule, url=None, url_variable=url_variable)


def _line(schedule: Schedule) -> str:
    timing = (
        f"cron {schedule.cron!r} in {schedule.zone}"
        if schedule.cron is not None
        else f"every {schedule.every.total_seconds():g}s"
        if schedule.every is not None
        else "?"
    )
    state = "paused" if schedule.paused else "active"
    return (
        f"{schedule.name}  {state}  {schedule.kind}  {timing}  missed={schedule.missed.value}"
        f"  input={json.dumps(schedule.input)}"
    )


def _as_json(schedule: Schedule) -> dict[str, object]:
    return {
        "name": schedule.name,
        "kind": schedule.kind,
        "input": schedule.input,
        "cron": schedule.cron,
        "every": None if schedule.every is None else schedule.every.total_seconds(),
        "zone": schedule.zone,
        "missed": schedule.missed.value,
        "paused": schedule.paused,
        "created_at": schedule.created_at.isoformat(),
        "since": schedule.since.isoformat(),
    }


async def _schedule(args: argparse.Namespace, out: TextIO) -> int:
    words = list(args.words)
    url = words.pop(0) if words and words[0] not in VERBS else None
    url = url or os.environ.get(args.url_variable) or None
    if url is None:
        raise ScheduleUsage(
            "no store URL: give it first (durable schedule sqlite:///orders.db list) "
            f"or set {args.url_variable}"
        )
    if not words or words[0] not in VERBS:
        raise ScheduleUsage(f"durable schedule: give one of {', '.join(VERBS)} after the URL")
    verb, rest = words[0], words[1:]
    if verb == "list":
        if rest:
            raise ScheduleUsage(f"durable schedule list takes no name, got {rest}")
    elif len(rest) != 1:
        raise ScheduleUsage(f"durable schedule {verb} takes one NAME, got {rest or 'none'}")
    async with durable.open(url) as store:
        schedules = Schedules(store)
        if verb == "list":
            found = await schedules.list()
            if args.json:
                out.write(json.dumps([_as_json(s) for s in found], indent=2) + "\n")
            else:
                out.writelines(_line(s) + "\n" for s in found)
            return 0
        name = rest[0]
        if verb == "create":
            if args.kind is None:
                raise ScheduleUsage("durable schedule create needs --kind KIND")
            try:
                value = None if args.input is None else json.loads(args.input)
            except json.JSONDecodeError as error:
                raise ScheduleUsage(
                    f"--input is not valid JSON ({error.msg}): {args.input!r}"
                ) from None
            made = await schedules.create(
                name,
                args.kind,
                cron=args.cron,
                every=None if args.every is None else timedelta(seconds=args.every),
                input=value,
                zone=args.zone,
                missed=args.missed,
            )
            out.write(f"created {_line(made)}\n")
        elif verb == "pause":
            out.write(f"paused {_line(await schedules.pause(name))}\n")
        elif verb == "resume":
            out.write(f"resumed {_line(await schedules.resume(name))}\n")
        else:
            await schedules.delete(name)
            out.write(f"deleted {name}\n")
    return 0
