"""The order-payout workflow: every kind of step durable has, in one service.

Read :func:`payout` from the top; each step says what guarantee it relies on.

0. The order is the workflow's input: ``start(kinds["payout"], order.id, order.message())``
   parses it with ``as_order`` before anything is written, records it with the kind, and
   hands the parsed order to every pass (:func:`payout_workflows` registers the kind).
1. Or, for an order submitted as a message (``Durable.send``, as the previous release's
   demo did): ``receive`` it from the workflow's inbox. That is the ``payout-message``
   kind, the registry's default, so a workflow with no recorded kind runs as it.
2. ``transact`` the stock reservation: the store performs it in the commit that records
   it, so stock moves exactly once however often the pass is repeated.
3. Fan out one ``step`` per line item to capture it at the payment gateway. The lines come
   from the data, so the steps are keyed by the line's id (``capture:L2``), never by a
   counter: a key is a step's identity across passes, and the gateway's idempotency key
   is built from the same id, so a capture repeated after a crash moves no money. Each
   capture also declares a reconcile probe (the gateway's "look up by idempotency key"):
   a pass that finds a capture begun and never recorded asks the gateway first, and
   records what it holds instead of charging again; and each is fenced by the pass's
   token, so a stalled pass that lost the order cannot charge after the new one did.
4. ``sleep`` through the settlement window (the deadline is recorded, so a restart does
   not push it back).
5. Above the approval threshold, ``awaiting`` a person's decision, which arrives from
   outside the pass (``durable arrive URL ORDER approval true``).
6. Pay the merchant out (another gateway step behind its own idempotency key), then run the
   fulfilment graph (``run_durably``), then record the outcome.

If a capture is declined, or the approval is refused, the saga compensates: it refunds
every line that was captured and releases the stock, each as a recorded step of its own.
It does not compensate when the pass is fenced; see the ``except`` in :func:`payout`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from durable import RetryPolicy, Workflows
from durable.interfaces import Checkpointer
from durable.parsers import as_is
from durable.run import Run, StepContext

from durable_examples.fulfilment import fulfil
from durable_examples.gate import Gate
from durable_examples.gateway import Gateway
from durable_examples.orders import (
    Capture,
    Line,
    Order,
    as_capture,
    as_decision,
    as_mapping,
    as_order,
    as_payment,
)
from durable_examples.stock import Stock, as_movement

__all__ = [
    "APPROVAL_THRESHOLD",
    "BY_MESSAGE",
    "KIND",
    "POLICY",
    "SETTLEMENT",
    "ApprovalRefused",
    "CaptureDeclined",
    "OrderFailed",
    "capture_key",
    "payout",
    "payout_workflows",
    "refund_key",
]

log = logging.getLogger("durable_examples.service")

E = TypeVar("E")

APPROVAL_THRESHOLD = 1_000
"""Orders above this total wait for a person's approval before they are paid out."""

SETTLEMENT = timedelta(seconds=2)
"""How long captured funds settle before the payout (short, so the demo is quick)."""

KIND = "payout"
"""The kind an order is started as, with the order as its input."""

BY_MESSAGE = "payout-message"
"""The kind that receives its order from the inbox; the registry's default."""

POLICY = RetryPolicy(max_attempts=5, initial=timedelta(milliseconds=500))
"""A pass that raises (the gateway unreachable, a store error inside a step) is tried five
times, from half a second apart, then the order is failed and ``durable list --status
failed`` shows it. A declined card or a refused approval is not a raise: the saga
compensates and the workflow finishes, with ``"status": "compensated"``."""

Body = Callable[[Run[E]], Awaitable[dict[str, object]]]
Process = Callable[[Run[E], Order], Awaitable[dict[str, object]]]


class OrderFailed(Exception):
    """The order cannot go through, for a business reason: what the saga compensates for."""


class CaptureDeclined(OrderFailed):
    def __init__(self, order: str, declined: Sequence[Capture]) -> None:
        self.declined = tuple(declined)
        lines = ", ".join(f"{c.line} ({c.reference})" for c in declined)
        super().__init__(f"order {order!r}: the gateway declined {lines}")


class ApprovalRefused(OrderFailed):
    def __init__(self, order: str, total: int) -> None:
        super().__init__(f"order {order!r}: the payout of {total} was not approved")


def capture_key(workflow: str, line: str) -> str:
    """The gateway idempotency key for capturing the line with id ``line``: the workflow and
    the line's own id, so the same line is the same charge on every pass, and only it is."""
    return f"{workflow}:capture:{line}"


def refund_key(workflow: str, line: str) -> str:
    """The gateway idempotency key for refunding the line with id ``line``."""
    return f"{workflow}:refund:{line}"


def payout_workflows(
    stock: Stock[E],
    gateway: Gateway,
    checkpointer: Checkpointer[Any],
    *,
    threshold: int = APPROVAL_THRESHOLD,
    settlement: timedelta = SETTLEMENT,
    gate: Gate | None = None,
    liveness: timedelta | None = None,
    policy: RetryPolicy = POLICY,
) -> Workflows:
    """The registry a payout worker serves: ``payout`` (the order is the input, parsed by
    ``as_order`` at ``start``) and ``payout-message`` (the order arrives in the inbox), the
    default for a workflow with no recorded kind. The arguments are :func:`payout`'s."""
    process = _process(
        stock,
        gateway,
        checkpointer,
        threshold=threshold,
        settlement=settlement,
        gate=gate,
        liveness=liveness,
    )

    async def by_message(run: Run[E], _: object) -> dict[str, object]:
        return await process(run, await run.receive("order", as_order))

    workflows = Workflows(default=BY_MESSAGE)
    workflows.kind(KIND, input=as_order, policy=policy)(process)
    workflows.kind(BY_MESSAGE, input=as_is, policy=policy)(by_message)
    return workflows


