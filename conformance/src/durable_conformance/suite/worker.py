"""work over the store: the queue worker and its timer, end to end.

This is where the Scheduler's guarantees meet a real consumer: a worker takes what is
ready, runs one pass of each, and answers for every delivery (done, or wake_at for a
sleeping, deferred or failed one). Workflows sent to it finish; a sleeping one wakes; a
blocked one runs again when its value arrives; a failing one is retried; a worker that is
cancelled mid-pass leaves its delivery for another; two workers never run one workflow at
once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

from durable.interfaces import Durable
from durable.parsers import exactly
from durable.run import Run
from durable.worker import work

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._support import PATIENCE

QUICK: dict[str, Any] = {
    "poll": timedelta(milliseconds=50),
    "tick": timedelta(milliseconds=50),
    "retry": timedelta(milliseconds=200),
    "liveness": timedelta(seconds=5),
}

Body = Callable[[Run[Any]], Awaitable[object]]


@contextlib.asynccontextmanager
async def working(durable: Durable[Any], body: Body, **options: Any) -> AsyncIterator[None]:
    """A worker running ``body`` on ``durable`` for the duration of the block."""
    stop = asyncio.Event()
    task = asyncio.create_task(work(durable, body, stop=stop, **{**QUICK, **options}))
    try:
        yield
    finally:
        stop.set()
        try:
            await asyncio.wait_for(task, PATIENCE)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def finished(store: StoreUnderTest, workflows: list[str], *, within: float = 60) -> None:
    """Wait until every workflow has recorded its ``finished`` step."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + within
    pending = list(workflows)
    while pending:
        pending = [wf for wf in pending if "finished" not in await store.checkpointer.load(wf)]
        if not pending:
            return
        if loop.time() > give_up:
            raise AssertionError(f"{len(pending)} of {len(workflows)} workflows never finished")
        await asyncio.sleep(0.05)


@requirement("worker.runs-what-is-sent")
async def test_worker_every_workflow_sent_to_it_finishes_once(store: StoreUnderTest) -> None:
    """A worker with a pool of several finishes every one of a hundred workflows sent to it,
    running each one's step once."""
    tag = store.workflow("sent")
    workflows = [f"{tag}-{i}" for i in range(100)]
    ran: Counter[str] = Counter()

    async def body(run: Run[Any]) -> None:
        message = await run.receive("order", exactly(str))

        async def effect() -> str:
            ran[run.workflow] += 1
            return f"did {message}"

        await run.step("finished", effect, exactly(str))

    async with working(store.durable, body, limit=8):
        await asyncio.gather(*(store.durable.send(wf, f"order for {wf}") for wf in workflows))
        await finished(store, workflows)
    assert all(ran[wf] == 1 for wf in workflows), [wf for wf in workflows if ran[wf] != 1][:3]


@requirement("worker.wakes-sleeping-and-blocked")
async def test_worker_a_sleeping_workflow_wakes_and_a_blocked_one_runs_when_its_value_arrives(
    store: StoreUnderTest,
) -> None:
    """A workflow that sleeps is run again by the worker's timer after its deadline; one
    blocked on a value is run again once the value arrives."""
    sleeper, waiter = store.workflow("sleeper"), store.workflow("waiter")

    async def body(run: Run[Any]) -> None:
        if run.workflow == sleeper:
            await run.sleep("nap", timedelta(seconds=0.5))
            await run.step("finished", lambda: "woke", exactly(str))
        else:
            approval = await run.awaiting("approval", exactly(str))
            await run.step("finished", lambda: approval, exactly(str))

    async with working(store.durable, body):
        await store.durable.scheduler.make_ready(sleeper)
        await store.durable.scheduler.make_ready(waiter)
        await asyncio.sleep(0.3)
        assert "finished" not in await store.checkpointer.load(waiter)
        await store.durable.arrive(waiter, "approval", "yes")
        await finished(store, [sleeper, waiter], within=PATIENCE)
    assert (await store.checkpointer.load(waiter))["finished"] == "yes"


