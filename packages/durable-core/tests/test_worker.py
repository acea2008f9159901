"""``work``: the queue worker. Its pool, its timer, and how it answers for every delivery it
takes, including the ones whose pass it never finishes."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import socket
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import durable.children as durable_children
import pytest
from durable.clock import ManualClock
from durable.durable import SplitDurable
from durable.interfaces import (
    Began,
    Delivery,
    Durable,
    Entry,
    LifecycleNotOffered,
    Pass,
    Recorded,
    Settlement,
    Status,
    StoreUnavailable,
    WorkflowStatus,
)
from durable.memory import MemoryCheckpointer, MemoryDurable, MemoryScheduler
from durable.parsers import exactly
from durable.policy import RetryPolicy
from durable.run import DEFAULT_LIVENESS, Run, resume
from durable.worker import work
from durable.workflows import Kind, WorkflowFailed, Workflows

WORKFLOW = "wf-payout-1"
LONG = timedelta(minutes=10)
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


class Plain:
    """A checkpointer that offers only the ``Checkpointer`` methods: the memory store as a
    third party's store without lifecycle looks to the worker."""

    def __init__(self, inner: MemoryCheckpointer) -> None:
        self.inner = inner

    async def load(self, workflow: str) -> dict[str, object]:
        return await self.inner.load(workflow)

    async def history(self, workflow: str) -> list[Entry]:
        return await self.inner.history(workflow)

    async def claim(self, workflow: str, *, liveness: timedelta, budget: timedelta) -> Pass | None:
        return await self.inner.claim(workflow, liveness=liveness, budget=budget)

    async def renew(self, holder: Pass) -> Pass:
        return await self.inner.renew(holder)

    async def release(self, holder: Pass) -> None:
        await self.inner.release(holder)

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        return await self.inner.record(holder, key, value)

    async def transact(self, holder: Pass, key: str, effect: Any) -> Recorded:
        return await self.inner.transact(holder, key, effect)

    async def supply(self, workflow: str, key: str, value: object) -> object:
        return await self.inner.supply(workflow, key, value)

    async def append(self, workflow: str, value: object, *, message_id: str | None = None) -> str:
        return await self.inner.append(workflow, value, message_id=message_id)

    async def discard(self, workflow: str) -> None:
        await self.inner.discard(workflow)


def plain(inner: MemoryCheckpointer, scheduler: MemoryScheduler) -> SplitDurable[Any]:
    """``inner`` and ``scheduler`` as a store without lifecycle."""
    return SplitDurable(Plain(inner), scheduler)