def payout(
    stock: Stock[E],
    gateway: Gateway,
    checkpointer: Checkpointer[Any],
    *,
    threshold: int = APPROVAL_THRESHOLD,
    settlement: timedelta = SETTLEMENT,
    gate: Gate | None = None,
    liveness: timedelta | None = None,
) -> Body[E]:
    """The body of an order submitted as a message: ``receive`` it, then process it. For
    ``resume`` and a bare-body worker; :func:`payout_workflows` registers it as a kind."""
    process = _process(
        stock,
        gateway,
        checkpointer,
        threshold=threshold,
        settlement=settlement,
        gate=gate,
        liveness=liveness,
    )

    async def body(run: Run[E]) -> dict[str, object]:
        return await process(run, await run.receive("order", as_order))

    return body


def _process(
    stock: Stock[E],
    gateway: Gateway,
    checkpointer: Checkpointer[Any],
    *,
    threshold: int,
    settlement: timedelta,
    gate: Gate | None,
    liveness: timedelta | None,
) -> Process[E]:
    """The workflow body, given its order, closed over what it talks to.

    ``stock`` makes the reservation effects in the store's own language, so the body is the
    same on every store; ``checkpointer`` is where the fulfilment graph records its nodes;
    ``gate`` (demo only) holds one capture so a worker can be killed inside it;
    ``liveness`` is the graph's claim window.
    """

    async def capture(run: Run[E], order: Order, line: Line) -> Capture:
        key = capture_key(run.workflow, line.id)

        async def charge(context: StepContext) -> object:
            # Fenced by the order and this pass's token: a pass that stalled past its
            # liveness and wakes after a newer one took the order over is refused here.
            fence = (run.workflow, context.fencing_token)
            answer = await gateway.capture(key, line.amount, order.card, fence=fence)
            if gate is not None:
                # The money has moved and the record has not landed: the crash that makes an
                # idempotency key necessary, held open for the demo to kill the worker in.
                await gate.passing(run.workflow, f"capture:{line.id}")
            return {"line": line.id, **answer}

        async def look_up(context: StepContext) -> object:
            # Asked by a later pass that finds this capture begun and never recorded (the
            # worker died in between): if the gateway holds it, that is the step's value,
            # and the card is not asked again.
            found = await gateway.look_up(key)
            if found is None:
                return None
            log.info(
                "%s: reconciled: the gateway already holds charge %s",
                run.workflow,
                found["reference"],
            )
            return {"line": line.id, **found}

        return await run.step(
            f"capture:{line.id}", charge, as_capture, reconcile=look_up, context=True
        )

    async def compensate(
        run: Run[E], order: Order, captures: Sequence[Capture], failure: OrderFailed
    ) -> dict[str, object]:
        captured = [c for c in captures if c.captured]
        refunds = await asyncio.gather(
            *(
                run.step(
                    f"refund:{c.line}",
                    lambda c=c: gateway.refund(
                        refund_key(run.workflow, c.line), capture_key(run.workflow, c.line)
                    ),
                    as_payment,
                )
                for c in captured
            )
        )
        await run.transact("stock:release", stock.release(run.workflow, order.lines), as_movement)
        return await run.step(
            "outcome",
            lambda: {
                "status": "compensated",
                "reason": str(failure),
                "refunded": sum(refund.amount for refund in refunds),
            },
            as_mapping,
        )

    async def body(run: Run[E], order: Order) -> dict[str, object]:
        await run.transact("stock:reserve", stock.reserve(run.workflow, order.lines), as_movement)
        captures: list[Capture] = []
        try:
            captures = list(await asyncio.gather(*(capture(run, order, ln) for ln in order.lines)))
            declined = [c for c in captures if not c.captured]
            if declined:
                raise CaptureDeclined(run.workflow, declined)
            await run.sleep("settlement", settlement)
            if order.total > threshold:
                await run.step(
                    "approval:requested",
                    lambda: {"total": order.total, "threshold": threshold},
                    as_mapping,
                )
                if not await run.awaiting("approval", as_decision):
                    raise ApprovalRefused(run.workflow, order.total)
            paid = await run.step(
                "payout",
                lambda: gateway.payout(f"{run.workflow}:payout", order.total),
                as_payment,
            )
        except OrderFailed as failure:
            # Only a business failure is compensated. Losing the workflow is not the workflow
            # failing: Fenced (a newer pass holds this order and is advancing it right now),
            # Contended and Suspended (a sleep or an await was reached) are BaseExceptions,
            # so they pass even an `except Exception` and reach the driver untouched. A
            # fenced loser that refunded would refund captures the winner is building on.
            # (Nor is a store error compensated: the worker retries the pass instead.)
            log.info("%s; compensating", failure)
            return await compensate(run, order, captures, failure)
        fulfilled = await run.step(
            "fulfilment", lambda: fulfil(checkpointer, order, liveness=liveness), as_mapping
        )
        return await run.step(
            "outcome",
            lambda: {
                "status": "paid",
                "total": order.total,
                "payout": paid.reference,
                "dispatch": fulfilled["dispatch"],
            },
            as_mapping,
        )

    return body
