"""Kinds of workflow, the registry a worker serves, and the handle a caller holds.

A *kind* names a body together with the parser of its input and the policy for its
failures. ``start(kind, workflow, input)`` records all three facts a worker needs before any
pass runs (which body, on what input, how hard to try), so the caller can ask afterwards
what became of it: ``status``, ``result``, ``cancel``, ``retry``, ``list``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast, overload, runtime_checkable

from durable import telemetry
from durable.boundary import KIND_NAME, check_duration, check_kind, check_workflow, shown
from durable.interfaces import (
    Admitted,
    Durable,
    Effect,
    Failure,
    Fenced,
    Lifecycle,
    LifecycleNotOffered,
    Limited,
    LimitsNotOffered,
    Page,
    Scheduler,
    Status,
    UnknownWorkflow,
    WorkflowStatus,
)
from durable.parsers import as_is
from durable.policy import RetryPolicy
from durable.run import DEADLINE_KEY, RETRY_PREFIX, ParseFailed, Run

__all__ = [
    "KIND_NAME",
    "InputRefused",
    "Kind",
    "LifecycleDurable",
    "Lifecycled",
    "WorkflowCancelled",
    "WorkflowFailed",
    "WorkflowHandle",
    "Workflows",
    "as_is",
    "lifecycle_of",
]

In = TypeVar("In")
T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Kind(Generic[In, T]):
    """A body, the parser of its input, its retry policy and its queue, under one name.

    ``parse`` checks an input and hands it back typed; it should not convert it, because the
    store keeps the input as it was given (through the codec), ``start`` compares a repeat by
    that encoding, and every pass hands the body ``parse(decoded input)`` afresh. It runs in
    ``start`` before anything is written, and again at each pass, where a refusal (an input
    started by name, or a parser since made stricter) fails the workflow at once: no retry
    can change an input. ``queue`` is recorded at start for a later release to route by.
    ``deadline``, when given, is how long a workflow of this kind may take from its first
    pass (``start(..., deadline=)`` sets one per workflow, from the start, and wins): past
    it the workflow fails with ``DeadlineExceeded`` wherever it is, and is not retried.
    Made by :meth:`Workflows.kind`, usually, which checks the name.

    ``signals`` and ``messages`` declare what the workflow accepts from outside a pass, so
    that a value it would refuse is refused when it is written rather than failing the
    workflow forever after (first writer wins: a bad value cannot be taken back).
    ``signals`` maps each key the body awaits (``run.awaiting``) to the parser it reads it
    with; ``messages`` is the parser of its inbox messages (``run.receive``). None (the
    default) declares nothing and checks nothing; a mapping refuses keys it does not name.
    ``durable.guards.arrive``/``send`` (and ``durable arrive``/``send --workflows``) check
    them before writing.
    """

    name: str
    body: Callable[[Run[Any], In], Awaitable[T]]
    parse: Callable[[object], In]
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    queue: str = "default"
    deadline: timedelta | None = None
    signals: Mapping[str, Callable[[object], object]] | None = field(
        default=None, hash=False, compare=False
    )
    messages: Callable[[object], object] | None = field(default=None, hash=False, compare=False)
    priority: int = 0
    """Within its queue, a workflow of a higher priority is handed out before one of a lower,
    on a store with queue limits (:class:`~durable.interfaces.Limited`); ``start`` keeps it
    for each workflow (0, the default, writes nothing)."""

    def __post_init__(self) -> None:
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise TypeError(f"kind {self.name!r}: priority is an int, got {self.priority!r}")
        if self.deadline is not None:
            check_duration(f"kind {self.name!r}'s deadline", self.deadline)
        if self.signals is not None:
            # A copy that cannot change under the kind (a frozen dataclass holds no dict).
            object.__setattr__(self, "signals", MappingProxyType(dict(self.signals)))


class Workflows:
    """The kinds one worker serves, by name.

    A worker is handed one of these and runs each delivered workflow as the kind its
    lifecycle row records. A workflow with no recorded kind (written by the previous
    release, or made by ``send``/``arrive`` without ``start``) runs as ``default``: the one
    named, or the only kind when there is exactly one.
    """

    def __init__(self, *kinds: Kind[Any, Any], default: str | None = None) -> None:
        self._kinds: dict[str, Kind[Any, Any]] = {}
        for kind in kinds:
            self.add(kind)
        if default is not None:
            check_kind(default)
        self._default = default

    def __repr__(self) -> str:
        names = ", ".join(self._kinds)
        return (
            f"Workflows({names})"
            if self._default is None
            else (f"Workflows({names}; default {self._default})")
        )

    def kind(
        self,
        name: str,
        *,
        input: Callable[[object], In] = as_is,  # type: ignore[assignment]
        policy: RetryPolicy | None = None,
        queue: str = "default",
        deadline: timedelta | None = None,
        signals: Mapping[str, Callable[[object], object]] | None = None,
        messages: Callable[[object], object] | None = None,
        priority: int = 0,
    ) -> Callable[[Callable[[Run[Any], In], Awaitable[T]]], Kind[In, T]]:
        """Register the decorated body as kind ``name``; the decorator returns the ``Kind``.

        ``signals`` (key to parser) and ``messages`` (a parser) declare what the kind
        accepts from outside a pass; see :class:`Kind`."""
        check_kind(name)

        def register(body: Callable[[Run[Any], In], Awaitable[T]]) -> Kind[In, T]:
            made: Kind[In, T] = Kind(
                name,
                body,
                input,
                RetryPolicy() if policy is None else policy,
                queue,
                deadline,
                signals,
                messages,
                priority,
            )
            return self.add(made)

        return register

    def add(self, kind: Kind[In, T]) -> Kind[In, T]:
        """Register ``kind``; ``ValueError`` if a kind of that name is already here."""
        if not isinstance(kind, Kind):
            raise TypeError(f"Workflows.add takes a Kind, got {kind!r}")
        check_kind(kind.name)
        if kind.name in self._kinds:
            raise ValueError(f"a kind named {kind.name!r} is already registered")
        self._kinds[kind.name] = kind
        return kind

    def __getitem__(self, name: str) -> Kind[Any, Any]:
        try:
            return self._kinds[name]
        except KeyError:
            known = ", ".join(repr(n) for n in self._kinds) or "none"
            raise KeyError(f"no kind named {name!r}; known kinds: {known}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._kinds

    def __iter__(self) -> Iterator[Kind[Any, Any]]:
        return iter(self._kinds.values())

    def __len__(self) -> int:
        return len(self._kinds)

    @property
    def default(self) -> Kind[Any, Any] | None:
        """The kind a workflow with no recorded kind runs as: explicit, or the only kind."""
        if self._default is not None:
            return self._kinds.get(self._default)
        if len(self._kinds) == 1:
            return next(iter(self._kinds.values()))
        return None

    def resolve(self, recorded: str | None) -> Kind[Any, Any] | None:
        """The kind to run a workflow recorded as ``recorded`` (None: the default), or None
        when this registry does not serve it (the worker defers it, never fails it)."""
        if recorded is None:
            return self.default
        return self._kinds.get(recorded)

    @classmethod
    def of(
        cls, target: Workflows | Kind[Any, Any] | Callable[[Run[Any]], Awaitable[object]]
    ) -> Workflows:
        """A registry from what a worker was handed: itself, one kind, or a bare body.

        A bare body becomes a one-kind registry named after the function, taking no input
        (its ``input`` is ignored), with the default policy; so a body written for the
        previous release keeps running, now with bounded retries.
        """
        if isinstance(target, Workflows):
            return target
        if isinstance(target, Kind):
            return cls(target)
        if not callable(target):
            raise TypeError(
                f"a worker serves a Workflows, a Kind or a workflow body, got {target!r}"
            )
        body = target
        name = getattr(body, "__name__", "workflow")
        if KIND_NAME.fullmatch(name) is None:
            name = "workflow"

        async def adapted(run: Run[Any], _: object) -> object:
            return await body(run)

        adapted.__name__ = adapted.__qualname__ = name
        return cls(Kind(name, adapted, as_is))


class WorkflowFailed(Exception):
    """``result()`` of a workflow that failed: ``.workflow`` and ``.failure`` say why."""

    def __init__(self, workflow: str, failure: Failure | None) -> None:
        self.workflow, self.failure = workflow, failure
        attempts = failure.attempts if failure is not None else 0
        why = f": {failure}" if failure is not None else ""
        plural = "" if attempts == 1 else "s"
        super().__init__(f"workflow {workflow!r} failed after {attempts} attempt{plural}{why}")


class WorkflowCancelled(Exception):
    """``result()`` of a workflow that was cancelled."""

    def __init__(self, workflow: str, status: WorkflowStatus) -> None:
        self.workflow, self.status = workflow, status
        super().__init__(f"workflow {workflow!r} was cancelled at {status.updated_at.isoformat()}")


class InputRefused(ValueError):
    """The kind's parser refused start's input; nothing was written."""


class WorkflowHandle(Generic[T]):
    """One workflow, from outside: its status, its result, its cancellation.

    Holds nothing but the store and the id, so a handle made in another process (or by
    ``durable.handle(workflow)``) is as good as the one ``start`` returned.
    """

    def __init__(self, durable: LifecycleDurable[Any], workflow: str) -> None:
        self.durable = durable
        self.workflow = check_workflow(workflow)

    def __repr__(self) -> str:
        return f"WorkflowHandle({self.workflow!r})"

    async def status(self) -> WorkflowStatus:
        """The workflow's status now; ``UnknownWorkflow`` when the store has none."""
        found = await self.durable.status(self.workflow)
        if found is None:
            raise UnknownWorkflow(
                f"no workflow {self.workflow!r} has a status in this store (never started, "
                "never run, or discarded)"
            )
        return found

    @overload
    async def result(self, timeout: timedelta | float | None = None) -> object: ...  # noqa: ASYNC109

    @overload
    async def result(
        self,
        timeout: timedelta | float | None = None,  # noqa: ASYNC109
        *,
        parse: Callable[[object], R],
    ) -> R: ...

    async def result(
        self,
        timeout: timedelta | float | None = None,  # noqa: ASYNC109
        *,
        parse: Callable[[object], Any] = as_is,
    ) -> Any:
        """Wait for the outcome: the value the body returned, through ``parse``.

        ``WorkflowFailed`` when it failed, ``WorkflowCancelled`` when it was cancelled,
        ``TimeoutError`` naming the workflow and its status once ``timeout`` (seconds or a
        ``timedelta``; None waits for ever) has passed, ``ParseFailed`` when ``parse``
        refuses the value. Polls ``status`` from every 10 ms, doubling to every 500 ms: a
        wait that costs one read per half second at worst, and never a busy loop.
        """
        seconds = _seconds(timeout)
        loop = asyncio.get_running_loop()
        give_up = None if seconds is None else loop.time() + seconds
        delay = RESULT_POLL_FIRST
        while True:
            found = await self.status()
            if found.status is Status.FINISHED:
                try:
                    return parse(found.value)
                except Exception as error:
                    raise ParseFailed(self.workflow, "<result>", found.value, error) from error
            if found.status is Status.FAILED:
                raise WorkflowFailed(self.workflow, found.failure)
            if found.status is Status.CANCELLED:
                raise WorkflowCancelled(self.workflow, found)
            if give_up is not None:
                remaining = give_up - loop.time()
                if remaining <= 0:
                    raise TimeoutError(
                        f"workflow {self.workflow!r} is still {found.status} after "
                        f"{seconds:g} s of waiting for its result"
                    )
                await asyncio.sleep(min(delay, remaining))
            else:
                await asyncio.sleep(delay)
            delay = min(delay * 2, RESULT_POLL_MOST)

    async def cancel(self) -> WorkflowStatus:
        """Cancel the workflow (see ``LifecycleDurable.cancel``)."""
        return await self.durable.cancel(self.workflow)


