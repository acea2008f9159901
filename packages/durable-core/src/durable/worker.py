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
  on the work: see :class:`_Outage` for what it looks like in the log;
* on a store that offers lifecycle, every pass begun is counted (in the claim's own write)
  and every pass ends in one ``settle``: the outcome, the failure, or a backoff, so that a
  failing workflow stops after its kind's ``RetryPolicy`` and says why (see
  :func:`_answer_lifecycle`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import socket
import time
from collections.abc import Awaitable, Callable, Collection, Coroutine
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast

from durable import children, telemetry
from durable.boundary import check_duration, check_queues
from durable.clock import Clock, SystemClock
from durable.codec import UnencodableValue
from durable.interfaces import (
    Contended,
    Delivery,
    Durable,
    Failure,
    Fenced,
    Lifecycle,
    LifecycleNotOffered,
    Limited,
    Pass,
    QueuesNotOffered,
    Routed,
    Settlement,
    Status,
    StoreUnavailable,
    WorkflowStatus,
)
from durable.policy import failure_of
from durable.run import (
    DEFAULT_BUDGET,
    DEFAULT_LIVENESS,
    Blocked,
    DeadlineExceeded,
    Finished,
    ParseFailed,
    Run,
    Sleeping,
    drive,
    resume,
)
from durable.schedules import Ticker
from durable.transfer import PrunePolicy
from durable.transfer import prune as prune_ended
from durable.workflows import Kind, Workflows

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

    def failed(
        self,
        doing: str,
        error: BaseException,
        *,
        workflow: str | None = None,
        then: str | None = None,
    ) -> float:
        """Note that ``doing`` failed because the store is unreachable; returns how long the
        caller should wait before trying again. ``workflow`` names a pass the outage cut
        short (its delivery is left outstanding); ``then`` says what happens next instead,
        for a caller that does something else."""
        now = time.monotonic()
        self._failures += 1
        if workflow is not None and workflow not in self._interrupted:
            self._interrupted.append(workflow)
        wait = self._step * self._random.uniform(0.5, 1.0)
        if then is None:
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
    except DeadlineExceeded as error:
        # Without lifecycle there is no status to fail; no pass will ever do anything else.
        log.error("workflow %r: %s; it is not run again", workflow, error)
        when = None
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
            when = outcome.until
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


REFUND_ON_CANCEL = timedelta(seconds=2)
"""How long a cancelled pass waits for the store to take its attempt back before giving up
(and staying counted, as a pass that died would)."""

PASS_LOST = "durable.PassLost"
"""The failure type of a workflow whose passes died until its attempts ran out."""


class _Serving:
    """What the lifecycle path of one worker shares across its passes."""

    def __init__(
        self,
        lifecycle: Lifecycle,
        registry: Workflows,
        owner: str,
        random: Callable[[], float] | None,
    ) -> None:
        self.lifecycle = lifecycle
        self.registry = registry
        self.owner = owner
        self.random = random
        self.unserved: set[str | None] = set()


async def _answer_lifecycle(
    durable: Durable[Any],
    delivery: Delivery,
    serving: _Serving,
    *,
    liveness: timedelta,
    budget: timedelta,
    retry: timedelta,
    clock: Clock,
    outage: _Outage,
) -> None:
    """One pass on a lifecycle store: begin (counting the attempt), drive, settle, answer.

    The count is the claim's own write, so a pass whose process is killed is counted and
    ``max_attempts`` of them end the crash loop as ``durable.PassLost``. A pass ending in
    an interruption it lives to report (fenced by its budget, a store outage) gives its
    attempt back in the ``settle`` that ends it; one that reaches a wait has made progress
    and sets the count to 0; a failure keeps it. Truth before queue: the settle lands before
    the delivery is answered, so a crash between leaves the delivery outstanding and the
    next pass finds the workflow terminal or replays it.
    """
    workflow = delivery.workflow
    scheduler = durable.scheduler
    lifecycle = serving.lifecycle
    started = time.monotonic()
    try:
        began = await lifecycle.begin(
            workflow, liveness=liveness, budget=budget, owner=serving.owner
        )
    except StoreUnavailable as error:
        outage.failed(f"beginning a pass of workflow {workflow!r}", error, workflow=workflow)
        return
    when: datetime | None
    if began is None:
        log.info("workflow %r: another pass holds it; deferred by %s", workflow, retry)
        await _reply(scheduler, delivery, clock.now() + retry, outage, started)
        return
    holder = began.holder
    if holder is None:
        log.info("workflow %r: %s; nothing to run", workflow, began.status)
        # A delivery back for a terminal workflow: its worker may have died between the
        # settle and telling a parent (durable.children); tell it again, idempotently.
        if began.status.terminal and not await _tell_parent(
            children.report_terminal(durable, workflow), workflow, outage
        ):
            return
        await _reply(scheduler, delivery, None, outage, started)
        return
    n = began.attempts
    held: Pass = holder
    seen: list[Run[Any]] = []
    kind = serving.registry.resolve(began.kind)

    async def end(settlement: Settlement, when: datetime | None) -> None:
        """Settle this pass, then tell a parent of a terminal outcome, then answer for its
        delivery (each after the one before has landed: see durable.children)."""
        after = None
        if settlement.status.terminal:
            found = children.outcome_of(
                WorkflowStatus(
                    workflow,
                    settlement.status,
                    kind.name if kind is not None else None,
                    settlement.attempts,
                    clock.now(),
                    value=settlement.value,
                    failure=settlement.failure,
                )
            )
            assert found is not None
            records = seen[0].records if seen else None
            after = children.report(durable, workflow, records, found)
        await _settle_and_reply(
            lifecycle, scheduler, delivery, held, settlement, when, outage, after
        )

    def refund() -> Settlement:
        return Settlement(Status.SLEEPING, max(n - 1, 0), until=clock.now() + retry)

    if kind is None:
        if began.kind not in serving.unserved:
            serving.unserved.add(began.kind)
            what = (
                f"kind {began.kind!r}"
                if began.kind is not None
                else "no recorded kind, and this registry has no default"
            )
            log.warning(
                "workflow %r has %s; this worker serves %s, so it defers such workflows by %s "
                "(another worker may serve them; said once per kind)",
                workflow,
                what,
                ", ".join(k.name for k in serving.registry) or "no kinds",
                retry,
            )
        await end(refund(), clock.now() + retry)
        return
    policy = kind.policy
    if began.lost is not None:
        log.warning(
            "workflow %r: the previous pass on %s never ended; attempt %d of %d",
            workflow,
            began.lost,
            n,
            policy.max_attempts,
        )
    if n > policy.max_attempts:
        where = f" (it ran on {began.lost})" if began.lost is not None else ""
        lost = Failure(
            PASS_LOST,
            f"attempt {n - 1} of {policy.max_attempts} never ended{where}: its process died "
            "or stalled past its liveness",
            "",
            n - 1,
        )
        log.error("workflow %r: failed: %s", workflow, lost)
        ended = Settlement(Status.FAILED, n - 1, failure=lost)
        await end(ended, None)
        return
    try:
        parsed = kind.parse(began.input)
    except Exception as error:
        refused = ParseFailed(workflow, "<input>", began.input, error)
        log.error("workflow %r: failed: kind %r refused its input: %s", workflow, kind.name, error)
        ended = Settlement(Status.FAILED, n, failure=failure_of(refused, n))
        await end(ended, None)
        return
    checkpointer: Any = durable.checkpointer
    try:
        outcome = await drive(
            checkpointer,
            holder,
            _bound(kind, parsed, seen, durable),
            liveness=liveness,
            clock=clock,
            beat=_holding(lifecycle.beat, scheduler, delivery, liveness),
            deadline=kind.deadline,
            kind=kind.name,
            attempt=n,
        )
    except Fenced as fenced:
        log.warning("workflow %r: pass stopped: %s; deferred by %s", workflow, fenced, retry)
        await end(refund(), clock.now() + retry)
        return
    except asyncio.CancelledError:
        # The worker is stopping (its grace ran out) or was cancelled: the pass did nothing
        # wrong, so it gives its attempt back if the store answers promptly, or a rolling
        # deploy would count against every long pass it interrupts. The delivery stays out,
        # as it always has for a cancelled pass.
        with contextlib.suppress(Exception):
            async with asyncio.timeout(REFUND_ON_CANCEL.total_seconds()):
                await lifecycle.settle(holder, refund())
        raise
    except Exception as error:
        if _is_outage(error):
            outage.failed(
                f"running workflow {workflow!r}",
                error,
                then=f"the pass stops, gives its attempt back and is retried in {retry}",
            )
            # Give the attempt back if the store answers; if it does not, the delivery stays
            # out and the attempt stays counted, the one an outage longer than the pass's
            # liveness can cost.
            await end(refund(), clock.now() + retry)
            return
        deadline = seen[0].deadline if seen else None
        await _failed(end, workflow, kind, error, n, clock, serving, deadline)
        return
    if isinstance(outcome, Finished):
        try:
            ended = Settlement(Status.FINISHED, n, value=outcome.value)
            log.info("workflow %r: finished", workflow)
            await end(ended, None)
        except UnencodableValue as error:
            # The body returned something the store cannot keep: the body's failure.
            await _failed(end, workflow, kind, error, n, clock, serving)
        return
    if isinstance(outcome, Sleeping):
        log.info("workflow %r: sleeping until %s", workflow, outcome.until.isoformat())
        ended = Settlement(Status.SLEEPING, 0, until=outcome.until, keys=outcome.keys)
        when = outcome.until
    else:
        assert isinstance(outcome, Blocked)
        log.info("workflow %r: blocked on %s", workflow, ", ".join(outcome.keys))
        ended = Settlement(Status.BLOCKED, 0, keys=outcome.keys)
        # A workflow with a deadline is worth a pass at it, to fail it, if nothing arrives.
        when = outcome.until
    await end(ended, when)


def _holding(
    beat: Callable[[Pass, str | None], Awaitable[Pass]],
    scheduler: Any,
    delivery: Delivery,
    liveness: timedelta,
) -> Callable[[Pass, str | None], Awaitable[Pass]]:
    """The pass's heartbeat, which also keeps the delivery's queue slot live when the take
    handed one out (``Delivery.slot``): the slot lives as long as the pass and lapses within
    ``liveness`` of the worker's death, as the claim does. A delivery of an unlimited queue
    beats exactly as before, with no write more."""
    if not delivery.slot or not isinstance(scheduler, Limited):
        return beat

    async def beat_and_hold(holder: Pass, step: str | None) -> Pass:
        renewed = await beat(holder, step)
        if not await scheduler.hold(delivery, liveness):
            # The slot lapsed (this worker stalled past its liveness) and may be another
            # pass's now: running on would put the queue over its limit.
            raise Fenced(
                f"{holder} lost its slot of its queue's concurrency limit (it stalled past its "
                f"liveness, {liveness.total_seconds():g}s); stop this pass"
            )
        return renewed

    return beat_and_hold


def _bound(
    kind: Kind[Any, Any],
    parsed: object,
    seen: list[Run[Any]] | None = None,
    durable: Durable[Any] | None = None,
) -> Callable[[Run[Any]], Awaitable[object]]:
    async def body(run: Run[Any]) -> object:
        if seen is not None:
            seen.append(run)
        run.durable = durable
        return await kind.body(run, parsed)

    return body


async def _failed(
    end: Callable[[Settlement, datetime | None], Awaitable[None]],
    workflow: str,
    kind: Kind[Any, Any],
    error: BaseException,
    n: int,
    clock: Clock,
    serving: _Serving,
    deadline: datetime | None = None,
) -> None:
    """Attempt ``n`` raised ``error``: fail the workflow, or sleep it for the backoff;
    ``end`` settles the pass and answers for its delivery. A passed deadline fails it at
    once, and a backoff past the deadline wakes at the deadline, to fail it then."""
    policy = kind.policy
    failure = failure_of(error, n)
    if isinstance(error, DeadlineExceeded) or policy.gives_up(error, n):
        why = (
            "deadline exceeded"
            if isinstance(error, DeadlineExceeded)
            else "non-retryable"
            if n < policy.max_attempts
            else f"attempt {n} of {n}"
        )
        log.error("workflow %r: failed (%s): %s", workflow, why, failure, exc_info=error)
        ended = Settlement(Status.FAILED, n, failure=failure)
        await end(ended, None)
        return
    delay = policy.backoff(n) if serving.random is None else policy.backoff(n, serving.random)
    until = clock.now() + delay
    if deadline is not None:
        until = min(until, deadline)
    log.warning(
        "workflow %r: attempt %d of %d failed: %s; retrying in %.3gs",
        workflow,
        n,
        policy.max_attempts,
        failure,
        delay.total_seconds(),
        exc_info=error,
    )
    ended = Settlement(Status.SLEEPING, n, failure=failure, until=until)
    await end(ended, until)


async def _settle_and_reply(
    lifecycle: Lifecycle,
    scheduler: Any,
    delivery: Delivery,
    holder: Pass,
    ended: Settlement,
    when: datetime | None,
    outage: _Outage,
    after: Awaitable[None] | None = None,
) -> None:
    """Settle, then ``after`` (telling a parent of the outcome), then answer for the
    delivery (truth before queue). ``after`` is skipped, and closed, when the settle is
    refused: whoever raised the fence owns the outcome now.

    Refused (``Fenced``): the workflow was cancelled or discarded, or superseded after this
    pass went silent, and whoever raised the fence owns its status now. The delivery is
    still answered as planned: the scheduler never lets an answer reinstate a cancelled
    workflow or undo a newer wakeup. Unreachable: the delivery stays out, as for any
    outage.
    """
    started = time.monotonic()
    try:
        await lifecycle.settle(holder, ended)
    except BaseException as error:
        # Not settled: the telling of a parent is never sent, whoever settles instead (the
        # fence's owner, a later pass after an outage, or the caller settling an outcome the
        # store cannot keep as the body's failure, with a telling of its own).
        if after is not None:
            cast("Coroutine[Any, Any, None]", after).close()
        if isinstance(error, Fenced):
            log.warning(
                "workflow %r: could not record it %s: %s", delivery.workflow, ended.status, error
            )
        elif isinstance(error, StoreUnavailable):
            outage.failed(
                f"settling workflow {delivery.workflow!r} as {ended.status}",
                error,
                workflow=delivery.workflow,
            )
            return
        else:
            raise
    else:
        if after is not None and not await _tell_parent(after, delivery.workflow, outage):
            return
    await _reply(scheduler, delivery, when, outage, started)


async def _tell_parent(telling: Awaitable[None], workflow: str, outage: _Outage) -> bool:
    """Deliver a child's outcome to its parent; False when the store is unreachable, so
    that the caller leaves the delivery out (it comes back, and is told again)."""
    try:
        await telling
    except StoreUnavailable as error:
        outage.failed(f"telling the parent of workflow {workflow!r} its outcome", error)
        return False
    except Exception:
        log.exception(
            "workflow %r: could not tell its parent its outcome; the parent's next pass "
            "reads it from this workflow's status",
            workflow,
        )
    return True


async def _reply(
    scheduler: Any, delivery: Delivery, when: datetime | None, outage: _Outage, started: float
) -> None:
    """Answer for ``delivery``: ``done`` when ``when`` is None, else ``wake_at(when)``."""
    try:
        if when is None:
            await scheduler.done(delivery)
        else:
            await scheduler.wake_at(delivery, when)
    except StoreUnavailable as error:
        how = "done" if when is None else "wake_at"
        outage.failed(
            f"answering for workflow {delivery.workflow!r} ({how})",
            error,
            workflow=delivery.workflow,
        )
        return
    outage.succeeded(started)


STOP_WAIT = timedelta(seconds=10)
"""How long a stopping worker waits for its own tasks to end once it has cancelled them."""


async def _between_rounds(seconds: float) -> None:
    """The pause between two rounds of a worker's background loop (timer, schedules,
    prune), which ends the loop instead if its task was cancelled during the round.

    redis-py can lose a cancellation that lands while a command is sent or its reply read,
    and hand back the reply as if nothing happened. A loop that then slept and went round
    again would run for ever, and the worker, waiting for it at the end, would never stop:
    so the task is asked whether it was cancelled before it sleeps."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError
    await asyncio.sleep(seconds)


async def _ended(tasks: list[asyncio.Future[Any]], passes: dict[Any, str]) -> None:
    """Wait, at most :data:`STOP_WAIT`, for a stopping worker's cancelled tasks to end.

    A task that outlives its cancellation (a lost cancellation inside a driver, a body that
    catches ``CancelledError``) must not keep the worker from stopping: it is named in an
    error and left behind, as a crash would leave it. What it held is safe the same way: a
    pass's claim lapses after its liveness and its delivery is handed out again."""
    if not tasks:
        return
    done, stuck = await asyncio.wait(tasks, timeout=STOP_WAIT.total_seconds())
    for task in done:
        if not task.cancelled():
            task.exception()  # retrieved: each was logged where it ended, if it failed
    if stuck:
        names = sorted(passes.get(task, getattr(task, "get_name", lambda: "?")()) for task in stuck)
        log.error(
            "stopping: %d task(s) did not end within %gs of being cancelled (%s); the worker "
            "stops without them, as if it had crashed",
            len(stuck),
            STOP_WAIT.total_seconds(),
            _named(names, 50),
        )


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
            await _between_rounds(outage.failed("moving due workflows (wake_due)", error))
            continue
        except Exception:
            log.exception("timer: wake_due failed; trying again in %.3fs", every)
        await _between_rounds(every)


async def _look(ticker: Ticker, every: float, outage: _Outage) -> None:
    # Like the timer: runs until the worker ends, and an outage only pauses it.
    while True:
        try:
            started = await ticker.look()
            if started:
                log.debug("schedules: started %s", _named(started))
        except StoreUnavailable as error:
            await _between_rounds(outage.failed("starting scheduled workflows", error))
            continue
        except Exception:
            log.exception("schedules: looking for due ticks failed; trying again in %.3fs", every)
        await _between_rounds(every)


async def _prune(durable: Durable[Any], policy: PrunePolicy, clock: Clock, outage: _Outage) -> None:
    # Like the timer: runs until the worker ends, and an outage only pauses it.
    every = policy.every.total_seconds()
    while True:
        try:
            before = clock.now() - policy.finished_before
            pruned = await prune_ended(durable, before, policy.statuses, batch=policy.batch)
            if pruned:
                log.info(
                    "prune: discarded %d ended workflow(s) last updated before %s",
                    pruned,
                    before.isoformat(timespec="seconds"),
                )
        except StoreUnavailable as error:
            await _between_rounds(outage.failed("pruning ended workflows", error))
            continue
        except Exception:
            log.exception("prune: pruning ended workflows failed; trying again in %.3fs", every)
        await _between_rounds(every)


async def work(
    durable: Durable[Any],
    workflows: Workflows | Kind[Any, Any] | Callable[[Run[Any]], Awaitable[object]],
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
    name: str | None = None,
    random: Callable[[], float] | None = None,
    schedules: bool = True,
    queues: Collection[str] | None = None,
    prune: PrunePolicy | None = None,
) -> None:
    """Run passes of ``workflows`` for whatever ``durable``'s scheduler delivers, until
    cancelled or until ``stop`` is set.

    ``queues`` names the queues this worker serves (a kind's ``queue``, default
    ``"default"``): it never takes a workflow of another queue, so two services with queues
    of their own can share one store. ``None`` (the default) serves every queue. Serving
    named queues needs a scheduler that routes (:class:`~durable.interfaces.Routed`, the
    ``queues`` capability); on one that does not, ``work`` refuses to start with
    ``QueuesNotOffered`` rather than take another service's work.

    ``workflows`` is a :class:`~durable.workflows.Workflows` registry, one ``Kind``, or a
    bare body (``Workflows.of`` makes a one-kind registry of either). On a store that
    offers lifecycle, each workflow runs as the kind its row records (a workflow with no
    recorded kind as the registry's default), every pass begun is counted, and a raising
    body is retried by its kind's ``RetryPolicy`` until it fails for good with its error
    recorded; a kind this worker does not serve is deferred by ``retry`` with a warning,
    never failed (another worker, or the next deploy, may serve it). ``name`` is this
    worker as each pass's owner (default ``host:pid``), shown by ``durable show`` and in
    the ``PassLost`` failure of a crash loop; ``random`` replaces the backoff's jitter
    source (a test passes ``lambda: 0.0`` for exact times).

    On a store without lifecycle, a bare body runs as the previous release ran it: each
    failure deferred by ``retry``, without bound (one warning says so), and a registry or
    a ``Kind`` is refused with ``LifecycleNotOffered`` before any work is taken.

    With ``schedules`` (the default) and a store that offers lifecycle, the worker also
    starts the ticks of the schedules whose kind it serves, looking every ``tick`` by
    ``clock`` (:class:`~durable.schedules.Ticker`): any number of workers may do so at once,
    and each tick still starts one workflow. ``schedules=False`` leaves that to others.

    With ``prune`` (a :class:`~durable.transfer.PrunePolicy`; a store that offers lifecycle,
    else ``LifecycleNotOffered``), the worker also prunes ended workflows: once when it
    starts and then every ``prune.every``, it discards those last updated more than
    ``prune.finished_before`` ago by ``clock`` (:func:`durable.transfer.prune`: a page of
    ``prune.batch`` at a time, one workflow per commit, never an unfinished one). Several
    workers may prune at once; a workflow one of them discarded is skipped by the others.

    ``limit`` passes run at once. ``poll`` bounds how long one wait for work lasts (and so
    how quickly ``stop`` is noticed); ``tick`` is the timer's period; ``idle`` is how long
    an unanswered delivery may sit before this worker reclaims it (default: the
    scheduler's lease); ``retry`` is how long a contended or fenced pass, or a workflow of
    a kind not served here, is deferred (on a store without lifecycle, a failed pass too).
    When ``stop`` is set the worker takes no more work and waits up to ``grace`` (default:
    forever) for passes in flight; passes still running then are cancelled and their
    deliveries left outstanding, and one line names their workflows. Cancelling ``work``
    itself does the same at once. On a lifecycle store such a pass first gives its attempt
    back (one ``settle``, waited for at most ``REFUND_ON_CANCEL``); if the store does not
    answer in time it stays counted, as a pass that died would.

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
    for timing, value in (
        ("liveness", liveness),
        ("budget", budget),
        ("poll", poll),
        ("tick", tick),
        ("retry", retry),
    ):
        check_duration(timing, value)
    if name is not None and (not isinstance(name, str) or not name):
        raise ValueError(f"a worker's name is a non-empty str, got {name!r}")
    owner = name if name is not None else f"{socket.gethostname()}:{os.getpid()}"
    served = check_queues(queues) if queues is not None else None
    if served is not None and not isinstance(durable.checkpointer, Lifecycle):
        raise QueuesNotOffered(
            f"the store {durable!r} does not offer lifecycle, which records each workflow's "
            "queue, so it cannot serve named queues: serve every queue (queues=None)"
        )
    if served is not None and not isinstance(durable.scheduler, Routed):
        raise QueuesNotOffered(
            f"the store {durable!r} does not route by queue (no 'queues' capability), so a "
            f"worker serving only {', '.join(sorted(served))} could take another queue's work: "
            "serve every queue (queues=None), or use a store that routes"
        )
    if prune is not None and not isinstance(prune, PrunePolicy):
        raise TypeError(f"prune is a durable.transfer.PrunePolicy, got {prune!r}")
    if prune is not None and not isinstance(durable.checkpointer, Lifecycle):
        raise LifecycleNotOffered(
            f"the store {durable!r} does not offer lifecycle, so it cannot tell an ended "
            "workflow from another: a worker on it cannot prune (prune=None)"
        )
    serving: _Serving | None = None
    body: Callable[[Run[Any]], Awaitable[object]] | None = None
    checkpointer = durable.checkpointer
    if isinstance(checkpointer, Lifecycle):
        serving = _Serving(checkpointer, Workflows.of(workflows), owner, random)
    elif isinstance(workflows, Workflows | Kind):
        raise LifecycleNotOffered(
            f"the store {durable!r} does not offer lifecycle, so it cannot run workflows by "
            "kind: serve a bare body instead (async def body(run)), or use a store that "
            "offers lifecycle"
        )
    elif callable(workflows):
        body = workflows
        log.warning(
            "the store %r does not offer lifecycle: workflows have no status, and a failing "
            "body is retried every %s without bound",
            durable,
            retry,
        )
    else:
        raise TypeError(f"work serves a Workflows, a Kind or a workflow body, got {workflows!r}")
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
    looking: asyncio.Future[None] | None = None
    pruning: asyncio.Future[None] | None = None
    # Telemetry is chosen here, once per worker (durable.telemetry); with it on, a lifecycle
    # store's ready workflows are read now and then for the queue gauges.
    hook = telemetry.configure()
    gauges: asyncio.Future[None] | None = None
    if hook is not None and serving is not None:
        gauges = asyncio.ensure_future(hook.watch_queue(serving.lifecycle))
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
        if schedules and serving is not None:
            ticker = Ticker(durable, serving.registry, clock=clock)
            looking = asyncio.ensure_future(_look(ticker, tick.total_seconds(), outage))
        if prune is not None:
            pruning = asyncio.ensure_future(_prune(durable, prune, clock, outage))
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
                if served is None:
                    delivery = await scheduler.reclaim(idle) or await scheduler.next_ready(poll)
                else:
                    # reclaim takes from every queue; a routed take hands out a delivery
                    # whose lease ran out, as next_ready does, from the queues served only.
                    delivery = await cast(Routed, scheduler).next_ready_in(served, poll)
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
            answering: Awaitable[None]
            if serving is not None:
                answering = _answer_lifecycle(
                    durable,
                    delivery,
                    serving,
                    liveness=liveness,
                    budget=budget,
                    retry=retry,
                    clock=clock,
                    outage=outage,
                )
            else:
                assert body is not None
                answering = _answer(
                    durable,
                    delivery,
                    body,
                    liveness=liveness,
                    budget=budget,
                    retry=retry,
                    clock=clock,
                    outage=outage,
                )
            task = asyncio.ensure_future(answering)
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
        if looking is not None:
            looking.cancel()
        if pruning is not None:
            pruning.cancel()
        if gauges is not None:
            gauges.cancel()
        tasks = list(in_flight)
        for task in tasks:
            task.cancel()
        own: list[asyncio.Future[Any]] = [
            t for t in (timer, looking, pruning, stopping, gauges) if t is not None
        ]
        with contextlib.suppress(asyncio.CancelledError):
            await _ended([*own, *tasks], in_flight)
