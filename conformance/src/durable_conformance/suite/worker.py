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
import secrets
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

from durable.interfaces import Durable, Inspectable, Status, StoreUnavailable, WorkflowStatus
from durable.parsers import exactly
from durable.policy import RetryPolicy
from durable.run import Run
from durable.worker import work
from durable.workflows import Kind, WorkflowFailed, WorkflowHandle, Workflows

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._lifecycle import lifecycle, lifecycle_durable, lost_pass
from durable_conformance.suite._support import PATIENCE, raised

QUICK: dict[str, Any] = {
    "poll": timedelta(milliseconds=50),
    "tick": timedelta(milliseconds=50),
    "retry": timedelta(milliseconds=200),
    "liveness": timedelta(seconds=5),
}

Body = Callable[[Run[Any]], Awaitable[object]]


@contextlib.asynccontextmanager
async def working(
    durable: Durable[Any], body: Body | Workflows | Kind[Any, Any], **options: Any
) -> AsyncIterator[None]:
    """A worker running ``body`` (or a registry) on ``durable`` for the block."""
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


# -- workflows by kind, on a store that offers lifecycle ---------------------------------


def _kind_name(label: str) -> str:
    return f"{label}-{secrets.token_hex(4)}"


async def _eventually_status(
    store: StoreUnderTest, workflow: str, wanted: Callable[[WorkflowStatus], bool], what: str
) -> WorkflowStatus:
    loop = asyncio.get_running_loop()
    give_up = loop.time() + PATIENCE
    lc = lifecycle(store)
    while True:
        st = await lc.status(workflow)
        if st is not None and wanted(st):
            return st
        if loop.time() > give_up:
            raise AssertionError(f"{workflow!r} never became {what}; last seen {st}")
        await asyncio.sleep(0.005)


@requirement("worker.records-the-outcome", capability="lifecycle")
async def test_worker_records_each_workflows_outcome_for_its_handle(store: StoreUnderTest) -> None:
    """Twenty workflows of two kinds, started and run by one worker, all finish, and
    result() returns each one's value."""
    durable = lifecycle_durable(store)
    registry = Workflows()

    @registry.kind(_kind_name("double"), input=exactly(int))
    async def double(run: Run[Any], number: int) -> int:
        return await run.step("double", lambda: number * 2, exactly(int))

    @registry.kind(_kind_name("greet"), input=exactly(str))
    async def greet(run: Run[Any], name: str) -> dict[str, object]:
        greeting = await run.step("greet", lambda: f"hello {name}", exactly(str))
        return {"greeting": greeting, "lines": (1, 2)}

    tag = store.workflow("outcome")
    async with working(durable, registry, limit=4):
        handles: list[tuple[WorkflowHandle[Any], object]] = []
        for i in range(10):
            doubled = await durable.start(double, f"{tag}-d{i}", i)
            greeted = await durable.start(greet, f"{tag}-g{i}", f"n{i}")
            handles.append((doubled, i * 2))
            handles.append((greeted, {"greeting": f"hello n{i}", "lines": [1, 2]}))
        for handle, expected in handles:
            assert await handle.result(timeout=PATIENCE * 3) == expected, handle
    lc = lifecycle(store)
    for handle, _ in handles:
        st = await lc.status(handle.workflow)
        assert st is not None, st
        assert st.status == Status.FINISHED, st
        assert st.attempts == 1, st


@requirement("worker.fails-after-max-attempts", capability="lifecycle")
async def test_worker_a_body_that_always_raises_fails_after_max_attempts(
    store: StoreUnderTest,
) -> None:
    """A body that always raises, max_attempts 3: the workflow sleeps between attempts
    holding no claim, with the last error recorded, and fails after exactly three runs
    with the last error."""
    durable = lifecycle_durable(store)
    runs: list[int] = []
    registry = Workflows()
    policy = RetryPolicy(max_attempts=3, initial=timedelta(milliseconds=300), jitter=0.0)

    @registry.kind(_kind_name("declined"), policy=policy)
    async def declined(run: Run[Any], order: object) -> None:
        runs.append(len(runs) + 1)
        raise ValueError(f"card declined (run {len(runs)})")

    wf = store.workflow()
    async with working(durable, registry):
        handle = await durable.start(declined, wf, {"amount": 5})
        backoff = await _eventually_status(
            store,
            wf,
            lambda st: st.status == Status.SLEEPING and st.failure is not None,
            "sleeping after a failed attempt",
        )
        assert backoff.failure is not None, backoff
        assert backoff.failure.type == "ValueError", backoff
        assert backoff.attempts >= 1, backoff
        assert backoff.until is not None, backoff
        inspect_claims = store.checkpointer
        if isinstance(inspect_claims, Inspectable):
            assert await inspect_claims.claimed(wf) is None, "a backing-off workflow holds a claim"
        error = await raised(handle.result(timeout=PATIENCE), "result()", WorkflowFailed)
    assert isinstance(error, WorkflowFailed)
    assert runs == [1, 2, 3], f"the body ran {len(runs)} times"
    assert error.failure is not None
    assert (error.failure.type, error.failure.attempts) == ("ValueError", 3), error.failure
    assert error.failure.message == "card declined (run 3)", error.failure
    assert "ValueError" in error.failure.traceback
    st = await lifecycle(store).status(wf)
    assert st is not None, st
    assert (st.status, st.attempts) == (Status.FAILED, 3), st


