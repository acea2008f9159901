"""Registries for the deploy check's tests (``durable check``): the code in production, and
three candidates to deploy over its records. Every effect counts itself in ``EFFECTS``."""

from __future__ import annotations

from typing import Any

from durable.run import Run
from durable.workflows import Workflows

EFFECTS = {"ran": 0}


def as_text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text, got {value!r}")
    return value


def as_int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected a whole number, got {value!r}")
    return value


def charged() -> str:
    EFFECTS["ran"] += 1
    return "charged"


def _registry(charge_key: str, approval: Any) -> Workflows:
    registry = Workflows()

    @registry.kind("payout")
    async def payout(run: Run[Any], order: object) -> str:
        receipt = await run.step(charge_key, charged, as_text)
        approved = await run.awaiting("approval", approval)
        await run.step("ship", charged, as_text)
        return f"{receipt}, approved {approved}"

    return registry


production = _registry("charge", as_text)
"""What the records were written by."""

unchanged = _registry("charge", as_text)
"""The same code again."""

renamed = _registry("charge-card", as_text)
"""Step ``charge`` renamed ``charge-card``: it would charge again."""

stricter = _registry("charge", as_int)
"""The approval's parser now wants a number."""


def _reusing() -> Workflows:
    registry = Workflows()

    @registry.kind("payout")
    async def payout(run: Run[Any], order: object) -> str:
        receipt = await run.awaiting("charge", as_text)  # the charge's key, now awaited
        approved = await run.awaiting("approval", as_text)
        return f"{receipt}, approved {approved}"

    return registry


reused = _reusing()
"""Step ``charge`` is now an ``awaiting`` under the same key: it would read the charge's
receipt as the value awaited."""
