"""A store filled with workflows in every status, by a real worker running real kinds."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from durable.interfaces import Lifecycle, Status
from durable.policy import RetryPolicy
from durable.run import Run
from durable.worker import work
from durable.workflows import LifecycleDurable, Workflows

HOSTILE = "<script>document.title='pwned'</script>"
"""A workflow id, and a value it records: the pages must show both as text."""

workflows = Workflows()
_failed_once: set[str] = set()
hang: asyncio.Event | None = None  # made per test: an Event belongs to its loop


def _any(value: object) -> object:
    return value


@workflows.kind("order")
async def order(run: Run[Any], amount: object) -> object:
    async def flaky() -> object:
        if run.workflow not in _failed_once:
            _failed_once.add(run.workflow)
            raise ConnectionError("gateway timed out")
        await asyncio.sleep(0.05)
        return {"charged": amount}

    charged = await run.step(
        "charge",
        flaky,
        _any,
        retry=RetryPolicy(max_attempts=3, initial=timedelta(milliseconds=50), jitter=0.0),
    )

    async def note() -> object:
        return {"note": HOSTILE, "long": "x" * 2000}

    await run.step("note", note, _any)
    return charged


@workflows.kind("doomed", policy=RetryPolicy(max_attempts=1))
async def doomed(run: Run[Any], _: object) -> object:
    raise ValueError("the card was declined <b>twice</b>")


@workflows.kind("napper")
async def napper(run: Run[Any], _: object) -> object:
    await run.sleep("nap", timedelta(hours=1))
    return "rested"


@workflows.kind("approval")
async def approval(run: Run[Any], _: object) -> object:
    async def prepare() -> object:
        return "prepared"

    await run.step("prepare", prepare, _any)
    answer = await run.awaiting("approved", _any)
    return {"approved": answer}


@workflows.kind("mailbox")
async def mailbox(run: Run[Any], _: object) -> object:
    first = await run.receive("first", _any)
    return {"got": first}


@workflows.kind("hanging")
async def hanging(run: Run[Any], _: object) -> object:
    async def forever() -> object:
        assert hang is not None
        await hang.wait()
        return "let go"

    return await run.step("forever", forever, _any)


@dataclass
class Filled:
    store: LifecycleDurable[Any]
    ids: dict[Status, str] = field(default_factory=dict)
    hostile: str = HOSTILE
    waiting: str = "approval-2"  # blocked; the live test lets it finish


async def settle(store: LifecycleDurable[Any], workflow: str, status: Status) -> None:
    for _ in range(400):
        st = await store.status(workflow)
        if st is not None and st.status is status:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{workflow} never became {status}: {await store.status(workflow)}")


@contextlib.asynccontextmanager
async def filled(store: LifecycleDurable[Any]) -> AsyncIterator[Filled]:
    """Workflows in all seven statuses, with a worker serving them while the test runs."""
    global hang
    _failed_once.clear()
    hang = asyncio.Event()
    stop = asyncio.Event()
    worker = asyncio.create_task(
        work(
            store,
            workflows,
            poll=timedelta(milliseconds=50),
            tick=timedelta(milliseconds=50),
            retry=timedelta(hours=1),
            stop=stop,
            grace=timedelta(seconds=1),
            name="dashboard-test",
        )
    )
    out = Filled(store)
    try:
        await store.send("mail-1", {"hello": "world"})
        starts = [
            ("order", "order-1", {"amount": 12}, Status.FINISHED),
            ("order", HOSTILE, {"amount": HOSTILE}, Status.FINISHED),
            ("mailbox", "mail-1", None, Status.FINISHED),
            ("doomed", "doomed-1", None, Status.FAILED),
            ("napper", "nap-1", None, Status.SLEEPING),
            ("approval", "approval-1", None, Status.BLOCKED),
            ("approval", out.waiting, None, Status.BLOCKED),
            ("approval", "cancel-me", None, Status.BLOCKED),
            ("hanging", "hang-1", None, Status.RUNNING),
        ]
        for kind, workflow, value, _ in starts:
            await store.start(kind, workflow, value)
        for _, workflow, _, status in starts:
            await settle(store, workflow, status)
        await store.cancel("cancel-me")
        # Ready, and not yet handed to a worker: the row admitted, its queue move still to
        # come (a worker would take it at once, and defer a kind it does not serve).
        life = store.checkpointer
        assert isinstance(life, Lifecycle)
        await life.admit("ready-1", "unserved", {"n": 1})
        await settle(store, "ready-1", Status.READY)
        out.ids = {
            Status.READY: "ready-1",
            Status.RUNNING: "hang-1",
            Status.SLEEPING: "nap-1",
            Status.BLOCKED: "approval-1",
            Status.FINISHED: "order-1",
            Status.FAILED: "doomed-1",
            Status.CANCELLED: "cancel-me",
        }
        yield out
    finally:
        hang.set()
        stop.set()
        await asyncio.wait_for(worker, 30)


families = Workflows()
"""A parent and its children, served by a worker of their own (:func:`family`)."""


@families.kind("member")
async def member(run: Run[Any], plan: object) -> object:
    if plan == "waits":
        return await run.awaiting("go", _any)
    return f"done: {plan}"


@families.kind("household")
async def household(run: Run[Any], _: object) -> object:
    first = await run.start_child(member, "kid-a", "now")
    second = await run.start_child(member, "kid-<b>", "waits")
    return await run.gather(first, second)


@contextlib.asynccontextmanager
async def family(store: LifecycleDurable[Any]) -> AsyncIterator[str]:
    """``house-1`` (blocked on its children) with two children: ``house-1/kid-a`` finished,
    ``house-1/kid-<b>`` blocked. Yields the parent's id."""
    stop = asyncio.Event()
    worker = asyncio.create_task(
        work(store, families, poll=timedelta(milliseconds=50), stop=stop, name="family-test")
    )
    try:
        await store.start("household", "house-1", None)
        await settle(store, "house-1/kid-a", Status.FINISHED)
        await settle(store, "house-1/kid-<b>", Status.BLOCKED)
        await settle(store, "house-1", Status.BLOCKED)
        yield "house-1"
    finally:
        stop.set()
        await asyncio.wait_for(worker, 30)
