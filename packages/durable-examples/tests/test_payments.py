"""The payments queue limited to five charges at once: three workers, each on its own handle
on one store (memory, SQLite, and PostgreSQL when a server answers), never put more than
five charges in flight at the provider, and do reach five."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from datetime import timedelta
from typing import Any

import durable
import pytest
from durable.interfaces import Limited
from durable.worker import work
from durable.workflows import LifecycleDurable
from durable_examples import warehouses
from durable_examples.warehouses import (
    PAYMENTS,
    PaymentProvider,
    charge,
    limit_payments,
    warehouse_workflows,
)


@pytest.fixture
def provider(monkeypatch: pytest.MonkeyPatch) -> PaymentProvider:
    fresh = PaymentProvider(seconds=0.1)
    monkeypatch.setattr(warehouses, "provider", fresh)
    return fresh


@pytest.fixture
async def handles(url: str) -> AsyncIterator[list[LifecycleDurable[Any]]]:
    """Three handles on one store (the memory store is one object, so three times it)."""
    async with AsyncExitStack() as stack:
        first = await stack.enter_async_context(durable.open(url))
        found = [first]
        for _ in range(2):
            found.append(
                first if url == "memory://" else await stack.enter_async_context(durable.open(url))
            )
        assert all(isinstance(h, LifecycleDurable) for h in found)
        yield found  # type: ignore[misc]


async def test_three_workers_charge_at_most_five_at_once_and_reach_five(
    handles: list[LifecycleDurable[Any]], provider: PaymentProvider
) -> None:
    assert await limit_payments(handles[0]) == warehouses.PAYMENTS_LIMIT
    scheduler = handles[2].scheduler
    assert isinstance(scheduler, Limited)
    assert (await scheduler.limits())[PAYMENTS].concurrent == 5
    started = [
        await handles[0].start(charge, f"pay-{i}", {"order": f"o-{i}", "amount": 10 + i})
        for i in range(20)
    ]
    stop = asyncio.Event()
    workers = [
        asyncio.create_task(
            work(
                handle, warehouse_workflows(), poll=timedelta(milliseconds=20), stop=stop, limit=10
            )
        )
        for handle in handles
    ]
    try:
        for handle in started:
            receipt: Any = await handle.result(timeout=30)
            assert receipt["charge"] == f"ch-{receipt['order']}", receipt
    finally:
        stop.set()
        await asyncio.gather(*workers)
    assert sorted(provider.charged) == sorted(f"o-{i}" for i in range(20))
    assert provider.highest <= 5, f"{provider.highest} charges at once; the limit is 5"
    assert provider.highest == 5, (
        f"the charges never reached the limit (at most {provider.highest})"
    )
