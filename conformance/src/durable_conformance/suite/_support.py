"""What several suite modules need: passes that have lost their claim, timers, deliveries.

Time is the store's: a lease or a budget runs out by the clock the store reads, so these
wait in short real intervals and give up after generous bounds rather than sleeping for
exact amounts. Every wait is bounded, so a broken store fails a test instead of hanging it.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from datetime import UTC, datetime, timedelta
from typing import Any

from durable.interfaces import Checkpointer, Delivery, Fenced, Pass, Scheduler

LONG = timedelta(minutes=10)
"""A liveness or budget no test outlives."""

SHORT = timedelta(milliseconds=300)
"""A liveness short enough to let run out inside a test."""

TICK = 0.02
"""How often a polling loop looks again, in seconds."""

PATIENCE = 10.0
"""How long, in seconds, a test waits for something the store owes it before failing."""


def now() -> datetime:
    return datetime.now(UTC)


def seconds(value: float) -> timedelta:
    return timedelta(seconds=value)


async def claimed(
    cp: Checkpointer[Any], workflow: str, *, liveness: timedelta = LONG, budget: timedelta = LONG
) -> Pass:
    """Claim ``workflow``, which the test knows to be free."""
    holder = await cp.claim(workflow, liveness=liveness, budget=budget)
    assert holder is not None, f"claim({workflow!r}) returned None although nothing holds it"
    assert holder.workflow == workflow, f"claim({workflow!r}) returned a pass for {holder!r}"
    return holder


async def claim_when_free(
    cp: Checkpointer[Any], workflow: str, *, within: float = PATIENCE
) -> Pass:
    """Claim ``workflow`` as soon as its current claim has run out."""
    give_up = asyncio.get_running_loop().time() + within
    while True:
        holder = await cp.claim(workflow, liveness=LONG, budget=LONG)
        if holder is not None:
            return holder
        if asyncio.get_running_loop().time() > give_up:
            raise AssertionError(
                f"{workflow!r} was still held {within:.0f} s after its claim should have run out"
            )
        await asyncio.sleep(TICK)


async def superseded(cp: Checkpointer[Any], workflow: str) -> tuple[Pass, Pass]:
    """A pass whose claim ran out, and the newer pass that took the workflow after it."""
    stale = await claimed(cp, workflow, liveness=SHORT)
    newer = await claim_when_free(cp, workflow)
    assert newer.token > stale.token, (
        f"the pass claimed after {stale} ran out got token {newer.token}, not a higher one"
    )
    return stale, newer


async def raised(
    call: Awaitable[object] | Callable[[], Awaitable[object]],
    what: str,
    expected: type[BaseException] | tuple[type[BaseException], ...] = (TypeError, ValueError),
) -> BaseException:
    """Await ``call`` (or what calling it returns, so that a store refusing before its
    first await is caught too), which must raise ``expected``: by default the errors a
    caller's mistake gets. The error is returned for the test to read; ``what`` names it."""
    try:
        result = await (call if inspect.isawaitable(call) else call())
    except expected as error:
        return error
    raise AssertionError(f"{what} was not refused; it returned {result!r}")


async def fenced(call: Awaitable[object], what: str) -> Fenced:
    """Await ``call``, which must be refused with ``Fenced``."""
    error = await raised(call, what, Fenced)
    assert isinstance(error, Fenced)
    return error


async def tick(schedulers: list[Scheduler]) -> None:
    """What a timer does once: move every due workflow to runnable, on each handle."""
    for scheduler in schedulers:
        await scheduler.wake_due(now())


@asynccontextmanager
async def timer(scheduler: Scheduler) -> AsyncIterator[None]:
    """A timer calling ``wake_due`` in the background, as a worker's timer would."""

    async def run() -> None:
        while True:
            await scheduler.wake_due(now())
            await asyncio.sleep(TICK)

    task = asyncio.create_task(run())
    try:
        yield
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task


async def next_delivery(
    scheduler: Scheduler, *, within: float = PATIENCE, workflow: str | None = None
) -> Delivery | None:
    """The next delivery (of ``workflow``, when given) within ``within`` seconds, ticking
    the timer as it waits. Deliveries of other workflows are answered with ``done``."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + within
    while True:
        await scheduler.wake_due(now())
        remaining = give_up - loop.time()
        if remaining <= 0:
            return None
        delivery = await scheduler.next_ready(seconds(min(0.1, max(remaining, 0.001))))
        if delivery is None:
            continue
        if workflow is None or delivery.workflow == workflow:
            return delivery
        await scheduler.done(delivery)


async def delivered_during(scheduler: Scheduler, window: float) -> list[Delivery]:
    """Everything delivered during ``window`` seconds (each answered with ``done``), for
    tests that show nothing is."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + window
    seen: list[Delivery] = []
    while (remaining := give_up - loop.time()) > 0:
        await scheduler.wake_due(now())
        delivery = await scheduler.next_ready(seconds(min(0.05, max(remaining, 0.001))))
        if delivery is not None:
            seen.append(delivery)
            await scheduler.done(delivery)
    return seen
