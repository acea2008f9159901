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
  its lease runs out, rather than a half-done pass being acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeVar

from durable.boundary import check_duration
from durable.clock import Clock, SystemClock
from durable.interfaces import Contended, Delivery, Durable, Fenced
from durable.run import DEFAULT_BUDGET, DEFAULT_LIVENESS, Blocked, Finished, Run, Sleeping, resume

__all__ = ["work"]

log = logging.getLogger("durable.worker")

T = TypeVar("T")


async def _answer(
    durable: Durable[Any],
    delivery: Delivery,
    body: Callable[[Run[Any]], Awaitable[object]],
    *,
    liveness: timedelta,
    budget: timedelta,
    retry: timedelta,
    clock: Clock,
) -> None:
    workflow = delivery.workflow
    scheduler = durable.scheduler
    try:
        outcome = await resume(
            durable, workflow, body, liveness=liveness, budget=budget, clock=clock
        )
    except Contended:
        log.info("workflow %r: another pass holds it; deferred by %s", workflow, retry)
        await scheduler.wake_at(delivery, clock.now() + retry)
        return
    except Fenced as fenced:
        log.warning("workflow %r: pass stopped: %s; deferred by %s", workflow, fenced, retry)
        await scheduler.wake_at(delivery, clock.now() + retry)
        return
    except Exception:
        log.exception("workflow %r: the body failed; retrying in %s", workflow, retry)
        await scheduler.wake_at(delivery, clock.now() + retry)
        return
    if isinstance(outcome, Finished):
        log.info("workflow %r: finished", workflow)
        await scheduler.done(delivery)
    elif isinstance(outcome, Sleeping):
        log.info("workflow %r: sleeping until %s", workflow, outcome.until.isoformat())
        await scheduler.wake_at(delivery, outcome.until)
    else:
        assert isinstance(outcome, Blocked)
        log.info("workflow %r: blocked on %s", workflow, ", ".join(outcome.keys))
        await scheduler.done(delivery)


async def _tick(durable: Durable[Any], every: float, clock: Clock) -> None:
    while True:
        try:
            moved = await durable.scheduler.wake_due(clock.now())
            if moved:
                log.debug("timer moved %d due workflow(s) to runnable", len(moved))
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
    their deliveries left outstanding. Cancelling ``work`` itself does the same at once.
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

    await scheduler.prepare()
    slots = asyncio.Semaphore(limit)
    in_flight: set[asyncio.Task[None]] = set()

    def finished(task: asyncio.Task[None]) -> None:
        in_flight.discard(task)
        slots.release()
        if not task.cancelled() and task.exception() is not None:
            log.error("answering a delivery failed", exc_info=task.exception())

    timer = asyncio.ensure_future(_tick(durable, tick.total_seconds(), clock))
    stopping = asyncio.ensure_future(stop.wait())
    try:
        while not stop.is_set():
            acquiring = asyncio.ensure_future(slots.acquire())
            await asyncio.wait({acquiring, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not acquiring.done():
                acquiring.cancel()
                break
            if stop.is_set():
                slots.release()
                break
            try:
                delivery = await scheduler.reclaim(idle) or await scheduler.next_ready(poll)
            except Exception:
                slots.release()
                log.exception("taking work failed; trying again in %s", poll)
                await asyncio.sleep(poll.total_seconds())
                continue
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
                )
            )
            in_flight.add(task)
            task.add_done_callback(finished)
        if in_flight:
            waited = grace.total_seconds() if grace is not None else None
            log.info("stopping: waiting for %d pass(es) in flight", len(in_flight))
            await asyncio.wait(set(in_flight), timeout=waited)
    finally:
        stopping.cancel()
        timer.cancel()
        for task in list(in_flight):
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(timer, stopping, *in_flight, return_exceptions=True)
