"""Workflow bodies for ``durable worker`` to run in the end-to-end tests (test_cli_stores.py).

A worker started as ``durable worker cli_bodies:greet`` imports this module by name, so the
tests put this folder on the worker's ``PYTHONPATH``. Each body is small and does one thing
a test can see in ``durable show``: finish, or sleep with a deadline the schedule reports.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from durable.run import Run

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
