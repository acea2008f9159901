"""Orders shipped from several warehouses, and the nightly settlement (child workflows and
schedules, ``docs/children.md`` and ``docs/schedules.md``).

An order's lines name the warehouse that holds each item. The ``ship-order`` workflow starts
one ``fulfil`` child per warehouse (``Run.start_child``), each with its own retries and its
own status, and waits for all of them at once (``Run.gather``): while they run the order is
blocked, holds no claim, and is woken as each child's outcome lands. A warehouse that cannot
fulfil fails its child, and the order sees a ``ChildFailed`` carrying the child's failure.

Every night at 02:00 Berlin time the ``nightly-settlement`` schedule starts a ``settle``
workflow (``nightly_settlement``), one per tick however many workers run.

An order is paid by a ``charge`` workflow in the ``payments`` queue, which the payment
provider lets take at most five charges at once (``docs/queues.md``, "Per-queue limits"):
``limit_payments`` keeps that limit in the store, so twenty workers between them still run
five charges at a time, and a worker killed mid-charge gives its slot back when its
liveness runs out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from durable import ChildFailed, RetryPolicy, Workflows
from durable.interfaces import Durable, Limited, LimitsNotOffered, QueueLimit
from durable.run import Run
from durable.schedules import Schedule, Schedules

__all__ = [
    "NIGHTLY",
    "PAYMENTS",
    "PAYMENTS_LIMIT",
    "PaymentProvider",
    "as_parcel",
    "as_shipment",
    "charge",
    "fulfil",
    "limit_payments",
    "nightly_settlement",
    "provider",
    "settle",
    "ship_order",
    "warehouse_workflows",
]

NIGHTLY = "nightly-settlement"
"""The settlement schedule's name: its ticks are the workflows ``nightly-settlement@MOMENT``."""

#: A warehouse that has closed: a child sent there fails (to show ``ChildFailed``).
CLOSED = frozenset({"closed"})

workflows = Workflows()


def as_shipment(value: object) -> dict[str, Any]:
    """The parser of an order: ``{"id": str, "lines": [{"sku", "quantity", "warehouse"}]}``."""
    if not isinstance(value, dict) or not isinstance(value.get("id"), str):
        raise TypeError(f"an order is an object with an id, got {value!r}")
    lines = value.get("lines")
    if not isinstance(lines, list) or not lines:
        raise TypeError(f"an order needs a non-empty list of lines, got {lines!r}")
    for line in lines:
        if not (
            isinstance(line, dict)
            and isinstance(line.get("sku"), str)
            and isinstance(line.get("warehouse"), str)
            and isinstance(line.get("quantity"), int)
            and not isinstance(line.get("quantity"), bool)
            and line["quantity"] > 0
        ):
            raise TypeError(f"a line is {{sku, quantity, warehouse}}, got {line!r}")
    return value


def as_parcel(value: object) -> dict[str, Any]:
    """The parser of a ``fulfil`` child's outcome: ``{"warehouse", "parcel", "items"}``."""
    if not (
        isinstance(value, dict)
        and isinstance(value.get("warehouse"), str)
        and isinstance(value.get("parcel"), str)
        and isinstance(value.get("items"), int)
    ):
        raise TypeError(f"a parcel is {{warehouse, parcel, items}}, got {value!r}")
    return value


def _as_request(value: object) -> dict[str, Any]:
    if not (
        isinstance(value, dict)
        and isinstance(value.get("order"), str)
        and isinstance(value.get("warehouse"), str)
        and isinstance(value.get("lines"), list)
    ):
        raise TypeError(f"a fulfilment is {{order, warehouse, lines}}, got {value!r}")
    return value


@workflows.kind("fulfil", input=_as_request, policy=RetryPolicy(max_attempts=1))
async def fulfil(run: Run[Any], request: dict[str, Any]) -> dict[str, Any]:
    """Pick and pack one warehouse's lines of an order into one parcel."""
    warehouse = request["warehouse"]
    if warehouse in CLOSED:
        raise RuntimeError(f"warehouse {warehouse!r} is closed")
    items = sum(int(line["quantity"]) for line in request["lines"])

    def pack() -> dict[str, Any]:
        return {"warehouse": warehouse, "parcel": f"{request['order']}-{warehouse}", "items": items}

    return await run.step("pack", pack, as_parcel)


