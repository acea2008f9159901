"""The payout workflow on the memory store, pass by pass, with a clock moved by hand.

Each test drives ``resume`` directly, so a pass is exactly one call and a crash is an
exception out of one: what the demo shows with processes, these pin down one property at a
time. The gateway is the real file-backed stand-in, in the test's own directory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest
from durable.clock import ManualClock
from durable.interfaces import Fenced, Interruption, Pass
from durable.memory import MemoryDurable, MemoryEffect
from durable.run import Blocked, Finished, Outcome, Run, Sleeping, resume
from durable_examples.fulfilment import fulfilment_workflow
from durable_examples.gateway import Fence, Gateway
from durable_examples.ledger import Books, audit
from durable_examples.orders import Line, Order, as_mapping
from durable_examples.service import OrderFailed, payout
from durable_examples.stock import MemoryStock, StockLedger, UnknownStore, as_movement, stock_for

SETTLEMENT = timedelta(seconds=2)
SMALL = Order("order-7", "tok_visa", (Line("A7", "lamp", 2, 45), Line("Z1", "chair", 1, 60)))
LARGE = Order("order-8", "tok_visa", (Line("K1", "desk", 2, 900), Line("K2", "lamp", 1, 45)))
DECLINING = Order(
    "order-9", "tok_limit_500", (Line("C1", "lamp", 1, 45), Line("C2", "piano", 1, 3200))
)


@dataclass
class Shop:
    """One memory store, its stock, a gateway and the workflow body over them."""

    durable: MemoryDurable
    clock: ManualClock
    stock: MemoryStock
    gateway: Gateway

    def __post_init__(self) -> None:
        self.body: Callable[[Run[MemoryEffect]], Awaitable[dict[str, object]]] = payout(
            self.stock, self.gateway, self.durable.checkpointer, settlement=SETTLEMENT
        )

    async def submit(self, order: Order) -> None:
        await self.durable.send(order.id, order.message())

    async def run(self, order: Order) -> Outcome[dict[str, object]]:
        return await resume(self.durable, order.id, self.body, clock=self.clock)

    async def run_to_end(self, order: Order) -> dict[str, object]:
        """Passes until the workflow finishes, waiting out sleeps (approvals must be given)."""
        for _ in range(10):
            outcome = await self.run(order)
            if isinstance(outcome, Finished):
                return outcome.value
            assert isinstance(outcome, Sleeping), outcome
            self.clock.advance(outcome.until - self.clock.now())
        raise AssertionError(f"{order.id} did not finish in 10 passes")

    async def records(self, order: Order) -> dict[str, object]:
        return await self.durable.checkpointer.load(order.id)

    async def moves(self, order: Order) -> list[tuple[str, int]]:
        return (await self.stock.ledger([order.id])).moves[order.id]

    def asked(self, key: str) -> int:
        return next((op.calls for op in self.gateway.operations() if op.key == key), 0)


def make_shop(tmp_path: Path, gateway: type[Gateway] = Gateway) -> Shop:
    clock = ManualClock()
    durable = MemoryDurable(clock=clock)
    return Shop(durable, clock, MemoryStock(durable.checkpointer), gateway(tmp_path / "gw.db"))


@pytest.fixture
def shop(tmp_path: Path) -> Shop:
    return make_shop(tmp_path)


# -- exactly-once stock ------------------------------------------------------------------


async def test_stock_moves_once_however_many_passes_run(shop: Shop) -> None:
    await shop.submit(SMALL)

    first = await shop.run(SMALL)
    assert isinstance(first, Sleeping)
    outcome = await shop.run_to_end(SMALL)
    for _ in range(5):
        again = await shop.run(SMALL)
        assert again == Finished(outcome)

    assert outcome["status"] == "paid"
    assert await shop.moves(SMALL) == [("lamp", 2), ("chair", 1)]
    assert (await shop.stock.ledger([SMALL.id])).reserved == {"lamp": 2, "chair": 1}


async def test_a_pass_that_dies_after_the_reservation_does_not_reserve_again(
    tmp_path: Path,
) -> None:
    class Unreachable(Gateway):
        """Down for the first pass: every capture fails after the stock was reserved."""

        down = True

        async def capture(
            self, key: str, amount: int, card: str, *, fence: Fence | None = None
        ) -> dict[str, object]:
            if self.down:
                raise ConnectionError("the gateway is unreachable")
            return await super().capture(key, amount, card, fence=fence)

    shop = make_shop(tmp_path, Unreachable)
    gateway = shop.gateway
    assert isinstance(gateway, Unreachable)
    await shop.submit(SMALL)

    with pytest.raises(ConnectionError):
        await shop.run(SMALL)
    assert "stock:reserve" in await shop.records(SMALL)
    gateway.down = False
    assert (await shop.run_to_end(SMALL))["status"] == "paid"

    assert await shop.moves(SMALL) == [("lamp", 2), ("chair", 1)]


async def test_a_reservation_that_fails_leaves_no_stock_and_no_record(shop: Shop) -> None:
    def failing(data: dict[str, object]) -> object:
        shop.stock.reserve(SMALL.id, SMALL.lines)(data)
        raise RuntimeError("the warehouse refused the reservation")

    async def body(run: Run[MemoryEffect]) -> object:
        return await run.transact("stock:reserve", failing, as_movement)

    with pytest.raises(RuntimeError, match="warehouse"):
        await resume(shop.durable, SMALL.id, body, clock=shop.clock)

    assert await shop.moves(SMALL) == []
    assert await shop.records(SMALL) == {}


# -- the fan-out ---------------------------------------------------------------------------


async def test_each_line_is_a_capture_step_keyed_by_the_lines_own_id(shop: Shop) -> None:
    await shop.submit(SMALL)
    await shop.run_to_end(SMALL)

    records = await shop.records(SMALL)
    assert {key for key in records if key.startswith("capture:")} == {"capture:A7", "capture:Z1"}
    captures = {op.key: op.amount for op in shop.gateway.operations() if op.kind == "capture"}
    assert captures == {"order-7:capture:A7": 90, "order-7:capture:Z1": 60}


async def test_after_a_failed_capture_only_that_line_is_asked_again(tmp_path: Path) -> None:
    class FlakyOnce(Gateway):
        """Fails the first request for line Z1 and nothing else."""

        failed = False

        async def capture(
            self, key: str, amount: int, card: str, *, fence: Fence | None = None
        ) -> dict[str, object]:
            if key.endswith(":Z1") and not self.failed:
                self.failed = True
                answer = await super().capture(key, amount, card, fence=fence)
                raise ConnectionError(f"the answer {answer} was lost on the way back")
            return await super().capture(key, amount, card, fence=fence)

    shop = make_shop(tmp_path, FlakyOnce)
    await shop.submit(SMALL)

    with pytest.raises(ConnectionError):
        await shop.run(SMALL)
    assert "capture:A7" in await shop.records(SMALL)
    assert "capture:Z1" not in await shop.records(SMALL)
    await shop.run_to_end(SMALL)

    assert shop.asked("order-7:capture:A7") == 1
    assert shop.asked("order-7:capture:Z1") == 2
    assert [op.status for op in shop.gateway.operations() if op.kind == "capture"] == [
        "captured",
        "captured",
    ]


def test_an_order_repeating_a_line_id_is_refused_by_its_parser() -> None:
    from durable_examples.orders import as_order

    twice = Order("order-5", "tok_visa", (Line("L1", "lamp", 1, 45), Line("L1", "desk", 1, 900)))
    with pytest.raises(ValueError, match="repeated: \\['L1'\\]"):
        as_order(twice.message())


# -- sleep, approval, saga -----------------------------------------------------------------


async def test_a_large_order_waits_for_approval_after_settling(shop: Shop) -> None:
    await shop.submit(LARGE)

    settling = await shop.run(LARGE)
    assert isinstance(settling, Sleeping)
    assert settling.keys == ("settlement",)
    shop.clock.advance(SETTLEMENT)
    assert await shop.run(LARGE) == Blocked(("approval",))
    assert await shop.run(LARGE) == Blocked(("approval",))

    await shop.durable.arrive(LARGE.id, "approval", True)
    outcome = await shop.run(LARGE)

    assert isinstance(outcome, Finished)
    assert outcome.value["status"] == "paid"
    assert [(op.kind, op.amount) for op in shop.gateway.operations() if op.kind == "payout"] == [
        ("payout", LARGE.total)
    ]


async def test_a_declined_line_refunds_the_captured_lines_and_releases_the_stock(
    shop: Shop,
) -> None:
    await shop.submit(DECLINING)

    outcome = await shop.run(DECLINING)

    assert isinstance(outcome, Finished)
    assert outcome.value["status"] == "compensated"
    assert outcome.value["refunded"] == 45
    operations = {op.key: (op.kind, op.status, op.amount) for op in shop.gateway.operations()}
    assert operations == {
        "order-9:capture:C1": ("capture", "captured", 45),
        "order-9:capture:C2": ("capture", "declined", 3200),
        "order-9:refund:C1": ("refund", "refunded", 45),
    }
    assert await shop.moves(DECLINING) == [("lamp", 1), ("piano", 1), ("lamp", -1), ("piano", -1)]
    assert "settlement" not in await shop.records(DECLINING)


async def test_a_refused_approval_refunds_every_line(shop: Shop) -> None:
    await shop.submit(LARGE)
    await shop.run(LARGE)
    shop.clock.advance(SETTLEMENT)
    await shop.run(LARGE)
    await shop.durable.arrive(LARGE.id, "approval", {"approved": False, "by": "ops"})

    outcome = await shop.run(LARGE)

    assert isinstance(outcome, Finished)
    assert outcome.value["status"] == "compensated"
    assert outcome.value["refunded"] == LARGE.total
    assert not [op for op in shop.gateway.operations() if op.kind == "payout"]


async def test_a_fenced_pass_does_not_compensate_and_the_winner_does(tmp_path: Path) -> None:
    # The declined line would make any pass compensate, so a loser that treated Fenced as a
    # failure would refund C1 while the winner is still working the order.
    class Usurped(Gateway):
        """While capturing C1, another pass takes the workflow over (the first one's claim
        lapsed), so the first pass's next write is refused."""

        steal: Callable[[], Awaitable[Pass | None]]
        usurper: Pass | None = None

        async def capture(
            self, key: str, amount: int, card: str, *, fence: Fence | None = None
        ) -> dict[str, object]:
            if key.endswith(":C1") and self.usurper is None:
                self.usurper = await self.steal()
            return await super().capture(key, amount, card, fence=fence)

    shop = make_shop(tmp_path, Usurped)
    gateway = shop.gateway
    assert isinstance(gateway, Usurped)

    async def steal() -> Pass | None:
        shop.clock.advance(timedelta(minutes=1))  # past the first pass's liveness
        return await shop.durable.checkpointer.claim(
            DECLINING.id, liveness=timedelta(seconds=30), budget=timedelta(minutes=5)
        )

    gateway.steal = steal
    await shop.submit(DECLINING)

    with pytest.raises(Fenced):
        await shop.run(DECLINING)

    assert not issubclass(Fenced, Exception)
    assert not issubclass(Interruption, OrderFailed)
    records = await shop.records(DECLINING)
    assert not [key for key in records if key.startswith("refund:")]
    assert "stock:release" not in records
    assert not [op for op in gateway.operations() if op.kind == "refund"]
    assert await shop.moves(DECLINING) == [("lamp", 1), ("piano", 1)]

    assert gateway.usurper is not None
    await shop.durable.checkpointer.release(gateway.usurper)
    outcome = await shop.run(DECLINING)
    assert isinstance(outcome, Finished)
    assert outcome.value["status"] == "compensated"
    assert [op.key for op in gateway.operations() if op.kind == "refund"] == ["order-9:refund:C1"]
    assert await shop.moves(DECLINING) == [("lamp", 1), ("piano", 1), ("lamp", -1), ("piano", -1)]


