"""The testing hook's ``gap=``: where each move of the SQLite store can be held or failed.

Every move awaits the gap inside its transaction, after ``BEGIN IMMEDIATE`` took the write
lock and the move's reads decided, and before its writes; so a rival on another connection
waits for the held move to commit, and a failure injected there rolls the move back whole.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from durable.interfaces import Pass, Recorded
from durable_conformance.suite._gaps import Gaps, InjectedFailure, make_every_move, race
from durable_sqlite import SqliteDurable, plugin

LIVENESS = timedelta(seconds=30)
BUDGET = timedelta(minutes=5)


async def test_a_stale_record_held_at_its_gap_makes_a_rival_claim_wait_and_lands() -> None:
    gaps = Gaps()
    async with plugin.testing(None, gap=gaps) as bed, bed.reopen() as other:  # type: ignore[misc]
        checkpointer = bed.durable.checkpointer
        stale = await checkpointer.claim("wf", liveness=timedelta(milliseconds=50), budget=BUDGET)
        assert stale is not None
        await asyncio.sleep(0.1)  # past its liveness: the next claim takes over

        raced = await race(
            gaps,
            "Checkpointer.record",
            "wf",
            lambda: checkpointer.record(stale, "charged", 1),
            lambda: other.checkpointer.claim("wf", liveness=LIVENESS, budget=BUDGET),
        )

        assert raced.reached
        assert not raced.rival_first  # the held record kept the write lock
        assert raced.held == Recorded(1, True)
        assert raced.rival == Pass("wf", stale.token + 1)
        assert await other.checkpointer.load("wf") == {"charged": 1}


async def test_a_failure_injected_inside_arrive_writes_neither_half() -> None:
    gaps = Gaps()
    async with plugin.testing(None, gap=gaps) as bed:
        durable = bed.durable
        assert isinstance(durable, SqliteDurable)
        gaps.arm("Durable.arrive", "wf", fail=InjectedFailure("lost between the halves"))
        with pytest.raises(InjectedFailure):
            await durable.arrive("wf", "approval", "yes")

        assert await durable.checkpointer.load("wf") == {}
        assert await durable.scheduler.scheduled("wf") is None
        assert await durable.scheduler.next_ready(timedelta(milliseconds=50)) is None

        # and the store is usable afterwards
        assert await durable.arrive("wf", "approval", "yes") == "yes"
        delivery = await durable.scheduler.next_ready(timedelta(seconds=1))
        assert delivery is not None
        assert delivery.workflow == "wf"
        assert await durable.checkpointer.load("wf") == {"approval": "yes"}


async def test_every_move_calls_its_gap() -> None:
    gaps = Gaps()
    async with plugin.testing(None, gap=gaps) as bed:
        assert isinstance(bed.durable, SqliteDurable)
        await make_every_move(bed, gaps)
