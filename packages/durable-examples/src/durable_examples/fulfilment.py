"""Order fulfilment as a graph of named nodes, run with ``durable.graph.run_durably``.

Once an order is paid it is picked, packed, labelled and invoiced, and dispatched when both
the label and the invoice exist. That is a DAG rather than a sequence (labelling and
invoicing are independent, so they run at once), and ``run_durably`` records each node's
result under its name: a pass that dies after ``pack`` resumes at ``label`` and
``invoice``, with ``pick`` and ``pack`` handed back from the store.

No node names a parser, unlike ``Run.step``. ``run_durably`` holds both what a node
returned and what the store now has, so it checks that they agree and refuses, by name, a
node whose result would come back different (a tuple under ``JsonCodec``, for instance):
its dependents would otherwise see one value on this pass and another after a restart.
"""

from __future__ import annotations

import hashlib
from datetime import timedelta
from typing import Any

from durable.graph import Graph, run_durably
from durable.interfaces import Checkpointer

from durable_examples.orders import Order

__all__ = ["fulfil", "fulfilment_graph", "fulfilment_workflow"]


def fulfilment_workflow(order: str) -> str:
    """The id the graph runs under: a workflow of its own, beside the order's payout."""
    return f"{order}.fulfilment"


def _bin(sku: str) -> str:
    # A warehouse's bin for a sku: stable, so a replayed pick would agree anyway.
    return f"B{int(hashlib.sha1(sku.encode()).hexdigest()[:4], 16) % 90 + 10}"


def fulfilment_graph(order: Order) -> Graph:
    """The graph for one order. Node names are identifiers, because each dependency is
    handed to its dependents as a keyword argument named after it."""
    graph = Graph()

    @graph.node()
    async def pick() -> object:
        return [
            {"line": line.id, "sku": line.sku, "quantity": line.quantity, "bin": _bin(line.sku)}
            for line in order.lines
        ]

    @graph.node(after=["pick"])
    async def pack(pick: list[dict[str, Any]]) -> object:
        units = sum(int(item["quantity"]) for item in pick)
        return {"parcels": 1 + units // 10, "units": units}

    @graph.node(after=["pack"])
    async def label(pack: dict[str, Any]) -> object:
        # A carrier would be an external effect behind an idempotency key, like the gateway;
        # this stand-in derives the tracking number from the order, so a repeat agrees.
        return {"carrier": "parcel-co", "tracking": f"PC-{order.id}", "parcels": pack["parcels"]}

    @graph.node(after=["pick"])
    async def invoice(pick: list[dict[str, Any]]) -> object:
        return {"number": f"INV-{order.id}", "total": order.total, "lines": len(pick)}

    @graph.node(after=["label", "invoice"])
    async def dispatch(label: dict[str, Any], invoice: dict[str, Any]) -> object:
        return f"{invoice['number']} dispatched as {label['tracking']}"

    return graph


async def fulfil(
    checkpointer: Checkpointer[Any], order: Order, *, liveness: timedelta | None = None
) -> dict[str, object]:
    """Run (or resume) the order's fulfilment graph to the end; every node's result by name.

    ``liveness`` is the graph's own claim window: how soon a dead runner is noticed.
    """
    options: dict[str, Any] = {} if liveness is None else {"liveness": liveness}
    return await run_durably(
        checkpointer, fulfilment_workflow(order.id), fulfilment_graph(order), **options
    )
