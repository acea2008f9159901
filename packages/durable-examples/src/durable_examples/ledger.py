"""The demo's books: what the gateway and the stock say happened, and the checks on them.

The demo does not trust the workflow's own records to prove the workflow right. It reads
the two places effects land, the gateway's ledger file and the stock in the store, and
checks them against the orders: every order reserved its stock exactly once (and released
it exactly once if it was compensated), every line was captured under exactly one
idempotency key, every paid order was paid out once and refunded never, every compensated
order refunded exactly what it captured and was paid out never, and nothing else moved.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from durable_examples.gateway import Operation
from durable_examples.orders import Order
from durable_examples.service import capture_key, refund_key
from durable_examples.stock import StockLedger

__all__ = ["Books", "audit", "render"]


@dataclass(frozen=True, slots=True)
class Books:
    """Everything the audit reads, gathered once."""

    orders: Sequence[Order]
    outcomes: Mapping[str, Mapping[str, object] | None]
    stock: StockLedger
    operations: Sequence[Operation]


def _by_key(books: Books) -> dict[str, Operation]:
    return {op.key: op for op in books.operations}


def _audit_order(order: Order, expected: str, books: Books) -> list[str]:
    failures: list[str] = []
    wid = order.id
    outcome = books.outcomes.get(wid)
    status = None if outcome is None else outcome.get("status")
    if status != expected:
        failures.append(f"{wid}: expected to end {expected}, but its outcome is {outcome!r}")

    reserve = [(line.sku, line.quantity) for line in order.lines]
    release = [(sku, -quantity) for sku, quantity in reserve]
    moves = books.stock.moves.get(wid, [])
    wanted = reserve + (release if expected == "compensated" else [])
    if moves != wanted:
        failures.append(
            f"{wid}: stock should have moved {wanted} (once), but the store holds {moves}"
        )

    ops = _by_key(books)
    mine = [op for op in books.operations if op.key.startswith(f"{wid}:")]
    captured = 0
    for line in order.lines:
        op = ops.get(capture_key(wid, line.id))
        if op is None or op.kind != "capture" or op.amount != line.amount:
            failures.append(f"{wid}: line {line.id} should be one capture of {line.amount}: {op}")
        elif op.status == "captured":
            captured += op.amount
    payouts = [op for op in mine if op.kind == "payout"]
    refunds = [op for op in mine if op.kind == "refund" and op.status == "refunded"]
    refunded = sum(op.amount for op in refunds)
    if expected == "paid":
        if [(op.amount, op.status) for op in payouts] != [(order.total, "paid")]:
            failures.append(f"{wid}: should be paid out {order.total} once: {payouts}")
        if refunds:
            failures.append(f"{wid}: a paid order must not be refunded: {refunds}")
        if captured != order.total:
            failures.append(f"{wid}: captured {captured}, but the order totals {order.total}")
    else:
        if payouts:
            failures.append(f"{wid}: a compensated order must not be paid out: {payouts}")
        if refunded != captured:
            failures.append(f"{wid}: captured {captured} but refunded {refunded}")
    known = {capture_key(wid, line.id) for line in order.lines} | {f"{wid}:payout"}
    known |= {refund_key(wid, line.id) for line in order.lines}
    stray = [op.key for op in mine if op.key not in known]
    if stray:
        failures.append(f"{wid}: the gateway holds operations no step makes: {stray}")
    return failures


def audit(books: Books, expected: Mapping[str, str]) -> list[str]:
    """Every way the books disagree with the orders (empty when they agree).

    ``expected`` is each order's intended end: ``paid`` or ``compensated``.
    """
    failures: list[str] = []
    for order in books.orders:
        failures += _audit_order(order, expected[order.id], books)
    net: dict[str, int] = {}
    for moves in books.stock.moves.values():
        for sku, quantity in moves:
            net[sku] = net.get(sku, 0) + quantity
    counters = {sku: units for sku, units in books.stock.reserved.items() if units}
    if counters != {sku: units for sku, units in net.items() if units}:
        failures.append(
            f"stock: the reserved counters {counters} do not add up to the movements {net}"
        )
    ids = {order.id for order in books.orders}
    foreign = [op.key for op in books.operations if op.key.split(":", 1)[0] not in ids]
    if foreign:
        failures.append(f"gateway: operations for no known order: {foreign}")
    return failures


def render(books: Books) -> list[str]:
    """The ledger as lines of text: per order, what the gateway and the stock hold."""
    lines: list[str] = []
    ops = _by_key(books)
    for order in books.orders:
        wid = order.id
        outcome = books.outcomes.get(wid) or {}
        lines.append(
            f"{wid}  total {order.total:>5}  card {order.card:<14} "
            f"-> {outcome.get('status', 'unfinished')}"
        )
        for line in order.lines:
            op = ops.get(capture_key(wid, line.id))
            shown = "not captured" if op is None else f"{op.status} {op.amount}"
            calls = "" if op is None else f"  ({_times(op.calls)} asked, decided once)"
            lines.append(
                f"    capture {line.id:<3} {line.quantity} x {line.sku:<6} {shown:<16}{calls}"
            )
        for op in books.operations:
            if op.key.startswith(f"{wid}:") and op.kind != "capture":
                asked = _times(op.calls)
                lines.append(f"    {op.kind:<11} {op.status} {op.amount}  ({asked} asked)")
        moves = books.stock.moves.get(wid, [])
        lines.append(f"    stock moves {', '.join(f'{s} {q:+d}' for s, q in moves) or 'none'}")
    reserved = ", ".join(f"{sku} {units}" for sku, units in books.stock.reserved.items())
    lines.append(f"stock reserved now: {reserved or 'nothing'}")
    return lines


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"
