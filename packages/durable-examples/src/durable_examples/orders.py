"""Orders and the parsers that prove what the store hands back.

An order arrives as a JSON message in the workflow's inbox (``Durable.send``). Everything
the workflow reads back from the store goes through a parser here, because a step returns
what the store holds rather than the object its effect produced: a parser is the proof that
the shape is the one the code expects, on the pass that ran the step and on every replay.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Capture",
    "Line",
    "Order",
    "Payment",
    "as_capture",
    "as_decision",
    "as_mapping",
    "as_order",
    "as_payment",
]


@dataclass(frozen=True, slots=True)
class Line:
    """One line item. ``id`` is the line's identity within its order: the capture step and
    the gateway's idempotency key are named after it, never after its position."""

    id: str
    sku: str
    quantity: int
    price: int

    @property
    def amount(self) -> int:
        return self.quantity * self.price

    def message(self) -> dict[str, object]:
        return {"id": self.id, "sku": self.sku, "quantity": self.quantity, "price": self.price}


@dataclass(frozen=True, slots=True)
class Order:
    """What a customer submitted: the lines, and the card to capture them on."""

    id: str
    card: str
    lines: tuple[Line, ...]

    @property
    def total(self) -> int:
        return sum(line.amount for line in self.lines)

    def message(self) -> dict[str, object]:
        """The inbox message that submits this order (what ``as_order`` reads back)."""
        return {"id": self.id, "card": self.card, "lines": [ln.message() for ln in self.lines]}


@dataclass(frozen=True, slots=True)
class Capture:
    """The gateway's answer to capturing one line, as the capture step recorded it."""

    line: str
    status: str
    amount: int
    reference: str

    @property
    def captured(self) -> bool:
        return self.status == "captured"


def _text(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise TypeError(f"{what} must be non-empty text, got {value!r}")
    return value


def _whole(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise TypeError(f"{what} must be a positive whole number, got {value!r}")
    return value


def _mapping(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"{what} must be a JSON object, got {value!r}")
    return value


def as_order(value: object) -> Order:
    """The parser for an order message. Line ids must be unique within the order, since
    each names a step: two lines called ``L1`` would be one capture, not two."""
    message = _mapping(value, "an order")
    lines_value = message.get("lines")
    if not isinstance(lines_value, list) or not lines_value:
        raise TypeError(f"an order needs a non-empty list of lines, got {lines_value!r}")
    lines: list[Line] = []
    for raw in lines_value:
        item = _mapping(raw, "a line")
        lines.append(
            Line(
                id=_text(item.get("id"), "a line's id"),
                sku=_text(item.get("sku"), "a line's sku"),
                quantity=_whole(item.get("quantity"), "a line's quantity"),
                price=_whole(item.get("price"), "a line's price"),
            )
        )
    ids = [line.id for line in lines]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ValueError(f"line ids must be unique within an order; repeated: {repeated}")
    return Order(
        id=_text(message.get("id"), "an order's id"),
        card=_text(message.get("card"), "an order's card"),
        lines=tuple(lines),
    )


def as_capture(value: object) -> Capture:
    """The parser for a capture step's record."""
    answer = _mapping(value, "a capture")
    status = _text(answer.get("status"), "a capture's status")
    if status not in ("captured", "declined"):
        raise ValueError(f"a capture is captured or declined, got {status!r}")
    amount = answer.get("amount")
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise TypeError(f"a capture's amount must be a whole number, got {amount!r}")
    return Capture(
        line=_text(answer.get("line"), "a capture's line"),
        status=status,
        amount=amount,
        reference=_text(answer.get("reference"), "a capture's reference"),
    )


@dataclass(frozen=True, slots=True)
class Payment:
    """The gateway's answer to a refund or a payout, as its step recorded it."""

    status: str
    amount: int
    reference: str


def as_payment(value: object) -> Payment:
    """The parser for a refund's or a payout's record."""
    answer = _mapping(value, "a gateway answer")
    amount = answer.get("amount")
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise TypeError(f"a gateway answer's amount must be a whole number, got {amount!r}")
    return Payment(
        status=_text(answer.get("status"), "a gateway answer's status"),
        amount=amount,
        reference=_text(answer.get("reference"), "a gateway answer's reference"),
    )


def as_decision(value: object) -> bool:
    """The parser for the approval a person supplies (``durable arrive ... approval true``).

    Only a parser can establish its shape: another process wrote it, so there is nothing
    to compare it with. A bare ``true``/``false`` or ``{"approved": true, ...}``.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, dict) and isinstance(value.get("approved"), bool):
        return bool(value["approved"])
    raise TypeError(f"an approval is true, false or {{'approved': bool}}, got {value!r}")


def as_mapping(value: object) -> dict[str, object]:
    """The parser for a record that is a JSON object of anything."""
    return dict(_mapping(value, "the record"))
