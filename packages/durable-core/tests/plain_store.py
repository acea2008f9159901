"""A third party's store as the previous release defined one: a Checkpointer and a
Scheduler, nothing of the lifecycle. ``run_cli`` runs the ``durable`` command with it
registered under ``plain://``, holding one workflow, ``wf``, made by a send.

Used by test_cli.py to show what the commands say on a store that does not offer lifecycle.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from durable.durable import SplitDurable
from durable.interfaces import Entry, Pass, Recorded
from durable.memory import MemoryCheckpointer, MemoryScheduler
from durable.plugins import StorePlugin, hookimpl, plugin_manager


class PlainCheckpointer:
    """The Checkpointer methods of a memory checkpointer, and ``workflows``; no more."""

    def __init__(self) -> None:
        self._inner = MemoryCheckpointer()

    async def load(self, workflow: str) -> dict[str, object]:
        return await self._inner.load(workflow)

    async def history(self, workflow: str) -> list[Entry]:
        return await self._inner.history(workflow)

    async def claim(self, workflow: str, *, liveness: timedelta, budget: timedelta) -> Pass | None:
        return await self._inner.claim(workflow, liveness=liveness, budget=budget)

    async def renew(self, holder: Pass) -> Pass:
        return await self._inner.renew(holder)

    async def release(self, holder: Pass) -> None:
        await self._inner.release(holder)

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        return await self._inner.record(holder, key, value)

    async def transact(self, holder: Pass, key: str, effect: Any) -> Recorded:
        return await self._inner.transact(holder, key, effect)

    async def supply(self, workflow: str, key: str, value: object) -> object:
        return await self._inner.supply(workflow, key, value)

    async def append(self, workflow: str, value: object, *, message_id: str | None = None) -> str:
        return await self._inner.append(workflow, value, message_id=message_id)

    async def discard(self, workflow: str) -> None:
        await self._inner.discard(workflow)

    async def workflows(self, limit: int | None = None) -> list[str]:
        return await self._inner.workflows(limit)


@asynccontextmanager
async def open_plain(url: str, **options: Any) -> AsyncIterator[SplitDurable[Any]]:
    durable: SplitDurable[Any] = SplitDurable(PlainCheckpointer(), MemoryScheduler())
    await durable.send("wf", "hello")
    yield durable


class Plugin:
    @hookimpl
    def durable_store(self) -> StorePlugin:
        return StorePlugin(
            name="plain",
            schemes=("plain",),
            open=open_plain,
            capabilities=frozenset({"enumerate"}),
            description="a store without lifecycle, for the CLI's tests",
        )


def run_cli(argv: list[str]) -> int:
    from durable.cli import main

    plugin_manager().register(Plugin(), name="plain")
    return main(argv)


if __name__ == "__main__":
    sys.exit(run_cli(sys.argv[1:]))
