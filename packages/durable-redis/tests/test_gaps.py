"""The testing hook's ``gap=``: where each move of the Redis store can be held or failed.

Every move awaits the gap just before sending its script, the one step that both decides
and writes; a move across the two stores awaits it between its two writes. So a rival run
while a move is held is decided first, and the held script then meets its outcome.
Each test runs on one node and on a 3-primary cluster.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from durable.interfaces import Fenced, Pass
from durable_conformance.suite._gaps import Gaps, InjectedFailure, make_every_move, race
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
        assert isinstance(bed.durable, RedisDurable)
        await make_every_move(bed, gaps)
