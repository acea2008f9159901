"""durable.group.GroupCommit, the gate every store's group commit shares: who goes alone,
who waits, what leaves together, and that every caller hears its own outcome.

The stores' own tests (test_group_commit.py in each store package) prove what a batch does
to the store; these prove the gate by itself, with a subclass that records its trips.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from durable.group import GroupCommit, Waiting


class _Item(Waiting):
    __slots__ = ("value",)

    def __init__(self, value: int) -> None:
        super().__init__()
        self.value = value


class _Recorder(GroupCommit[_Item]):
    """Each trip takes a real turn of the loop (a trip away and back), and is written down:
    ``("alone", n)`` or ``("together", [n, ...])``. A value below zero refuses alone, and
    ``fail_batches`` makes every batch fail as a whole."""

    def __init__(self, *, fail_batches: BaseException | None = None) -> None:
        super().__init__()
        self.trips: list[tuple[str, Any]] = []
        self.fail_batches = fail_batches

    async def alone(self, write: _Item) -> Any:
        self.trips.append(("alone", write.value))
        await asyncio.sleep(0.001)
        if write.value < 0:
            raise ValueError(f"{write.value} refused")
        return write.value * 10

    async def together(self, batch: list[_Item]) -> None:
        self.trips.append(("together", [write.value for write in batch]))
        await asyncio.sleep(0.001)
        if self.fail_batches is not None:
            raise self.fail_batches
        for write in batch:
            if write.value < 0:
                await self.answer_alone(write)  # the batch could not decide it
            else:
                write.answer(write.value * 10)


async def test_a_lone_write_goes_alone_at_once() -> None:
    gate = _Recorder()
    assert await gate.submit(_Item(1)) == 10
    assert await gate.submit(_Item(2)) == 20
    assert gate.trips == [("alone", 1), ("alone", 2)]
    assert not gate.busy
    assert not gate.pending


async def test_writes_arriving_meanwhile_leave_together_in_arrival_order() -> None:
    gate = _Recorder()
    results = await asyncio.gather(*(gate.submit(_Item(n)) for n in range(1, 9)))
    assert results == [n * 10 for n in range(1, 9)], "each caller heard its own value"
    assert gate.trips[0] == ("alone", 1)
    assert gate.trips[1] == ("together", list(range(2, 9)))
    assert len(gate.trips) == 2
    assert not gate.busy
    assert not gate.flushing


async def test_a_crowd_answered_lets_the_woken_writers_join_the_next_batch() -> None:
    """After a batch of several, the next batch waits one turn of the loop, so the writers
    that batch woke (who write again at once) join it instead of queueing behind it."""
    gate = _Recorder()
    assert gate.settle_after_crowd

    async def writer(n: int) -> None:
        for step in range(5):
            await gate.submit(_Item(n * 100 + step))

    await asyncio.gather(*(writer(n) for n in range(8)))
    sizes = [len(values) if kind == "together" else 1 for kind, values in gate.trips]
    assert sum(sizes) == 40
    # Without the turn, the writer that went alone first would go alone again while the
    # other seven were still waking, splitting them into a 1 and a 7 taking turns (10
    # trips); with it, every round after the first carries all eight.
    assert sizes[2:] == [8, 8, 8, 8], gate.trips


class _Unsettled(_Recorder):
    settle_after_crowd = False


async def test_without_the_turn_the_writers_settle_into_two_groups_taking_turns() -> None:
    """What the turn after a crowd is for: without it, the writer that went alone first
    goes alone again while the other seven are still waking, round after round."""
    gate = _Unsettled()

    async def writer(n: int) -> None:
        for step in range(5):
            await gate.submit(_Item(n * 100 + step))

    await asyncio.gather(*(writer(n) for n in range(8)))
    sizes = [len(values) if kind == "together" else 1 for kind, values in gate.trips]
    assert sizes == [1, 7] * 5, gate.trips


async def test_a_write_the_batch_cannot_decide_is_sent_alone_and_only_it_fails() -> None:
    gate = _Recorder()
    results = await asyncio.gather(
        gate.submit(_Item(1)),
        gate.submit(_Item(2)),
        gate.submit(_Item(-3)),
        gate.submit(_Item(4)),
        return_exceptions=True,
    )
    assert results[0] == 10
    assert results[1] == 20
    assert results[3] == 40
    assert isinstance(results[2], ValueError)
    assert "-3 refused" in str(results[2])
    assert ("alone", -3) in gate.trips


async def test_a_batch_that_fails_whole_fails_each_of_its_callers() -> None:
    refusal = ConnectionError("the server went away")
    gate = _Recorder(fail_batches=refusal)
    results = await asyncio.gather(
        *(gate.submit(_Item(n)) for n in range(1, 5)), return_exceptions=True
    )
    assert results[0] == 10, "the lone write went before the failure"
    assert results[1:] == [refusal] * 3
    assert not gate.busy, "the gate opens again after a failed batch"
    assert await gate.submit(_Item(5)) == 50


async def test_a_cancelled_batch_cancels_its_callers() -> None:
    gate = _Recorder(fail_batches=asyncio.CancelledError())
    first = asyncio.ensure_future(gate.submit(_Item(1)))
    waiting = [asyncio.ensure_future(gate.submit(_Item(n))) for n in (2, 3)]
    assert await first == 10
    for task in waiting:
        with pytest.raises(asyncio.CancelledError):
            await task
    assert not gate.busy


async def test_a_caller_cancelled_while_waiting_leaves_the_others_answered() -> None:
    gate = _Recorder()
    first = asyncio.ensure_future(gate.submit(_Item(1)))
    leaving = asyncio.ensure_future(gate.submit(_Item(2)))
    staying = asyncio.ensure_future(gate.submit(_Item(3)))
    await asyncio.sleep(0)
    leaving.cancel()
    assert await first == 10
    assert await staying == 30
    assert leaving.cancelled()
    assert gate.trips[1] == ("together", [2, 3]), "its write still went"


async def test_take_and_sent_hold_the_turn_for_a_caller_that_sends_itself() -> None:
    gate = _Recorder()
    assert gate.take(), "nothing on its way: the caller may send alone"
    assert not gate.take(), "one turn at a time"
    waiting = asyncio.ensure_future(gate.submit(_Item(7)))
    await asyncio.sleep(0)
    assert not waiting.done()
    assert len(gate.pending) == 1
    gate.sent()
    assert await waiting == 70
    assert gate.trips == [("alone", 7)], "a batch of one goes alone"
    assert not gate.busy