@workflows.kind("ship-order", input=as_shipment)
async def ship_order(run: Run[Any], order: Mapping[str, Any]) -> dict[str, Any]:
    """One ``fulfil`` child per warehouse (id ``<order>/fulfil-<warehouse>``), gathered."""
    by_warehouse: dict[str, list[dict[str, Any]]] = {}
    for line in order["lines"]:
        by_warehouse.setdefault(line["warehouse"], []).append(line)
    handles = [
        await run.start_child(
            fulfil,
            f"fulfil-{warehouse}",
            {"order": order["id"], "warehouse": warehouse, "lines": lines},
        )
        for warehouse, lines in sorted(by_warehouse.items())
    ]
    try:
        parcels = await run.gather(*handles, parse=as_parcel)
    except ChildFailed as failed:
        return {"order": order["id"], "failed": failed.child, "why": failed.failure.message}
    return {"order": order["id"], "parcels": [p["parcel"] for p in parcels]}


@workflows.kind("settle")
async def settle(run: Run[Any], ledger: object) -> dict[str, Any]:
    """Settle ``ledger`` for the night: the tick's id names the night it settles."""
    return await run.step(
        "settle",
        lambda: {"ledger": ledger, "tick": run.workflow},
        _as_settlement,
    )


def _as_settlement(value: object) -> dict[str, Any]:
    if not isinstance(value, dict) or not isinstance(value.get("tick"), str):
        raise TypeError(f"a settlement is {{ledger, tick}}, got {value!r}")
    return value


PAYMENTS = "payments"
"""The queue of ``charge``: the one the payment provider's limit applies to."""

PAYMENTS_LIMIT = QueueLimit(concurrent=5)
"""The provider takes at most five charges at once, across every worker of the service."""


class PaymentProvider:
    """A stand-in for the provider's API: each charge takes a moment, and it counts how
    many were in flight at once (the number its rate-limited API would refuse above 5)."""

    def __init__(self, seconds: float = 0.05) -> None:
        self.seconds = seconds
        self.in_flight = 0
        self.highest = 0
        self.charged: list[str] = []

    async def charge(self, order: str, amount: int) -> dict[str, Any]:
        self.in_flight += 1
        self.highest = max(self.highest, self.in_flight)
        try:
            await asyncio.sleep(self.seconds)
        finally:
            self.in_flight -= 1
        self.charged.append(order)
        return {"order": order, "amount": amount, "charge": f"ch-{order}"}


provider = PaymentProvider()
"""The provider this module's ``charge`` calls (a test swaps in its own)."""


def _as_payment(value: object) -> dict[str, Any]:
    if not (
        isinstance(value, dict)
        and isinstance(value.get("order"), str)
        and isinstance(value.get("amount"), int)
        and not isinstance(value.get("amount"), bool)
    ):
        raise TypeError(f"a payment is {{order: str, amount: int}}, got {value!r}")
    return value


def _as_receipt(value: object) -> dict[str, Any]:
    if not isinstance(value, dict) or not isinstance(value.get("charge"), str):
        raise TypeError(f"a receipt is {{order, amount, charge}}, got {value!r}")
    return value


@workflows.kind("charge", input=_as_payment, queue=PAYMENTS, policy=RetryPolicy(max_attempts=3))
async def charge(run: Run[Any], payment: dict[str, Any]) -> dict[str, Any]:
    """Charge one order through the provider (at most five of these run at once, whatever
    the number of workers: the queue's limit is kept and counted in the store)."""
    return await run.step(
        "charge", lambda: provider.charge(payment["order"], payment["amount"]), _as_receipt
    )


async def limit_payments(durable: Durable[Any]) -> QueueLimit:
    """Keep :data:`PAYMENTS_LIMIT` on the payments queue, in the store: every worker on it
    obeys at its next take, with no restart. Setting it again as it is changes nothing, so
    a deploy may call this on every start (or an operator runs ``durable queue URL limit
    payments --concurrent 5``)."""
    scheduler = durable.scheduler
    if not isinstance(scheduler, Limited):
        raise LimitsNotOffered(
            f"the store {durable!r} keeps no queue limits, so the payments queue cannot be "
            "held to five charges at once: use a store with the 'limits' capability"
        )
    await scheduler.set_limit(PAYMENTS, PAYMENTS_LIMIT)
    return PAYMENTS_LIMIT


def warehouse_workflows() -> Workflows:
    """The registry a worker serves: ``ship-order``, ``fulfil``, ``settle`` and ``charge``."""
    return workflows


async def nightly_settlement(
    durable: Durable[Any],
    *,
    ledger: str = "eu",
    every: timedelta | None = None,
    schedules: Schedules | None = None,
) -> Schedule:
    """Create (or keep, if it is already so) the nightly settlement: ``settle`` on
    ``ledger`` at 02:00 in Berlin, or every ``every`` (a test's short interval). Creating it
    again as it is writes nothing, so a deploy may call this on every start."""
    schedules = schedules if schedules is not None else Schedules(durable)
    if every is not None:
        return await schedules.create(NIGHTLY, settle, every=every, input=ledger)
    return await schedules.create(
        NIGHTLY, settle, cron="0 2 * * *", zone="Europe/Berlin", input=ledger, missed="once"
    )
