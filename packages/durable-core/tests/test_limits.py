"""Queue limits from the worker's side and the operator's: a pass longer than the lease
keeps its slot (the worker holds it at each heartbeat), a kind's priority orders the takes,
a limit is checked where it is made, and ``durable queue`` sets, lists and clears one."""

from __future__ import annotations

import asyncio
import io
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import durable
import pytest
from durable.cli import main
from durable.interfaces import LimitsNotOffered, QueueLimit
from durable.memory import MemoryDurable
from durable.run import Run
from durable.worker import work

QUICK: dict[str, Any] = {"poll": timedelta(milliseconds=10), "tick": timedelta(milliseconds=50)}


def test_a_limit_is_at_least_one_and_an_int() -> None:
    assert QueueLimit().unlimited
    assert not QueueLimit(rate=1).unlimited
    with pytest.raises(ValueError, match="at least 1"):
        QueueLimit(concurrent=0)
    with pytest.raises(TypeError, match="an int"):
        QueueLimit(rate=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="an int"):
        QueueLimit(concurrent=True)


async def test_a_pass_longer_than_the_lease_keeps_its_slot() -> None:
    """Lease 0.3 s, liveness 0.45 s (a heartbeat every 0.15 s), a queue limited to 1 and
    three passes of 1 s each: never two at once. Without the worker holding the slot at
    each heartbeat, it would lapse with the lease and a second pass would start beside."""
    store = MemoryDurable(lease=timedelta(milliseconds=300))
    registry = durable.Workflows()
    running: list[int] = [0]
    highest: list[int] = [0]

    @registry.kind("slow", queue="slow")
    async def slow(run: Run[Any], _: object) -> str:
        running[0] += 1
        highest[0] = max(highest[0], running[0])
        await asyncio.sleep(1)
        running[0] -= 1
        return "done"

    await store.scheduler.set_limit("slow", QueueLimit(concurrent=1))
    handles = [await store.start(slow, f"slow-{i}", i) for i in range(3)]
    stop = asyncio.Event()
    worker = asyncio.create_task(
        work(store, registry, liveness=timedelta(milliseconds=450), stop=stop, **QUICK)
    )
    try:
        for handle in handles:
            assert await handle.result(timeout=15) == "done"
    finally:
        stop.set()
        await worker
    assert highest[0] == 1, f"{highest[0]} passes ran at once in a queue limited to 1"


async def test_a_kinds_priority_is_handed_out_first() -> None:
    """Three of a low kind started before one of a high kind, in one queue limited to 1:
    the high one runs first."""
    store = MemoryDurable()
    registry = durable.Workflows()
    ran: list[str] = []

    async def body(run: Run[Any], _: object) -> None:
        ran.append(run.workflow)

    low: durable.Kind[Any, None] = registry.kind("low", queue="q")(body)
    high: durable.Kind[Any, None] = registry.kind("high", queue="q", priority=10)(body)
    await store.scheduler.set_limit("q", QueueLimit(concurrent=1))
    handles = [await store.start(low, f"low-{i}", i) for i in range(3)]
    handles.append(await store.start(high, "high", 0))
    stop = asyncio.Event()
    worker = asyncio.create_task(work(store, registry, stop=stop, **QUICK))
    try:
        for handle in handles:
            await handle.result(timeout=10)
    finally:
        stop.set()
        await worker
    assert ran == ["high", "low-0", "low-1", "low-2"], ran


async def test_a_priority_on_a_store_without_limits_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    registry = durable.Workflows()

    @registry.kind("urgent", priority=1)
    async def urgent(run: Run[Any], _: object) -> None:
        return None

    store = MemoryDurable()
    store._scheduler = _Unlimited(store.scheduler)  # type: ignore[assignment]
    with pytest.raises(LimitsNotOffered, match="urgent"):
        await store.start(urgent, "u-1", 0)
    assert await store.checkpointer.status("u-1") is None


class _Unlimited:
    """A scheduler that is not Limited (the memory one, less its limit methods)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in ("set_limit", "limits", "held", "hold", "prioritize"):
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_durable_queue_sets_lists_and_clears_a_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    out = io.StringIO()
    assert main(["queue", url, "limit", "payments", "--concurrent", "5"], out) == 0
    assert main(["queue", url, "limit", "emails", "--rate", "20"], out) == 0
    assert main(["queue", url, "limits", "--json"], out) == 0
    listed = json.loads(out.getvalue().split("\n", 2)[2])
    assert listed == [
        {"queue": "emails", "concurrent": None, "rate": 20, "held": 0},
        {"queue": "payments", "concurrent": 5, "rate": None, "held": 0},
    ]
    assert main(["queue", url, "limit", "emails", "--clear"], out) == 0
    shown = io.StringIO()
    assert main(["queue", url, "limits"], shown) == 0
    assert shown.getvalue() == "payments  concurrent=5  held=0\n"
    with pytest.raises(SystemExit) as refused:
        main(["queue", url, "limit", "payments", "--concurrent", "0"], out)
    assert refused.value.code == 2
    assert "at least 1" in capsys.readouterr().err