@requirement("worker.retries-a-failure")
async def test_worker_a_failing_pass_is_answered_and_retried(store: StoreUnderTest) -> None:
    """A body that fails is logged and deferred, not dropped: the worker runs it again and
    it finishes."""
    wf = store.workflow()
    attempts: Counter[str] = Counter()

    async def body(run: Run[Any]) -> None:
        attempts[run.workflow] += 1
        if attempts[run.workflow] < 3:
            raise RuntimeError("the gateway timed out, this time")
        await run.step("finished", lambda: "done", exactly(str))

    async with working(store.durable, body):
        await store.durable.scheduler.make_ready(wf)
        await finished(store, [wf], within=PATIENCE)
    assert attempts[wf] == 3


@requirement("worker.cancelled-worker-leaves-the-delivery")
async def test_worker_a_worker_cancelled_mid_pass_leaves_the_workflow_for_another(
    store: StoreUnderTest,
) -> None:
    """A worker cancelled while a pass runs leaves the delivery outstanding; another worker
    takes it over once the lease runs out (or by reclaim) and finishes the workflow."""
    async with store.with_options(lease=timedelta(seconds=1)) as opened:
        wf = store.workflow()
        started = asyncio.Event()
        passes: Counter[str] = Counter()

        async def first_body(run: Run[Any]) -> None:
            passes["first"] += 1
            started.set()
            await asyncio.sleep(PATIENCE * 6)

        async def second_body(run: Run[Any]) -> None:
            passes["second"] += 1
            await run.step("finished", lambda: "by the second worker", exactly(str))

        halt = asyncio.Event()  # only for a worker that ignores its cancellation
        first = asyncio.create_task(
            work(
                opened,
                first_body,
                stop=halt,
                grace=timedelta(seconds=1),
                **{**QUICK, "liveness": timedelta(seconds=0.5)},
            )
        )
        await opened.scheduler.make_ready(wf)
        await asyncio.wait_for(started.wait(), PATIENCE)
        first.cancel()
        stopped, _ = await asyncio.wait({first}, timeout=PATIENCE)
        if not stopped:
            halt.set()
            await asyncio.wait({first}, timeout=PATIENCE)
            raise AssertionError(f"a cancelled worker was still running {PATIENCE:.0f} s later")
        async with working(opened, second_body, idle=timedelta(seconds=0.5)):
            loop = asyncio.get_running_loop()
            give_up = loop.time() + PATIENCE * 2
            while "finished" not in await opened.checkpointer.load(wf):
                assert loop.time() < give_up, "the cancelled worker's workflow was never taken"
                await asyncio.sleep(0.05)
        assert passes == Counter({"first": 1, "second": 1})


@requirement("worker.one-pass-at-a-time")
async def test_worker_two_workers_on_two_handles_never_run_one_workflow_at_once(
    store: StoreUnderTest,
) -> None:
    """Two workers, each on its own handle, woken for the same workflows over and over:
    no workflow ever has two passes running at once, and each finishes."""
    tag = store.workflow("shared")
    workflows = [f"{tag}-{i}" for i in range(20)]
    running: Counter[str] = Counter()
    overlaps: list[str] = []

    async def body(run: Run[Any]) -> None:
        running[run.workflow] += 1
        if running[run.workflow] > 1:
            overlaps.append(run.workflow)
        try:
            await asyncio.sleep(0.05)
            await run.step("finished", lambda: "done", exactly(str))
        finally:
            running[run.workflow] -= 1

    async with store.handles(2) as handles, contextlib.AsyncExitStack() as stack:
        for handle in handles:
            await stack.enter_async_context(working(handle, body, limit=4))
        for _ in range(3):
            for i, wf in enumerate(workflows):
                await handles[i % len(handles)].scheduler.make_ready(wf)
            await asyncio.sleep(0.02)
        await finished(store, workflows)
    assert overlaps == [], f"two passes ran at once on {sorted(set(overlaps))[:3]}"
