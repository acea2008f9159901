"""Schedules: a kind started on a cron expression or a fixed interval.

A schedule names a kind, an input, a cron expression (read in a time zone) or an interval,
and what to do about ticks that fell due while no worker ran (:class:`Missed`). Every tick
starts one workflow whose id is the schedule's name and the tick's moment in UTC
(``nightly@2026-01-01T02:00:00Z``, :func:`tick_workflow`), with ``start``: so however many
workers look at the same tick, the store's one-winner ``admit`` lets exactly one of them
create it, and the others' starts find it there and write nothing. No lock, no leader, and
nothing a store owes beyond what lifecycle already certifies
(``lifecycle.admit-one-winner-under-concurrency``).

Where schedules live: the inbox of one reserved workflow, :data:`REGISTRY`. Creating,
pausing, resuming and deleting each append an event there (``Checkpointer.append``, which
no store may lose or reorder), and the schedules now are those events folded in append
order, so every reader of the store sees the same schedules in the same state, and they
survive restarts as any record does. Nothing queues the registry, so no worker ever runs
it as a workflow. Which ticks a schedule has fired is not kept a second time: the tick
workflows are that record (a worker that starts looks for the newest tick's workflow,
:meth:`Ticker.look`), so no store needs a table, a key or a schema change for schedules.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from durable.boundary import check_kind, shown
from durable.clock import Clock, SystemClock
from durable.interfaces import INBOX_PREFIX, Durable, StartConflict
from durable.workflows import InputRefused, Kind, LifecycleDurable, Workflows, lifecycle_of

__all__ = [
    "MOST_MISSED",
    "ON_TIME",
    "REGISTRY",
    "Missed",
    "Schedule",
    "Schedules",
    "Starter",
    "Ticker",
    "UnknownSchedule",
    "tick_workflow",
]

log = logging.getLogger("durable.schedules")

REGISTRY = "durable.schedules"
"""The reserved workflow whose inbox holds every schedule's events, in the order they landed."""

ON_TIME = timedelta(minutes=1)
"""A tick started within this long of its moment is on time; one found later was missed
(no worker looked while it was due), and the schedule's :class:`Missed` policy decides."""

MOST_MISSED = 1000
"""At most this many of the newest missed ticks are considered when a worker catches up:
``each`` starts at most this many, and a worker looking for the last tick fired reads at
most this many statuses."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Missed(enum.StrEnum):
    """What to do with ticks that fell due while no worker ran."""

    SKIP = "skip"
    """Start none of them: the schedule goes on from its next tick."""
    ONCE = "once"
    """Start the newest of them, once (none when an on-time tick starts in the same look)."""
    EACH = "each"
    """Start every one of them, oldest first (at most :data:`MOST_MISSED`)."""


class UnknownSchedule(LookupError):
    """No schedule of that name (never created, or deleted)."""


def tick_workflow(name: str, tick: datetime) -> str:
    """The id of the workflow that ``name``'s tick at ``tick`` starts: name, ``@``, the moment
    in UTC to the second. One id per tick, the same on every worker: that is what lets the
    store's idempotent ``start`` pick one winner."""
    return f"{name}@{tick.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ}"


