"""Workflow bodies for ``durable worker`` to run in the end-to-end tests (test_cli_stores.py).

A worker started as ``durable worker cli_bodies:greet`` imports this module by name, so the
tests put this folder on the worker's ``PYTHONPATH``. Each body is small and does one thing
a test can see in ``durable show``: finish, or sleep with a deadline the schedule reports.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
from datetime import timedelta
from typing import Any

from durable.policy import RetryPolicy
from durable.run import Run
from durable.workflows import Workflows

log = logging.getLogger("cli_bodies")

NAP = timedelta(hours=1)
"""Long enough that no test run outlives it: a napping workflow stays scheduled."""


def as_text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text, got {value!r}")
    return value


async def greet(run: Run[Any]) -> str:
    """Take one inbox message (a name) and finish with a greeting recorded as a step."""
    name = await run.receive("name", as_text)
    return await run.step("greeting", lambda: f"hello, {name}", as_text)


async def nap(run: Run[Any]) -> str:
    """Sleep for an hour: the worker answers the delivery with the sleep's deadline."""
    await run.sleep("nap", NAP)
    return "rested"


def as_pid(value: object) -> int:
    if not isinstance(value, int):
        raise TypeError(f"expected a process id, got {value!r}")
    return value


async def hold(run: Run[Any]) -> str:
    """Log that the pass is running, then hold the workflow for an hour: a pass still in
    flight when the worker is told to stop."""
    log.warning("holding %s", run.workflow)
    await asyncio.sleep(NAP.total_seconds())
    return "held"


async def outlive_first_taker(run: Run[Any]) -> str:
    """Hold the workflow while the first worker to take it is alive (its process id is the
    first step); any other worker's pass finishes it. So a second worker finishing it
    shows that the first one's delivery and claim were taken over."""
    taker = await run.step("first-taker", os.getpid, as_pid)
    if taker == os.getpid():
        log.warning("first taker %d holding %s", taker, run.workflow)
        await asyncio.sleep(NAP.total_seconds())
    return f"taken over from {taker}"


# Targets the worker must refuse before it opens its store: not async, or not of one Run.
NOT_CALLABLE = "a string"


def synchronous(run: Run[Any]) -> str:
    return "not awaited"


async def two_arguments(run: Run[Any], order: str) -> str:
    return order


async def no_arguments() -> str:
    return "no run"


# Targets it accepts: an async function with the Run bound last, and an object whose
# __call__ is an async function of a Run.
async def greet_as(greeting: str, run: Run[Any]) -> str:
    name = await run.receive("name", as_text)
    return await run.step("greeting", lambda: f"{greeting}, {name}", as_text)


greet_in_french = functools.partial(greet_as, "bonjour")


class Greeter:
    async def __call__(self, run: Run[Any]) -> str:
        return await greet(run)


greeter = Greeter()


# A registry of kinds, for `durable worker cli_bodies:workflows` and `durable start
# --workflows cli_bodies:workflows`.
workflows = Workflows()


def as_order(value: object) -> dict[str, int]:
    """An order is {"amount": a positive int}; anything else is refused at start."""
    if not isinstance(value, dict) or set(value) != {"amount"}:
        raise ValueError(f'an order is {{"amount": N}}, got {value!r}')
    amount = value["amount"]
    if isinstance(amount, bool) or not isinstance(amount, int) or amount <= 0:
        raise ValueError(f"an order's amount is a positive int, got {amount!r}")
    return {"amount": amount}


@workflows.kind("payout", input=as_order)
async def payout(run: Run[Any], order: dict[str, int]) -> dict[str, int]:
    """Pay an order out in one recorded step."""
    paid = await run.step("charge", lambda: order["amount"], as_pid)
    return {"paid": paid}


class Declined(Exception):
    """The card was declined: raised by every attempt of ``declined``."""


@workflows.kind(
    "declined",
    policy=RetryPolicy(max_attempts=2, initial=timedelta(milliseconds=50), jitter=0.0),
)
async def declined(run: Run[Any], _: object) -> str:
    raise Declined("card declined")


def as_path(value: object) -> str:
    if not isinstance(value, dict) or not isinstance(value.get("file"), str):
        raise ValueError(f'expected {{"file": PATH}}, got {value!r}')
    path: str = value["file"]
    return path


@workflows.kind("crash", input=as_path, policy=RetryPolicy(max_attempts=3))
async def crash(run: Run[Any], path: str) -> str:
    """A body whose every pass kills its own process, the way an out-of-memory kill or a
    segfault in an extension ends a worker: one line in ``path`` per pass run, then SIGKILL.
    Nothing in the process survives to report it, so only the attempt counted in the
    claim's own write can end the loop."""
    _append_line(path, f"pass by {os.getpid()}")
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


def _append_line(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as lines:
        lines.write(line + "\n")
        lines.flush()
        os.fsync(lines.fileno())


@workflows.kind("slow_charge")
async def slow_charge(run: Run[Any], _: object) -> str:
    """A step that stays in flight for an hour: what `durable show` names while it runs."""

    async def charging() -> str:
        log.warning("charging %s", run.workflow)
        await asyncio.sleep(NAP.total_seconds())
        return "charged"

    return await run.step("charge", charging, as_text)


# -- guard rails (issue 17): a kind that declares what it accepts from outside a pass, for
# `durable arrive/send --workflows cli_bodies:guarded` (and guards.arrive/send in Python).


def as_bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {value!r}")
    return value


guarded = Workflows()


@guarded.kind("approval", signals={"confirm": as_bool}, messages=as_text)
async def approval(run: Run[Any], _: object) -> str:
    """Wait for a yes or no under ``confirm``; the inbox takes notes (text)."""
    confirmed = await run.awaiting("confirm", as_bool)
    return "approved" if confirmed else "refused"
