"""``resume``: one pass over a workflow, and what survives between passes: recorded steps,
deadlines, values that arrive, and the claim that keeps two passes from both writing."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import pytest
from durable.clock import ManualClock
from durable.interfaces import Contended, Fenced
from durable.memory import MemoryCheckpointer, MemoryDurable, MemoryEffect, MemoryScheduler
from durable.parsers import exactly as expect
from durable.run import Blocked, Finished, Run, Sleeping, resume

T = TypeVar("T")
WORKFLOW = "wf-payout-1"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def durable(clock: ManualClock) -> MemoryDurable:
    return MemoryDurable(clock=clock)


class Effects:
    """Counts how often each named effect really ran."""

    def __init__(self) -> None:
        self.ran: Counter[str] = Counter()

    def __call__(self, name: str, result: object = None) -> Callable[[], object]:
        def effect() -> object:
            self.ran[name] += 1
            return result if result is not None else name

        return effect


# -- replay ------------------------------------------------------------------------------


async def test_a_finished_workflow_run_again_performs_no_effects(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    effects = Effects()

    def reserve(data: dict[str, object]) -> object:
        data["reserved"] = 1
        effects.ran["reserve"] += 1
        return 1

    async def body(run: Run[MemoryEffect]) -> list[object]:
        charged = await run.step("charge", effects("charge", "ch_1"), expect(str))
        reserved = await run.transact("reserve", reserve, expect(int))
        await run.sleep("settle", timedelta(minutes=1))
        approved = await run.awaiting("approval", expect(bool))
        note = await run.receive("note", expect(str))
        paid = await run.step("payout", effects("payout", "po_1"), expect(str))
        return [charged, reserved, approved, note, paid]

    await durable.arrive(WORKFLOW, "approval", True)
    await durable.send(WORKFLOW, "thanks")
    assert isinstance(await resume(durable, WORKFLOW, body, clock=clock), Sleeping)
    clock.advance(timedelta(minutes=1))
    finished = await resume(durable, WORKFLOW, body, clock=clock)
    assert finished == Finished(["ch_1", 1, True, "thanks", "po_1"])
    records = await durable.checkpointer.load(WORKFLOW)

    for _ in range(3):
        clock.advance(timedelta(hours=1))
        assert await resume(durable, WORKFLOW, body, clock=clock) == finished

    assert effects.ran == {"charge": 1, "reserve": 1, "payout": 1}
    assert durable.checkpointer.data == {"reserved": 1}
    assert await durable.checkpointer.load(WORKFLOW) == records


async def test_a_pass_cancelled_between_steps_resumes_without_repeating_them(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    effects = Effects()
    between = asyncio.Event()

    async def body(run: Run[Any]) -> str:
        await run.step("charge", effects("charge"), expect(str))
        if effects.ran["payout"] == 0 and not between.is_set():
            between.set()
            await asyncio.Event().wait()  # the process stalls here until it is killed
        return await run.step("payout", effects("payout"), expect(str))

    first = asyncio.ensure_future(resume(durable, WORKFLOW, body, clock=clock))
    await asyncio.wait_for(between.wait(), 1)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first

    # The clock has not moved: the cancelled pass released its claim on the way out.
    assert await resume(durable, WORKFLOW, body, clock=clock) == Finished("payout")
    assert effects.ran == {"charge": 1, "payout": 1}


async def test_a_pass_whose_body_raised_resumes_without_repeating_recorded_steps(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    effects = Effects()
    gateway_up = False

    async def body(run: Run[Any]) -> str:
        await run.step("reserve", effects("reserve"), expect(str))
        await run.step("charge", effects("charge"), expect(str))
        if not gateway_up:
            raise ConnectionError("gateway unreachable")
        return await run.step("payout", effects("payout"), expect(str))

    with pytest.raises(ConnectionError):
        await resume(durable, WORKFLOW, body, clock=clock)
    gateway_up = True

    assert await resume(durable, WORKFLOW, body, clock=clock) == Finished("payout")
    assert effects.ran == {"reserve": 1, "charge": 1, "payout": 1}


# -- sleeps across restarts --------------------------------------------------------------


async def test_a_sleeps_deadline_survives_a_restart_and_is_not_pushed_back(
    clock: ManualClock,
) -> None:
    checkpointer = MemoryCheckpointer(clock=clock)
    scheduler = MemoryScheduler(clock=clock)
    started = clock.now()
    deadline = started + timedelta(hours=1)

    async def body(run: Run[Any]) -> str:
        woke = await run.sleep("cool-off", timedelta(hours=1))
        return woke.isoformat()

    before = MemoryDurable(checkpointer, scheduler)
    assert await resume(before, WORKFLOW, body, clock=clock) == Sleeping(deadline, ("cool-off",))

    for _ in range(3):
        clock.advance(timedelta(minutes=15))
        after_restart = MemoryDurable(checkpointer, scheduler)
        assert await resume(after_restart, WORKFLOW, body, clock=clock) == Sleeping(
            deadline, ("cool-off",)
        )

    clock.advance(timedelta(minutes=30))
    woken = await resume(MemoryDurable(checkpointer, scheduler), WORKFLOW, body, clock=clock)
    assert woken == Finished(deadline.isoformat())
    assert clock.now() > deadline


async def test_a_sleep_returns_the_deadline_as_a_datetime_once_it_has_passed(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    woke: list[object] = []
    deadline = clock.now() + timedelta(seconds=30)

    async def body(run: Run[Any]) -> None:
        woke.append(await run.sleep("settle", timedelta(seconds=30)))

    assert await resume(durable, WORKFLOW, body, clock=clock) == Sleeping(deadline, ("settle",))
    clock.advance(timedelta(minutes=2))
    assert await resume(durable, WORKFLOW, body, clock=clock) == Finished(None)
    assert woke == [deadline]


# -- values that arrive ------------------------------------------------------------------


async def test_an_awaited_value_wakes_the_workflow_through_arrive(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    scheduler = durable.scheduler
    within = timedelta(milliseconds=10)

    async def body(run: Run[Any]) -> str:
        approver = await run.awaiting("approval", expect(str))
        return f"approved by {approver}"

    await scheduler.make_ready(WORKFLOW)
    delivery = await scheduler.next_ready(within)
    assert delivery is not None
    assert await resume(durable, WORKFLOW, body, clock=clock) == Blocked(("approval",))
    await scheduler.done(delivery)
    assert await scheduler.next_ready(within) is None

    assert await durable.arrive(WORKFLOW, "approval", "ops") == "ops"

    woken = await scheduler.next_ready(within)
    assert woken is not None
    assert woken.workflow == WORKFLOW
    assert await resume(durable, WORKFLOW, body, clock=clock) == Finished("approved by ops")


# -- one pass at a time ------------------------------------------------------------------


async def test_two_concurrent_passes_run_an_effect_once(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    effects = Effects()

    async def body(run: Run[Any]) -> str:
        await asyncio.sleep(0.01)
        return await run.step("charge", effects("charge", "ch_1"), expect(str))

    outcomes = await asyncio.gather(
        resume(durable, WORKFLOW, body, clock=clock),
        resume(durable, WORKFLOW, body, clock=clock),
        return_exceptions=True,
    )

    assert effects.ran == {"charge": 1}
    assert sorted(type(o).__name__ for o in outcomes) == ["Contended", "Finished"]
    assert Finished("ch_1") in outcomes


async def test_many_concurrent_passes_run_an_effect_once(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    effects = Effects()

    async def body(run: Run[Any]) -> str:
        await asyncio.sleep(0.01)
        return await run.step("charge", effects("charge", "ch_1"), expect(str))

    outcomes = await asyncio.gather(
        *(resume(durable, WORKFLOW, body, clock=clock) for _ in range(25)),
        return_exceptions=True,
    )

    assert effects.ran == {"charge": 1}
    assert all(isinstance(o, Contended) or o == Finished("ch_1") for o in outcomes), outcomes
    assert sum(isinstance(o, Contended) for o in outcomes) >= 1


async def test_a_pass_on_a_held_workflow_is_contended_and_never_starts(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    started: list[str] = []

    async def body(run: Run[Any]) -> None:
        started.append(run.workflow)

    held = await durable.checkpointer.claim(
        WORKFLOW, liveness=timedelta(seconds=30), budget=timedelta(minutes=5)
    )
    assert held is not None

    with pytest.raises(Contended, match=WORKFLOW):
        await resume(durable, WORKFLOW, body, clock=clock)
    assert started == []


async def test_a_stalled_pass_past_its_lease_is_fenced_at_its_next_step(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    stalled = asyncio.Event()
    carry_on = asyncio.Event()

    async def slow_pass(run: Run[Any]) -> str:
        await run.step("reserve", lambda: "r_1", expect(str))
        stalled.set()
        await carry_on.wait()  # a GC pause, a partition: the lease runs out meanwhile
        return await run.step("charge", lambda: "from the stalled pass", expect(str))

    async def newer_pass(run: Run[Any]) -> str:
        await run.step("reserve", lambda: "r_2", expect(str))
        return await run.step("charge", lambda: "from the newer pass", expect(str))

    liveness = timedelta(seconds=30)
    first = asyncio.ensure_future(
        resume(durable, WORKFLOW, slow_pass, clock=clock, liveness=liveness)
    )
    await asyncio.wait_for(stalled.wait(), 1)
    clock.advance(liveness + timedelta(seconds=1))

    assert await resume(durable, WORKFLOW, newer_pass, clock=clock) == Finished(
        "from the newer pass"
    )
    carry_on.set()
    with pytest.raises(Fenced):
        await first
    assert await durable.checkpointer.load(WORKFLOW) == {
        "reserve": "r_1",
        "charge": "from the newer pass",
    }


async def test_a_sagas_except_exception_does_not_compensate_a_fenced_pass(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    refunds: list[str] = []
    in_gateway = asyncio.Event()
    gateway_answers = asyncio.Event()
    calls = 0

    async def charge() -> object:
        nonlocal calls
        calls += 1
        if calls == 1:
            in_gateway.set()
            await gateway_answers.wait()  # the first pass stalls inside the gateway call
        return f"ch_{calls}"

    def refund() -> object:
        refunds.append("refund")
        return "refunded"

    async def saga(run: Run[Any]) -> str:
        await run.step("reserve", lambda: "r_1", expect(str))
        try:
            return await run.step("charge", charge, expect(str))
        except Exception:
            await run.step("refund", refund, expect(str))
            raise

    first = asyncio.ensure_future(resume(durable, WORKFLOW, saga, clock=clock))
    await asyncio.wait_for(in_gateway.wait(), 1)
    clock.advance(timedelta(minutes=1))
    assert await resume(durable, WORKFLOW, saga, clock=clock) == Finished("ch_2")

    gateway_answers.set()
    with pytest.raises(Fenced):
        await first
    assert refunds == []
    assert "refund" not in await durable.checkpointer.load(WORKFLOW)


async def test_a_long_body_keeps_its_claim_past_the_liveness_window_by_renewing() -> None:
    durable = MemoryDurable()  # the system clock: renewal runs on real time
    liveness = timedelta(milliseconds=120)

    async def long_body(run: Run[Any]) -> str:
        await asyncio.sleep(0.5)
        return await run.step("done", lambda: "long body", expect(str))

    async def intruder(run: Run[Any]) -> str:
        return await run.step("done", lambda: "intruder", expect(str))

    passing = asyncio.ensure_future(resume(durable, WORKFLOW, long_body, liveness=liveness))
    await asyncio.sleep(0.3)
    with pytest.raises(Contended):
        await resume(durable, WORKFLOW, intruder, liveness=liveness)

    assert await passing == Finished("long body")


async def test_a_pass_whose_budget_is_spent_is_stopped_with_fenced() -> None:
    durable = MemoryDurable()  # the system clock: renewal runs on real time
    stopped = asyncio.Event()

    async def endless(run: Run[Any]) -> None:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            stopped.set()
            raise

    with pytest.raises(Fenced, match="budget"):
        await asyncio.wait_for(
            resume(
                durable,
                WORKFLOW,
                endless,
                liveness=timedelta(milliseconds=60),
                budget=timedelta(milliseconds=200),
            ),
            3,
        )
    assert stopped.is_set()
    # The stopped pass released its claim: the workflow is claimable again at once.
    assert await resume(durable, WORKFLOW, lambda run: asyncio.sleep(0)) == Finished(None)


async def test_a_pass_is_stopped_with_fenced_when_its_workflow_is_discarded_under_it() -> None:
    durable = MemoryDurable()
    stopped = asyncio.Event()
    running = asyncio.Event()

    async def endless(run: Run[Any]) -> None:
        running.set()
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            stopped.set()
            raise

    passing = asyncio.ensure_future(
        resume(durable, WORKFLOW, endless, liveness=timedelta(milliseconds=60))
    )
    await asyncio.wait_for(running.wait(), 1)
    await durable.discard(WORKFLOW)

    with pytest.raises(Fenced):
        await asyncio.wait_for(passing, 3)
    assert stopped.is_set()


async def test_the_claim_is_released_when_the_pass_ends(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    async def body(run: Run[Any]) -> bool:
        return await run.awaiting("approval", expect(bool))

    assert await resume(durable, WORKFLOW, body, clock=clock) == Blocked(("approval",))
    again = await durable.checkpointer.claim(
        WORKFLOW, liveness=timedelta(seconds=30), budget=timedelta(minutes=5)
    )
    assert again is not None


@pytest.mark.parametrize("name", ["liveness", "budget"])
@pytest.mark.parametrize("value", [timedelta(0), timedelta(seconds=-1)])
async def test_resume_refuses_non_positive_timings_before_claiming(
    durable: MemoryDurable, clock: ManualClock, name: str, value: timedelta
) -> None:
    async def body(run: Run[Any]) -> None:
        raise AssertionError("the body must not run")

    options: dict[str, Any] = {name: value}
    with pytest.raises(ValueError, match=name):
        await resume(durable, WORKFLOW, body, clock=clock, **options)
    held = await durable.checkpointer.claim(
        WORKFLOW, liveness=timedelta(seconds=1), budget=timedelta(seconds=1)
    )
    assert held is not None


async def test_resume_takes_a_bare_checkpointer_too(clock: ManualClock) -> None:
    checkpointer = MemoryCheckpointer(clock=clock)

    async def body(run: Run[Any]) -> int:
        return await run.step("one", lambda: 1, expect(int))

    assert await resume(checkpointer, WORKFLOW, body, clock=clock) == Finished(1)
    assert await checkpointer.load(WORKFLOW) == {"one": 1}


# -- a fan-out that reaches a wait while another branch is mid-effect ----------------------


async def test_a_branch_mid_effect_when_its_sibling_waits_records_before_the_pass_ends(
    durable: MemoryDurable,
) -> None:
    charged = 0
    release = asyncio.Event()

    async def slow_charge() -> str:
        nonlocal charged
        await release.wait()
        charged += 1
        return "ch_1"

    async def body(run: Run[Any]) -> object:
        return await asyncio.gather(
            run.step("charge", slow_charge, expect(str)),
            run.awaiting("approval", expect(bool)),
        )

    passing = asyncio.ensure_future(resume(durable, WORKFLOW, body))
    await asyncio.sleep(0.05)
    assert not passing.done(), "the pass must wait for the charge in flight"
    release.set()
    outcome = await passing
    assert outcome == Blocked(("approval",))
    assert await durable.checkpointer.load(WORKFLOW) == {"charge": "ch_1"}

    await durable.arrive(WORKFLOW, "approval", True)
    again = await resume(durable, WORKFLOW, body)
    assert again == Finished(["ch_1", True])
    assert charged == 1


async def test_a_branch_that_would_start_an_effect_after_its_sibling_waits_does_not(
    durable: MemoryDurable,
) -> None:
    effects = Effects()

    async def later_branch(run: Run[Any]) -> str:
        await asyncio.sleep(0.02)  # starts its effect after the other branch has suspended
        return await run.step("ship", effects("ship"), expect(str))

    async def body(run: Run[Any]) -> object:
        return await asyncio.gather(
            run.awaiting("approval", expect(bool)), later_branch(run), return_exceptions=False
        )

    outcome = await resume(durable, WORKFLOW, body)
    assert outcome == Blocked(("approval",))
    await asyncio.sleep(0.05)
    assert effects.ran["ship"] == 0, "no effect may start once the pass is ending"
    assert "ship" not in await durable.checkpointer.load(WORKFLOW)
