"""The queue worker: takes runnable workflows from a scheduler and drives one pass of each.

What it owes, each for a reason:

* a pool with backpressure: it never takes a delivery it has no slot for, so a busy
  worker leaves work on the queue for another rather than hoarding it;
* reclaim before read: deliveries abandoned by a dead worker are taken over before new
  work, so the oldest work is not starved by the newest;
* renewal while a pass runs (``resume`` does it) and a stopped pass when the budget is spent;
* contended and fenced passes deferred with ``wake_at``: another pass owns the workflow now,
  and the workflow is worth another look once it may have finished;
* every delivery answered for: ``done`` for a finished or blocked workflow, ``wake_at``
  for a sleeping, deferred or failed one; a failing body is logged with its workflow id;
* cancellation leaves the delivery outstanding, so the scheduler hands it out again once
  its lease runs out, rather than a half-done pass being acknowledged;
* a store outage (:class:`~durable.interfaces.StoreUnavailable`) is waited out, not blamed
  on the work: see :class:`_Outage` for what it looks like in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from durable.boundary import check_duration
from durable.clock import Clock, SystemClock
from durable.interfaces import Contended, Delivery, Durable, Fenced, StoreUnavailable
from durable.run import DEFAULT_BUDGET, DEFAULT_LIVENESS, Blocked, Finished, Run, Sleeping, resume

__all__ = ["work"]

log = logging.getLogger("durable.worker")

T = TypeVar("T")


OUTAGE_CAP = timedelta(seconds=30)
"""The longest a worker waits between two tries while its store is unreachable."""


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _named(workflows: list[str], most: int = 10) -> str:
    """Workflow ids for a log line: the first ``most``, and how many more."""
    shown = ", ".join(repr(workflow) for workflow in workflows[:most])
    more = len(workflows) - most
    return f"{shown} and {more} more" if more > 0 else shown


def _is_outage(error: BaseException) -> bool:
    """Whether ``error`` says only that the store was unreachable (a fan-out inside a body
    can raise a group of them)."""
    if isinstance(error, StoreUnavailable):
        return True
    if isinstance(error, BaseExceptionGroup):
        return (
            error.subgroup(lambda e: not isinstance(e, StoreUnavailable | BaseExceptionGroup))
            is None
        )
    return False


class _Outage:
    """The worker's view of whether its store answers, and the one place an outage is logged.

    Every part of the worker that talks to the store (the take loop, the timer, each pass
    and each answer) reports a :class:`~durable.interfaces.StoreUnavailable` here rather
    than logging it. A *series* starts at the first one and ends at the first success of an
    operation started after it, so a store that is down for a minute reads as:

    * one ERROR naming the store, what the worker was doing and the error, with the
      traceback (the only one of the series: every later failure is the same failure);
    * one WARNING per step of a capped exponential backoff (the take loop's ``poll``,
      doubled at each line, up to :data:`OUTAGE_CAP`), however many operations failed in
      between; the rest are counted and logged at DEBUG;
    * one WARNING when the store answers again, with how long it was away and the
      workflows whose passes the outage cut short.

    The waits the retrying loops are handed follow the same schedule, jittered (each is
    between half and all of the current step), so that many workers restarted together by
    one server restart do not come back in step.
    """

    def __init__(self, store: str, first: timedelta, lease: timedelta) -> None:
        self.store = store
        self.first = first.total_seconds()
        self.cap = max(OUTAGE_CAP.total_seconds(), self.first)
        self.lease = lease
        self.since: float | None = None
        self._step = self.first
        self._next_line = 0.0
        self._unlogged = 0
        self._failures = 0
        self._interrupted: list[str] = []
        self._random = random.Random()

    def failed(self, doing: str, error: BaseException, *, workflow: str | None = None) -> float:
        """Note that ``doing`` failed because the store is unreachable; returns how long the
        caller should wait before trying again. ``workflow`` names a pass the outage cut
        short (its delivery is left outstanding)."""
        now = time.monotonic()
        self._failures += 1
        if workflow is not None and workflow not in self._interrupted:
            self._interrupted.append(workflow)
        wait = self._step * self._random.uniform(0.5, 1.0)
        then = (
            f"the pass stops and its delivery stays out until the queue hands it out again "
            f"(after the delivery lease, {self.lease.total_seconds():g}s)"
            if workflow is not None
            else f"next try in {wait:.1f}s"
        )
        if self.since is None:
            self.since = now
            self._failures = 1
            self._interrupted = [workflow] if workflow is not None else []
            log.error(
                "store outage: %s, while %s: %s; %s. Retrying with backoff (at most %gs apart) "
                "until it answers; this is the outage's only traceback",
                self.store,
                doing,
                _one_line(error),
                then,
                self.cap,
                exc_info=error,
            )
        elif now >= self._next_line:
            unlogged, self._unlogged = self._unlogged, 0
            log.warning(
                "store outage: %s, %.1fs so far, while %s: %s; %s%s",
                self.store,
                now - self.since,
                doing,
                _one_line(error),
                then,
                f" ({unlogged} more failed operation(s) since the last line)" if unlogged else "",
            )
        else:
            self._unlogged += 1
            log.debug("store outage: %s failed: %s", doing, _one_line(error))
            return wait
        self._next_line = now + self._step * 0.5
        self._step = min(self._step * 2, self.cap)
        return wait

    def succeeded(self, started: float) -> None:
        """An operation started at ``started`` (``time.monotonic()``) reached the store."""
        if self.since is None or started < self.since:
            return
        away = time.monotonic() - self.since
        interrupted = _named(self._interrupted)
        log.warning(
            "store %s reachable again after %.1fs (%d failed operation(s))%s",
            self.store,
            away,
            self._failures,
            f"; the passes of {interrupted} were cut short and are handed out again once "
            f"their delivery lease ({self.lease.total_seconds():g}s) runs out"
            if interrupted
            else "",
        )
        self.since = None
        self._step = self.first
        self._unlogged = 0


async def _pause(seconds: float, stopping: asyncio.Future[Any]) -> None:
    """Wait ``seconds``, or less if the worker is told to stop."""
    await asyncio.wait({stopping}, timeout=seconds)


async def _answer(
    durable: Durable[Any],
    delivery: Delivery,
    body: Callable[[Run[Any]], Awaitable[object]],
    *,
    liveness: timedelta,
    budget: timedelta,
    retry: timedelta,
    clock: Clock,
    outage: _Outage,
) -> None:
    workflow = delivery.workflow
    scheduler = durable.scheduler
    started = time.monotonic()
    when: datetime | None
    try:
        outcome = await resume(
            durable, workflow, body, liveness=liveness, budget=budget, clock=clock
        )
    except Contended:
        log.info("workflow %r: another pass holds it; deferred by %s", workflow, retry)
        when = clock.now() + retry
    except Fenced as fenced:
        log.warning("workflow %r: pass stopped: %s; deferred by %s", workflow, fenced, retry)
        when = clock.now() + retry
    except Exception as error:
        if _is_outage(error):
            # Not the body's failure, and not a reason to defer the workflow: the delivery
            # stays out, and the scheduler hands it out again once its lease runs out.
            outage.failed(f"running workflow {workflow!r}", error, workflow=workflow)
            return
        log.exception("workflow %r: the body failed; retrying in %s", workflow, retry)
        when = clock.now() + retry
    else:
        if isinstance(outcome, Finished):
            log.info("workflow %r: finished", workflow)
            when = None
        elif isinstance(outcome, Sleeping):
            log.info("workflow %r: sleeping until %s", workflow, outcome.until.isoformat())
            when = outcome.until
        else:
            assert isinstance(outcome, Blocked)
            log.info("workflow %r: blocked on %s", workflow, ", ".join(outcome.keys))
            when = None
    try:
        if when is None:
            await scheduler.done(delivery)
        else:
            await scheduler.wake_at(delivery, when)
    except StoreUnavailable as error:
        how = "done" if when is None else "wake_at"
        outage.failed(f"answering for workflow {workflow!r} ({how})", error, workflow=workflow)
        return
    outage.succeeded(started)


async def _tick(durable: Durable[Any], every: float, clock: Clock, outage: _Outage) -> None:
    # A success here ends no outage: a scheduler whose timer has nothing to do (a
    # visibility-scored queue) answers wake_due without asking its store anything. The
    # timer runs until the worker ends, stopping or not, so its waits are plain sleeps.
    while True:
        try:
            moved = await durable.scheduler.wake_due(clock.now())
            if moved:
                log.debug("timer moved %d due workflow(s) to runnable", len(moved))
        except StoreUnavailable as error:
            await asyncio.sleep(outage.failed("moving due workflows (wake_due)", error))
            continue
        except Exception:
            log.exception("timer: wake_due failed; trying again in %.3fs", every)
        await asyncio.sleep(every)


async def work(
    durable: Durable[Any],
    body: Callable[[Run[Any]], Awaitable[object]],
    *,
    limit: int = 8,
    liveness: timedelta = DEFAULT_LIVENESS,
    budget: timedelta = DEFAULT_BUDGET,
    poll: timedelta = timedelta(seconds=1),
    tick: timedelta = timedelta(seconds=1),
    idle: timedelta | None = None,
    retry: timedelta = timedelta(seconds=5),
    clock: Clock | None = None,
    stop: asyncio.Event | None = None,
    grace: timedelta | None = None,
) -> None:
    """Run passes of ``body`` for whatever ``durable``'s scheduler delivers, until cancelled
    or until ``stop`` is set.

    ``limit`` passes run at once. ``poll`` bounds how long one wait for work lasts (and so
    how quickly ``stop`` is noticed); ``tick`` is the timer's period; ``idle`` is how long
    an unanswered delivery may sit before this worker reclaims it (default: the
    scheduler's lease); ``retry`` is how long a contended, fenced or failed pass is
    deferred. When ``stop`` is set the worker takes no more work and waits up to ``grace``
    (default: forever) for passes in flight; passes still running then are cancelled and
    their deliveries left outstanding, and one line names their workflows. Cancelling
    ``work`` itself does the same at once.

    A store outage (:class:`~durable.interfaces.StoreUnavailable`, from taking work, from a
    pass, from answering for a delivery or from the timer) never fails a pass and never
    ends the worker: it is logged as an outage, once in full and then a line per retry,
    and retried with capped exponential backoff starting at ``poll`` (see
    :class:`_Outage`). A pass the outage cut short leaves its delivery outstanding, like a
    cancelled one. (A ``StoreUnavailable`` that a pass raises is taken for this outage
    whoever raised it; a body that wraps its own unreachable service should raise its own
    error.) Any other exception keeps its usual meaning: from a pass, the body failed.
    """
    if not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive number of passes, got {limit!r}")
    for name, value in (
        ("liveness", liveness),
        ("budget", budget),
        ("poll", poll),
        ("tick", tick),
        ("retry", retry),
    ):
        check_duration(name, value)
    scheduler = durable.scheduler
    idle = check_duration("idle", idle if idle is not None else scheduler.lease)
    if grace is not None:
        check_duration("grace", grace)
    clock = clock if clock is not None else SystemClock()
    stop = stop if stop is not None else asyncio.Event()

    outage = _Outage(type(durable).__name__, poll, scheduler.lease)
    stopping = asyncio.ensure_future(stop.wait())
    slots = asyncio.Semaphore(limit)
    in_flight: dict[asyncio.Task[None], str] = {}

    def finished(task: asyncio.Task[None]) -> None:
        workflow = in_flight.pop(task, "?")
        slots.release()
        if not task.cancelled() and task.exception() is not None:
            log.error("answering for workflow %r failed", workflow, exc_info=task.exception())

    timer: asyncio.Future[None] | None = None
    try:
        while True:
            started = time.monotonic()
            try:
                await scheduler.prepare()
            except StoreUnavailable as error:
                await _pause(outage.failed("preparing the scheduler", error), stopping)
                if stop.is_set():
                    return
                continue
            outage.succeeded(started)
            break
        timer = asyncio.ensure_future(_tick(durable, tick.total_seconds(), clock, outage))
        while not stop.is_set():
            acquiring = asyncio.ensure_future(slots.acquire())
            await asyncio.wait({acquiring, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not acquiring.done():
                acquiring.cancel()
                break
            if stop.is_set():
                slots.release()
                break
            started = time.monotonic()
            try:
                delivery = await scheduler.reclaim(idle) or await scheduler.next_ready(poll)
            except StoreUnavailable as error:
                slots.release()
                await _pause(outage.failed("taking work", error), stopping)
                continue
            except Exception:
                slots.release()
                log.exception("taking work failed; trying again in %s", poll)
                await asyncio.sleep(poll.total_seconds())
                continue
            outage.succeeded(started)
            if delivery is None:
                slots.release()
                continue
            task = asyncio.ensure_future(
                _answer(
                    durable,
                    delivery,
                    body,
                    liveness=liveness,
                    budget=budget,
                    retry=retry,
                    clock=clock,
                    outage=outage,
                )
            )
            in_flight[task] = delivery.workflow
            task.add_done_callback(finished)
        if in_flight:
            waited = grace.total_seconds() if grace is not None else None
            log.info("stopping: waiting for %d pass(es) in flight", len(in_flight))
            _, running = await asyncio.wait(set(in_flight), timeout=waited)
            if running:
                dropped = _named(sorted(in_flight.get(task, "?") for task in running), 50)
                log.warning(
                    "stopping: the grace of %gs ran out; cancelling the pass(es) of %s, whose "
                    "deliveries stay out and are handed out again after the delivery lease (%gs)",
                    waited,
                    dropped,
                    scheduler.lease.total_seconds(),
                )
    finally:
        stopping.cancel()
        if timer is not None:
            timer.cancel()
        tasks = list(in_flight)
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(
                *(t for t in (timer, stopping) if t is not None), *tasks, return_exceptions=True
            )