# -- the graph -------------------------------------------------------------------------------


async def test_a_paid_order_is_fulfilled_by_its_graph_once(shop: Shop) -> None:
    await shop.submit(SMALL)
    outcome = await shop.run_to_end(SMALL)
    await shop.run(SMALL)

    graph = await shop.durable.checkpointer.load(fulfilment_workflow(SMALL.id))
    assert set(graph) == {"pick", "pack", "label", "invoice", "dispatch"}
    assert list(graph)[:2] == ["pick", "pack"]
    assert list(graph)[-1] == "dispatch"
    assert outcome["dispatch"] == graph["dispatch"] == "INV-order-7 dispatched as PC-order-7"


# -- the adapter and the books -----------------------------------------------------------------


async def test_the_stock_adapter_is_chosen_by_the_stores_checkpointer(tmp_path: Path) -> None:
    from durable_examples.stock import SqliteStock
    from durable_sqlite import SqliteDurable, connect

    memory = MemoryDurable()
    assert isinstance(stock_for(memory), MemoryStock)
    async with connect(tmp_path / "store.db") as connection:
        assert isinstance(stock_for(SqliteDurable.over(connection)), SqliteStock)

    class Foreign:
        checkpointer = object()
        scheduler = object()

    with pytest.raises(UnknownStore, match="no stock adapter"):
        stock_for(Foreign())  # type: ignore[arg-type]


