"""MemoryDurable: the moves across the pair, each one step.

arrive is supply plus make_ready, send is append plus make_ready, discard is discard plus
cancel, and because each is one step no other task can see the record without the
wakeup.
"""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime, timedelta

import pytest
from durable.clock import ManualClock
from durable.codec import UnencodableValue
from durable.interfaces import INBOX_PREFIX, Durable, Fenced
from durable.memory import MemoryCheckpointer, MemoryDurable, MemoryScheduler

LIVENESS = timedelta(seconds=10)
BUDGET = timedelta(minutes=5)
BRIEFLY = timedelta(milliseconds=30)


def memory_durable() -> tuple[MemoryDurable, ManualClock]:
    clock = ManualClock(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    return MemoryDurable(clock=clock, lease=timedelta(seconds=30)), clock


async def ready_now(durable: MemoryDurable) -> list[str]:
    """Every workflow the scheduler hands out right now."""
    workflows = []
    while (delivery := await durable.scheduler.next_ready(BRIEFLY)) is not None:
        workflows.append(delivery.workflow)
    return workflows


def test_the_memory_durable_is_an_atomic_durable() -> None:
    durable, clock = memory_durable()
    assert isinstance(durable, Durable)
    assert durable.atomic is True
    assert durable.checkpointer.clock is clock
    assert durable.scheduler.clock is clock
    assert durable.scheduler.lease == timedelta(seconds=30)


def test_a_memory_durable_composes_the_stores_it_is_given() -> None:
    checkpointer, scheduler = MemoryCheckpointer(), MemoryScheduler()
    durable = MemoryDurable(checkpointer, scheduler)
    assert durable.checkpointer is checkpointer
    assert durable.scheduler is scheduler


async def test_arrive_supplies_the_value_and_makes_the_workflow_ready() -> None:
    durable, clock = memory_durable()
    assert await durable.arrive("order-1", "approved", {"by": "ana"}) == {"by": "ana"}
    assert await durable.checkpointer.load("order-1") == {"approved": {"by": "ana"}}
    history = await durable.checkpointer.history("order-1")
    assert [e.at for e in history] == [clock.now()]
    assert await ready_now(durable) == ["order-1"]


async def test_arrive_is_first_writer_wins_and_still_wakes_the_workflow() -> None:
    durable, _ = memory_durable()
    await durable.arrive("order-1", "approved", True)
    assert await ready_now(durable) == ["order-1"]
    assert await durable.arrive("order-1", "approved", False) is True
    assert await durable.checkpointer.load("order-1") == {"approved": True}
    assert await ready_now(durable) == ["order-1"], "a resubmission must still wake it"


async def test_arrive_does_not_wait_for_a_live_pass() -> None:
    durable, _ = memory_durable()
    holder = await durable.checkpointer.claim("order-1", liveness=LIVENESS, budget=BUDGET)
    assert holder is not None
    assert await durable.arrive("order-1", "approved", True) is True
    assert await ready_now(durable) == ["order-1"]


async def test_send_appends_to_the_inbox_and_makes_the_workflow_ready() -> None:
    durable, _ = memory_durable()
    await durable.arrive("order-1", "approved", True)
    assert await ready_now(durable) == ["order-1"]
    first = await durable.send("order-1", {"note": "gift wrap"})
    second = await durable.send("order-1", {"note": "leave at door"})
    assert first.startswith(INBOX_PREFIX)
    assert first < second
    assert await durable.checkpointer.load("order-1") == {
        "approved": True,
        first: {"note": "gift wrap"},
        second: {"note": "leave at door"},
    }
    assert await ready_now(durable) == ["order-1"]


async def test_concurrent_sends_all_land_and_each_wakes_the_workflow() -> None:
    durable, _ = memory_durable()
    keys = await asyncio.gather(*(durable.send("order-1", i) for i in range(200)))
    assert len(set(keys)) == 200
    assert sorted(keys) == list((await durable.checkpointer.load("order-1")).keys())
    assert await ready_now(durable) == ["order-1"]


async def test_discard_forgets_records_fences_the_pass_and_cancels_its_runs() -> None:
    durable, clock = memory_durable()
    checkpointer, scheduler = durable.checkpointer, durable.scheduler
    await durable.arrive("order-1", "approved", True)
    delivery = await scheduler.next_ready(BRIEFLY)
    assert delivery is not None
    holder = await checkpointer.claim("order-1", liveness=LIVENESS, budget=BUDGET)
    assert holder is not None
    await durable.send("order-1", "made ready again mid-pass")

    await durable.discard("order-1")

    assert await checkpointer.load("order-1") == {}
    with pytest.raises(Fenced):
        await checkpointer.record(holder, "charged", 1)
    await scheduler.wake_at(delivery, clock.now())  # the pass answers for its delivery
    clock.advance(timedelta(minutes=5))
    assert await ready_now(durable) == [], "a discarded workflow was reinstated"
    successor = await checkpointer.claim("order-1", liveness=LIVENESS, budget=BUDGET)
    assert successor is not None
    assert successor.token > holder.token


class Witness:
    """A clock that notes each time a store reads it: each store reads its clock at the
    moment it acts (stamping a record, scoring a wakeup), so the notes are the order in
    which the halves of a move happened, interleaved with whatever else ran."""

    def __init__(self, log: list[str], name: str) -> None:
        self._log = log
        self._name = name
        self._clock = ManualClock(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))

    def now(self) -> datetime:
        self._log.append(self._name)
        return self._clock.now()


async def test_no_other_task_runs_between_the_record_and_the_wakeup() -> None:
    log: list[str] = []
    durable = MemoryDurable(
        MemoryCheckpointer(clock=Witness(log, "recorded")),
        MemoryScheduler(clock=Witness(log, "ready")),
    )
    finished = asyncio.Event()

    async def other_tasks() -> None:
        while not finished.is_set():
            log.append("other")
            await asyncio.sleep(0)

    async def moves() -> None:
        for i in range(20):
            await durable.arrive(f"order-{i}", "approved", i)
            await durable.send(f"order-{i}", i)
        finished.set()

    await asyncio.gather(other_tasks(), other_tasks(), moves())

    halves = [i for i, note in enumerate(log) if note == "recorded"]
    assert len(halves) == 40
    assert all(log[i + 1] == "ready" for i in halves), "another task ran mid-move"
    assert log.count("other") > 40


@pytest.mark.parametrize("value", [math.nan, object(), {1, 2}], ids=["nan", "object", "set"])
async def test_a_value_the_codec_refuses_is_neither_recorded_nor_queued(value: object) -> None:
    durable, _ = memory_durable()
    with pytest.raises(UnencodableValue, match="'order-1', key 'approved'"):
        await durable.arrive("order-1", "approved", value)
    with pytest.raises(UnencodableValue, match="'order-1'"):
        await durable.send("order-1", value)
    assert await durable.checkpointer.load("order-1") == {}
    assert await ready_now(durable) == []


async def test_arrive_refuses_an_inbox_key_before_anything_is_written() -> None:
    durable, _ = memory_durable()
    with pytest.raises(ValueError, match="reserved for inbox entries"):
        await durable.arrive("order-1", f"{INBOX_PREFIX}00000000000000000000", "forged")
    assert await durable.checkpointer.load("order-1") == {}
    assert await ready_now(durable) == []
