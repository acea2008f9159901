"""The testing hook's ``gap=``: where each move of the Redis store can be held or failed.

Every move awaits the gap just before sending its script, the one step that both decides
and writes; a move across the two stores awaits it between its two writes. So a rival run
while a move is held is decided first, and the held script then meets its outcome.
Each test runs on one node and on a 3-primary cluster.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest
from durable.interfaces import Fenced, Pass, Settlement, Status
from durable.plugins import GAP_MOVES
from durable_conformance.suite._gaps import Gaps, InjectedFailure, race
from durable_redis import RedisDurable, testing

LIVENESS = timedelta(seconds=30)
BUDGET = timedelta(minutes=5)


async def test_a_stale_record_held_before_its_script_is_fenced_by_a_rival_claim(
    server_url: str,
) -> None:
    gaps = Gaps()
    async with testing.testbed(server_url, gap=gaps) as bed, bed.reopen() as other:  # type: ignore[misc]
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
            after_rival=lambda: other.checkpointer.load("wf"),
        )

        assert raced.reached
        assert raced.rival_first  # nothing was locked: the claim was decided first
        assert isinstance(raced.rival, Pass)
        assert raced.rival.token > stale.token
        assert raced.seen_by_rival_first == {}
        assert isinstance(raced.held, Fenced)
        assert await other.checkpointer.load("wf") == {}


async def test_a_failure_injected_inside_arrive_leaves_the_first_half_and_the_store_usable(
    server_url: str,
) -> None:
    gaps = Gaps()
    async with testing.testbed(server_url, gap=gaps) as bed:
        durable = bed.durable
        assert isinstance(durable, RedisDurable)
        assert not durable.atomic
        gaps.arm("Checkpointer.supply", "wf", fail=InjectedFailure("lost before the script"))
        with pytest.raises(InjectedFailure):
            await durable.arrive("wf", "approval", "yes")
        assert await durable.checkpointer.load("wf") == {}
        assert await durable.scheduler.scheduled("wf") is None

        gaps.arm("Durable.arrive", "wf", fail=InjectedFailure("lost between the writes"))
        with pytest.raises(InjectedFailure):
            await durable.arrive("wf", "approval", "yes")
        # recorded first, so a crash between leaves the value waiting for a wakeup
        assert await durable.checkpointer.load("wf") == {"approval": "yes"}
        assert await durable.scheduler.scheduled("wf") is None

        # asking again supplies the wakeup
        assert await durable.arrive("wf", "approval", "yes") == "yes"
        delivery = await durable.scheduler.next_ready(timedelta(seconds=1))
        assert delivery is not None
        assert delivery.workflow == "wf"


async def test_every_move_calls_its_gap(server_url: str) -> None:
    gaps = Gaps()
    async with testing.testbed(server_url, gap=gaps) as bed:
        assert bed.probe is not None
        durable = bed.durable
        assert isinstance(durable, RedisDurable)
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
