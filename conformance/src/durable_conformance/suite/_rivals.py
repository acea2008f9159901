"""What the rival-move tests share: a testbed with a gap, two handles, one move held.

A rival-move test stops one move at the store's gap (between what it reads to decide and
what it commits) and runs a rival move on another handle while it is stopped. Where the
store offers no gap for the move, or no gap at all, the same trial runs several times by
timing alone; the invariant checked afterwards is the same either way, and true of every
order a correct store could have put the two moves in.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from durable.interfaces import Durable
from durable.plugins import Testbed

from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._gaps import HOLD_AT_MOST, Gaps, Hold, gapped

HOLD_FOR = 0.3
"""Seconds the rival is given to return while the held move is stopped. A store whose
held move keeps a lock makes the rival wait for the release, which is correct; the rival
then returns after the held move committed."""

TRIALS = 8
"""Trials by timing alone, where the store cannot hold the move."""


@asynccontextmanager
async def gapped_testbed(
    sut: StoreUnderTest, **options: Any
) -> AsyncIterator[tuple[Testbed[Any], Gaps | None]]:
    """:func:`gapped`, falling back to the test's own testbed (and timing) when the store's
    testing hook takes options but refuses ``gap=`` itself (as a hook that hands every
    option to its store's ``open`` does, until it offers a gap)."""
    async with AsyncExitStack() as stack:
        try:
            testbed, gaps = await stack.enter_async_context(gapped(sut, **options))
        except (TypeError, ValueError):
            testbed, gaps = sut.testbed, None
        yield testbed, gaps


@asynccontextmanager
async def two_handles(testbed: Testbed[Any]) -> AsyncIterator[tuple[Durable[Any], Durable[Any]]]:
    """The testbed's first handle and a second one (the first again where it cannot reopen)."""
    if testbed.reopen is None:
        yield testbed.durable, testbed.durable
        return
    async with testbed.reopen() as second:
        yield testbed.durable, second


@dataclass
class Held:
    """What happened when one move was stopped at its gap while a rival ran."""

    held: object
    """The held move's result, or the exception it raised."""
    rival: object
    """The rival's result, or the exception it raised."""
    rival_first: bool
    """True when the rival returned while the held move was still stopped: the rival then
    committed before the held move did."""
    reached: bool
    """False when the store never stopped the held move (the race was left to timing)."""


def _settled(task: asyncio.Task[Any]) -> object:
    error = task.exception()
    return error if error is not None else task.result()


async def hold_while(
    gaps: Gaps | None,
    at: list[tuple[str, str]],
    held: Callable[[], Awaitable[Any]],
    rival: Callable[[], Awaitable[Any]],
    *,
    hold_for: float = HOLD_FOR,
) -> Held:
    """Start ``held``; once it stops at the store's gap for any ``(move, workflow)`` in
    ``at``, run ``rival`` and give it ``hold_for`` seconds before letting ``held`` go.

    Several places may be named because a store may call its gap for one move under more
    than one name: ``next_ready`` before it knows which workflow it takes (``""``) or after.
    Without ``gaps`` (or when the store never stops ``held``) both run by timing alone.
    """
    holds: list[Hold] = [gaps.arm(move, wf) for move, wf in at] if gaps is not None else []
    held_task: asyncio.Task[Any] = asyncio.ensure_future(held())
    reached = False
    try:
        if holds:
            waiters = [asyncio.ensure_future(h.reached.wait()) for h in holds]
            await asyncio.wait(
                {held_task, *waiters}, timeout=HOLD_AT_MOST, return_when="FIRST_COMPLETED"
            )
            for waiter in waiters:
                waiter.cancel()
            reached = any(h.reached.is_set() for h in holds)
            assert gaps is not None
            for hold in holds:
                if not hold.reached.is_set():
                    gaps.disarm(hold)
        rival_task: asyncio.Task[Any] = asyncio.ensure_future(rival())
        rival_first = False
        if reached:
            done, _ = await asyncio.wait({rival_task}, timeout=hold_for)
            rival_first = bool(done)
        for hold in holds:
            hold.release()
        await asyncio.wait({held_task, rival_task})
        return Held(_settled(held_task), _settled(rival_task), rival_first, reached)
    finally:
        for hold in holds:
            hold.release()
            if gaps is not None:
                gaps.disarm(hold)


def outcome(value: object) -> Any:
    """``value`` as a result, re-raising it when it is the exception a move raised."""
    if isinstance(value, BaseException):
        raise value
    return value


async def trials(gaps: Gaps | None, trial: Callable[[Gaps | None], Awaitable[bool]]) -> None:
    """Run ``trial`` once with the store's gap; where it was not held there (the trial
    returns whether it was), run it :data:`TRIALS` times at once by timing alone."""
    if gaps is not None and await trial(gaps):
        return
    await asyncio.gather(*(trial(None) for _ in range(TRIALS)))
