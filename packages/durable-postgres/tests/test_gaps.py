"""The testing hook's ``gap=``: where each move of the Postgres store can be held or failed.

Every move awaits the gap inside its transaction, after it locked the row its statement locks
first (its decision), and before its writes; so a rival on another pool
waits for the held move to commit, and a failure injected there rolls the move back whole.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from durable.interfaces import Pass, Recorded, Settlement, Status
from durable.plugins import GAP_MOVES
from durable_conformance.suite._gaps import Gaps, InjectedFailure, race
from durable_postgres import PostgresDurable, testing

LIVENESS = timedelta(seconds=30)
BUDGET = timedelta(minutes=5)


async def test_a_stale_record_held_at_its_gap_makes_a_rival_claim_wait_and_lands() -> None:
    gaps = Gaps()
    async with testing.testbed(None, gap=gaps) as bed, bed.reopen() as other:  # type: ignore[misc]
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
        assert not raced.rival_first  # the held record kept the claim row locked
        assert raced.held == Recorded(1, True)
        assert raced.rival == Pass("wf", stale.token + 1)
        assert await other.checkpointer.load("wf") == {"charged": 1}


async def test_a_failure_injected_inside_arrive_writes_neither_half() -> None:
    gaps = Gaps()
    async with testing.testbed(None, gap=gaps) as bed:
        durable = bed.durable
        assert isinstance(durable, PostgresDurable)
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
    async with testing.testbed(None, gap=gaps) as bed:
        assert bed.probe is not None
        durable = bed.durable
        assert isinstance(durable, PostgresDurable)
        checkpointer, scheduler = durable.checkpointer, durable.scheduler
        holder = await checkpointer.claim("a", liveness=LIVENESS, budget=BUDGET)
        assert holder is not None
        await checkpointer.renew(holder)
        await checkpointer.record(holder, "k", 1)
        await checkpointer.transact(holder, "t", bed.probe.bump("a", "n"))
        await checkpointer.release(holder)
        await checkpointer.supply("a", "s", 2)
        await checkpointer.append("a", 3)
        await checkpointer.discard("a")

        await scheduler.make_ready("b")
        delivery = await scheduler.next_ready(timedelta(seconds=1))
        assert delivery is not None
        await scheduler.reclaim(timedelta(seconds=1))
        await scheduler.wake_at(delivery, datetime.now(UTC) + timedelta(hours=1))
        await scheduler.make_ready("b")
        delivery = await scheduler.next_ready(timedelta(seconds=1))
        assert delivery is not None
        await scheduler.done(delivery)
        await scheduler.cancel("b")

        await durable.arrive("c", "k", 1)
        await durable.send("c", 2)
        await durable.discard("c")

        await checkpointer.admit("d", "kind", None)
        began = await checkpointer.begin("d", liveness=LIVENESS, budget=BUDGET, owner="me")
        assert began is not None
        assert began.holder is not None
        await checkpointer.beat(began.holder, "step")
        await checkpointer.settle(began.holder, Settlement(Status.BLOCKED, 1, keys=("x",)))
        await checkpointer.withdraw("d")
        await checkpointer.readmit("d")

        await durable.start("kind", "e", None)
        await durable.cancel("e")
        await durable.retry("e")

        assert gaps.seen == GAP_MOVES
        # a second handle (reopen) awaits the same gap
        gaps.seen.clear()
        assert bed.reopen is not None
        async with bed.reopen() as other:
            await other.checkpointer.supply("f", "k", 1)
        assert gaps.seen == {"Checkpointer.supply"}
