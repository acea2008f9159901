"""A testing kit for workflow authors: a fresh store per test, time travel, and every crash point.

The conformance suite tests stores; this tests *your* workflows, on any installed store::

    async with testing.open_kit("memory") as kit:
        outcome = await kit.run_until("order-1", body)   # sleeps skipped in no real time

:func:`open_kit` hands out a fresh, isolated store (the store's own ``testing`` hook, as the
conformance suite uses it) with a :class:`~durable.clock.ManualClock`; :meth:`Kit.run_until`
drives a workflow pass by pass, moving the clock to each wake-up instead of waiting for it.
:func:`crash_points` kills a workflow at every boundary where a process can die, resumes
it as a new worker would, and checks your invariant after each. The pytest fixtures in
:mod:`durable.fixtures` wrap :func:`open_kit`. See ``docs/testing.md``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Generic, Literal, TypeVar

from durable.clock import ManualClock
from durable.interfaces import Checkpointer, Durable, Pass
from durable.plugins import StorePlugin, Testbed, store
from durable.run import Blocked, Finished, Outcome, Run, Sleeping, checkpointer_of, drive

__all__ = [
    "POSITIONS",
    "Boundary",
    "CrashPoint",
    "CrashReport",
    "Kit",
    "NotFinished",
    "Scenario",
    "crash_points",
    "open_kit",
]

T = TypeVar("T")

Body = Callable[[Run[Any]], Awaitable[Any]]

POSITIONS: tuple[str, ...] = (
    "before the effect",
    "after the effect, before its record",
    "after the record",
    "before transact",
    "inside transact",
    "after transact",
    "before sleep",
    "after sleep",
    "before await",
    "after await",
    "before receive",
    "after receive",
)
"""Where :func:`crash_points` kills a pass, relative to the operation named by a key."""

Until = Literal["finished", "sleeping", "blocked"]

CLAIM_POLL = 0.02


class NotFinished(AssertionError):
    """:meth:`Kit.run_until` ran out of passes before reaching what it was asked for."""


@dataclass
class Kit(Generic[T]):
    """One test's fresh store, its clock, and ways to drive a workflow over them.

    ``clock`` is the clock every pass the kit drives reads (``run.now()``, sleeps, a
    step's backoff). ``store_follows_clock`` says whether the store was opened with it too
    (its leases, history stamps and scheduler due times): true on memory and SQLite, whose
    testing hooks take ``clock=``; false on a store that reads its server's clock
    (Postgres, Redis), where a test that needs the scheduler or a lease to follow the
    clock must be skipped (:meth:`require_store_clock`). Sleeps and backoffs follow the
    clock on every store.
    """

    durable: Durable[Any]
    clock: ManualClock
    plugin: StorePlugin
    testbed: Testbed[Any]
    store_follows_clock: bool
    liveness: timedelta = timedelta(seconds=30)

    @property
    def name(self) -> str:
        return self.plugin.name

    def require_store_clock(self) -> None:
        """Skip the calling pytest test when the store reads its own clock."""
        if not self.store_follows_clock:
            import pytest

            pytest.skip(
                f"the {self.name} store reads its server's clock: its leases and scheduler "
                "due times do not follow an injected clock"
            )

    def advance(self, by: timedelta) -> datetime:
        """Move the clock forward by ``by``."""
        return self.clock.advance(by)

    def advance_to(self, moment: datetime) -> datetime:
        """Move the clock to ``moment`` (nothing happens if it is already past)."""
        if moment > self.clock.now():
            self.clock.advance(moment - self.clock.now())
        return self.clock.now()

    async def run(self, workflow: str, body: Body, **options: Any) -> Outcome[Any]:
        """One pass of ``body`` over ``workflow`` (claim, drive, release) on the kit's clock."""
        checkpointer = checkpointer_of(self.durable)
        holder = await _claim(self, checkpointer, workflow)
        try:
            return await drive(
                checkpointer, holder, body, liveness=self.liveness, clock=self.clock, **options
            )
        finally:
            await checkpointer.release(holder)

    async def run_until(
        self, workflow: str, body: Body, until: Until = "finished", *, most: int = 100
    ) -> Outcome[Any]:
        """Pass after pass until the workflow reaches ``until``, and return that outcome.

        A sleeping workflow (a ``sleep``, or a step's backoff longer than its policy's
        ``suspend_after``) is woken by moving the clock to its wake-up, unless ``until`` is
        ``"sleeping"``. Where the store follows the clock, it goes through the scheduler as
        a worker would: ``wake_at`` the wake-up, the clock moved, ``wake_due``, and the
        workflow must then be delivered by ``next_ready``, which proves the due time
        followed the clock. A blocked workflow (awaiting a value or a message nobody has
        sent) is returned whatever ``until`` says: nothing the kit does unblocks it.
        Raises :class:`NotFinished` after ``most`` passes.
        """
        scheduled = self.store_follows_clock
        scheduler = self.durable.scheduler
        if scheduled:
            await scheduler.make_ready(workflow)
        for _ in range(most):
            delivery = None
            if scheduled:
                delivery = await scheduler.next_ready(timedelta(seconds=1))
                if delivery is None or delivery.workflow != workflow:
                    raise NotFinished(
                        f"workflow {workflow!r} was not delivered by the scheduler at "
                        f"{self.clock.now().isoformat()} (got {delivery!r}): its due time "
                        "did not follow the clock"
                    )
            outcome = await self.run(workflow, body)
            if isinstance(outcome, Finished | Blocked):
                if delivery is not None:
                    await scheduler.done(delivery)
                return outcome
            if delivery is not None:
                await scheduler.wake_at(delivery, outcome.until)
            if until == "sleeping":
                return outcome
            self.advance_to(outcome.until)
            if scheduled:
                await scheduler.wake_due(self.clock.now())
        raise NotFinished(f"workflow {workflow!r} did not reach {until!r} in {most} passes")


async def _claim(
    kit: Kit[Any],
    checkpointer: Checkpointer[Any],
    workflow: str,
    contended: Callable[[], None] | None = None,
) -> Pass:
    """Claim ``workflow``, waiting for an abandoned claim to lapse as a new worker would:
    the clock is moved past the liveness where the store follows it, else real time passes.
    ``contended`` is called once when the first try finds the claim held."""
    waited = 0.0
    while True:
        holder = await checkpointer.claim(
            workflow, liveness=kit.liveness, budget=timedelta(hours=1)
        )
        if holder is not None:
            return holder
        if contended is not None:
            contended()
            contended = None
        if kit.store_follows_clock:
            kit.advance(kit.liveness + timedelta(seconds=1))
            continue
        if waited > kit.liveness.total_seconds() * 4 + 5:
            raise TimeoutError(f"workflow {workflow!r}: an abandoned claim never lapsed")
        await asyncio.sleep(CLAIM_POLL)
        waited += CLAIM_POLL


async def _enter_testing(
    stack: AsyncExitStack, plugin: StorePlugin, url: str | None, options: dict[str, Any]
) -> tuple[Testbed[Any], bool]:
    if plugin.testing is None:
        raise ValueError(f"the {plugin.name} store offers no testing hook")
    clock = options.pop("clock")
    try:
        return await stack.enter_async_context(plugin.testing(url, clock=clock, **options)), True
    except TypeError as error:
        if "clock" not in str(error):
            raise
    return await stack.enter_async_context(plugin.testing(url, **options)), False


@asynccontextmanager
async def open_kit(
    name: str = "memory",
    url: str | None = None,
    *,
    clock: ManualClock | None = None,
    liveness: timedelta = timedelta(seconds=30),
    **options: Any,
) -> AsyncIterator[Kit[Any]]:
    """A fresh, isolated store of the installed store ``name``, removed on exit.

    Opened by the store's ``testing`` hook (as ``pytest --durable-store`` certifies it), at
    ``url`` when given, else the store's testing default (a temporary file, the loopback
    server). The clock (a new :class:`ManualClock` unless given) is handed to the store
    too where its hook takes ``clock=``; ``options`` (``codec=``, ``gap=``, ...) are passed
    through.
    """
    plugin = store(name)
    clock = clock if clock is not None else ManualClock()
    async with AsyncExitStack() as stack:
        bed, follows = await _enter_testing(stack, plugin, url, {"clock": clock, **options})
        yield Kit(bed.durable, clock, plugin, bed, follows, liveness)


# -- every crash point ---------------------------------------------------------------------


@dataclass(frozen=True)
class Boundary:
    """A point where a process can die: ``position`` (one of :data:`POSITIONS`) relative to
    the operation keyed ``key``; ``index`` is its order in a run without crashes."""

    index: int
    key: str
    position: str

    def __str__(self) -> str:
        return f"#{self.index} {self.key!r} {self.position}"


@dataclass
class Scenario:
    """One trial's workflow over a world of its own: ``body``, and ``invariant`` over the
    world after the run (raise ``AssertionError`` or return ``False`` when it is broken).
    ``supply`` is called when the workflow blocks on keys, to arrive or send what it
    waits for (a workflow that blocks without one is reported as stuck)."""

    body: Body
    invariant: Callable[[], object]
    supply: Callable[[tuple[str, ...]], Awaitable[object]] | None = None


@dataclass
class CrashPoint:
    boundary: Boundary
    verdict: Literal["held", "broken", "not reached"]
    error: str | None = None
    history: list[str] = field(default_factory=list)


@dataclass
class CrashReport:
    """Every crash point tried, in order, and what the invariant said after each."""

    workflow: str
    store: str
    boundaries: list[Boundary]
    points: list[CrashPoint]

    @property
    def broken(self) -> CrashPoint | None:
        """The first crash point after which the invariant failed, if any."""
        return next((p for p in self.points if p.verdict == "broken"), None)

    @property
    def capped(self) -> bool:
        return len(self.points) < len(self.boundaries)

    def __str__(self) -> str:
        lines = [
            f"crash points of {self.workflow!r} on {self.store}: {len(self.points)} tried "
            f"of {len(self.boundaries)}"
        ]
        for point in self.points:
            lines.append(f"  {point.boundary}: {point.verdict}")
        first = self.broken
        if first is not None:
            lines.append(
                f"first broken: step {first.boundary.key!r}, killed "
                f"{first.boundary.position}: {first.error}"
            )
            lines.extend(f"    {entry}" for entry in first.history)
        return "\n".join(lines)

    def check(self) -> None:
        """Raise ``AssertionError`` with the report when any crash point broke the invariant."""
        if self.broken is not None:
            raise AssertionError(str(self))


class _Killed(BaseException):
    """The simulated death of a process, at a boundary: a ``BaseException`` so that no
    ``except Exception`` in a body or a retry policy mistakes it for the effect failing."""


@dataclass
class _Trial:
    target: tuple[str, str] | None
    seen: list[tuple[str, str]] = field(default_factory=list)
    history: list[str] = field(default_factory=list)
    killed: bool = False
    inside: str | None = None
    workflow: str = ""
    passes: int = 0

    def at(self, key: str, position: str) -> None:
        spot = (key, position)
        if spot not in self.seen:
            self.seen.append(spot)
            if not self.killed and spot == self.target:
                self.killed = True
                self.history.append(f"pass {self.passes}: killed {position} of {key!r}")
                raise _Killed(f"{key} {position}")
        self.history.append(f"pass {self.passes}: {key!r} {position}")

    def lapse(self) -> None:
        self.history.append(
            f"pass {self.passes}: the claim is still held by the dead pass; waiting for it to lapse"
        )

    async def gap(self, move: str, workflow: str) -> None:
        await asyncio.sleep(0)
        if (
            move == "Checkpointer.transact"
            and self.inside is not None
            and workflow == self.workflow
        ):
            key, self.inside = self.inside, None
            self.at(key, "inside transact")


class _CrashingRun(Run[Any]):
    """A ``Run`` that reports each boundary to its trial, which may kill the pass there."""

    _trial: _Trial

    async def step(self, key: str, effect: Callable[..., object], parse: Any, **kw: Any) -> Any:
        if key in self._records:
            return await super().step(key, effect, parse, **kw)
        trial = self._trial

        async def effect_at_boundaries(*args: object) -> object:
            trial.at(key, "before the effect")
            produced = effect(*args)
            if inspect.isawaitable(produced):
                produced = await produced
            trial.at(key, "after the effect, before its record")
            return produced

        value = await super().step(key, effect_at_boundaries, parse, **kw)
        trial.at(key, "after the record")
        return value

    async def transact(self, key: str, effect: Any, parse: Callable[[object], T]) -> T:
        if key in self._records:
            return await super().transact(key, effect, parse)
        self._trial.at(key, "before transact")
        self._trial.inside = key  # the store's gap, where it offers one, reports it
        try:
            value = await super().transact(key, effect, parse)
        finally:
            self._trial.inside = None
        self._trial.at(key, "after transact")
        return value

    async def sleep(self, key: str, duration: timedelta) -> datetime:
        if key not in self._records:
            self._trial.at(key, "before sleep")
        value = await super().sleep(key, duration)
        self._trial.at(key, "after sleep")
        return value

    async def awaiting(self, key: str, parse: Callable[[object], T]) -> T:
        if key not in self._records:
            self._trial.at(key, "before await")
        value = await super().awaiting(key, parse)
        self._trial.at(key, "after await")
        return value

    async def receive(self, key: str, parse: Callable[[object], T]) -> T:
        if key not in self._records:
            self._trial.at(key, "before receive")
        value = await super().receive(key, parse)
        self._trial.at(key, "after receive")
        return value


def _instrumented(body: Body, trial: _Trial) -> Body:
    async def instrumented(run: Run[Any]) -> Any:
        run.__class__ = _CrashingRun
        run._trial = trial  # type: ignore[attr-defined]
        return await body(run)

    return instrumented


StoreFactory = Callable[..., AbstractAsyncContextManager[Kit[Any]]]
"""``factory(gap=...)``: a fresh :class:`Kit` per trial, such as :func:`open_kit` itself or
``functools.partial(open_kit, "sqlite")``."""

Setup = Callable[[Kit[Any]], Awaitable[Scenario] | Scenario]


async def _trial(
    setup: Setup,
    factory: StoreFactory,
    workflow: str,
    target: tuple[str, str] | None,
    liveness: timedelta,
    most_passes: int,
) -> tuple[_Trial, str, str | None]:
    """Run one trial: kill at ``target`` (or nowhere), resume on a fresh handle, run to the
    end, and check the invariant. Returns the trial and the invariant's error, if any."""
    trial = _Trial(target, workflow=workflow)
    async with factory(gap=trial.gap, liveness=liveness) as kit:
        name = kit.name
        made = setup(kit)
        scenario = await made if inspect.isawaitable(made) else made
        body = _instrumented(scenario.body, trial)
        async with AsyncExitStack() as handles:
            durable = kit.durable
            for _ in range(most_passes):
                trial.passes += 1
                checkpointer = checkpointer_of(durable)
                holder = await _claim(kit, checkpointer, workflow, trial.lapse)
                try:
                    outcome = await drive(
                        checkpointer, holder, body, liveness=liveness, clock=kit.clock
                    )
                except (_Killed, BaseExceptionGroup) as error:
                    if isinstance(error, BaseExceptionGroup) and error.subgroup(_Killed) is None:
                        raise
                    # The process is dead: its claim is not released, it must lapse. The
                    # next pass runs on a handle of its own, as a new worker's would be.
                    if kit.testbed.reopen is not None:
                        durable = await handles.enter_async_context(kit.testbed.reopen())
                    continue
                await checkpointer.release(holder)
                if isinstance(outcome, Finished):
                    trial.history.append(f"pass {trial.passes}: finished: {outcome.value!r}")
                    break
                if isinstance(outcome, Sleeping):
                    trial.history.append(f"pass {trial.passes}: sleeps until {outcome.until}")
                    kit.advance_to(outcome.until)
                    continue
                trial.history.append(f"pass {trial.passes}: blocked on {list(outcome.keys)}")
                if scenario.supply is None:
                    return (
                        trial,
                        name,
                        f"the workflow blocked on {list(outcome.keys)} with no supply",
                    )
                await scenario.supply(outcome.keys)
            else:
                return trial, name, f"the workflow did not finish in {most_passes} passes"
        try:
            held = scenario.invariant()
            if inspect.isawaitable(held):
                held = await held
        except AssertionError as error:
            return trial, name, f"AssertionError: {error}" if str(error) else "AssertionError"
        if held is False:
            return trial, name, "the invariant returned False"
        records: Mapping[str, object] = await checkpointer_of(kit.durable).load(workflow)
        trial.history.append(f"records at the end: {sorted(records)}")
    return trial, name, None


def _spread(boundaries: list[Boundary], most: int | None) -> list[Boundary]:
    if most is None or len(boundaries) <= most:
        return boundaries
    if most <= 1:
        return boundaries[:most]
    step = (len(boundaries) - 1) / (most - 1)
    return [boundaries[round(i * step)] for i in range(most)]


async def crash_points(
    setup: Setup,
    *,
    store: StoreFactory = open_kit,
    workflow: str = "crash-test",
    most: int | None = None,
    liveness: timedelta = timedelta(seconds=0.5),
    most_passes: int = 50,
    stop_at_broken: bool = False,
) -> CrashReport:
    """Kill ``workflow`` at every boundary where a process can die, and check the invariant.

    ``setup(kit)`` builds one trial's world on a fresh store from ``store`` (called with
    ``gap=`` and ``liveness=``) and returns its :class:`Scenario`. A first trial runs without
    a crash, checks the invariant, and lists the boundaries it passes (:data:`POSITIONS`);
    then, for each boundary, a trial runs the workflow, kills the pass there (a
    ``BaseException`` out of the boundary, and the claim abandoned, not released), resumes
    it in passes on a fresh handle once the claim has lapsed, runs it to the end, and
    checks the invariant. "Inside transact" is reached through the store's gap, where its
    testing hook takes ``gap=``.

    The boundaries number a few per step of one run, so trials grow linearly with the
    steps (and each trial with them too); ``most`` caps the trials, spread evenly over the
    boundaries, for a long workflow. ``stop_at_broken`` ends at the first crash point that
    breaks the invariant, for a test that only needs to know one does.
    """
    clean, name, error = await _trial(setup, store, workflow, None, liveness, most_passes)
    boundaries = [Boundary(i, key, position) for i, (key, position) in enumerate(clean.seen)]
    if error is not None:
        point = CrashPoint(
            Boundary(-1, "(none)", "without a crash"), "broken", error, clean.history
        )
        return CrashReport(workflow, name, boundaries, [point])
    points: list[CrashPoint] = []
    for boundary in _spread(boundaries, most):
        trial, _, error = await _trial(
            setup, store, workflow, (boundary.key, boundary.position), liveness, most_passes
        )
        if not trial.killed:
            points.append(CrashPoint(boundary, "not reached", error, trial.history))
        else:
            points.append(CrashPoint(boundary, "broken" if error else "held", error, trial.history))
            if error and stop_at_broken:
                break
    return CrashReport(workflow, name, boundaries, points)
