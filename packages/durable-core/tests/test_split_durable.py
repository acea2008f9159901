"""SplitDurable: any checkpointer beside any scheduler, two writes in the safe order.

The order is all it can offer, so the tests prove it by breaking the second write: a
value is recorded even when queueing it fails, and nothing is queued when recording
fails.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from durable.clock import ManualClock
from durable.codec import UnencodableValue
from durable.durable import SplitDurable
from durable.interfaces import INBOX_PREFIX, Durable, Fenced
from durable.memory import MemoryCheckpointer, MemoryEffect, MemoryScheduler

LIVENESS = timedelta(seconds=10)
BUDGET = timedelta(minutes=5)
BRIEFLY = timedelta(milliseconds=30)


class QueueDown(RuntimeError):
    """The scheduler's server went away between the two writes."""


class RefusingScheduler(MemoryScheduler):
    """A scheduler whose every write fails, as a crash between the two writes would."""

    async def make_ready(self, workflow: str) -> None:
        raise QueueDown(f"could not queue {workflow!r}")

    async def cancel(self, workflow: str) -> None:
        raise QueueDown(f"could not cancel {workflow!r}")


class RefusingCheckpointer(MemoryCheckpointer):
    """A checkpointer whose outside writes fail."""

    async def supply(self, workflow: str, key: str, value: object) -> object:
        raise QueueDown(f"could not record {key!r}")

    async def append(self, workflow: str, value: object, *, message_id: str | None = None) -> str:
        raise QueueDown("could not append")

    async def discard(self, workflow: str) -> None:
        raise QueueDown("could not discard")


def split() -> tuple[SplitDurable[MemoryEffect], MemoryCheckpointer, MemoryScheduler]:
    clock = ManualClock(datetime(2026, 3, 1, 12, 0, tzinfo=UTC))
    checkpointer = MemoryCheckpointer(clock=clock)
    scheduler = MemoryScheduler(clock=clock)
    return SplitDurable(checkpointer, scheduler), checkpointer, scheduler


async def ready_now(scheduler: MemoryScheduler) -> list[str]:
    workflows = []
    while (delivery := await scheduler.next_ready(BRIEFLY)) is not None:
        workflows.append(delivery.workflow)
    return workflows


def test_a_split_durable_is_a_durable_that_is_not_atomic() -> None:
    durable, checkpointer, scheduler = split()
    assert isinstance(durable, Durable)
    assert durable.atomic is False
    assert durable.checkpointer is checkpointer
    assert durable.scheduler is scheduler


async def test_arrive_supplies_the_value_and_makes_the_workflow_ready() -> None:
    durable, checkpointer, scheduler = split()
    assert await durable.arrive("order-1", "approved", (1, 2)) == [1, 2]
    assert await durable.arrive("order-1", "approved", "late") == [1, 2]
    assert await checkpointer.load("order-1") == {"approved": [1, 2]}
    assert await ready_now(scheduler) == ["order-1"]


async def test_send_appends_and_makes_the_workflow_ready() -> None:
    durable, checkpointer, scheduler = split()
    first = await durable.send("order-1", "gift wrap")
    second = await durable.send("order-1", "leave at door")
    assert first.startswith(INBOX_PREFIX)
    assert first < second
    assert await checkpointer.load("order-1") == {first: "gift wrap", second: "leave at door"}
    assert await ready_now(scheduler) == ["order-1"]


async def test_discard_forgets_records_fences_the_pass_and_cancels_its_runs() -> None:
    durable, checkpointer, scheduler = split()
    await durable.arrive("order-1", "approved", True)
    holder = await checkpointer.claim("order-1", liveness=LIVENESS, budget=BUDGET)
    assert holder is not None

    await durable.discard("order-1")

    assert await checkpointer.load("order-1") == {}
    with pytest.raises(Fenced):
        await checkpointer.record(holder, "charged", 1)
    assert await ready_now(scheduler) == []
    assert await checkpointer.claim("order-1", liveness=LIVENESS, budget=BUDGET) is not None


async def test_arrive_records_before_it_queues() -> None:
    checkpointer = MemoryCheckpointer()
    durable = SplitDurable(checkpointer, RefusingScheduler())
    with pytest.raises(QueueDown):
        await durable.arrive("order-1", "approved", {"by": "ana"})
    assert await checkpointer.load("order-1") == {"approved": {"by": "ana"}}


