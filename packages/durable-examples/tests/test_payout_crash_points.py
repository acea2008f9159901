"""The payout workflow killed at every crash point, on every installed store.

``durable.testing.crash_points`` runs the order once to list the boundaries where a worker
can die, then once per boundary: killed there (its claim abandoned, left to lapse),
resumed by a fresh pass on a fresh handle, run to the end. After each, the books must be
right: the stock reservation (a ``transact``) moved exactly once, every gateway request
(a ``step`` behind an idempotency key) asked at most twice and decided once, each capture
(a step with a reconcile probe) asked exactly once, and the order paid. A deliberately
broken variant, loyalty points counted in a ``step`` rather than a ``transact``, is caught
and the report names its step.
"""

from __future__ import annotations

import functools
import itertools
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from durable.plugins import stores
from durable.run import Run
from durable.testing import Kit, Scenario, crash_points, open_kit
from durable_examples.gateway import Gateway
from durable_examples.orders import Line, Order
from durable_examples.service import payout
from durable_examples.stock import stock_for

SMALL = Order("order-7", "tok_visa", (Line("A7", "lamp", 2, 45), Line("Z1", "chair", 1, 60)))
STORES = [name for name in ("memory", "sqlite", "postgres", "redis") if name in stores()]


@pytest.fixture(params=STORES)
async def store(request: pytest.FixtureRequest) -> Any:
    """A factory of fresh kits of one store; skipped where the store cannot open here."""
    name = request.param
    try:
        async with open_kit(name):
            pass
    except Exception as error:  # a server that does not answer
        pytest.skip(f"the {name} store cannot open here: {type(error).__name__}: {error}")
    return functools.partial(open_kit, name)


def as_int(value: object) -> int:
    assert isinstance(value, int)
    return value


def payout_scenario(tmp_path: Path, *, points_in_a_step: bool = False) -> Any:
    numbers = itertools.count()

    async def setup(kit: Kit[Any]) -> Scenario:
        gateway = Gateway(tmp_path / f"gateway-{next(numbers)}.db")
        stock = stock_for(kit.durable)
        await stock.prepare()
        process = payout(stock, gateway, kit.durable.checkpointer, settlement=timedelta(days=2))
        points = {"awarded": 0}

        async def award() -> int:
            points["awarded"] += SMALL.total
            return points["awarded"]

        async def body(run: Run[Any]) -> dict[str, object]:
            if points_in_a_step:
                await run.step("loyalty:points", award, as_int)
            return await process(run)

        await kit.durable.send(SMALL.id, SMALL.message())

        async def invariant() -> None:
            ledger = await stock.ledger([SMALL.id])
            assert ledger.moves[SMALL.id] == [("lamp", 2), ("chair", 1)], "stock moved twice"
            assert ledger.reserved == {"lamp": 2, "chair": 1}
            operations = gateway.operations()
            assert sorted(op.kind for op in operations) == ["capture", "capture", "payout"]
            assert all(op.calls <= 2 for op in operations), operations
            # A capture declares a reconcile probe: a crash between the charge and its record
            # is looked up on the next pass, never charged again.
            assert all(op.calls == 1 for op in operations if op.kind == "capture"), operations
            records = await kit.durable.checkpointer.load(SMALL.id)
            assert isinstance(records["outcome"], dict)
            assert records["outcome"]["status"] == "paid"
            if points_in_a_step:
                assert points["awarded"] == SMALL.total, f"points awarded {points['awarded']}"

        return Scenario(body, invariant)

    return setup


async def test_every_crash_point_leaves_the_books_right(store: Any, tmp_path: Path) -> None:
    report = await crash_points(payout_scenario(tmp_path), store=store, workflow=SMALL.id)
    report.check()
    reached = {(b.key, b.position) for b in report.boundaries}
    assert ("stock:reserve", "before transact") in reached
    assert ("stock:reserve", "after transact") in reached
    assert ("capture:A7", "after the effect, before its record") in reached
    assert ("settlement", "before sleep") in reached
    assert ("order", "before receive") in reached
    assert all(p.verdict == "held" for p in report.points), str(report)


async def test_points_counted_in_a_step_are_caught(store: Any, tmp_path: Path) -> None:
    report = await crash_points(
        payout_scenario(tmp_path, points_in_a_step=True),
        store=store,
        workflow=SMALL.id,
        stop_at_broken=True,
    )
    broken = report.broken
    assert broken is not None, str(report)
    assert broken.boundary.key == "loyalty:points"
    assert broken.boundary.position == "after the effect, before its record"
    assert "points awarded" in str(broken.error)
