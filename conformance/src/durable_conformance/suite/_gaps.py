"""The suite's side of a store's :data:`durable.plugins.Gap`: hold one move in flight.

A racing test arms one move on one workflow (``gaps.arm("Checkpointer.record", wf)``); the
next call of that move on that workflow stops at the store's gap until the test lets it go,
or raises what the test asked it to raise. Every other call passes straight through, so a
rival move on another handle runs while the armed one is held. Which moves a store's gap was
called for is recorded, so a test can tell a held race from one left to timing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from durable.interfaces import Durable, Settlement, Status
from durable.plugins import GAP_MOVES, Probe, Testbed

from durable_conformance.subject import DeclaredButUnimplemented, StoreUnderTest, _accepts

T = TypeVar("T")

HOLD_AT_MOST = 30.0
"""A held move is let go after this many seconds whatever the test does, so that a test
that forgets to release cannot hang the run."""


class InjectedFailure(Exception):
    """What the suite raises at a store's gap to stand for a crash or lost connection there."""


@dataclass
class Hold:
    """One armed move: ``reached`` is set when the store arrives at its gap."""

    move: str
    workflow: str
    fail: BaseException | None = None
    reached: asyncio.Event = field(default_factory=asyncio.Event)
    released: asyncio.Event = field(default_factory=asyncio.Event)

    def release(self) -> None:
        self.released.set()


class Gaps:
    """The callable handed to a store's testing hook as ``gap=``."""

    def __init__(self) -> None:
        self._armed: dict[tuple[str, str], Hold] = {}
        self.seen: set[str] = set()

    def arm(self, move: str, workflow: str, *, fail: BaseException | None = None) -> Hold:
        """Hold the next call of ``move`` on ``workflow`` (or make it raise ``fail`` there)."""
        if move not in GAP_MOVES:
            raise ValueError(f"{move!r} is not one of durable.plugins.GAP_MOVES")
        hold = Hold(move, workflow, fail)
        if fail is not None:
            hold.released.set()
        self._armed[(move, workflow)] = hold
        return hold

    def disarm(self, hold: Hold) -> None:
        self._armed.pop((hold.move, hold.workflow), None)
        hold.released.set()

    async def __call__(self, move: str, workflow: str) -> None:
        self.seen.add(move)
        hold = self._armed.pop((move, workflow), None)
        if hold is None:
            await asyncio.sleep(0)
            return
        hold.reached.set()
        try:
            async with asyncio.timeout(HOLD_AT_MOST):
                await hold.released.wait()
        except TimeoutError:
            pass
        if hold.fail is not None:
            raise hold.fail


@asynccontextmanager
async def gapped(
    sut: StoreUnderTest, **options: Any
) -> AsyncIterator[tuple[Testbed[Any], Gaps | None]]:
    """A fresh testbed of the store under test built with a :class:`Gaps`, when its testing
    hook accepts ``gap=``; otherwise the test's own testbed and ``None`` (race by timing).

    A hook that takes ``**options`` and then refuses ``gap`` by name (a ``TypeError`` or
    ``ValueError`` mentioning it) is read as declining, not as failing."""
    gaps = Gaps()
    testing = sut.plugin.testing
    if testing is not None and _accepts(testing, {**options, "gap": gaps}):
        async with AsyncExitStack() as stack:
            try:
                testbed = await stack.enter_async_context(testing(sut.url, gap=gaps, **options))
            except (TypeError, ValueError) as error:
                # A hook taking ``**options`` may still refuse one it does not know, by
                # name: that is a store offering no gap, raced by timing, not a failure.
                if "gap" not in str(error):
                    raise
            else:
                yield testbed, gaps
                return
    yield sut.testbed, None


@asynccontextmanager
async def handles_of(testbed: Testbed[Any], count: int) -> AsyncIterator[list[Durable[Any]]]:
    """Up to ``count`` independent handles on ``testbed``'s store (what
    ``StoreUnderTest.handles`` gives for the test's own testbed), the first being its
    ``durable``: on a testbed from :func:`gapped`, every one of them awaits the same gap."""
    async with AsyncExitStack() as stack:
        found: list[Durable[Any]] = [testbed.durable]
        if testbed.reopen is not None:
            for _ in range(count - 1):
                found.append(await stack.enter_async_context(testbed.reopen()))
        yield found


def probe_of(sut: StoreUnderTest, testbed: Testbed[Any]) -> Probe[Any]:
    """``testbed``'s transact probe (``StoreUnderTest.probe`` for a testbed of its own)."""
    if testbed.probe is None:
        raise DeclaredButUnimplemented(
            f"store {sut.name!r} declares 'transact' but its testing hook gives no probe "
            "(Testbed.probe): the suite cannot hand transact an effect to co-commit"
        )
    return testbed.probe


