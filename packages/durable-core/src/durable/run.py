"""One pass over a workflow: the ``Run`` its body is handed, and ``resume``, which drives it.

A workflow is an ordinary async function of a :class:`Run`. Resuming it means calling it
again: ``resume`` claims the workflow, loads what it has recorded, and hands the body a
``Run`` on which every step already recorded returns its value instead of running.

Every durable read takes a parser (``parse: Callable[[object], T]``) because a step hands
back what the store holds, not the object its effect produced: a tuple comes back a list
under ``JsonCodec`` on the very pass that ran the step, not only after a crash. The return
type is then proven by a function that ran rather than asserted by a cast.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, Generic, Never, TypeVar, cast

from typing_extensions import TypeVar as DefaultTypeVar

from durable.boundary import check_duration, check_key, check_workflow, shown
from durable.clock import Clock, SystemClock
from durable.interfaces import (
    INBOX_PREFIX,
    Checkpointer,
    Contended,
    Durable,
    Fenced,
    Pass,
    Recorded,
    StoreUnavailable,
    Suspended,
    Swallowed,
)

__all__ = [
    "Blocked",
    "DuplicateKey",
    "Finished",
    "Outcome",
    "ParseFailed",
    "Run",
    "Sleeping",
    "drive",
    "resume",
]

log = logging.getLogger("durable.run")

T = TypeVar("T")
E = DefaultTypeVar("E", contravariant=True, default=Never)

RECEIVE_FIELD = "durable.receive"
"""A ``receive`` records ``{RECEIVE_FIELD: <inbox key>}``: a reference to the entry it took,
never a copy, so the inbox entry stays the one record of the message."""

DEFAULT_LIVENESS = timedelta(seconds=30)
DEFAULT_BUDGET = timedelta(minutes=15)


@dataclass(frozen=True, slots=True)
class Finished(Generic[T]):
    """The body returned ``value`` without reaching a wait."""

    value: T


@dataclass(frozen=True, slots=True)
class Sleeping:
    """The body reached at least one sleep; it is next worth running at ``until``.

    ``keys`` names every wait reached in this pass, sleeps and awaits alike, in the order
    reached: a value arriving for one of the awaited keys makes it worth running sooner.
    """

    until: datetime
    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Blocked:
    """The body is waiting on values (or inbox messages) that somebody else must supply."""

    keys: tuple[str, ...]


Outcome = Finished[T] | Sleeping | Blocked


class DuplicateKey(ValueError):
    """Two steps or waits used one key in one pass.

    A key is a step's identity: the second use would replay the first one's value, which is
    never what the author meant.
    """


class ParseFailed(ValueError):
    """A parser refused what the store holds under a key."""

    def __init__(self, workflow: str, key: str, value: object, error: Exception) -> None:
        self.workflow = workflow
        self.key = key
        self.value = value
        super().__init__(
            f"workflow {workflow!r}, key {key!r}: the parser refused the stored value "
            f"{shown(value)}: {type(error).__name__}: {error}"
        )


def _is_reference(value: object) -> str | None:
    if isinstance(value, dict) and len(value) == 1:
        target = value.get(RECEIVE_FIELD)
        if isinstance(target, str) and target.startswith(INBOX_PREFIX):
            return target
    return None


class Run(Generic[E]):
    """A body's view of one pass: its records so far and the ways to add to them.

    Keys are identity. A step's key names the step across passes, so the same key must
    mean the same effect every time the body runs, and one key may be used once per pass.
    """

    def __init__(
        self,
        checkpointer: Checkpointer[E],
        holder: Pass,
        records: Mapping[str, object],
        *,
        clock: Clock | None = None,
    ) -> None:
        self._checkpointer = checkpointer
        self._holder = holder
        self._records: dict[str, object] = dict(records)
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._used: set[str] = set()
        self._taken: set[str] = {
            target for value in self._records.values() if (target := _is_reference(value))
        }
        self._waits: list[str] = []
        self._sleeps: dict[str, datetime] = {}
        # A pass ends when its body does, but a fan-out's other branches may still be mid-
        # effect. Once the pass is ending, no new effect may start, and the pass waits for the
        # ones in flight to land their records before it reports, so nothing runs unclaimed.
        self._ending = False
        self._in_flight = 0
        # The keys whose effects are in flight, oldest first: a dict for its order. This is
        # all that naming the running step costs a step; the store hears of it only when
        # the renewal loop beats, never from the step itself.
        self._current: dict[str, None] = {}
        self._settled = asyncio.Event()
        self._settled.set()

    def __repr__(self) -> str:
        return f"Run({self._holder}, {len(self._records)} records)"

    @property
    def workflow(self) -> str:
        return self._holder.workflow

    @property
    def checkpointer(self) -> Checkpointer[E]:
        """The store this pass writes to: what a body needs to build the store's own kind of
        effect for :meth:`transact` (a Lua effect's keys carry ``hash_key(workflow)``)."""
        return self._checkpointer

    @property
    def holder(self) -> Pass:
        """The pass this run writes with; every write is fenced by its token."""
        return self._holder

    @property
    def records(self) -> Mapping[str, object]:
        """What the workflow holds, as this pass knows it (read-only)."""
        return MappingProxyType(self._records)

    @property
    def waits(self) -> tuple[str, ...]:
        """Every wait this pass has reached, in order."""
        return tuple(self._waits)

    @property
    def current(self) -> str | None:
        """The key of the oldest step in flight, or ``None`` between steps.

        What a worker's heartbeat (``Lifecycle.beat``) tells the store, so that ``durable
        show`` can name the step a long pass is stuck in without any step writing it.
        """
        return next(iter(self._current), None)

    def now(self) -> datetime:
        """The run's clock. Not recorded: wrap it in a step if a pass must replay it."""
        return self._clock.now()

    def _use(self, key: str) -> str:
        check_key(self.workflow, key)
        if key in self._used:
            raise DuplicateKey(
                f"workflow {self.workflow!r}: key {key!r} is used twice in one pass; "
                "every step and wait needs a key of its own"
            )
        self._used.add(key)
        return key

    def _parse(self, key: str, value: object, parse: Callable[[object], T]) -> T:
        try:
            return parse(value)
        except Exception as error:
            raise ParseFailed(self.workflow, key, value, error) from error

    def _begin(self, key: str) -> None:
        """Count an effect in flight, or refuse it if the pass is ending. A pair of plain
        calls rather than a context manager: this is on every step's path."""
        if self._ending:
            raise Suspended(
                f"workflow {self.workflow!r}: the pass is ending, so {key!r} waits for the next"
            )
        self._in_flight += 1
        self._current[key] = None
        self._settled.clear()

    def _finish(self, key: str) -> None:
        self._current.pop(key, None)
        self._in_flight -= 1
        if not self._in_flight:
            self._settled.set()

    async def _end(self) -> None:
        """Refuse new effects and wait for those in flight to record."""
        self._ending = True
        await self._settled.wait()

    def _keep(self, key: str, recorded: Recorded) -> object:
        self._records[key] = recorded.value
        return recorded.value

    async def _write(self, key: str, value: object) -> Recorded:
        """Record ``value`` under ``key`` with this pass's token (for drivers such as the graph)."""
        recorded = await self._checkpointer.record(self._holder, key, value)
        self._keep(key, recorded)
        return recorded

    async def step(
        self,
        key: str,
        effect: Callable[[], Awaitable[object]] | Callable[[], object],
        parse: Callable[[object], T],
    ) -> T:
        """Run ``effect`` once and record its result under ``key``; on later passes, return
        the recorded value without running it.

        At-least-once: a crash after the effect and before the record repeats it on the
        next pass. An effect that leaves the store belongs behind an idempotency key; one
        that lives in the store belongs in :meth:`transact`.
        """
        self._use(key)
        if key in self._records:
            return self._parse(key, self._records[key], parse)
        self._begin(key)
        try:
            produced = effect()
            if inspect.isawaitable(produced):
                produced = await produced
            recorded = await self._write(key, produced)
        finally:
            self._finish(key)
        return self._parse(key, recorded.value, parse)

    async def transact(self, key: str, effect: E, parse: Callable[[object], T]) -> T:
        """Have the store perform ``effect`` and record its result in one commit: exactly
        once, for an effect that lives in the store. What ``effect`` is depends on the store
        (a Lua script, a callback handed a cursor)."""
        self._use(key)
        if key in self._records:
            return self._parse(key, self._records[key], parse)
        self._begin(key)
        try:
            recorded = await self._checkpointer.transact(self._holder, key, effect)
        finally:
            self._finish(key)
        self._keep(key, recorded)
        return self._parse(key, recorded.value, parse)

    def _suspend(self, key: str, why: str) -> Never:
        self._waits.append(key)
        raise Suspended(f"workflow {self.workflow!r} {why} {key!r}")

    async def awaiting(self, key: str, parse: Callable[[object], T]) -> T:
        """The value somebody else supplies under ``key`` (``Durable.arrive``); until it is
        there, the pass stops here and the workflow is blocked on ``key``.

        Only a parser can establish its shape: another process wrote it, so there is
        nothing to compare it against.
        """
        self._use(key)
        if key in self._records:
            return self._parse(key, self._records[key], parse)
        self._suspend(key, "awaits a value under")

    async def sleep(self, key: str, duration: timedelta) -> datetime:
        """Sleep until ``duration`` after the first pass reached this key.

        The deadline is recorded (as an ISO string) the first time, so it survives restarts
        and is not pushed back by later passes. Returns the deadline once it has passed.
        """
        self._use(key)
        check_duration("a sleep's duration", duration, workflow=self.workflow)
        if key in self._records:
            stored = self._records[key]
        else:
            self._begin(key)
            try:
                stored = (await self._write(key, (self.now() + duration).isoformat())).value
            finally:
                self._finish(key)
        deadline = self._parse(key, stored, _as_deadline)
        if self.now() >= deadline:
            return deadline
        self._sleeps[key] = deadline
        self._suspend(key, "sleeps until " + deadline.isoformat() + " at")

    async def receive(self, key: str, parse: Callable[[object], T]) -> T:
        """The next inbox message (``Durable.send``) not yet taken by another ``receive``.

        Records a reference to the entry under ``key``, not a copy: the entry is never
        consumed, and first-writer-wins keeps the reference pointing where it did.
        """
        self._use(key)
        if key not in self._records:
            untaken = next(
                (k for k in self._records if k.startswith(INBOX_PREFIX) and k not in self._taken),
                None,
            )
            if untaken is None:
                self._suspend(key, "waits for an inbox message at")
            self._begin(key)
            try:
                self._taken.add(untaken)
                await self._write(key, {RECEIVE_FIELD: untaken})
            finally:
                self._finish(key)
        target = _is_reference(self._records[key])
        if target is None or target not in self._records:
            raise ParseFailed(
                self.workflow,
                key,
                self._records[key],
                ValueError("this key does not hold a reference to an inbox entry"),
            )
        self._taken.add(target)
        return self._parse(key, self._records[target], parse)

    def _suspension(self) -> Sleeping | Blocked:
        keys = tuple(self._waits)
        if self._sleeps:
            return Sleeping(min(self._sleeps.values()), keys)
        return Blocked(keys)


def _as_deadline(value: object) -> datetime:
    if not isinstance(value, str):
        raise TypeError(f"a sleep's deadline is recorded as an ISO string, got {value!r}")
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        raise ValueError(f"a sleep's deadline must carry a timezone, got {value!r}")
    return moment


def _only_suspended(group: BaseExceptionGroup[BaseException]) -> bool:
    rest = group.subgroup(lambda e: not isinstance(e, Suspended | BaseExceptionGroup))
    return rest is None


async def _drive(run: Run[Any], body: Callable[[Run[Any]], Awaitable[T]]) -> Outcome[T]:
    try:
        value = await body(run)
    except Suspended:
        # Siblings started in the same fan-out get one turn to reach their own waits, so
        # that the report names every key of the fan-out rather than the first to raise.
        await asyncio.sleep(0)
        await run._end()
        return run._suspension()
    except BaseExceptionGroup as group:
        await run._end()
        if group.subgroup(Suspended) is not None and _only_suspended(group):
            return run._suspension()
        raise
    except BaseException:
        await run._end()
        raise
    await run._end()
    if run.waits:
        raise Swallowed(run.workflow, run.waits)
    return Finished(value)


def checkpointer_of(store: Durable[E] | Checkpointer[E]) -> Checkpointer[E]:
    """The checkpointer of a ``Durable``, or the argument itself."""
    inner = getattr(store, "checkpointer", None)
    if inner is not None and hasattr(store, "scheduler"):
        return cast(Checkpointer[E], inner)
    return cast(Checkpointer[E], store)


async def _renew_until_stopped(
    checkpointer: Checkpointer[Any],
    holder: Pass,
    every: float,
    run: Run[Any],
    beat: Callable[[Pass, str | None], Awaitable[Pass]] | None,
) -> Never:
    while True:
        await asyncio.sleep(every)
        if beat is None:
            await checkpointer.renew(holder)
        else:
            await beat(holder, run.current)


async def drive(
    checkpointer: Checkpointer[E],
    holder: Pass,
    body: Callable[[Run[E]], Awaitable[T]],
    *,
    liveness: timedelta = DEFAULT_LIVENESS,
    clock: Clock | None = None,
    beat: Callable[[Pass, str | None], Awaitable[Pass]] | None = None,
) -> Outcome[T]:
    """Load ``holder``'s workflow and run ``body`` over it, renewing the claim meanwhile;
    neither claims nor releases (whoever took ``holder`` answers for it).

    The renewal runs every third of ``liveness`` and calls ``beat(holder, run.current)``
    when given (a lifecycle store's ``beat``, which also records the step in flight), else
    ``checkpointer.renew(holder)``. A refused renewal cancels the body and raises
    ``Fenced``. Returns as :func:`resume` does.
    """
    records = await checkpointer.load(holder.workflow)
    run: Run[E] = Run(checkpointer, holder, records, clock=clock)
    passing = asyncio.ensure_future(_drive(run, body))
    renewing = asyncio.ensure_future(
        _renew_until_stopped(checkpointer, holder, liveness.total_seconds() / 3, run, beat)
    )
    try:
        await asyncio.wait({passing, renewing}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not passing.done():
            passing.cancel()
        renewing.cancel()
        await asyncio.gather(passing, renewing, return_exceptions=True)
    if not passing.cancelled() or renewing.cancelled():
        return passing.result()
    error = renewing.exception()
    if isinstance(error, Fenced):
        raise Fenced(f"{holder} lost its claim while running: {error}") from error
    assert error is not None
    raise error


async def resume(
    store: Durable[E] | Checkpointer[E],
    workflow: str,
    body: Callable[[Run[E]], Awaitable[T]],
    *,
    liveness: timedelta = DEFAULT_LIVENESS,
    budget: timedelta = DEFAULT_BUDGET,
    clock: Clock | None = None,
) -> Outcome[T]:
    """Run one pass of ``body`` over ``workflow``.

    Claims the workflow (``Contended`` if another pass holds it), loads its records, and
    calls ``body`` with a :class:`Run`. While the body runs, the claim's liveness is renewed
    every third of ``liveness``; if renewal is refused (a newer pass, a discard, or the
    budget spent) the body is cancelled and ``Fenced`` is raised. The claim is released on
    the way out, whatever happened.

    Returns ``Finished`` when the body returns, ``Sleeping``/``Blocked`` when it reached a
    wait, and raises ``Swallowed`` when it returned after reaching one.

    ``resume`` writes no lifecycle status, even on a store that keeps one: it is the
    primitive under the worker, which records the outcome with ``begin`` and ``settle``.
    """
    check_workflow(workflow)
    check_duration("liveness", liveness, workflow=workflow)
    check_duration("budget", budget, workflow=workflow)
    checkpointer = checkpointer_of(store)
    holder = await checkpointer.claim(workflow, liveness=liveness, budget=budget)
    if holder is None:
        raise Contended(f"workflow {workflow!r} is held by another pass; try again later")
    try:
        return await drive(checkpointer, holder, body, liveness=liveness, clock=clock)
    finally:
        try:
            await checkpointer.release(holder)
        except StoreUnavailable as error:
            # Nothing to act on: the claim lapses by itself once its liveness runs out, and
            # whoever drives this pass hears about the outage from its own calls.
            log.debug("could not release %s: the store is unreachable: %s", holder, error)
        except Exception:  # the pass's own outcome matters more than a failed release
            log.warning("could not release %s", holder, exc_info=True)
