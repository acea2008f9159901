"""``work``: the queue worker. Its pool, its timer, and how it answers for every delivery it
takes, including the ones whose pass it never finishes."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import pytest
from durable.clock import ManualClock
from durable.interfaces import Delivery, Durable
from durable.memory import MemoryCheckpointer, MemoryDurable, MemoryScheduler
from durable.run import Run, resume
from durable.worker import work

WORKFLOW = "wf-payout-1"
POLL = timedelta(milliseconds=10)
QUICK: dict[str, Any] = {"poll": POLL, "tick": POLL}


def as_str(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a str, got {value!r}")
    return value


class Spy(MemoryScheduler):
    """A real ``MemoryScheduler`` that notes what the worker asks of it."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.calls: list[str] = []
        self.answers: list[tuple[str, Delivery, datetime | None]] = []
        self.ticks: list[datetime] = []
        self.outstanding = 0
        self.most_outstanding = 0
        self._answered = asyncio.Event()

    async def prepare(self) -> None:
        self.calls.append("prepare")
        await super().prepare()

    def _took(self, delivery: Delivery | None) -> Delivery | None:
        if delivery is not None:
            self.outstanding += 1
            self.most_outstanding = max(self.most_outstanding, self.outstanding)
        return delivery

    async def next_ready(self, within: timedelta) -> Delivery | None:
        self.calls.append("next_ready")
        return self._took(await super().next_ready(within))

    async def reclaim(self, idle: timedelta) -> Delivery | None:
        self.calls.append(f"reclaim {idle.total_seconds()}")
        return self._took(await super().reclaim(idle))

    def _answer(self, how: str, delivery: Delivery, when: datetime | None) -> None:
        self.outstanding -= 1
        self.answers.append((how, delivery, when))
        self._answered.set()

    async def wake_at(self, delivery: Delivery, when: datetime) -> None:
        await super().wake_at(delivery, when)
        self._answer("wake_at", delivery, when)

    async def done(self, delivery: Delivery) -> None:
        await super().done(delivery)
        self._answer("done", delivery, None)

    async def wake_due(self, now: datetime) -> tuple[str, ...]:
        self.ticks.append(now)
        return await super().wake_due(now)

    async def answer(self, within: float = 2.0) -> tuple[str, Delivery, datetime | None]:
        """The next answer the worker gives for a delivery, as ``(how, delivery, when)``."""
        seen = len(self.answers)
        async with asyncio.timeout(within):
            while len(self.answers) == seen:
                self._answered.clear()
                await self._answered.wait()
        return self.answers[seen]


def spied(clock: ManualClock | None = None, **options: Any) -> tuple[MemoryDurable, Spy]:
    spy = Spy(clock=clock, **options)
    return MemoryDurable(MemoryCheckpointer(clock=clock), spy), spy


@contextlib.asynccontextmanager
async def working(
    durable: Durable[Any], body: Callable[[Run[Any]], Awaitable[object]], **options: Any
) -> AsyncIterator[asyncio.Task[None]]:
    worker = asyncio.ensure_future(work(durable, body, **{**QUICK, **options}))
    try:
        yield worker
    finally:
        await cancelled(worker)


async def cancelled(worker: asyncio.Task[None]) -> None:
    """Cancel ``worker`` once and wait for it to end."""
    worker.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await worker


async def eventually(condition: Callable[[], bool], within: float = 2.0) -> None:
    """Wait until ``condition`` holds, looking every few milliseconds."""
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110 (the conditions are plain state, not events)
            await asyncio.sleep(0.005)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


# -- the pool ----------------------------------------------------------------------------


async def test_the_worker_never_runs_more_passes_than_its_pool_and_finishes_them_all() -> None:
    durable, spy = spied()
    workflows = [f"wf-{i}" for i in range(50)]
    running = 0
    most_running = 0
    finished: set[str] = set()

    async def body(run: Run[Any]) -> None:
        nonlocal running, most_running
        running += 1
        most_running = max(most_running, running)
        await asyncio.sleep(0.002)
        running -= 1
        finished.add(run.workflow)

    for workflow in workflows:
        await durable.scheduler.make_ready(workflow)

    async with working(durable, body, limit=3):
        await eventually(lambda: len(finished) == 50, within=10)

    assert finished == set(workflows)
    assert most_running == 3
    assert spy.most_outstanding <= 3