@dataclass(frozen=True, slots=True)
class Schedule:
    """A schedule as its events leave it (:meth:`Schedules.get`).

    Exactly one of ``cron`` (five fields, or six with seconds first, read in ``zone``) and
    ``every`` (whole seconds, at least one; ticks are multiples of it since the Unix epoch,
    so ``every=1h`` fires on the hour on every worker) is set. ``since`` is when it was last
    created or resumed: no tick at or before it is ever started, so a tick that fell due
    while it was paused is neither run nor counted missed.
    """

    name: str
    kind: str
    input: object
    cron: str | None
    every: timedelta | None
    zone: str
    missed: Missed
    paused: bool
    created_at: datetime
    since: datetime

    def ticks(self, after: datetime, until: datetime, most: int = MOST_MISSED) -> list[datetime]:
        """The newest ``most`` tick moments in ``(after, until]``, oldest first, in UTC."""
        if until <= after or most < 1:
            return []
        if self.every is not None:
            step = _micros(self.every)
            first = _micros(after - _EPOCH) // step + 1
            last = _micros(until - _EPOCH) // step
            first = max(first, last - most + 1)
            return [_EPOCH + timedelta(microseconds=k * step) for k in range(first, last + 1)]
        assert self.cron is not None
        zone = ZoneInfo(self.zone)
        # cronsim counts whole seconds, strictly before its start when reversed: start one
        # second past ``until`` cut to the second, and every tick up to ``until`` is seen.
        start = until.replace(microsecond=0) + timedelta(seconds=1)
        found: list[datetime] = []
        cronsim = _cronsim()
        for moment in cronsim.CronSim(self.cron, start.astimezone(zone), reverse=True):
            moment = moment.astimezone(UTC)
            if moment <= after or len(found) == most:
                break
            found.append(moment)
        found.reverse()
        return found

    def _event(self) -> dict[str, object]:
        return {
            "schedule": self.name,
            "event": "create",
            "kind": self.kind,
            "input": self.input,
            "cron": self.cron,
            "every": None if self.every is None else self.every.total_seconds(),
            "zone": self.zone,
            "missed": self.missed.value,
            "at": self.created_at.isoformat(),
        }

    def _same(self, other: Schedule) -> bool:
        """The same definition (kind, input, timing, zone, policy), whatever its state."""
        return (self.kind, self.input, self.cron, self.every, self.zone, self.missed) == (
            other.kind,
            other.input,
            other.cron,
            other.every,
            other.zone,
            other.missed,
        )


def _micros(duration: timedelta) -> int:
    return (duration.days * 86_400 + duration.seconds) * 1_000_000 + duration.microseconds


def _check_name(name: object) -> str:
    try:
        return check_kind(name)
    except ValueError:
        raise ValueError(
            f"schedule name {shown(name)} is not allowed: a schedule is named like a kind, 1 to "
            "100 of letters, digits, '_', '.' and '-', not starting with '.' or '-'"
        ) from None


def _check_timing(cron: str | None, every: timedelta | None, zone: str) -> None:
    if (cron is None) == (every is None):
        raise ValueError("a schedule has exactly one of cron= and every=")
    try:
        where = ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ValueError(
            f"no time zone {zone!r}: give an IANA name like 'Europe/Berlin' or 'UTC'"
        ) from None
    if cron is not None:
        if not isinstance(cron, str):
            raise TypeError(f"cron= is a str like '0 2 * * *', got {cron!r}")
        cronsim = _cronsim()
        try:
            next(iter(cronsim.CronSim(cron, datetime(2026, 1, 1, tzinfo=where))))
        except (cronsim.CronSimError, StopIteration) as error:
            raise ValueError(f"cron expression {cron!r} is not valid: {error}") from None
    if every is not None:
        if not isinstance(every, timedelta):
            raise TypeError(f"every= is a timedelta, got {every!r}")
        if every < timedelta(seconds=1) or every.microseconds:
            raise ValueError(f"every= is whole seconds, at least one, got {every!r}")


def _fold(records: dict[str, object]) -> dict[str, Schedule]:
    """The schedules the registry's events leave, in append order; deleted ones gone."""
    found: dict[str, Schedule] = {}
    for key, event in records.items():
        if not key.startswith(INBOX_PREFIX) or not isinstance(event, dict):
            continue
        name, what = event.get("schedule"), event.get("event")
        if not isinstance(name, str):
            continue
        try:
            at = datetime.fromisoformat(str(event.get("at")))
        except ValueError:
            continue
        if what == "create":
            every = event.get("every")
            found[name] = Schedule(
                name=name,
                kind=str(event["kind"]),
                input=event.get("input"),
                cron=cast("str | None", event.get("cron")),
                every=None if every is None else timedelta(seconds=cast("float", every)),
                zone=str(event.get("zone", "UTC")),
                missed=Missed(str(event.get("missed", "skip"))),
                paused=False,
                created_at=at,
                since=at,
            )
        elif name not in found:
            continue
        elif what == "pause":
            found[name] = replace(found[name], paused=True)
        elif what == "resume" and found[name].paused:
            found[name] = replace(found[name], paused=False, since=max(at, found[name].since))
        elif what == "delete":
            del found[name]
    return found