@dataclass
class Raced:
    """What happened when ``held`` was stopped at its gap while ``rival`` ran."""

    held: object | BaseException
    """The held move's result, or the exception it raised."""
    rival: object
    """The rival's result."""
    rival_first: bool
    """True when the rival returned while the held move was still stopped at its gap."""
    reached: bool
    """False when the store never called its gap for the held move (a race by timing)."""
    seen_by_rival_first: object = None
    """What ``after_rival`` returned, when the rival returned first (read before release)."""


async def race(
    gaps: Gaps | None,
    move: str,
    workflow: str,
    held: Callable[[], Awaitable[Any]],
    rival: Callable[[], Awaitable[Any]],
    *,
    after_rival: Callable[[], Awaitable[Any]] | None = None,
    hold_for: float = 0.3,
) -> Raced:
    """Start ``held``; once it stops at its gap for ``move`` on ``workflow``, run ``rival``
    and give it ``hold_for`` seconds to return before letting ``held`` go.

    A store whose move holds a lock at its gap makes the rival wait for the release, which
    is the correct answer: the rival then returns after the held move committed. A store
    that left the gap between a check and a write lets the rival return first, and
    ``after_rival`` (a read, such as ``load``) shows the store as it was then. Without
    ``gaps`` both start together, and the race is left to timing.
    """
    hold = gaps.arm(move, workflow) if gaps is not None else None
    held_task: asyncio.Task[Any] = asyncio.ensure_future(held())
    reached = False
    if hold is not None:
        waiter = asyncio.ensure_future(hold.reached.wait())
        await asyncio.wait({held_task, waiter}, timeout=HOLD_AT_MOST, return_when="FIRST_COMPLETED")
        waiter.cancel()
        reached = hold.reached.is_set()
        if not reached:
            gaps.disarm(hold)  # type: ignore[union-attr]
    rival_task: asyncio.Task[Any] = asyncio.ensure_future(rival())
    rival_first = False
    seen: object = None
    if reached:
        done, _ = await asyncio.wait({rival_task}, timeout=hold_for)
        if done and rival_task.exception() is None:
            rival_first = True
            if after_rival is not None:
                seen = await after_rival()
        assert hold is not None
        hold.release()
    outcomes = await asyncio.gather(held_task, rival_task, return_exceptions=True)
    if isinstance(outcomes[1], BaseException):
        raise outcomes[1]
    return Raced(outcomes[0], outcomes[1], rival_first, reached, seen)


async def make_every_move(testbed: Testbed[Any], gaps: Gaps) -> None:
    """Make every move of :data:`GAP_MOVES` once on ``testbed`` (opened with ``gap=gaps``)
    and check that each awaited its gap, and that a handle from ``reopen`` awaits it too:
    a store's own test that its gap is wired to every move."""
    assert testbed.probe is not None
    durable: Any = testbed.durable
    liveness, budget = timedelta(seconds=30), timedelta(minutes=5)
    checkpointer, scheduler = durable.checkpointer, durable.scheduler
    holder = await checkpointer.claim("a", liveness=liveness, budget=budget)
    assert holder is not None
    await checkpointer.renew(holder)
    await checkpointer.record(holder, "k", 1)
    await checkpointer.transact(holder, "t", testbed.probe.bump("a", "n"))
    await checkpointer.release(holder)
    await checkpointer.supply("a", "s", 2)
    await checkpointer.append("a", 3)
    await checkpointer.discard("a")

    await scheduler.make_ready("b")
    delivery = await scheduler.next_ready(timedelta(seconds=1))
    assert delivery is not None
    await scheduler.reclaim(timedelta(seconds=1))
    await scheduler.wake_at(delivery, datetime.now(UTC) + timedelta(hours=1))
    await scheduler.make_ready("b")
    delivery = await scheduler.next_ready(timedelta(seconds=1))
    assert delivery is not None
    await scheduler.done(delivery)
    await scheduler.cancel("b")

    await durable.arrive("c", "k", 1)
    await durable.send("c", 2)
    await durable.discard("c")

    await checkpointer.admit("d", "kind", None)
    began = await checkpointer.begin("d", liveness=liveness, budget=budget, owner="me")
    assert began is not None
    assert began.holder is not None
    await checkpointer.beat(began.holder, "step")
    await checkpointer.settle(began.holder, Settlement(Status.BLOCKED, 1, keys=("x",)))
    await checkpointer.withdraw("d")
    await checkpointer.readmit("d")

    await durable.start("kind", "e", None)
    await durable.cancel("e")
    await durable.retry("e")

    assert gaps.seen == GAP_MOVES
    # a second handle (reopen) awaits the same gap
    gaps.seen.clear()
    assert testbed.reopen is not None
    async with testbed.reopen() as other:
        await other.checkpointer.supply("f", "k", 1)
    assert gaps.seen == {"Checkpointer.supply"}