async def test_send_records_before_it_queues() -> None:
    checkpointer = MemoryCheckpointer()
    durable = SplitDurable(checkpointer, RefusingScheduler())
    with pytest.raises(QueueDown):
        await durable.send("order-1", "gift wrap")
    assert list((await checkpointer.load("order-1")).values()) == ["gift wrap"]


async def test_a_send_with_an_id_repeated_after_the_queue_failed_appends_nothing_and_queues() -> (
    None
):
    """The repair a message id makes safe: the first send recorded and died before queueing;
    the repeat finds the entry, appends nothing, and queues the wakeup the first never did."""
    durable, checkpointer, scheduler = split()
    broken = SplitDurable(checkpointer, RefusingScheduler())
    with pytest.raises(QueueDown):
        await broken.send("order-1", "gift wrap", message_id="m-1")
    key = await durable.send("order-1", "gift wrap", message_id="m-1")
    assert await checkpointer.load("order-1") == {key: "gift wrap"}
    assert await ready_now(scheduler) == ["order-1"]


class PlainCheckpointer(MemoryCheckpointer):
    """A checkpointer written before message ids, whose append takes no keyword."""

    async def append(self, workflow: str, value: object) -> str:  # type: ignore[override]
        return await super().append(workflow, value)


async def test_a_send_without_an_id_still_works_over_a_checkpointer_without_message_ids() -> None:
    durable = SplitDurable(PlainCheckpointer(), MemoryScheduler())  # type: ignore[arg-type]
    key = await durable.send("order-1", "gift wrap")
    assert await durable.checkpointer.load("order-1") == {key: "gift wrap"}


async def test_discard_forgets_the_records_before_it_cancels() -> None:
    checkpointer = MemoryCheckpointer()
    durable = SplitDurable(checkpointer, RefusingScheduler())
    await checkpointer.supply("order-1", "approved", True)
    with pytest.raises(QueueDown):
        await durable.discard("order-1")
    assert await checkpointer.load("order-1") == {}


async def test_nothing_is_queued_when_the_record_fails() -> None:
    scheduler = MemoryScheduler()
    durable = SplitDurable(RefusingCheckpointer(), scheduler)
    with pytest.raises(QueueDown):
        await durable.arrive("order-1", "approved", True)
    with pytest.raises(QueueDown):
        await durable.send("order-1", "gift wrap")
    assert await ready_now(scheduler) == []


async def test_runs_are_not_cancelled_when_the_discard_fails() -> None:
    scheduler = MemoryScheduler()
    await scheduler.make_ready("order-1")
    durable = SplitDurable(RefusingCheckpointer(), scheduler)
    with pytest.raises(QueueDown):
        await durable.discard("order-1")
    assert await ready_now(scheduler) == ["order-1"]


@pytest.mark.parametrize("value", [math.nan, object(), {1, 2}], ids=["nan", "object", "set"])
async def test_a_value_the_codec_refuses_is_neither_recorded_nor_queued(value: object) -> None:
    durable, checkpointer, scheduler = split()
    with pytest.raises(UnencodableValue, match="'order-1', key 'approved'"):
        await durable.arrive("order-1", "approved", value)
    with pytest.raises(UnencodableValue, match="'order-1'"):
        await durable.send("order-1", value)
    assert await checkpointer.load("order-1") == {}
    assert await ready_now(scheduler) == []


@pytest.mark.parametrize("key", ["", f"{INBOX_PREFIX}00000000000000000000"], ids=["empty", "inbox"])
async def test_arrive_refuses_a_bad_key_before_either_write(key: str) -> None:
    durable, checkpointer, scheduler = split()
    with pytest.raises(ValueError, match="'order-1'"):
        await durable.arrive("order-1", key, True)
    assert await checkpointer.load("order-1") == {}
    assert await ready_now(scheduler) == []


@pytest.mark.parametrize("workflow", ["", 7], ids=["empty", "not-a-string"])
async def test_every_move_refuses_a_bad_workflow_id_before_either_write(workflow: object) -> None:
    durable = SplitDurable(RefusingCheckpointer(), RefusingScheduler())
    with pytest.raises(ValueError, match="workflow id must be a non-empty string"):
        await durable.arrive(workflow, "approved", True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="workflow id must be a non-empty string"):
        await durable.send(workflow, True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="workflow id must be a non-empty string"):
        await durable.discard(workflow)  # type: ignore[arg-type]
