"""The memory store's raw round trip: one turn of the event loop and a dict write."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from durable.plugins import Testbed


@asynccontextmanager
async def raw_op(testbed: Testbed[Any]) -> AsyncIterator[Callable[[int], Awaitable[None]]]:
    table: dict[str, str] = {}

    async def op(i: int) -> None:
        await asyncio.sleep(0)
        table.setdefault(f"k{i}", "1")

    yield op