class Schedules:
    """Create, list, pause, resume and delete the schedules of ``durable``.

    Each change is one append to :data:`REGISTRY`'s inbox, stamped with ``clock``; a change
    that would change nothing (creating a schedule exactly as it is, pausing a paused one)
    appends nothing, so a deploy script may create its schedules on every run.
    """

    def __init__(self, durable: Durable[Any], *, clock: Clock | None = None) -> None:
        self.durable = durable
        self.clock = clock if clock is not None else SystemClock()

    def __repr__(self) -> str:
        return f"Schedules({self.durable!r})"

    async def _all(self) -> dict[str, Schedule]:
        return _fold(await self.durable.checkpointer.load(REGISTRY))

    async def _append(self, name: str, event: str, **fields: object) -> None:
        value = {"schedule": name, "event": event, "at": self.clock.now().isoformat(), **fields}
        await self.durable.checkpointer.append(REGISTRY, value)

    async def create(
        self,
        name: str,
        kind: Kind[Any, Any] | str,
        *,
        cron: str | None = None,
        every: timedelta | None = None,
        input: object = None,
        zone: str = "UTC",
        missed: Missed | str = Missed.SKIP,
    ) -> Schedule:
        """Create the schedule ``name``, or redefine it (ticks already started are kept; the
        new definition's ticks start after now). With a ``Kind``, its parser checks
        ``input`` first (``InputRefused``, nothing written)."""
        _check_name(name)
        if isinstance(kind, Kind):
            kind_name = check_kind(kind.name)
            try:
                kind.parse(input)
            except Exception as error:
                raise InputRefused(
                    f"schedule {name!r}: kind {kind_name!r} refused the input {shown(input)}: "
                    f"{error} (nothing was written)"
                ) from error
        else:
            kind_name = check_kind(kind)
        _check_timing(cron, every, zone)
        try:
            policy = Missed(missed)
        except ValueError:
            known = ", ".join(m.value for m in Missed)
            raise ValueError(f"missed= is one of {known}, got {missed!r}") from None
        lifecycle_of(self.durable.checkpointer)  # LifecycleNotOffered before anything is written
        now = self.clock.now()
        wanted = Schedule(name, kind_name, input, cron, every, zone, policy, False, now, now)
        current = (await self._all()).get(name)
        if current is not None and current._same(wanted):
            return current
        await self.durable.checkpointer.append(REGISTRY, wanted._event())
        made = (await self._all()).get(name)
        assert made is not None
        return made

    async def get(self, name: str) -> Schedule | None:
        """The schedule ``name``, or None."""
        return (await self._all()).get(_check_name(name))

    async def list(self) -> list[Schedule]:
        """Every schedule, by name."""
        return sorted((await self._all()).values(), key=lambda s: s.name)

    async def _found(self, name: str) -> Schedule:
        found = (await self._all()).get(_check_name(name))
        if found is None:
            raise UnknownSchedule(f"no schedule named {name!r} (never created, or deleted)")
        return found

    async def pause(self, name: str) -> Schedule:
        """Stop starting ``name``'s ticks until it is resumed; ticks due meanwhile never run."""
        if not (await self._found(name)).paused:
            await self._append(name, "pause")
        return await self._found(name)

    async def resume(self, name: str) -> Schedule:
        """Start ``name``'s ticks again, from the first one after now."""
        if (await self._found(name)).paused:
            await self._append(name, "resume")
        return await self._found(name)

    async def delete(self, name: str) -> None:
        """Forget ``name``: no more ticks. Workflows its ticks started are kept."""
        await self._found(name)
        await self._append(name, "delete")


Starter = Callable[[LifecycleDurable[Any], Kind[Any, Any], str, object], Awaitable[object]]
"""How a :class:`Ticker` starts a tick's workflow: ``(store, kind, workflow, input)``."""


async def _start(
    store: LifecycleDurable[Any], kind: Kind[Any, Any], workflow: str, input: object
) -> object:
    return await store.start(kind, workflow, input)


@dataclass(slots=True)
class _Seen:
    created_at: datetime
    since: datetime
    last: datetime  # the newest tick this ticker has dealt with (started, or let go)