async def test_the_worker_reclaims_before_it_reads_new_work(clock: ManualClock) -> None:
    durable, spy = spied(clock, lease=timedelta(seconds=45))
    ran: list[str] = []

    async def body(run: Run[Any]) -> None:
        ran.append(run.workflow)

    await durable.scheduler.make_ready(WORKFLOW)
    async with working(durable, body, clock=clock):
        await spy.answer()

    takes = [call for call in spy.calls if call != "prepare"]
    assert spy.calls[0] == "prepare"
    assert takes[0] == "reclaim 45.0"  # idle defaults to the scheduler's lease
    assert all(
        before.startswith("reclaim")
        for before, after in itertools.pairwise(takes)
        if after == "next_ready"
    )
    assert ran == [WORKFLOW]


# -- answering for a delivery ------------------------------------------------------------


async def test_a_finished_pass_is_done(clock: ManualClock) -> None:
    durable, spy = spied(clock)

    async def body(run: Run[Any]) -> str:
        return await run.step("payout", lambda: "po_1", as_str)

    await durable.scheduler.make_ready(WORKFLOW)
    async with working(durable, body, clock=clock):
        how, delivery, _ = await spy.answer()

    assert (how, delivery.workflow) == ("done", WORKFLOW)
    assert await spy.scheduled(WORKFLOW) is None


async def test_a_blocked_pass_is_done_until_its_value_arrives(clock: ManualClock) -> None:
    durable, spy = spied(clock)
    outcomes: list[str] = []

    async def body(run: Run[Any]) -> None:
        outcomes.append(await run.awaiting("approval", as_str))

    await durable.scheduler.make_ready(WORKFLOW)
    async with working(durable, body, clock=clock):
        how, _, _ = await spy.answer()
        assert how == "done"
        assert await spy.scheduled(WORKFLOW) is None

        await durable.arrive(WORKFLOW, "approval", "ops")
        assert (await spy.answer())[0] == "done"

    assert outcomes == ["ops"]


async def test_a_sleeping_pass_is_woken_at_its_deadline(clock: ManualClock) -> None:
    durable, spy = spied(clock)
    deadline = clock.now() + timedelta(hours=1)
    woke: list[datetime] = []

    async def body(run: Run[Any]) -> None:
        woke.append(await run.sleep("cool-off", timedelta(hours=1)))

    await durable.scheduler.make_ready(WORKFLOW)
    async with working(durable, body, clock=clock):
        assert (await spy.answer())[0::2] == ("wake_at", deadline)
        assert await spy.scheduled(WORKFLOW) == deadline

        clock.advance(timedelta(hours=1))
        assert (await spy.answer())[0] == "done"

    assert woke == [deadline]


async def test_a_contended_pass_is_deferred_and_later_finishes(clock: ManualClock) -> None:
    durable, spy = spied(clock)
    retry = timedelta(seconds=5)
    ran: list[str] = []

    async def body(run: Run[Any]) -> None:
        ran.append(run.workflow)

    other = await durable.checkpointer.claim(
        WORKFLOW, liveness=timedelta(minutes=1), budget=timedelta(minutes=5)
    )
    assert other is not None
    await durable.scheduler.make_ready(WORKFLOW)

    async with working(durable, body, clock=clock, retry=retry):
        assert (await spy.answer())[0::2] == ("wake_at", clock.now() + retry)
        assert ran == []

        await durable.checkpointer.release(other)
        clock.advance(retry)
        assert (await spy.answer())[0] == "done"

    assert ran == [WORKFLOW]