async def test_the_sqlite_effect_moves_stock_once_in_the_stores_own_file(tmp_path: Path) -> None:
    from durable_sqlite import SqliteDurable, connect

    async with connect(tmp_path / "store.db") as connection:
        store = SqliteDurable.over(connection)
        stock = stock_for(store)
        await stock.prepare()
        await stock.prepare()  # idempotent
        body = payout(stock, Gateway(tmp_path / "gw.db"), store.checkpointer, settlement=SETTLEMENT)
        await store.send(DECLINING.id, DECLINING.message())
        for _ in range(3):
            outcome = await resume(store, DECLINING.id, body)
            assert isinstance(outcome, Finished)

        ledger = await stock.ledger([DECLINING.id])
    assert ledger.moves[DECLINING.id] == [("lamp", 1), ("piano", 1), ("lamp", -1), ("piano", -1)]
    assert ledger.reserved == {"lamp": 0, "piano": 0}


async def test_the_gateway_decides_a_key_once_under_concurrent_requests(tmp_path: Path) -> None:
    gateway = Gateway(tmp_path / "gw.db")

    answers = await asyncio.gather(*(gateway.capture("k-1", 90, "tok_visa") for _ in range(8)))

    assert len({str(answer) for answer in answers}) == 1
    [operation] = gateway.operations()
    assert (operation.key, operation.amount, operation.calls) == ("k-1", 90, 8)


