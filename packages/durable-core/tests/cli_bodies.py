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
from datetime import timedelta
from typing import Any

from durable.run import Run

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