@contextlib.asynccontextmanager
async def working(
    durable: Durable[Any],
    body: Callable[[Run[Any]], Awaitable[object]] | Workflows | Kind[Any, Any],
    **options: Any,
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


async def test_without_lifecycle_a_failing_body_is_logged_and_retried_after_retry(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The previous release's path, kept for a store that offers no lifecycle."""
    spy = Spy(clock=clock)
    durable = plain(MemoryCheckpointer(clock=clock), spy)
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


# -- store outages -----------------------------------------------------------------------


class Switch:
    """Makes the stores built over it unreachable while ``down``, as a server that went away
    would: every call raises ``StoreUnavailable`` and reaches nothing."""

    def __init__(self) -> None:
        self.down = False
        self.refused: list[str] = []

    def reach(self, what: str) -> None:
        if self.down:
            self.refused.append(what)
            raise StoreUnavailable(f"could not reach the test store for {what}")


class CutCheckpointer(MemoryCheckpointer):
    def __init__(self, switch: Switch, clock: ManualClock | None) -> None:
        super().__init__(clock=clock)
        self.switch = switch

    async def claim(self, workflow: str, *, liveness: timedelta, budget: timedelta) -> Pass | None:
        self.switch.reach("claim")
        return await super().claim(workflow, liveness=liveness, budget=budget)

    async def load(self, workflow: str) -> dict[str, object]:
        self.switch.reach("load")
        return await super().load(workflow)

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        self.switch.reach("record")
        return await super().record(holder, key, value)

    async def history(self, workflow: str) -> list[Entry]:
        self.switch.reach("load")  # what a pass reads its records with, operations and all
        return await super().history(workflow)

    async def record_as(self, holder: Pass, key: str, value: object, operation: str) -> Recorded:
        self.switch.reach("record")
        return await super().record_as(holder, key, value, operation)

    async def renew(self, holder: Pass) -> Pass:
        self.switch.reach("renew")
        return await super().renew(holder)

    async def release(self, holder: Pass) -> None:
        self.switch.reach("release")
        await super().release(holder)

    async def begin(
        self, workflow: str, *, liveness: timedelta, budget: timedelta, owner: str
    ) -> Began | None:
        self.switch.reach("begin")
        return await super().begin(workflow, liveness=liveness, budget=budget, owner=owner)

    async def beat(self, holder: Pass, step: str | None) -> Pass:
        self.switch.reach("beat")
        return await super().beat(holder, step)

    async def settle(self, holder: Pass, settlement: Settlement) -> None:
        self.switch.reach("settle")
        await super().settle(holder, settlement)


class CutScheduler(Spy):
    def __init__(self, switch: Switch, **options: Any) -> None:
        super().__init__(**options)
        self.switch = switch

    async def prepare(self) -> None:
        self.switch.reach("prepare")
        await super().prepare()

    async def next_ready(self, within: timedelta) -> Delivery | None:
        self.switch.reach("next_ready")
        return await super().next_ready(within)

    async def reclaim(self, idle: timedelta) -> Delivery | None:
        self.switch.reach("reclaim")
        return await super().reclaim(idle)

    async def wake_at(self, delivery: Delivery, when: datetime) -> None:
        self.switch.reach("wake_at")
        await super().wake_at(delivery, when)

    async def done(self, delivery: Delivery) -> None:
        self.switch.reach("done")
        await super().done(delivery)

    async def wake_due(self, now: datetime) -> tuple[str, ...]:
        self.switch.reach("wake_due")
        return await super().wake_due(now)


def cuttable(
    clock: ManualClock | None = None, **options: Any
) -> tuple[MemoryDurable, CutScheduler, Switch]:
    switch = Switch()
    scheduler = CutScheduler(switch, clock=clock, **options)
    return MemoryDurable(CutCheckpointer(switch, clock), scheduler), scheduler, switch


def cuttable_plain(
    clock: ManualClock | None = None,
) -> tuple[SplitDurable[Any], CutScheduler, Switch]:
    """``cuttable``, as a store without lifecycle (the worker's path for a bare body)."""
    switch = Switch()
    scheduler = CutScheduler(switch, clock=clock)
    return plain(CutCheckpointer(switch, clock), scheduler), scheduler, switch


def worker_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "durable.worker"]


async def test_without_lifecycle_a_pass_cut_short_by_an_outage_leaves_its_delivery_out(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    durable, spy, switch = cuttable_plain(clock)
    midway = asyncio.Event()
    go_on = asyncio.Event()
    passes = 0

    async def body(run: Run[Any]) -> str:
        nonlocal passes
        passes += 1
        await run.step("reserved", lambda: "r1", as_str)
        if passes == 1:
            midway.set()
            await go_on.wait()
        return await run.step("payout", lambda: f"po_{passes}", as_str)

    taken_at = clock.now()
    await durable.scheduler.make_ready(WORKFLOW)
    with caplog.at_level(logging.DEBUG, logger="durable"):
        async with working(durable, body, clock=clock):
            await asyncio.wait_for(midway.wait(), 2)
            switch.down = True
            go_on.set()
            await eventually(lambda: "release" in switch.refused)
            await asyncio.sleep(0.05)
            assert spy.answers == []  # neither done nor deferred: left outstanding
            assert await spy.scheduled(WORKFLOW) == taken_at + spy.lease

            switch.down = False
            clock.advance(max(spy.lease, DEFAULT_LIVENESS))  # the unreleased claim lapses too
            assert (await spy.answer())[0] == "done"

    assert passes == 2
    assert await durable.checkpointer.load(WORKFLOW) == {"reserved": "r1", "payout": "po_2"}
    records = worker_records(caplog)
    assert not [r for r in records if "body failed" in r.getMessage()]
    tracebacks = [r for r in records if r.exc_info]
    assert len(tracebacks) == 1
    assert tracebacks[0].exc_info is not None
    assert isinstance(tracebacks[0].exc_info[1], StoreUnavailable)
    first = tracebacks[0].getMessage()
    assert "store outage: SplitDurable" in first
    assert f"running workflow {WORKFLOW!r}" in first
    assert "could not reach the test store for record" in first
    assert "delivery stays out" in first
    again = [r for r in records if "reachable again" in r.getMessage()]
    assert len(again) == 1
    assert f"the passes of {WORKFLOW!r} were cut short" in again[0].getMessage()
    # The failed release says nothing a person must act on: the claim lapses by itself.
    assert not [r for r in caplog.records if r.name == "durable.run" and r.levelno > logging.DEBUG]


async def test_without_lifecycle_an_answer_lost_to_an_outage_is_replayed_by_the_next_pass(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    durable, spy, switch = cuttable_plain(clock)
    passes = 0

    async def body(run: Run[Any]) -> str:
        nonlocal passes
        passes += 1
        payout = await run.step("payout", lambda: f"po_{passes}", as_str)
        if passes == 1:
            switch.down = True  # the store goes away between the pass and its answer
        return payout

    await durable.scheduler.make_ready(WORKFLOW)
    with caplog.at_level(logging.INFO, logger="durable.worker"):
        async with working(durable, body, clock=clock):
            await eventually(lambda: "done" in switch.refused)
            assert spy.answers == []
            switch.down = False
            clock.advance(max(spy.lease, DEFAULT_LIVENESS))
            assert (await spy.answer())[0] == "done"

    assert passes == 2
    assert await durable.checkpointer.load(WORKFLOW) == {"payout": "po_1"}  # replayed
    records = worker_records(caplog)
    assert not [r for r in records if "body failed" in r.getMessage()]
    [first] = [r for r in records if r.exc_info]
    assert f"answering for workflow {WORKFLOW!r} (done)" in first.getMessage()


async def test_an_outage_is_retried_with_backoff_and_logged_once_in_full(
    caplog: pytest.LogCaptureFixture,
) -> None:
    durable, spy, switch = cuttable()
    finished: set[str] = set()

    async def body(run: Run[Any]) -> None:
        finished.add(run.workflow)

    outage = 0.6  # seconds; polling every 10 ms without backoff would make 60 tries
    with caplog.at_level(logging.INFO, logger="durable.worker"):
        async with working(durable, body):
            await asyncio.sleep(0.05)
            switch.down = True
            await asyncio.sleep(outage)
            takes = sum(1 for what in switch.refused if what in ("reclaim", "next_ready"))
            ticks = switch.refused.count("wake_due")
            for workflow in ("wf-a", "wf-b"):
                await MemoryScheduler.make_ready(spy, workflow)
            switch.down = False
            await eventually(lambda: finished == {"wf-a", "wf-b"})

    # Waits of 10, 20, 40, 80, 160, 320 ms (each jittered to between half and all of it)
    # leave room for at most eight tries in 0.6 s, whoever is trying.
    assert 1 <= takes <= 8
    assert ticks <= 8
    records = worker_records(caplog)
    outage_lines = [r for r in records if r.getMessage().startswith("store outage:")]
    assert 2 <= len(outage_lines) <= 8
    assert sum(1 for r in records if r.exc_info) == 1
    assert outage_lines[0].exc_info is not None
    assert all(r.exc_info is None for r in outage_lines[1:])
    assert all("\n" not in r.getMessage() for r in outage_lines)
    assert len([r for r in records if "reachable again" in r.getMessage()]) == 1


async def test_a_worker_started_while_its_store_is_down_waits_for_it() -> None:
    durable, spy, switch = cuttable()
    finished = asyncio.Event()

    async def body(run: Run[Any]) -> None:
        finished.set()

    switch.down = True
    async with working(durable, body):
        await asyncio.sleep(0.2)
        assert 1 <= switch.refused.count("prepare") <= 6
        await MemoryScheduler.make_ready(spy, WORKFLOW)
        switch.down = False
        await asyncio.wait_for(finished.wait(), 2)
    assert "prepare" in spy.calls


async def test_an_unknown_error_from_the_store_is_still_a_body_failure(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """A third-party store that raises its driver's own errors still works, as before."""
    spy = Spy(clock=clock)
    durable = plain(MemoryCheckpointer(clock=clock), spy)
    passes = 0

    async def body(run: Run[Any]) -> None:
        nonlocal passes
        passes += 1
        if passes == 1:
            raise OSError("connection reset by peer")

    await durable.scheduler.make_ready(WORKFLOW)
    with caplog.at_level(logging.ERROR, logger="durable.worker"):
        async with working(durable, body, clock=clock):
            assert (await spy.answer())[0] == "wake_at"
    assert [r for r in worker_records(caplog) if "body failed" in r.getMessage()]
    assert not [r for r in worker_records(caplog) if "store outage" in r.getMessage()]


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


async def test_a_grace_that_runs_out_names_the_workflows_whose_passes_it_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    durable, _ = spied()
    stop = asyncio.Event()
    started: set[str] = set()

    async def body(run: Run[Any]) -> None:
        started.add(run.workflow)
        if run.workflow != "wf-quick":
            await asyncio.Event().wait()

    for workflow in ("wf-stuck-1", "wf-quick", "wf-stuck-2"):
        await durable.scheduler.make_ready(workflow)
    with caplog.at_level(logging.INFO, logger="durable.worker"):
        worker = asyncio.ensure_future(
            work(durable, body, stop=stop, grace=timedelta(milliseconds=50), **QUICK)
        )
        await eventually(lambda: len(started) == 3)
        stop.set()
        await asyncio.wait_for(worker, 2)

    dropped = [r.getMessage() for r in worker_records(caplog) if "grace" in r.getMessage()]
    assert len(dropped) == 1
    assert "'wf-stuck-1', 'wf-stuck-2'" in dropped[0]
    assert "wf-quick" not in dropped[0]


async def test_stop_with_nothing_running_returns_promptly() -> None:
    durable, _ = spied()
    stop = asyncio.Event()

    async def body(run: Run[Any]) -> None:
        raise AssertionError("nothing is ready")

    worker = asyncio.ensure_future(work(durable, body, stop=stop, **QUICK))
    await asyncio.sleep(0.03)
    stop.set()
    await asyncio.wait_for(worker, 1)


class LosesCancellation(MemoryScheduler):
    """A scheduler whose timer call loses a cancellation landing in it, as redis-py's
    asyncio client can: the reply comes back as if nothing happened."""

    async def wake_due(self, now: datetime) -> tuple[str, ...]:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(1)  # a command in flight, where the worker's stop lands
        return await super().wake_due(now)


async def test_a_timer_call_that_loses_its_cancellation_does_not_keep_the_worker_running() -> None:
    durable = MemoryDurable(MemoryCheckpointer(), LosesCancellation())
    stop = asyncio.Event()

    async def body(run: Run[Any]) -> None:
        raise AssertionError("nothing is ready")

    worker = asyncio.ensure_future(work(durable, body, stop=stop, **QUICK))
    await asyncio.sleep(0.03)
    stop.set()
    # Before: the timer slept and went round again for ever, and the worker waited for it.
    await asyncio.wait_for(worker, 5)


async def test_a_pass_that_ignores_its_cancellation_is_left_behind_with_an_error(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("durable.worker.STOP_WAIT", timedelta(milliseconds=200))
    durable, _ = spied()
    stop = asyncio.Event()
    started = asyncio.Event()
    release = asyncio.Event()

    async def body(run: Run[Any]) -> None:
        started.set()
        while not release.is_set():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(0.01)

    await durable.scheduler.make_ready("wf-stubborn")
    worker = asyncio.ensure_future(
        work(durable, body, stop=stop, grace=timedelta(milliseconds=50), **QUICK)
    )
    try:
        await asyncio.wait_for(started.wait(), 5)
        stop.set()
        await asyncio.wait_for(worker, 5)
    finally:
        release.set()
    stuck = [r.getMessage() for r in worker_records(caplog) if "did not end" in r.getMessage()]
    assert len(stuck) == 1
    assert "'wf-stubborn'" in stuck[0]


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


# -- workflows by kind: attempts, backoff and the outcome --------------------------------


def exact(**policy: Any) -> RetryPolicy:
    """A policy without jitter, so a test knows every wait to the microsecond."""
    return RetryPolicy(**{"jitter": 0.0, **policy})


async def status_of(durable: MemoryDurable, workflow: str = WORKFLOW) -> WorkflowStatus:
    found = await durable.checkpointer.status(workflow)
    assert found is not None, f"{workflow!r} has no status"
    return found


async def test_a_failing_kind_backs_off_by_its_policy_and_fails_with_the_last_error(
    clock: ManualClock,
) -> None:
    durable, spy = spied(clock)
    registry = Workflows()
    runs = 0

    @registry.kind("payout", policy=exact(max_attempts=3, initial=timedelta(seconds=2)))
    async def payout(run: Run[Any], order: object) -> None:
        nonlocal runs
        runs += 1
        raise ValueError(f"card declined ({runs})")

    await durable.start(payout, WORKFLOW, {"amount": 5})
    async with working(durable, registry, clock=clock):
        for attempt, wait in ((1, 2), (2, 4)):
            assert (await spy.answer())[0::2] == ("wake_at", clock.now() + timedelta(seconds=wait))
            st = await status_of(durable)
            assert (st.status, st.attempts) == (Status.SLEEPING, attempt)
            assert st.failure is not None
            assert str(st.failure) == f"ValueError: card declined ({attempt})"
            assert st.until == clock.now() + timedelta(seconds=wait)
            assert await durable.checkpointer.claimed(WORKFLOW) is None
            clock.advance(timedelta(seconds=wait))
        assert (await spy.answer())[0] == "done"
    st = await status_of(durable)
    assert (st.status, st.attempts, runs) == (Status.FAILED, 3, 3)
    assert st.failure is not None
    assert (st.failure.type, st.failure.message, st.failure.attempts) == (
        "ValueError",
        "card declined (3)",
        3,
    )
    with pytest.raises(WorkflowFailed, match="failed after 3 attempts: ValueError: card declined"):
        await durable.handle(WORKFLOW).result()


async def test_the_jitter_source_is_the_workers_random(clock: ManualClock) -> None:
    durable, spy = spied(clock)
    registry = Workflows()

    @registry.kind("payout", policy=RetryPolicy(initial=timedelta(seconds=10), jitter=0.5))
    async def payout(run: Run[Any], order: object) -> None:
        raise ValueError("declined")

    await durable.start(payout, WORKFLOW)
    async with working(durable, registry, clock=clock, random=lambda: 1.0):
        assert (await spy.answer())[0::2] == ("wake_at", clock.now() + timedelta(seconds=5))


async def test_passes_lost_to_crashes_are_counted_and_end_as_pass_lost(clock: ManualClock) -> None:
    """A pass begun and never settled is counted by its begin alone, so a crash loop ends
    after max_attempts deaths, without the body running again."""
    durable, spy = spied(clock)
    registry = Workflows()
    runs = 0

    @registry.kind("payout", policy=exact(max_attempts=3))
    async def payout(run: Run[Any], order: object) -> None:
        nonlocal runs
        runs += 1

    await durable.start(payout, WORKFLOW)
    liveness = timedelta(seconds=30)
    for death in range(1, 4):
        began = await durable.checkpointer.begin(
            WORKFLOW, liveness=liveness, budget=LONG, owner=f"host:{death}"
        )
        assert began is not None
        assert began.attempts == death
        assert began.lost == (f"host:{death - 1}" if death > 1 else None)
        clock.advance(liveness)  # the process died: nobody renews or settles
    async with working(durable, registry, clock=clock):
        assert (await spy.answer())[0] == "done"
    assert runs == 0
    st = await status_of(durable)
    assert st.failure is not None
    assert (st.status, st.attempts, st.failure.type, st.failure.attempts) == (
        Status.FAILED,
        3,
        "durable.PassLost",
        3,
    )
    assert st.failure.message == (
        "attempt 3 of 3 never ended (it ran on host:3): its process died or stalled past its "
        "liveness"
    )


async def test_an_outage_in_a_pass_gives_its_attempt_back(clock: ManualClock) -> None:
    durable, spy = spied(clock)
    registry = Workflows()
    retry = timedelta(seconds=7)
    runs = 0

    @registry.kind("payout", policy=exact(max_attempts=1))
    async def payout(run: Run[Any], order: object) -> str:
        nonlocal runs
        runs += 1
        if runs < 3:
            raise StoreUnavailable("the server went away")
        return "paid"

    await durable.start(payout, WORKFLOW)
    async with working(durable, registry, clock=clock, retry=retry):
        for _ in range(2):
            assert (await spy.answer())[0::2] == ("wake_at", clock.now() + retry)
            st = await status_of(durable)
            assert (st.status, st.attempts) == (Status.SLEEPING, 0)
            clock.advance(retry)
        assert (await spy.answer())[0] == "done"
    st = await status_of(durable)
    assert (st.status, st.attempts, st.value) == (Status.FINISHED, 1, "paid")


async def test_a_pass_fenced_by_its_budget_gives_its_attempt_back(clock: ManualClock) -> None:
    durable, spy = spied(clock, lease=timedelta(hours=1))
    registry = Workflows()
    retry = timedelta(seconds=5)
    stuck = asyncio.Event()

    @registry.kind("payout", policy=exact(max_attempts=1))
    async def payout(run: Run[Any], order: object) -> None:
        stuck.set()
        await asyncio.Event().wait()

    await durable.start(payout, WORKFLOW)
    options = {"liveness": timedelta(seconds=0.06), "budget": timedelta(minutes=1)}
    async with working(durable, registry, clock=clock, retry=retry, **options):
        await asyncio.wait_for(stuck.wait(), 2)
        clock.advance(timedelta(minutes=2))  # the budget is spent; the next beat is refused
        assert (await spy.answer())[0::2] == ("wake_at", clock.now() + retry)
    st = await status_of(durable)
    assert (st.status, st.attempts) == (Status.SLEEPING, 0)


async def test_the_running_status_names_the_worker_and_the_step_in_flight(
    clock: ManualClock,
) -> None:
    durable, _ = spied(clock)
    registry = Workflows()
    charging = asyncio.Event()
    release = asyncio.Event()

    @registry.kind("payout")
    async def payout(run: Run[Any], order: object) -> str:
        async def charge() -> str:
            charging.set()
            await release.wait()
            return "ch-1"

        return await run.step("charge", charge, exactly(str))

    await durable.start(payout, WORKFLOW)
    async with working(
        durable, registry, clock=clock, name="host-a:4242", liveness=timedelta(seconds=0.06)
    ):
        await asyncio.wait_for(charging.wait(), 2)
        await eventually(lambda: durable.checkpointer._lives[WORKFLOW].step == "charge")
        st = await status_of(durable)
        assert (st.status, st.owner, st.step, st.attempts) == (
            Status.RUNNING,
            "host-a:4242",
            "charge",
            1,
        )
        release.set()
        assert await durable.handle(WORKFLOW).result(timeout=2) == "ch-1"


async def test_a_kind_this_worker_does_not_serve_is_deferred_not_failed(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    durable, spy = spied(clock)
    registry = Workflows()
    retry = timedelta(seconds=5)

    @registry.kind("payout")
    async def payout(run: Run[Any], order: object) -> None:
        return None

    await durable.start("invoice", "inv-1")
    await durable.start("invoice", "inv-2")
    with caplog.at_level(logging.WARNING, logger="durable.worker"):
        async with working(durable, registry, clock=clock, retry=retry):
            for _ in range(2):
                assert (await spy.answer())[0::2] == ("wake_at", clock.now() + retry)
    for workflow in ("inv-1", "inv-2"):
        st = await status_of(durable, workflow)
        assert (st.status, st.attempts, st.kind) == (Status.SLEEPING, 0, "invoice")
    warned = [r for r in worker_records(caplog) if "kind 'invoice'" in r.getMessage()]
    assert len(warned) == 1, "the unserved kind was warned about more than once"
    assert "this worker serves payout" in warned[0].getMessage()


async def test_a_workflow_without_a_kind_runs_as_the_registrys_default(
    clock: ManualClock,
) -> None:
    durable, spy = spied(clock)
    registry = Workflows()

    @registry.kind("payout")
    async def payout(run: Run[Any], order: object) -> str:
        return await run.receive("order", exactly(str))

    await durable.send(WORKFLOW, "o-1")
    async with working(durable, registry, clock=clock):
        assert (await spy.answer())[0] == "done"
    st = await status_of(durable)
    assert (st.status, st.kind, st.value) == (Status.FINISHED, None, "o-1")


async def test_an_input_the_kind_refuses_fails_the_workflow_at_once(clock: ManualClock) -> None:
    durable, spy = spied(clock)
    registry = Workflows()
    runs = 0

    @registry.kind("payout", input=exactly(int))
    async def payout(run: Run[Any], amount: int) -> int:
        nonlocal runs
        runs += 1
        return amount

    await durable.start("payout", WORKFLOW, "a lot")  # by name: nothing parsed it
    async with working(durable, registry, clock=clock):
        assert (await spy.answer())[0] == "done"
    st = await status_of(durable)
    assert st.failure is not None
    assert (st.status, st.failure.type, runs) == (Status.FAILED, "durable.run.ParseFailed", 0)
    assert "expected int, got str 'a lot'" in st.failure.message


async def test_a_value_the_store_cannot_keep_is_the_bodys_failure(
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Settled again as the body's failure, and the first settle's telling of a parent is
    closed, not left unawaited (a RuntimeWarning at garbage collection)."""
    tellings: list[Any] = []
    report = durable_children.report

    def kept(*args: Any) -> Any:
        tellings.append(report(*args))
        return tellings[-1]

    monkeypatch.setattr(durable_children, "report", kept)
    durable, spy = spied(clock)
    registry = Workflows()

    @registry.kind("payout", policy=exact(max_attempts=1))
    async def payout(run: Run[Any], order: object) -> object:
        return object()

    await durable.start(payout, WORKFLOW)
    async with working(durable, registry, clock=clock):
        assert (await spy.answer())[0] == "done"
    st = await status_of(durable)
    assert st.failure is not None
    assert (st.status, st.failure.type) == (Status.FAILED, "durable.codec.UnencodableValue")
    assert len(tellings) == 2, tellings  # the finished outcome's, then the failure's
    assert all(t.cr_frame is None for t in tellings), "a telling was neither sent nor closed"


async def test_the_outcome_lands_before_the_answer_so_a_lost_answer_runs_nothing_again(
    clock: ManualClock,
) -> None:
    """Truth before queue: an answer lost to an outage leaves the delivery out, and the pass
    that takes it next finds the workflow finished and only answers for it."""
    switch = Switch()  # the scheduler's alone: the checkpointer stays up
    spy = CutScheduler(switch, clock=clock)
    durable = MemoryDurable(MemoryCheckpointer(clock=clock), spy)
    registry = Workflows()
    runs = 0

    @registry.kind("payout")
    async def payout(run: Run[Any], order: object) -> str:
        nonlocal runs
        runs += 1
        if runs == 1:
            switch.down = True  # the scheduler's server goes away before the answer
        return "paid"

    await durable.start(payout, WORKFLOW)
    async with working(durable, registry, clock=clock):
        await eventually(lambda: "done" in switch.refused)
        assert (await status_of(durable)).status == Status.FINISHED
        switch.down = False
        clock.advance(spy.lease)
        assert (await spy.answer())[0] == "done"
    assert runs == 1


async def test_a_registry_on_a_store_without_lifecycle_is_refused_before_any_work() -> None:
    spy = Spy()
    with pytest.raises(LifecycleNotOffered, match="cannot run workflows by kind"):
        await work(plain(MemoryCheckpointer(), spy), Workflows.of(noop), **QUICK)
    assert spy.calls == []


async def test_a_bare_body_on_a_store_without_lifecycle_is_warned_about_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    spy = Spy()
    with caplog.at_level(logging.WARNING, logger="durable.worker"):
        async with working(plain(MemoryCheckpointer(), spy), noop):
            await asyncio.sleep(0.05)
    warned = [r for r in worker_records(caplog) if "does not offer lifecycle" in r.getMessage()]
    assert len(warned) == 1
    assert "retried every 0:00:05 without bound" in warned[0].getMessage()


async def noop(run: Run[Any]) -> None:
    return None


async def test_a_worker_is_named_after_its_host_and_process_by_default() -> None:
    durable = MemoryDurable()
    registry = Workflows()
    running = asyncio.Event()

    @registry.kind("payout")
    async def payout(run: Run[Any], order: object) -> None:
        running.set()
        await asyncio.Event().wait()

    await durable.start(payout, WORKFLOW)
    async with working(durable, registry):
        await asyncio.wait_for(running.wait(), 2)
        assert (await status_of(durable)).owner == f"{socket.gethostname()}:{os.getpid()}"


async def test_an_outage_that_outlasts_the_pass_costs_that_attempt_and_no_more(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The store goes away mid-pass and stays away through the settle that would give the
    attempt back: the delivery stays out, the pass stays counted (its claim lapses as a dead
    pass's would), and the next pass, once the store is back, says so and finishes."""
    durable, spy, switch = cuttable(clock)
    registry = Workflows()
    midway, go_on = asyncio.Event(), asyncio.Event()
    runs = 0

    @registry.kind("payout")
    async def payout(run: Run[Any], order: object) -> str:
        nonlocal runs
        runs += 1
        reserved = await run.step("reserve", lambda: "r-1", exactly(str))
        if runs == 1:
            midway.set()
            await go_on.wait()
        return await run.step("pay", lambda: f"{reserved}/paid", exactly(str))

    await durable.start(payout, WORKFLOW)
    with caplog.at_level(logging.INFO, logger="durable.worker"):
        async with working(durable, registry, clock=clock):
            await asyncio.wait_for(midway.wait(), 2)
            switch.down = True
            go_on.set()
            await eventually(lambda: "settle" in switch.refused)
            await asyncio.sleep(0.05)
            assert spy.answers == []
            switch.down = False
            clock.advance(max(spy.lease, DEFAULT_LIVENESS))
            assert (await spy.answer())[0] == "done"
    assert runs == 2
    st = await status_of(durable)
    assert (st.status, st.attempts, st.value) == (Status.FINISHED, 2, "r-1/paid")
    messages = [r.getMessage() for r in worker_records(caplog)]
    assert any("gives its attempt back" in m for m in messages), messages
    assert any("never ended; attempt 2 of 10" in m for m in messages), messages
    assert not [m for m in messages if "failed" in m and "attempt" in m and "of 10 failed" in m]


async def test_a_kindless_workflow_waits_when_the_registry_names_no_default(
    clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    durable, spy = spied(clock)
    registry = Workflows()
    retry = timedelta(seconds=5)

    @registry.kind("payout")
    async def payout(run: Run[Any], order: object) -> None:
        return None

    @registry.kind("refund")
    async def refund(run: Run[Any], order: object) -> None:
        return None

    await durable.send(WORKFLOW, "written by the previous release")
    with caplog.at_level(logging.WARNING, logger="durable.worker"):
        async with working(durable, registry, clock=clock, retry=retry):
            assert (await spy.answer())[0::2] == ("wake_at", clock.now() + retry)
    st = await status_of(durable)
    assert (st.status, st.attempts, st.kind) == (Status.SLEEPING, 0, None)
    [warned] = [r for r in worker_records(caplog) if "no recorded kind" in r.getMessage()]
    assert "this registry has no default" in warned.getMessage()


class Counting(MemoryCheckpointer):
    """The memory store, counting every call a worker makes of it."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.calls: Counter[str] = Counter()

    async def begin(
        self, workflow: str, *, liveness: timedelta, budget: timedelta, owner: str
    ) -> Began | None:
        self.calls["begin"] += 1
        return await super().begin(workflow, liveness=liveness, budget=budget, owner=owner)

    async def load(self, workflow: str) -> dict[str, object]:
        self.calls["load"] += 1
        return await super().load(workflow)

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        self.calls["record"] += 1
        return await super().record(holder, key, value)

    async def history(self, workflow: str) -> list[Entry]:
        self.calls["load"] += 1  # a pass reads its records, and their operations, in one read
        return await super().history(workflow)

    async def record_as(self, holder: Pass, key: str, value: object, operation: str) -> Recorded:
        self.calls["record"] += 1
        return await super().record_as(holder, key, value, operation)

    async def settle(self, holder: Pass, settlement: Settlement) -> None:
        self.calls["settle"] += 1
        await super().settle(holder, settlement)

    async def claim(self, workflow: str, *, liveness: timedelta, budget: timedelta) -> Pass | None:
        self.calls["claim"] += 1
        return await super().claim(workflow, liveness=liveness, budget=budget)

    async def release(self, holder: Pass) -> None:
        self.calls["release"] += 1
        await super().release(holder)

    async def beat(self, holder: Pass, step: str | None) -> Pass:
        self.calls["beat"] += 1
        return await super().beat(holder, step)


async def test_a_pass_makes_the_same_writes_as_before_lifecycle_and_a_step_none_more(
    clock: ManualClock,
) -> None:
    """begin stands for claim and settle for release: a five-step pass is one begin, one
    load, five records and one settle, and nothing else."""
    counting = Counting(clock=clock)
    spy = Spy(clock=clock)
    durable = MemoryDurable(counting, spy)
    registry = Workflows()

    @registry.kind("five")
    async def five(run: Run[Any], order: object) -> int:
        for i in range(5):
            await run.step(f"step-{i}", lambda i=i: i, exactly(int))
        return 5

    await durable.start(five, WORKFLOW)
    # The schedule loop's reads are the worker's, not the pass's: counted apart, elsewhere.
    async with working(durable, registry, clock=clock, schedules=False):
        assert (await spy.answer())[0] == "done"
    assert counting.calls == Counter({"begin": 1, "load": 1, "record": 5, "settle": 1})


async def test_a_pass_cancelled_by_a_stopping_worker_gives_its_attempt_back(
    clock: ManualClock,
) -> None:
    """A deploy that stops a worker past its grace interrupts the pass, which did nothing
    wrong: it is not counted, and its delivery stays out for the next worker."""
    durable, spy = spied(clock)
    registry = Workflows()
    stop = asyncio.Event()
    in_pass = asyncio.Event()

    @registry.kind("long")
    async def long(run: Run[Any], order: object) -> None:
        in_pass.set()
        await asyncio.Event().wait()

    taken_at = clock.now()
    await durable.start(long, WORKFLOW)
    worker = asyncio.ensure_future(
        work(durable, registry, stop=stop, grace=timedelta(milliseconds=50), clock=clock, **QUICK)
    )
    await asyncio.wait_for(in_pass.wait(), 2)
    stop.set()
    await asyncio.wait_for(worker, 2)
    assert spy.answers == []
    assert await spy.scheduled(WORKFLOW) == taken_at + spy.lease
    st = await status_of(durable)
    assert (st.status, st.attempts) == (Status.SLEEPING, 0)
    assert await durable.checkpointer.claimed(WORKFLOW) is None


class _Unrouted:
    """A scheduler as the previous release defined one: every Scheduler method, no routing."""

    def __init__(self, inner: MemoryScheduler) -> None:
        self._inner = inner
        self.lease = inner.lease
        self.prepare = inner.prepare
        self.make_ready = inner.make_ready
        self.next_ready = inner.next_ready
        self.reclaim = inner.reclaim
        self.wake_at = inner.wake_at
        self.wake_due = inner.wake_due
        self.done = inner.done
        self.cancel = inner.cancel


async def test_a_worker_asked_for_queues_refuses_a_scheduler_that_does_not_route() -> None:
    from durable.interfaces import QueuesNotOffered, Routed

    durable = MemoryDurable()
    assert isinstance(durable.scheduler, Routed)
    unrouted = _Unrouted(durable.scheduler)
    assert not isinstance(unrouted, Routed)
    durable._scheduler = unrouted  # type: ignore[assignment]
    with pytest.raises(QueuesNotOffered, match="does not route by queue"):
        await work(durable, Workflows(), queues=["payments"])
    with pytest.raises(ValueError, match="queues is empty"):
        await work(MemoryDurable(), Workflows(), queues=[])


async def test_a_worker_serving_a_queue_leaves_the_other_queues_workflows_ready() -> None:
    durable = MemoryDurable()
    registry = Workflows()
    ran: list[str] = []

    @registry.kind("charge", queue="payments")
    async def charge(run: Run[Any], order: object) -> None:
        ran.append(run.workflow)

    @registry.kind("mail", queue="emails")
    async def mail(run: Run[Any], order: object) -> None:
        ran.append(run.workflow)

    charged = await durable.start(charge, "c-1")
    await durable.start(mail, "m-1")
    stop = asyncio.Event()
    task = asyncio.create_task(
        work(durable, registry, queues=["payments"], poll=timedelta(milliseconds=20), stop=stop)
    )
    await charged.result(timeout=5)
    await asyncio.sleep(0.1)
    stop.set()
    await task
    assert ran == ["c-1"]
    assert (await status_of(durable, "m-1")).status == Status.READY