def test_the_audit_names_an_order_whose_stock_moved_twice() -> None:
    moved = [("lamp", 2), ("chair", 1)]
    books = Books(
        orders=[SMALL],
        outcomes={SMALL.id: {"status": "paid"}},
        stock=StockLedger({SMALL.id: moved + moved}, {"lamp": 4, "chair": 2}),
        operations=[],
    )

    failures = audit(books, {SMALL.id: "paid"})

    assert any(f.startswith("order-7: stock should have moved") for f in failures)
    assert any("line A7 should be one capture of 90" in f for f in failures)


# -- kinds and start -------------------------------------------------------------------------


async def test_an_order_started_as_the_payout_kind_runs_to_its_outcome_on_sqlite(
    tmp_path: Path,
) -> None:
    """The order is the workflow's input: start parses it and records it with the kind, a
    worker serving the registry runs it, and the outcome is the workflow's value."""
    from durable.interfaces import Status
    from durable.worker import work
    from durable_examples.service import BY_MESSAGE, KIND, payout_workflows
    from durable_sqlite import SqliteDurable, connect

    async with connect(tmp_path / "store.db") as connection:
        store = SqliteDurable.over(connection)
        stock = stock_for(store)
        await stock.prepare()
        kinds = payout_workflows(
            stock, Gateway(tmp_path / "gw.db"), store.checkpointer, settlement=SETTLEMENT / 20
        )
        assert kinds.default is kinds[BY_MESSAGE]
        handle = await store.start(kinds[KIND], SMALL.id, SMALL.message())
        # Submitted the old way, by message: no recorded kind, so it runs as the default.
        await store.send(DECLINING.id, DECLINING.message())
        stop = asyncio.Event()
        worker = asyncio.ensure_future(
            work(store, kinds, poll=timedelta(milliseconds=20), stop=stop)
        )
        try:
            outcome = await handle.result(timeout=30, parse=as_mapping)
            declined = await store.handle(DECLINING.id).result(timeout=30, parse=as_mapping)
        finally:
            stop.set()
            await worker
        status = await store.status(SMALL.id)
        assert status is not None
        assert (status.status, status.kind, status.input) == (
            Status.FINISHED,
            KIND,
            SMALL.message(),
        )
    assert outcome["status"] == "paid"
    assert outcome["total"] == SMALL.total
    assert declined["status"] == "compensated"


async def test_an_order_its_parser_refuses_is_refused_at_start_and_nothing_is_written(
    shop: Shop,
) -> None:
    from durable.workflows import InputRefused
    from durable_examples.service import KIND, payout_workflows

    kinds = payout_workflows(shop.stock, shop.gateway, shop.durable.checkpointer)
    repeated = {**SMALL.message(), "lines": [SMALL.lines[0].message()] * 2}
    with pytest.raises(InputRefused, match="line ids must be unique"):
        await shop.durable.start(kinds[KIND], SMALL.id, repeated)
    assert await shop.durable.status(SMALL.id) is None
