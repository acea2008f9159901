"""An order-payout workflow: a step, a settlement sleep, an approval, an inbox message.

The workflow takes its order from its inbox (``Durable.send`` put it there), charges the
card behind an idempotency key (the gateway is outside every store, so the step is
at-least-once and the key makes a repeat harmless), waits out a settlement window, asks a
person to approve large orders, and pays out.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from durable.run import Run

log = logging.getLogger("durable_examples.payout")

APPROVAL_THRESHOLD = 1_000
SETTLEMENT = timedelta(seconds=2)


@dataclass
class Gateway:
    """A stand-in for a payment provider that honours idempotency keys, as real ones do."""

    charges: dict[str, int] = field(default_factory=dict)
    calls: int = 0

    def charge(self, idempotency_key: str, amount: int) -> str:
        self.calls += 1
        self.charges.setdefault(idempotency_key, amount)
        return f"ch_{idempotency_key}"


def as_order(value: object) -> dict[str, Any]:
    """The parser for an order message: a mapping with an id and a whole amount."""
    if not isinstance(value, dict) or not isinstance(value.get("amount"), int):
        raise ValueError(f"an order is a mapping with an integer amount, got {value!r}")
    return value


def as_text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text, got {value!r}")
    return value


def as_flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {value!r}")
    return value


def payout(gateway: Gateway, settlement: timedelta = SETTLEMENT) -> Any:
    """The workflow body, closed over the gateway it charges."""

    async def body(run: Run[Any]) -> str:
        order = await run.receive("order", as_order)
        charge = await run.step(
            "charge",
            lambda: gateway.charge(f"{run.workflow}-charge", order["amount"]),
            as_text,
        )
        await run.sleep("settlement", settlement)
        if order["amount"] > APPROVAL_THRESHOLD:
            if not await run.awaiting("approval", as_flag):
                return await run.step("refused", lambda: "refused", as_text)
        return await run.step("paid", lambda: f"paid {order['amount']} against {charge}", as_text)

    return body