class Declined(Exception):
    """A payment refusal no retry can change."""


@requirement("worker.non-retryable-fails-at-once", capability="lifecycle")
async def test_worker_a_non_retryable_error_fails_the_first_attempt(store: StoreUnderTest) -> None:
    """An error the kind's policy names non-retryable fails the workflow at its first
    attempt, however many attempts the policy allows."""
    durable = lifecycle_durable(store)
    runs: list[str] = []
    registry = Workflows()
    policy = RetryPolicy(max_attempts=10, non_retryable=(Declined,))

    @registry.kind(_kind_name("final"), policy=policy)
    async def final(run: Run[Any], order: object) -> None:
        runs.append(run.workflow)
        raise Declined("insufficient funds")

    wf = store.workflow()
    async with working(durable, registry):
        handle = await durable.start(final, wf)
        error = await raised(handle.result(timeout=PATIENCE), "result()", WorkflowFailed)
    assert isinstance(error, WorkflowFailed)
    assert error.failure is not None
    assert error.failure.type.endswith("Declined"), error.failure
    assert error.failure.attempts == 1, error.failure
    assert runs == [wf], f"a non-retryable failure ran {len(runs)} times"


@requirement("worker.interruptions-are-not-attempts", capability="lifecycle")
async def test_worker_interruptions_never_spend_an_attempt(store: StoreUnderTest) -> None:
    """With max_attempts 1, a body interrupted by StoreUnavailable twice and then
    returning finishes: an outage is never counted against the workflow."""
    durable = lifecycle_durable(store)
    runs: list[int] = []
    registry = Workflows()

    @registry.kind(_kind_name("flaky-store"), policy=RetryPolicy(max_attempts=1))
    async def flaky(run: Run[Any], order: object) -> str:
        runs.append(len(runs) + 1)
        if len(runs) <= 2:
            raise StoreUnavailable(f"the store went away (run {len(runs)})")
        return "paid"

    wf = store.workflow()
    async with working(durable, registry):
        handle = await durable.start(flaky, wf)
        assert await handle.result(timeout=PATIENCE) == "paid"
    assert runs == [1, 2, 3]
    st = await lifecycle(store).status(wf)
    assert st is not None, st
    assert (st.status, st.attempts) == (Status.FINISHED, 1), st


@requirement("worker.lost-passes-count", capability="lifecycle")
async def test_worker_passes_that_never_ended_fail_the_workflow_as_pass_lost(
    store: StoreUnderTest,
) -> None:
    """After max_attempts passes begun and never settled (each a process that died), the
    next delivery fails the workflow with durable.PassLost without running the body."""
    durable = lifecycle_durable(store)
    runs: list[str] = []
    registry = Workflows()

    @registry.kind(_kind_name("crashing"), policy=RetryPolicy(max_attempts=2))
    async def crashing(run: Run[Any], order: object) -> None:
        runs.append(run.workflow)

    wf = store.workflow()
    lc = lifecycle(store)
    await lc.admit(wf, crashing.name, None)
    assert await lost_pass(store, wf, "doomed:1") == 1
    second = await lost_pass(store, wf, "doomed:2")
    assert second == 2, f"the second lost pass began as attempt {second}"
    async with working(durable, registry):
        await durable.scheduler.make_ready(wf)
        st = await _eventually_status(store, wf, lambda st: st.status.terminal, "terminal")
    assert runs == [], "the body ran after its attempts were spent by passes that died"
    assert st.status == Status.FAILED, st
    assert st.failure is not None, st
    assert st.failure.type == "durable.PassLost", st.failure
    assert (st.failure.attempts, st.attempts) == (2, 2), st
