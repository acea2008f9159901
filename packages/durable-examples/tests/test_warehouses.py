"""The warehouse orders and the nightly settlement, driven through a real worker loop on
memory, SQLite and (when a server answers) PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import durable
import pytest
from durable import ManualClock, Status
from durable.schedules import Schedules, Ticker
from durable.worker import work
from durable.workflows import LifecycleDurable
from durable_examples.warehouses import (
    NIGHTLY,
    fulfil,
    nightly_settlement,
    settle,
    ship_order,
    warehouse_workflows,
)

PATIENCE = 20.0

ORDER: dict[str, Any] = {
    "id": "o-7",
    "lines": [
        {"sku": "book", "quantity": 2, "warehouse": "berlin"},
        {"sku": "lamp", "quantity": 1, "warehouse": "lyon"},
        {"sku": "pen", "quantity": 3, "warehouse": "berlin"},
    ],
}


@pytest.fixture
async def store(url: str) -> AsyncIterator[LifecycleDurable[Any]]:
    async with durable.open(url) as opened:
        assert isinstance(opened, LifecycleDurable)
        yield opened


def worker(store: LifecycleDurable[Any], stop: asyncio.Event) -> asyncio.Task[None]:
    return asyncio.create_task(
        work(
            store,
            warehouse_workflows(),
            poll=timedelta(milliseconds=20),
            tick=timedelta(milliseconds=50),
            idle=timedelta(seconds=1),
            liveness=timedelta(seconds=2),
            stop=stop,
        )
    )


async def test_an_order_starts_one_fulfilment_child_per_warehouse_and_gathers_them(
    store: LifecycleDurable[Any],
) -> None:
    stop = asyncio.Event()
    running = worker(store, stop)
    try:
        handle = await store.start(ship_order, "o-7", ORDER)
        value = await handle.result(timeout=PATIENCE)
        assert value == {"order": "o-7", "parcels": ["o-7-berlin", "o-7-lyon"]}
        children = (await store.list(kind=fulfil.name)).statuses
        assert sorted(s.workflow for s in children) == ["o-7/fulfil-berlin", "o-7/fulfil-lyon"]
        assert all(s.status is Status.FINISHED for s in children)
        berlin = await store.handle("o-7/fulfil-berlin").result(timeout=PATIENCE)
        assert berlin == {"warehouse": "berlin", "parcel": "o-7-berlin", "items": 5}

        lines: list[Any] = [*ORDER["lines"], {"sku": "sofa", "quantity": 1, "warehouse": "closed"}]
        closed = {"id": "o-8", "lines": lines}
        failed: Any = await (await store.start(ship_order, "o-8", closed)).result(timeout=PATIENCE)
        assert failed["failed"] == "o-8/fulfil-closed"
        assert "closed" in failed["why"]
        assert (await store.status("o-8/fulfil-closed")).status is Status.FAILED  # type: ignore[union-attr]
    finally:
        stop.set()
        await asyncio.wait_for(running, PATIENCE)


async def test_the_nightly_settlement_starts_one_settle_per_tick_through_a_worker(
    store: LifecycleDurable[Any],
) -> None:
    made = await nightly_settlement(store, every=timedelta(seconds=1))
    assert (made.kind, made.every) == (settle.name, timedelta(seconds=1))
    stop = asyncio.Event()
    running = worker(store, stop)
    try:
        give_up = asyncio.get_running_loop().time() + PATIENCE
        while not (await store.list(kind=settle.name, status=Status.FINISHED)).statuses:
            assert asyncio.get_running_loop().time() < give_up, "no settlement ran"
            await asyncio.sleep(0.05)
        tick = (await store.list(kind=settle.name, status=Status.FINISHED)).statuses[0]
        assert tick.workflow.startswith(f"{NIGHTLY}@")
        value = await store.handle(tick.workflow).result(timeout=PATIENCE)
        assert value == {"ledger": "eu", "tick": tick.workflow}
    finally:
        stop.set()
        await asyncio.wait_for(running, PATIENCE)


async def test_the_nightly_schedule_fires_at_two_in_berlin_once_for_any_number_of_workers(
    store: LifecycleDurable[Any],
) -> None:
    pytest.importorskip("cronsim")
    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    made = await nightly_settlement(store, schedules=Schedules(store, clock=clock))
    assert (made.cron, made.zone) == ("0 2 * * *", "Europe/Berlin")
    again = await nightly_settlement(store, schedules=Schedules(store, clock=clock))
    assert again == made  # a deploy creating it on every start changes nothing
    clock.advance(timedelta(hours=1, seconds=5))  # 02:00:05 in Berlin
    tickers = [Ticker(store, warehouse_workflows(), clock=clock) for _ in range(4)]
    started = await asyncio.gather(*(t.look() for t in tickers))
    fired = {w for looked in started for w in looked}
    assert fired == {f"{NIGHTLY}@2026-01-01T01:00:00Z"}
    assert len((await store.list(kind=settle.name)).statuses) == 1