class Ticker:
    """One worker's view of the schedules: each :meth:`look` starts what is due.

    Any number of tickers may look at one store at once; each tick's workflow is started by
    ``start``, whose one winner is the store's. A ticker starts only schedules whose kind
    ``workflows`` serves, so two services sharing a store each start their own, with their
    kind's parser and queue. ``on_time`` is :data:`ON_TIME` unless given.
    """

    def __init__(
        self,
        durable: Durable[Any],
        workflows: Workflows,
        *,
        clock: Clock | None = None,
        on_time: timedelta = ON_TIME,
        start: Starter = _start,
    ) -> None:
        self.durable = durable
        self.workflows = workflows
        self.clock = clock if clock is not None else SystemClock()
        self.on_time = on_time
        self._start = start
        self._seen: dict[str, _Seen] = {}

    def __repr__(self) -> str:
        return f"Ticker({self.durable!r}, {self.workflows!r})"

    async def look(self) -> list[str]:
        """Start every tick due now by each schedule's policy; return the ids this call
        started (or found already started by another worker, which wrote them first)."""
        store = cast("LifecycleDurable[Any]", self.durable)
        schedules = _fold(await self.durable.checkpointer.load(REGISTRY))
        for gone in set(self._seen) - set(schedules):
            del self._seen[gone]
        now = self.clock.now()
        started: list[str] = []
        for schedule in schedules.values():
            if schedule.paused or schedule.kind not in self.workflows:
                self._seen.pop(schedule.name, None)
                continue
            seen = self._seen.get(schedule.name)
            if seen is None or (seen.created_at, seen.since) != (
                schedule.created_at,
                schedule.since,
            ):
                seen = _Seen(schedule.created_at, schedule.since, await self._last(schedule, now))
                self._seen[schedule.name] = seen
            due = schedule.ticks(max(seen.last, schedule.since), now)
            if not due:
                continue
            for tick in self._chosen(schedule, due, now):
                workflow = tick_workflow(schedule.name, tick)
                kind = self.workflows[schedule.kind]
                try:
                    await self._start(store, kind, workflow, schedule.input)
                except StartConflict:
                    # Started first under an earlier definition of the schedule: that start
                    # is this tick's, and the tick is not started twice.
                    log.info(
                        "schedule %r: tick %s was started before it was redefined",
                        schedule.name,
                        workflow,
                    )
                except InputRefused as refused:
                    log.error(
                        "schedule %r: tick %s not started: %s", schedule.name, workflow, refused
                    )
                    continue
                started.append(workflow)
            seen.last = due[-1]
        return started

    def _chosen(self, schedule: Schedule, due: list[datetime], now: datetime) -> Iterable[datetime]:
        on_time = [tick for tick in due if now - tick <= self.on_time]
        missed = [tick for tick in due if now - tick > self.on_time]
        if missed:
            log.info(
                "schedule %r: %d tick(s) missed since %s (policy %s)",
                schedule.name,
                len(missed),
                missed[0].isoformat(),
                schedule.missed.value,
            )
        if schedule.missed is Missed.EACH:
            return missed + on_time
        if schedule.missed is Missed.ONCE and missed and not on_time:
            return missed[-1:]
        return on_time

    async def _last(self, schedule: Schedule, now: datetime) -> datetime:
        """The newest tick of ``schedule`` whose workflow exists (the last one fired, by
        whichever worker), else its ``since``: read from the tick workflows themselves,
        newest first, at most :data:`MOST_MISSED` of them."""
        lifecycle = lifecycle_of(self.durable.checkpointer)
        for tick in reversed(schedule.ticks(schedule.since, now)):
            if await lifecycle.status(tick_workflow(schedule.name, tick)) is not None:
                return tick
        return schedule.since


def _cronsim() -> Any:
    """The cron parser, imported when a cron schedule is first read.

    It is the ``cron`` extra (``pip install 'durable-core[cron]'``) rather than a dependency,
    so that the core keeps to pluggy and typing_extensions; interval schedules need nothing.
    """
    try:
        import cronsim
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            "a cron schedule needs a cron parser: pip install 'durable-core[cron]' "
            "(interval schedules, --every, need nothing more)",
            name=error.name,
        ) from error
    return cronsim