RESULT_POLL_FIRST = 0.01
"""``result`` first asks again after this many seconds..."""

RESULT_POLL_MOST = 0.5
"""...doubling up to this: an outcome is seen at most half a second late."""


def _seconds(timeout: object) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, int | float) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise TypeError(f"a timeout is seconds or a timedelta, got {timeout!r}")
    if seconds < 0:
        raise ValueError(f"a timeout cannot be negative, got {timeout!r}")
    return seconds


@runtime_checkable
class LifecycleDurable(Durable[Effect], Protocol[Effect]):
    """A ``Durable`` whose workflows are started by kind and asked about afterwards."""

    @overload
    async def start(
        self,
        kind: Kind[Any, T],
        workflow: str,
        input: object = None,
        *,
        deadline: datetime | timedelta | None = None,
    ) -> WorkflowHandle[T]: ...

    @overload
    async def start(
        self,
        kind: str,
        workflow: str,
        input: object = None,
        *,
        deadline: datetime | timedelta | None = None,
    ) -> WorkflowHandle[object]: ...

    async def start(
        self,
        kind: Kind[Any, T] | str,
        workflow: str,
        input: object = None,
        *,
        deadline: datetime | timedelta | None = None,
    ) -> WorkflowHandle[Any]: ...

    async def cancel(self, workflow: str) -> WorkflowStatus: ...

    async def retry(self, workflow: str) -> WorkflowStatus: ...

    async def status(self, workflow: str) -> WorkflowStatus | None: ...

    async def list(
        self,
        *,
        status: Status | str | None = None,
        kind: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page: ...

    def handle(self, workflow: str) -> WorkflowHandle[object]: ...


class Lifecycled:
    """The six methods above for any Durable, from its checkpointer's Lifecycle. The three
    moves that cross both halves are hooks whose defaults record, then queue; an atomic
    Durable overrides them as one commit.

    A Durable whose checkpointer does not offer lifecycle still has the methods (they are
    on the class); each raises ``LifecycleNotOffered`` naming the store, before anything is
    written.
    """

    if TYPE_CHECKING:

        @property
        def checkpointer(self) -> object: ...

        @property
        def scheduler(self) -> Scheduler: ...

    def _lifecycle(self) -> Lifecycle:
        return lifecycle_of(self.checkpointer)

    async def _admit_and_queue(
        self, workflow: str, kind: str, input: object, queue: str
    ) -> Admitted:
        """Record the start, then queue it: a crash between leaves a ``ready`` workflow that
        is not queued, and the same ``start`` again finds it ready and queues it."""
        admitted = await self._lifecycle().admit(workflow, kind, input, queue=queue)
        if admitted.queue:
            await self.scheduler.make_ready(workflow)
        return admitted

    async def _withdraw_and_cancel(self, workflow: str) -> WorkflowStatus:
        """Cancel in the record first (raising the fence), then in the queue: a crash between
        leaves a queued cancelled workflow, whose next ``begin`` refuses it."""
        withdrawn = await self._lifecycle().withdraw(workflow)
        if withdrawn.status is Status.CANCELLED:
            await self.scheduler.cancel(workflow)
        return withdrawn

    async def _mark_retry(self, workflow: str) -> None:
        """Record the retry's marker, ``durable.retry:<n>``, under a claim of its own while
        the workflow is failed or cancelled (so no pass runs), before it is readmitted.

        The markers count the workflow's generations; in a new one every step's attempts
        count afresh, so a step that spent its retry policy does not fail again at once. A
        crash after the marker and before the readmit leaves a generation unused, which is
        harmless. A store's own ``_readmit_and_queue`` (one transaction) is left as it is."""
        before = await self._lifecycle().status(workflow)
        if before is None or before.status not in (Status.FAILED, Status.CANCELLED):
            return  # readmit refuses it, with the reason
        checkpointer: Any = self.checkpointer
        holder = await checkpointer.claim(
            workflow, liveness=timedelta(seconds=30), budget=timedelta(seconds=30)
        )
        if holder is None:
            return
        try:
            # Again under the claim: a discard (a prune) between the first read and the claim
            # leaves the id claimable at once, and a marker written now would be a record of
            # a forgotten workflow. A discard after this read fences the record below.
            again = await self._lifecycle().status(workflow)
            if again is None or again.status not in (Status.FAILED, Status.CANCELLED):
                return
            records = await checkpointer.load(workflow)
            retries = sum(1 for key in records if key.startswith(RETRY_PREFIX))
            await checkpointer.record(
                holder, f"{RETRY_PREFIX}{retries + 1}", {"after": before.status.value}
            )
        except Fenced:
            # Discarded (a prune) since the status was read: readmit, next, says so
            # (UnknownWorkflow) rather than an interruption no retry caller expects.
            return
        finally:
            await checkpointer.release(holder)

    async def _readmit_and_queue(self, workflow: str) -> WorkflowStatus:
        """Readmit, then queue, as ``start`` does (and repaired the same way: retry again)."""
        readmitted = await self._lifecycle().readmit(workflow)
        await self.scheduler.make_ready(workflow)
        return readmitted

    @overload
    async def start(
        self,
        kind: Kind[Any, T],
        workflow: str,
        input: object = None,
        *,
        deadline: datetime | timedelta | None = None,
    ) -> WorkflowHandle[T]: ...

    @overload
    async def start(
        self,
        kind: str,
        workflow: str,
        input: object = None,
        *,
        deadline: datetime | timedelta | None = None,
    ) -> WorkflowHandle[object]: ...

    async def start(
        self,
        kind: Kind[Any, T] | str,
        workflow: str,
        input: object = None,
        *,
        deadline: datetime | timedelta | None = None,
    ) -> WorkflowHandle[Any]:
        """Start ``workflow`` as ``kind`` on ``input``, and return its handle.

        With a ``Kind``, its parser checks ``input`` first, and ``InputRefused`` means nothing
        was written: a worker would only fail the workflow on its first pass, and the caller
        who holds the mistake is the one to hear of it. The input stored is the one given
        (through the codec), not the parsed one, so a repeat is compared by its encoding.
        With a name (``str``), only the name is checked; the worker parses at its first pass.

        Idempotent: the same kind and input again writes nothing and returns the handle (and
        queues it again if it is still ready, which repairs a start whose queueing was lost).
        Another kind or input under the id is ``StartConflict``, nothing written.

        ``deadline`` (a moment, or a duration from now by this machine's clock) is recorded
        among the workflow's records, first writer wins (a repeated start keeps the first
        deadline): before the admit for a new workflow, so its first pass sees it, and after
        it otherwise, so a conflicting start writes nothing. Past it the workflow fails with
        "deadline exceeded" wherever it is. It wins over the kind's ``deadline``.
        """
        check_workflow(workflow)
        when: datetime | None = None
        if isinstance(deadline, timedelta):
            when = datetime.now(UTC) + check_duration("a deadline", deadline, workflow=workflow)
        elif isinstance(deadline, datetime):
            if deadline.tzinfo is None:
                raise ValueError(
                    f"workflow {workflow!r}: a deadline must carry a timezone, got {deadline!r}"
                )
            when = deadline
        elif deadline is not None:
            raise TypeError(
                f"workflow {workflow!r}: a deadline is a datetime or a timedelta, got {deadline!r}"
            )
        if isinstance(kind, Kind):
            name, queue = check_kind(kind.name), kind.queue
            try:
                kind.parse(input)
            except Exception as error:
                raise InputRefused(
                    f"workflow {workflow!r}: kind {name!r} refused the input {shown(input)}: "
                    f"{error} (nothing was written)"
                ) from error
        elif isinstance(kind, str):
            name, queue = check_kind(kind), "default"
        else:
            raise TypeError(f"start takes a Kind or a kind's name, got {kind!r}")
        self._lifecycle()  # LifecycleNotOffered before anything is written
        if isinstance(kind, Kind) and kind.priority != 0:
            await self._prioritize(workflow, kind)
        hook = telemetry.current()
        if hook is None:
            await self._start(workflow, name, input, queue, when, None)
        else:
            with hook.starting(workflow, name) as carrier:
                await self._start(workflow, name, input, queue, when, carrier)
        return WorkflowHandle(cast("LifecycleDurable[Any]", self), workflow)

    async def _prioritize(self, workflow: str, kind: Kind[Any, Any]) -> None:
        """Keep a new workflow's priority before it is first made ready, so its first take
        already orders by it; a repeated start finds the row and writes nothing more."""
        scheduler = cast(Any, self).scheduler
        if not isinstance(scheduler, Limited):
            raise LimitsNotOffered(
                f"workflow {workflow!r}: kind {kind.name!r} has priority {kind.priority}, but "
                f"the store's scheduler {scheduler!r} keeps no priorities (no 'limits' "
                "capability); nothing was written: drop the priority or use a store with limits"
            )
        if await self._lifecycle().status(workflow) is None:
            await scheduler.prioritize(workflow, kind.priority)

    async def _start(
        self,
        workflow: str,
        name: str,
        input: object,
        queue: str,
        when: datetime | None,
        carrier: dict[str, str] | None,
    ) -> None:
        checkpointer: Any = self.checkpointer
        early = (when is not None or carrier is not None) and await self._lifecycle().status(
            workflow
        ) is None
        if early:
            # A new workflow: before it is queued, so that its first pass already sees it.
            if when is not None:
                await checkpointer.supply(workflow, DEADLINE_KEY, when.isoformat())
            if carrier:
                # The trace it was started in (telemetry on): every pass joins it.
                await checkpointer.supply(workflow, telemetry.TRACE_KEY, carrier)
        await self._admit_and_queue(workflow, name, input, queue)
        if when is not None and not early:
            # One already started: after the admit, so that a conflicting start writes
            # nothing (a repeat's deadline loses to the first, as every supply does).
            await checkpointer.supply(workflow, DEADLINE_KEY, when.isoformat())

    async def cancel(self, workflow: str) -> WorkflowStatus:
        """Cancel ``workflow``: it never runs again, a pass in flight is refused at its next
        write, and its records are kept (``retry`` resumes it; ``discard`` forgets it). A
        finished or failed workflow is returned unchanged; ``UnknownWorkflow`` for none.

        Then its unfinished children are cancelled (those started with
        ``cancel_with_parent``, the default), and its parent, if it is a child, is told.
        Both come after the cancel itself, so a crash between is repaired by cancelling
        again (see :mod:`durable.children`)."""
        check_workflow(workflow)
        self._lifecycle()
        withdrawn = await self._withdraw_and_cancel(workflow)
        from durable import children

        await children.cancelled(self, workflow, withdrawn)
        return withdrawn

    async def retry(self, workflow: str) -> WorkflowStatus:
        """Run a failed or cancelled workflow again with fresh attempts, its recorded steps
        replayed rather than repeated. ``NotRetryable`` for any other status."""
        check_workflow(workflow)
        self._lifecycle()
        await self._mark_retry(workflow)
        return await self._readmit_and_queue(workflow)

    async def status(self, workflow: str) -> WorkflowStatus | None:
        """The workflow's status, or None when the store has none for it."""
        check_workflow(workflow)
        return await self._lifecycle().status(workflow)

    async def list(
        self,
        *,
        status: Status | str | None = None,
        kind: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page:
        """Workflows by status and kind, newest updated first; pass ``Page.cursor`` back for
        the next page."""
        wanted: Status | None = None
        if status is not None:
            try:
                wanted = Status(status)
            except ValueError:
                known = ", ".join(s.value for s in Status)
                raise ValueError(f"no status {status!r}; a workflow is one of {known}") from None
        if kind is not None:
            check_kind(kind)
        return await self._lifecycle().statuses(
            status=wanted, kind=kind, limit=limit, cursor=cursor
        )

    def handle(self, workflow: str) -> WorkflowHandle[object]:
        """A handle on ``workflow``, started here or anywhere else."""
        return WorkflowHandle(cast("LifecycleDurable[Any]", self), workflow)


def lifecycle_of(checkpointer: object) -> Lifecycle:
    """``checkpointer`` as a ``Lifecycle``, or ``LifecycleNotOffered`` naming the store."""
    if isinstance(checkpointer, Lifecycle):
        return checkpointer
    raise LifecycleNotOffered(
        f"the store {checkpointer!r} does not offer lifecycle (kinds, start, status and "
        "outcome): it keeps records and schedules passes, but no workflow's status"
    )
