"""Kinds, the registry, ``start`` and the handle: what a caller of the lifecycle sees.

The store's half (``admit``, ``begin``, ``settle``, ...) is proved for every store by the
conformance suite; these pin the core's own behaviour on the memory store and on a split
store, with a ``ManualClock`` where time matters.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from durable import (
    InputRefused,
    Kind,
    LifecycleNotOffered,
    NotRetryable,
    RetryPolicy,
    StartConflict,
    Status,
    UnknownWorkflow,
    WorkflowCancelled,
    WorkflowFailed,
    Workflows,
)
from durable.clock import ManualClock
from durable.durable import SplitDurable
from durable.interfaces import Failure, Settlement
from durable.memory import MemoryCheckpointer, MemoryDurable, MemoryScheduler
from durable.parsers import as_is, exactly
from durable.run import ParseFailed, Run
from durable.workflows import LifecycleDurable, lifecycle_of

LONG = timedelta(minutes=10)


def as_order(value: object) -> dict[str, object]:
    if not isinstance(value, dict) or not isinstance(value.get("amount"), int):
        raise ValueError(f"an order is a dict with an int amount, got {value!r}")
    return value


registry = Workflows()


@registry.kind("payout", input=as_order, policy=RetryPolicy(max_attempts=5))
async def payout(run: Run[Any], order: dict[str, object]) -> dict[str, object]:
    return {"paid": order["amount"]}


@registry.kind("refund")
async def refund(run: Run[Any], order: object) -> None:
    return None


# -- the registry ------------------------------------------------------------------------


def test_the_decorator_returns_the_kind_with_its_parser_policy_and_queue() -> None:
    assert isinstance(payout, Kind)
    assert (payout.name, payout.parse, payout.queue) == ("payout", as_order, "default")
    assert payout.policy == RetryPolicy(max_attempts=5)
    assert refund.parse is as_is
    assert refund.policy == RetryPolicy()
    assert registry["payout"] is payout
    assert "refund" in registry
    assert "nothing" not in registry
    assert [kind.name for kind in registry] == ["payout", "refund"]


def test_a_duplicate_name_is_refused() -> None:
    with pytest.raises(ValueError, match="'payout' is already registered"):
        registry.add(Kind("payout", payout.body, as_is))


def test_an_unknown_kind_names_the_known_ones() -> None:
    with pytest.raises(KeyError, match="no kind named 'payouts'; known kinds: 'payout', 'refund'"):
        registry["payouts"]


@pytest.mark.parametrize("name", ["", "a:b", "{tag}", "has space", ".hidden", "-x", "x" * 101])
def test_a_kind_name_a_store_cannot_key_by_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="kind name"):
        Workflows().kind(name)


def test_the_default_is_the_named_one_or_the_only_one() -> None:
    assert registry.default is None, "two kinds and no default named"
    assert registry.resolve(None) is None
    assert registry.resolve("refund") is refund
    assert registry.resolve("gone") is None
    assert Workflows(payout).default is payout
    assert Workflows(payout, refund, default="refund").resolve(None) is refund


def test_of_makes_a_one_kind_registry_of_a_bare_body() -> None:
    async def nightly(run: Run[Any]) -> str:
        return "done"

    made = Workflows.of(nightly)
    kind = made.default
    assert kind is not None
    assert (kind.name, kind.parse, kind.policy) == ("nightly", as_is, RetryPolicy())
    assert Workflows.of(registry) is registry
    assert Workflows.of(payout).default is payout
    with pytest.raises(TypeError, match="a Workflows, a Kind or a workflow body"):
        Workflows.of(42)  # type: ignore[arg-type]


# -- start -------------------------------------------------------------------------------


async def test_start_records_the_kind_and_input_and_queues_the_workflow() -> None:
    durable = MemoryDurable()
    assert isinstance(durable, LifecycleDurable)
    handle = await durable.start(payout, "o-1", {"amount": 120})
    st = await handle.status()
    assert (st.status, st.kind, st.input, st.attempts) == (
        Status.READY,
        "payout",
        {"amount": 120},
        0,
    )
    assert await durable.scheduler.scheduled("o-1") is not None


async def test_an_input_the_parser_refuses_writes_nothing() -> None:
    durable = MemoryDurable()
    with pytest.raises(InputRefused, match="workflow 'o-1': kind 'payout' refused the input"):
        await durable.start(payout, "o-1", {"amount": "lots"})
    assert await durable.status("o-1") is None
    assert await durable.scheduler.scheduled("o-1") is None


async def test_starting_by_name_checks_only_the_name() -> None:
    durable = MemoryDurable()
    handle = await durable.start("payout", "o-1", {"amount": "unchecked"})
    assert (await handle.status()).input == {"amount": "unchecked"}
    with pytest.raises(ValueError, match="kind name 'a:b'"):
        await durable.start("a:b", "o-2")


async def test_the_same_start_again_is_harmless_and_another_is_a_conflict() -> None:
    durable = MemoryDurable()
    first = await durable.start(payout, "o-1", {"amount": 120})
    again = await durable.start(payout, "o-1", {"amount": 120})
    assert (await again.status()).updated_at == (await first.status()).updated_at
    with pytest.raises(StartConflict, match=r"started as kind 'payout'.*refusing to start it"):
        await durable.start(payout, "o-1", {"amount": 121})
    with pytest.raises(StartConflict):
        await durable.start(refund, "o-1", {"amount": 120})


async def test_a_split_start_whose_queueing_was_lost_is_queued_by_starting_it_again() -> None:
    """The crash between the two writes of a split store leaves a ready workflow that is not
    queued; whoever starts it again queues it, with nothing else written."""

    class LostQueue(MemoryScheduler):
        lose = True

        async def make_ready(self, workflow: str) -> None:
            if self.lose:
                raise ConnectionError("the scheduler's server went away")
            await super().make_ready(workflow)

    scheduler = LostQueue()
    durable = SplitDurable(MemoryCheckpointer(), scheduler)
    with pytest.raises(ConnectionError):
        await durable.start(payout, "o-1", {"amount": 1})
    assert (await durable.status("o-1")) is not None
    assert await scheduler.scheduled("o-1") is None
    scheduler.lose = False
    await durable.start(payout, "o-1", {"amount": 1})
    assert await scheduler.scheduled("o-1") is not None


async def test_a_store_without_lifecycle_refuses_before_writing() -> None:
    class Bare:
        """Anything that is not a Lifecycle."""

    with pytest.raises(LifecycleNotOffered, match="does not offer lifecycle"):
        lifecycle_of(Bare())
    scheduler = MemoryScheduler()
    durable = SplitDurable(Bare(), scheduler)  # type: ignore[arg-type]
    with pytest.raises(LifecycleNotOffered):
        await durable.start(payout, "o-1", {"amount": 1})
    assert await scheduler.scheduled("o-1") is None


# -- cancel, retry, list -----------------------------------------------------------------


async def test_cancel_and_retry_move_the_workflow_and_its_queue_together() -> None:
    durable = MemoryDurable()
    await durable.start(payout, "o-1", {"amount": 1})
    cancelled = await durable.cancel("o-1")
    assert cancelled.status == Status.CANCELLED
    assert await durable.scheduler.scheduled("o-1") is None
    ready = await durable.retry("o-1")
    assert (ready.status, ready.attempts) == (Status.READY, 0)
    assert await durable.scheduler.scheduled("o-1") is not None
    with pytest.raises(NotRetryable, match="workflow 'o-1' is ready; only a failed or cancelled"):
        await durable.retry("o-1")
    with pytest.raises(UnknownWorkflow):
        await durable.cancel("never")


async def test_list_takes_a_status_by_name_and_refuses_an_unknown_one() -> None:
    durable = MemoryDurable()
    for i in range(3):
        await durable.start(payout, f"o-{i}", {"amount": i})
    await durable.start(refund, "r-1")
    page = await durable.list(status="ready", kind="payout", limit=2)
    assert [st.workflow for st in page.statuses] == ["o-2", "o-1"]
    assert page.cursor is not None
    rest = await durable.list(status=Status.READY, kind="payout", cursor=page.cursor)
    assert ([st.workflow for st in rest.statuses], rest.cursor) == (["o-0"], None)
    with pytest.raises(ValueError, match="no status 'done'; a workflow is one of ready, running"):
        await durable.list(status="done")


# -- the handle --------------------------------------------------------------------------


async def settle(durable: MemoryDurable, workflow: str, settlement: Settlement) -> None:
    began = await durable.checkpointer.begin(workflow, liveness=LONG, budget=LONG, owner="t")
    assert began is not None
    assert began.holder is not None
    await durable.checkpointer.settle(began.holder, settlement)


async def test_result_waits_for_the_value_and_parses_it() -> None:
    durable = MemoryDurable()
    handle = await durable.start(payout, "o-1", {"amount": 7})

    async def later() -> None:
        await asyncio.sleep(0.05)
        await settle(durable, "o-1", Settlement(Status.FINISHED, 1, value={"paid": (7, "EUR")}))

    finishing = asyncio.ensure_future(later())
    assert await handle.result(timeout=5) == {"paid": [7, "EUR"]}
    await finishing
    with pytest.raises(ParseFailed, match="workflow 'o-1'"):
        await handle.result(parse=exactly(str))
    assert await durable.handle("o-1").result(parse=exactly(dict)) == {"paid": [7, "EUR"]}


async def test_result_raises_the_failure_or_the_cancellation() -> None:
    durable = MemoryDurable()
    failed = await durable.start(payout, "o-1", {"amount": 7})
    failure = Failure("ValueError", "card declined", "Traceback ...", 5)
    await settle(durable, "o-1", Settlement(Status.FAILED, 5, failure=failure))
    with pytest.raises(WorkflowFailed) as raised:
        await failed.result()
    assert str(raised.value) == "workflow 'o-1' failed after 5 attempts: ValueError: card declined"
    assert raised.value.failure == failure
    cancelled = await durable.start(payout, "o-2", {"amount": 7})
    await cancelled.cancel()
    with pytest.raises(WorkflowCancelled, match="workflow 'o-2' was cancelled at"):
        await cancelled.result()


async def test_result_times_out_naming_the_workflow_and_its_status() -> None:
    durable = MemoryDurable()
    handle = await durable.start(payout, "o-1", {"amount": 7})
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(TimeoutError, match=r"workflow 'o-1' is still ready after 0\.1 s"):
        await handle.result(timeout=timedelta(milliseconds=100))
    assert 0.09 <= loop.time() - started < 1.0
    with pytest.raises(ValueError, match="cannot be negative"):
        await handle.result(timeout=-1)


async def test_result_polls_with_backoff_not_in_a_busy_loop() -> None:
    class Counting(MemoryCheckpointer):
        reads = 0

        async def status(self, workflow: str) -> Any:
            Counting.reads += 1
            return await super().status(workflow)

    durable = MemoryDurable(Counting(), MemoryScheduler())
    handle = await durable.start(payout, "o-1", {"amount": 7})
    with pytest.raises(TimeoutError):
        await handle.result(timeout=1.0)
    # 10, 20, 40, 80, 160, 320, then 500 ms: about eight reads in a second, not thousands.
    assert 5 <= Counting.reads <= 10, Counting.reads


async def test_a_handle_on_an_unknown_workflow_says_so() -> None:
    with pytest.raises(UnknownWorkflow, match="no workflow 'ghost'"):
        await MemoryDurable().handle("ghost").status()


# -- Run.current ---------------------------------------------------------------------------


async def test_run_current_is_the_oldest_step_in_flight() -> None:
    cp = MemoryCheckpointer(clock=ManualClock())
    holder = await cp.claim("wf", liveness=LONG, budget=LONG)
    assert holder is not None
    run: Run[Any] = Run(cp, holder, {})
    seen: list[str | None] = []
    charging, shipping = asyncio.Event(), asyncio.Event()

    async def charge() -> str:
        seen.append(run.current)
        await charging.wait()
        return "ch-1"

    async def ship() -> str:
        await shipping.wait()
        return "sh-1"

    def current() -> str | None:
        return run.current

    assert current() is None
    first = asyncio.ensure_future(run.step("charge", charge, exactly(str)))
    await asyncio.sleep(0)
    second = asyncio.ensure_future(run.step("ship", ship, exactly(str)))
    await asyncio.sleep(0)
    assert current() == "charge"
    charging.set()
    await first
    assert current() == "ship"
    shipping.set()
    await second
    assert current() is None
    assert seen == ["charge"]