async def test_a_fenced_pass_is_deferred_and_later_finishes(clock: ManualClock) -> None:
    durable, spy = spied(clock)
    retry = timedelta(seconds=5)
    in_pass = asyncio.Event()
    carry_on = asyncio.Event()
    passes = 0

    async def body(run: Run[Any]) -> str:
        nonlocal passes
        passes += 1
        if passes == 1:
            in_pass.set()
            await carry_on.wait()
        return await run.step("payout", lambda: f"po_{passes}", as_str)

    await durable.scheduler.make_ready(WORKFLOW)
    async with working(durable, body, clock=clock, retry=retry):
        await asyncio.wait_for(in_pass.wait(), 2)
        await durable.checkpointer.discard(WORKFLOW)  # raises the fence under the pass
        carry_on.set()
        assert (await spy.answer())[0::2] == ("wake_at", clock.now() + retry)

        clock.advance(retry)
        assert (await spy.answer())[0] == "done"

    assert passes == 2
    assert await durable.checkpointer.load(WORKFLOW) == {"payout": "po_2"}


async def test_a_failing_body_is_logged_with_its_workflow_and_retried_after_retry(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    durable, spy = spied(clock)
    retry = timedelta(seconds=7)
    passes = 0

    async def body(run: Run[Any]) -> None:
        nonlocal passes
        passes += 1
        if passes == 1:
            raise ConnectionError("ledger unreachable")

    await durable.scheduler.make_ready(WORKFLOW)
    with caplog.at_level(logging.ERROR, logger="durable.worker"):
        async with working(durable, body, clock=clock, retry=retry):
            assert (await spy.answer())[0::2] == ("wake_at", clock.now() + retry)
            await asyncio.sleep(0.05)
            assert passes == 1  # not before the retry is due

            clock.advance(retry)
            assert (await spy.answer())[0] == "done"

    assert passes == 2
    failures = [r for r in caplog.records if r.name == "durable.worker" and r.exc_info]
    assert len(failures) == 1
    assert WORKFLOW in failures[0].getMessage()
    assert failures[0].exc_info is not None
    assert isinstance(failures[0].exc_info[1], ConnectionError)


# -- the races with the queue ------------------------------------------------------------


async def test_a_make_ready_that_lands_mid_pass_is_not_lost_to_that_passs_wake_at(
    clock: ManualClock,
) -> None:
    durable, spy = spied(clock)
    deadline = clock.now() + timedelta(hours=1)
    in_pass = asyncio.Event()
    carry_on = asyncio.Event()
    seen: list[dict[str, object]] = []

    async def body(run: Run[Any]) -> None:
        seen.append(dict(run.records))
        if len(seen) == 1:
            in_pass.set()
            await carry_on.wait()
        await run.sleep("cool-off", timedelta(hours=1))

    await durable.scheduler.make_ready(WORKFLOW)
    # One slot, so the wakeup waits on the queue rather than being taken beside the pass.
    async with working(durable, body, clock=clock, limit=1):
        await asyncio.wait_for(in_pass.wait(), 2)
        await durable.arrive(WORKFLOW, "note", "the customer called")
        carry_on.set()
        # That pass answers with its deadline, but the wakeup that landed during it wins:
        # the clock never moves, and the workflow runs again at once.
        assert (await spy.answer())[0::2] == ("wake_at", deadline)
        assert (await spy.answer())[0::2] == ("wake_at", deadline)
        assert len(seen) == 2
        assert await spy.scheduled(WORKFLOW) == deadline

    assert seen[1]["note"] == "the customer called"


async def test_a_wakeup_taken_beside_its_own_pass_is_deferred_by_retry_not_by_the_sleep(
    clock: ManualClock,
) -> None:
    durable, spy = spied(clock)
    deadline = clock.now() + timedelta(hours=1)
    retry = timedelta(seconds=5)
    in_pass = asyncio.Event()
    carry_on = asyncio.Event()
    seen: list[dict[str, object]] = []

    async def body(run: Run[Any]) -> None:
        seen.append(dict(run.records))
        if len(seen) == 1:
            in_pass.set()
            await carry_on.wait()
        await run.sleep("cool-off", timedelta(hours=1))

    await durable.scheduler.make_ready(WORKFLOW)
    async with working(durable, body, clock=clock, limit=2, retry=retry):
        await asyncio.wait_for(in_pass.wait(), 2)
        await durable.arrive(WORKFLOW, "note", "the customer called")
        # A free slot takes the wakeup at once; the pass still running makes it contended.
        assert (await spy.answer())[0::2] == ("wake_at", clock.now() + retry)
        carry_on.set()
        assert (await spy.answer())[0::2] == ("wake_at", deadline)
        assert await spy.scheduled(WORKFLOW) == clock.now() + retry

        clock.advance(retry)
        assert (await spy.answer())[0::2] == ("wake_at", deadline)

    assert len(seen) == 2
    assert seen[1]["note"] == "the customer called"


async def test_wake_at_does_not_reinstate_a_workflow_discarded_during_the_pass(
    clock: ManualClock,
) -> None:
    durable, spy = spied(clock)
    in_pass = asyncio.Event()
    carry_on = asyncio.Event()
    passes = 0

    async def body(run: Run[Any]) -> None:
        nonlocal passes
        passes += 1
        if passes > 1:
            in_pass.set()
            await carry_on.wait()
        await run.sleep("cool-off", timedelta(hours=1))

    # A first pass records the deadline; an early wakeup makes the worker run it again.
    await resume(durable, WORKFLOW, body, clock=clock)
    await durable.scheduler.make_ready(WORKFLOW)

    async with working(durable, body, clock=clock):
        await asyncio.wait_for(in_pass.wait(), 2)
        await durable.discard(WORKFLOW)
        carry_on.set()
        how, _, when = await spy.answer()
        assert (how, when) == ("wake_at", clock.now() + timedelta(hours=1))
        assert await spy.scheduled(WORKFLOW) is None

        clock.advance(timedelta(hours=2))
        await asyncio.sleep(0.05)

    assert passes == 2
    assert await spy.scheduled(WORKFLOW) is None


async def test_a_fenced_pass_does_not_reinstate_a_workflow_discarded_during_it(
    clock: ManualClock,
) -> None:
    durable, spy = spied(clock)
    retry = timedelta(seconds=5)
    in_pass = asyncio.Event()
    carry_on = asyncio.Event()
    passes = 0

    async def body(run: Run[Any]) -> None:
        nonlocal passes
        passes += 1
        in_pass.set()
        await carry_on.wait()
        await run.step("payout", lambda: "po_1", as_str)

    await durable.scheduler.make_ready(WORKFLOW)
    async with working(durable, body, clock=clock, retry=retry):
        await asyncio.wait_for(in_pass.wait(), 2)
        await durable.discard(WORKFLOW)
        carry_on.set()
        assert (await spy.answer())[0] == "wake_at"
        clock.advance(retry * 2)
        await asyncio.sleep(0.05)

    assert passes == 1
    assert await spy.scheduled(WORKFLOW) is None
    assert await durable.checkpointer.load(WORKFLOW) == {}


async def test_a_dead_workers_delivery_is_taken_over_after_its_lease(clock: ManualClock) -> None:
    lease = timedelta(seconds=30)
    durable, spy = spied(clock, lease=lease)
    in_pass = asyncio.Event()
    interrupted = asyncio.Event()
    passes = 0

    async def body(run: Run[Any]) -> str:
        nonlocal passes
        passes += 1
        if passes == 1:
            in_pass.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                interrupted.set()
                raise
        return await run.step("payout", lambda: f"po_{passes}", as_str)

    taken_at = clock.now()
    await durable.scheduler.make_ready(WORKFLOW)
    async with working(durable, body, clock=clock):
        await asyncio.wait_for(in_pass.wait(), 2)
    assert interrupted.is_set()
    # Nothing answered for the delivery: it stays hidden for the rest of its lease.
    assert await spy.scheduled(WORKFLOW) == taken_at + lease

    async with working(durable, body, clock=clock):
        await asyncio.sleep(0.05)
        assert passes == 1

        clock.advance(lease)
        assert (await spy.answer())[0] == "done"

    assert passes == 2
    assert await durable.checkpointer.load(WORKFLOW) == {"payout": "po_2"}


async def test_cancelling_a_worker_as_work_arrives_stops_it() -> None:
    async def body(run: Run[Any]) -> None:
        ran.append(run.workflow)

    # The race is one turn of the loop wide, so give it several chances.
    for _ in range(5):
        durable, _ = spied()
        ran: list[str] = []
        worker = asyncio.ensure_future(work(durable, body, poll=timedelta(milliseconds=100)))
        await asyncio.sleep(0.03)  # the worker is waiting for work
        await durable.scheduler.make_ready(WORKFLOW)
        worker.cancel()
        await asyncio.wait({worker}, timeout=0.1)
        stopped = worker.done()
        await cancelled(worker)

        assert stopped
        assert ran == []


# -- the timer ---------------------------------------------------------------------------


async def test_the_timer_calls_wake_due_every_tick_with_the_clocks_time(
    clock: ManualClock,
) -> None:
    durable, spy = spied(clock)

    async def body(run: Run[Any]) -> None:
        raise AssertionError("nothing is ready")

    async with working(durable, body, clock=clock, tick=timedelta(milliseconds=10)):
        await eventually(lambda: len(spy.ticks) >= 3)
        assert set(spy.ticks) == {clock.now()}
        later = clock.advance(timedelta(minutes=1))
        await eventually(lambda: spy.ticks[-1] == later)


# -- stopping ----------------------------------------------------------------------------


async def test_stop_lets_passes_in_flight_finish_and_takes_no_more_work() -> None:
    durable, spy = spied()
    stop = asyncio.Event()
    release = asyncio.Event()
    started: list[str] = []
    finished: list[str] = []

    async def body(run: Run[Any]) -> None:
        started.append(run.workflow)
        await release.wait()
        finished.append(run.workflow)

    for i in range(3):
        await durable.scheduler.make_ready(f"wf-{i}")
    worker = asyncio.ensure_future(work(durable, body, limit=3, stop=stop, **QUICK))
    await eventually(lambda: len(started) == 3)

    stop.set()
    await durable.scheduler.make_ready("wf-late")
    await asyncio.sleep(0.05)
    assert not worker.done()
    release.set()
    await asyncio.wait_for(worker, 2)

    assert sorted(finished) == ["wf-0", "wf-1", "wf-2"]
    assert [how for how, _, _ in spy.answers] == ["done"] * 3
    assert "wf-late" not in started


async def test_stop_cancels_passes_still_running_after_the_grace(clock: ManualClock) -> None:
    durable, spy = spied(clock)
    stop = asyncio.Event()
    in_pass = asyncio.Event()
    interrupted = asyncio.Event()

    async def body(run: Run[Any]) -> None:
        in_pass.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            interrupted.set()
            raise

    taken_at = clock.now()
    await durable.scheduler.make_ready(WORKFLOW)
    worker = asyncio.ensure_future(
        work(durable, body, stop=stop, grace=timedelta(milliseconds=50), clock=clock, **QUICK)
    )
    await asyncio.wait_for(in_pass.wait(), 2)
    stop.set()
    await asyncio.wait_for(worker, 2)

    assert interrupted.is_set()
    assert spy.answers == []  # left outstanding for another worker
    assert await spy.scheduled(WORKFLOW) == taken_at + spy.lease


async def test_stop_with_nothing_running_returns_promptly() -> None:
    durable, _ = spied()
    stop = asyncio.Event()

    async def body(run: Run[Any]) -> None:
        raise AssertionError("nothing is ready")

    worker = asyncio.ensure_future(work(durable, body, stop=stop, **QUICK))
    await asyncio.sleep(0.03)
    stop.set()
    await asyncio.wait_for(worker, 1)


# -- refused settings --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["liveness", "budget", "poll", "tick", "idle", "retry", "grace"])
@pytest.mark.parametrize("value", [timedelta(0), timedelta(seconds=-1)])
async def test_work_refuses_non_positive_timings(name: str, value: timedelta) -> None:
    durable, spy = spied()

    async def body(run: Run[Any]) -> None:
        raise AssertionError("must not run")

    options: dict[str, Any] = {name: value}
    with pytest.raises(ValueError, match=name):
        await asyncio.wait_for(work(durable, body, **options), 1)
    assert spy.calls == []


@pytest.mark.parametrize("limit", [0, -1])
async def test_work_refuses_a_pool_of_fewer_than_one(limit: int) -> None:
    durable, spy = spied()

    async def body(run: Run[Any]) -> None:
        raise AssertionError("must not run")

    with pytest.raises(ValueError, match="limit"):
        await asyncio.wait_for(work(durable, body, limit=limit), 1)
    assert spy.calls == []
