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
import hashlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Generic, Literal, Never, TypeVar, cast, overload

from typing_extensions import TypeVar as DefaultTypeVar

from durable import telemetry
from durable.boundary import check_duration, check_key, check_workflow, shown
from durable.clock import Clock, SystemClock
from durable.interfaces import (
    INBOX_PREFIX,
    Checkpointer,
    Contended,
    Durable,
    Failure,
    Fenced,
    KeyReused,
    Operational,
    Pass,
    Recorded,
    StoreUnavailable,
    Suspended,
    Swallowed,
)
from durable.parsers import as_is as _as_is
from durable.policy import RetryPolicy, failure_of

if TYPE_CHECKING:
    from durable.children import ChildHandle
    from durable.workflows import Kind

__all__ = [
    "ATTEMPT_LOST",
    "CHILD_PREFIX",
    "DEADLINE_KEY",
    "OUTCOME_PREFIX",
    "PARENT_KEY",
    "RESERVED_PREFIX",
    "RETRY_PREFIX",
    "STEP_PREFIX",
    "Blocked",
    "DeadlineExceeded",
    "DuplicateKey",
    "Finished",
    "Outcome",
    "ParseFailed",
    "Run",
    "Sleeping",
    "StepContext",
    "StepFailed",
    "attempts_recorded",
    "drive",
    "idempotency_key",
    "recall",
    "resume",
    "step_entry",
]

log = logging.getLogger("durable.run")

T = TypeVar("T")
E = DefaultTypeVar("E", contravariant=True, default=Never)

RECEIVE_FIELD = "durable.receive"
"""A ``receive`` records ``{RECEIVE_FIELD: <inbox key>}``: a reference to the entry it took,
never a copy, so the inbox entry stays the one record of the message."""

_PLAIN: frozenset[type] = frozenset({int, str, float, bool, type(None), dict, list, tuple})
"""Exact types no effect's result of which is awaitable: a step's result is checked against
them before ``inspect.isawaitable``, whose ABC check costs a plain step more than the rest
of its bookkeeping."""

RESERVED_PREFIX = "durable."
"""Every key durable keeps for itself starts here, so a body may use none of them: what the
run records beside the body's own keys (below), the inbox, and what later releases add."""

STEP_PREFIX = "durable.step:"
"""The prefix of the records a step with a retry policy or a reconcile probe keeps about its
attempts, beside its result: ``durable.step:<key>:attempt:<n>`` when attempt ``n`` begins
(the intent a reconcile probe answers to), ``...:failed:<n>`` when it raised or was lost,
``...:retry:<n>`` holding the deadline of a backoff slept durably, and ``...:reconciled:<n>``
when a probe found attempt ``n``'s effect done.

They are ordinary records, written with the pass's token through ``record`` like any
other, so every store keeps them, fences them and stamps them with its own clock with no
method of its own; ``durable show`` prints them as sentences. A body may not use a key
with this prefix (``Run`` refuses one), so nothing else can forge an attempt."""

RETRY_PREFIX = "durable.retry:"
"""``durable.retry:<n>``: the marker ``Durable.retry`` records (before readmitting a failed
or cancelled workflow) for the ``n``-th time it is retried. The number of markers is the
workflow's generation; a step's attempts made in an earlier generation no longer count
against its policy, so a retried workflow's steps get fresh attempts. A new key for every
retry, as records are first-writer-wins; attempts keep counting on (``attempt 6 of 10``)
so every attempt keeps a key of its own."""

DEADLINE_KEY = "durable.deadline"
"""The record holding a workflow's deadline (an ISO string): supplied by ``start(...,
deadline=)`` or recorded by the first pass of a kind with a ``deadline``."""

CHILD_PREFIX = "durable.child:"
"""A parent's record of the child it started under a key: ``durable.child:<key>`` holds
``{"workflow": <child>, "kind": <name>, "cancel_with_parent": bool}`` (see
:mod:`durable.children`)."""

OUTCOME_PREFIX = "durable.outcome:"
"""Where a child's outcome arrives in its parent: ``durable.outcome:<key>``."""

PARENT_KEY = "durable.parent"
"""A child's record of its parent: ``{"workflow": <parent>, "key": <key>}``."""

ATTEMPT_LOST = "durable.AttemptLost"
"""The failure type recorded for a step's attempt that began and never ended: its process
died, or its pass lost the claim, mid-effect."""

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
    """The body is waiting on values (or inbox messages) that somebody else must supply.

    ``until`` is the workflow's deadline when it has one: the moment it is worth running
    again even if nothing arrives, to fail it."""

    keys: tuple[str, ...]
    until: datetime | None = None

    def __repr__(self) -> str:
        # As before deadlines: a workflow without one reads the way it always has.
        if self.until is None:
            return f"Blocked(keys={self.keys!r})"
        return f"Blocked(keys={self.keys!r}, until={self.until!r})"


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


class StepFailed(Exception):
    """A step with a retry policy spent it: ``.key``, ``.attempts`` and ``.failure`` (the
    last attempt's error, as text) say how.

    The body is handed this rather than the effect's own exception because a replay must
    see the same thing as the pass that spent the policy, and only text survives a crash:
    a body that compensates on ``StepFailed`` compensates again, identically, on a pass
    that resumes it halfway through the compensation. On the pass that spent it the
    effect's exception is chained as ``__cause__``; ``failure.type`` names it on every pass.
    """

    def __init__(self, workflow: str, key: str, attempts: int, failure: Failure) -> None:
        self.workflow, self.key, self.attempts, self.failure = workflow, key, attempts, failure
        plural = "" if attempts == 1 else "s"
        super().__init__(
            f"workflow {workflow!r}: step {key!r} failed after {attempts} attempt{plural}: "
            f"{failure}"
        )


class DeadlineExceeded(Exception):
    """The workflow's deadline passed: it fails, wherever it was, and is not retried."""

    def __init__(self, workflow: str, deadline: datetime) -> None:
        self.workflow, self.deadline = workflow, deadline
        super().__init__(f"workflow {workflow!r}: deadline exceeded ({deadline.isoformat()})")


def idempotency_key(workflow: str, key: str) -> str:
    """The idempotency key of step ``key`` of ``workflow``: the same for every attempt in
    every pass, different for another step or workflow.

    A hash rather than the id and key themselves: a gateway limits the length and the
    characters of the keys it takes, and sees no workflow names. Ids and keys hold no
    control character, so the NUL between them cannot be forged by either. Note that it
    is a function of the names alone: a workflow discarded and started again under the same
    id hands the gateway the same keys, which then answers with the first run's results.
    """
    digest = hashlib.sha256(f"{workflow}\x00{key}".encode()).hexdigest()
    return f"durable-{digest[:40]}"


@dataclass(frozen=True, slots=True)
class StepContext:
    """What an effect (``step(..., context=True)``) and a reconcile probe are handed.

    ``attempt`` counts from 1. It is counted durably, across passes and crashes, for a
    step with a retry policy or a reconcile probe; for any other step it is 1, as nothing
    is recorded about its attempts. ``idempotency_key`` is the key to hand a service that
    deduplicates requests (see :func:`idempotency_key`). ``fencing_token`` is the pass's
    token, strictly increasing per workflow: a service that remembers the highest token it
    has seen for a resource, and refuses a lower one, refuses a stalled pass that has lost
    the workflow to a newer one, which the store alone cannot stop once the request is on
    the wire.
    """

    workflow: str
    key: str
    attempt: int
    idempotency_key: str
    fencing_token: int


def _step_key(key: str, what: str, attempt: int) -> str:
    return f"{STEP_PREFIX}{key}:{what}:{attempt}"


def step_entry(key: str, value: object) -> str | None:
    """A step's attempt record said as a sentence (``charge: attempt 3 of 5 failed:
    TimeoutError``), or None when ``key`` is not one; what ``durable show`` prints."""
    if key.startswith(RETRY_PREFIX) and key[len(RETRY_PREFIX) :].isdigit():
        return f"retried ({key[len(RETRY_PREFIX) :]}): every step gets fresh attempts"
    if not key.startswith(STEP_PREFIX):
        return None
    parts = key[len(STEP_PREFIX) :].rsplit(":", 2)
    if len(parts) != 3 or not parts[2].isdigit() or not parts[0]:
        return None
    step, what, number = parts
    details = value if isinstance(value, dict) else {}
    of = details.get("of")
    attempt = f"{step}: attempt {number}" + (f" of {of}" if isinstance(of, int) else "")
    if what == "attempt":
        token = details.get("token")
        return attempt + " began" + (f" (pass {token})" if isinstance(token, int) else "")
    if what == "failed":
        message = details.get("message")
        why = str(details.get("type", "?")) + (f": {message}" if message else "")
        final = " (gave up)" if details.get("final") else ""
        return f"{attempt} failed{final}: {why}"
    if what == "retry":
        return f"{step}: attempt {number} waits until {value}"
    if what == "reconciled":
        return f"{step}: attempt {number} reconciled: the probe found the effect done"
    return None


def _failure_of_record(value: object, attempt: int) -> Failure:
    details = value if isinstance(value, dict) else {}
    return Failure(
        type=str(details.get("type", "?")),
        message=str(details.get("message", "")),
        traceback=str(details.get("traceback", "")),
        attempts=attempt,
    )


def _seconds_of(workflow: str, key: str, timeout: timedelta | float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, int | float) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise TypeError(
            f"workflow {workflow!r}, step {key!r}: a timeout is seconds or a timedelta, "
            f"got {timeout!r}"
        )
    if not seconds > 0:
        raise ValueError(
            f"workflow {workflow!r}, step {key!r}: a timeout must be positive, got {timeout!r}"
        )
    return seconds


async def _call(
    function: Callable[..., object], argument: StepContext | None, seconds: float | None
) -> object:
    """Call ``function`` (with ``argument`` when given) and await what it returns, cancelled
    after ``seconds``. A synchronous function cannot be interrupted: only what it returns is
    awaited under the timeout."""
    produced = function() if argument is None else function(argument)
    if not inspect.isawaitable(produced):
        return produced
    if seconds is None:
        return await produced
    async with asyncio.timeout(seconds):
        return await produced


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
        operations: Mapping[str, str | None] | None = None,
    ) -> None:
        self._checkpointer = checkpointer
        self._holder = holder
        self._records: dict[str, object] = dict(records)
        # The operation that wrote each record, where the store keeps them (Operational):
        # what refuses a key reused as another kind of operation at its replay.
        self._operations: dict[str, str | None] = dict(operations or {})
        self._operational = isinstance(checkpointer, Operational)
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
        self._deadline: datetime | None = None
        self._generation = sum(1 for k in self._records if k.startswith(RETRY_PREFIX))
        # The Durable the pass runs in, when a worker runs it: what starting a child needs.
        self.durable: Any = None
        # Set by the telemetry hook on a traced pass only; a plain Run never reads them.
        self._telemetry: telemetry.Telemetry | None = None
        self._kind = "?"
        self._span: Any = None
        if DEADLINE_KEY in self._records:
            self._deadline = self._parse(DEADLINE_KEY, self._records[DEADLINE_KEY], _as_deadline)

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

    @property
    def deadline(self) -> datetime | None:
        """When the workflow fails with ``DeadlineExceeded``, wherever it is; None for never."""
        return self._deadline

    def context(self, key: str, attempt: int = 1) -> StepContext:
        """The :class:`StepContext` of step ``key`` at ``attempt`` in this pass."""
        return StepContext(
            self.workflow, key, attempt, idempotency_key(self.workflow, key), self._holder.token
        )

    def now(self) -> datetime:
        """The run's clock. Not recorded: wrap it in a step if a pass must replay it."""
        return self._clock.now()

    def _use(self, key: str, operation: str | None = None) -> str:
        check_key(self._holder.workflow, key)
        if key.startswith(RESERVED_PREFIX):
            raise ValueError(
                f"workflow {self.workflow!r}, key {key!r}: keys starting with "
                f"{RESERVED_PREFIX!r} are kept by durable itself (a step's attempts, retries, "
                "the workflow's deadline, its trace context, its children, its parent, its inbox); "
                "choose another key"
            )
        # One probe of the set rather than a lookup and an add: it holds every key of the
        # pass, and on a step's path each probe of a large table is a miss in the cache.
        used, count = self._used, len(self._used)
        used.add(key)
        if len(used) == count:
            raise DuplicateKey(
                f"workflow {self.workflow!r}: key {key!r} is used twice in one pass; "
                "every step and wait needs a key of its own"
            )
        if operation is not None and self._operations:
            recorded = self._operations.get(key)
            if recorded is None and operation != "child":
                # A child's result is not under its key but under its link's.
                recorded = self._operations.get(CHILD_PREFIX + key)
            if recorded is not None and recorded != operation:
                raise KeyReused(self.workflow, key, recorded, operation)
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

    async def _write(self, key: str, value: object, operation: str | None = None) -> Recorded:
        """Record ``value`` under ``key`` with this pass's token (for drivers such as the
        graph), keeping ``operation`` with it on a store that keeps operations."""
        if operation is not None and self._operational:
            store = cast(Operational, self._checkpointer)
            recorded = await store.record_as(self._holder, key, value, operation)
            self._operations[key] = operation
        else:
            recorded = await self._checkpointer.record(self._holder, key, value)
        self._keep(key, recorded)
        return recorded

    @overload
    async def step(
        self,
        key: str,
        effect: Callable[[], Awaitable[object]] | Callable[[], object],
        parse: Callable[[object], T],
        *,
        retry: RetryPolicy | None = None,
        timeout: timedelta | float | None = None,  # noqa: ASYNC109
        reconcile: Callable[[StepContext], Awaitable[object]]
        | Callable[[StepContext], object]
        | None = None,
        context: Literal[False] = False,
    ) -> T: ...

    @overload
    async def step(
        self,
        key: str,
        effect: Callable[[StepContext], Awaitable[object]] | Callable[[StepContext], object],
        parse: Callable[[object], T],
        *,
        retry: RetryPolicy | None = None,
        timeout: timedelta | float | None = None,  # noqa: ASYNC109
        reconcile: Callable[[StepContext], Awaitable[object]]
        | Callable[[StepContext], object]
        | None = None,
        context: Literal[True],
    ) -> T: ...

    async def step(
        self,
        key: str,
        effect: Callable[..., object],
        parse: Callable[[object], T],
        *,
        retry: RetryPolicy | None = None,
        timeout: timedelta | float | None = None,  # noqa: ASYNC109
        reconcile: Callable[[StepContext], object] | None = None,
        context: bool = False,
    ) -> T:
        """Run ``effect`` and record its result under ``key``; on later passes, return the
        recorded value without running it.

        At-least-once: a crash after the effect and before the record repeats it on the
        next pass. An effect that leaves the store belongs behind an idempotency key
        (``context=True`` hands it a :class:`StepContext` holding one); one that lives in
        the store belongs in :meth:`transact`.

        ``timeout`` (seconds or a ``timedelta``) cancels an attempt that overruns it, which
        then fails with ``TimeoutError``. ``retry`` makes the step try again per the policy;
        each attempt's start and error are recorded (under :data:`STEP_PREFIX`) before the
        next, so attempts are counted across passes and crashes, and a spent policy raises
        :class:`StepFailed` into the body. ``reconcile`` records an intent before each
        attempt; a later pass that finds an intent and no result asks the probe, with the
        step's context, whether the effect happened: it returns the value to record, or
        ``None`` for "not done", and only then does the effect run again.

        A step with none of these costs what it always did: no write but its result's.
        """
        self._use(key, "step")
        if key in self._records:
            return self._parse(key, self._records[key], parse)
        if retry is None and reconcile is None and timeout is None and not context:
            self._begin(key)
            try:
                produced = effect()
                if type(produced) not in _PLAIN and inspect.isawaitable(produced):
                    produced = await produced
                # _write, spelled out: every plain step comes this way, and a coroutine
                # between it and the store costs it going and coming back.
                if self._operational:
                    store = cast(Operational, self._checkpointer)
                    recorded = await store.record_as(self._holder, key, produced, "step")
                    self._operations[key] = "step"
                else:
                    recorded = await self._checkpointer.record(self._holder, key, produced)
                self._records[key] = recorded.value
            finally:
                self._finish(key)
            return self._parse(key, recorded.value, parse)
        seconds = _seconds_of(self.workflow, key, timeout)
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise TypeError(
                f"workflow {self.workflow!r}, step {key!r}: retry takes a RetryPolicy, "
                f"got {retry!r}"
            )
        if retry is None and reconcile is None:
            self._begin(key)
            try:
                produced = await _call(effect, self.context(key) if context else None, seconds)
                recorded = await self._write(key, produced, "step")
            finally:
                self._finish(key)
            return self._parse(key, recorded.value, parse)
        value = await self._attempts(key, effect, retry, seconds, reconcile, context)
        return self._parse(key, value, parse)

    async def _attempts(
        self,
        key: str,
        effect: Callable[..., object],
        policy: RetryPolicy | None,
        seconds: float | None,
        reconcile: Callable[[StepContext], object] | None,
        context: bool,
    ) -> object:
        """A step whose attempts are recorded: count them, reconcile the one a previous
        pass left unfinished, and try until the result is recorded or the policy is spent."""
        begun = 0
        while _step_key(key, "attempt", begun + 1) in self._records:
            begun += 1
        # Attempts made before the workflow's last retry (an earlier generation) do not
        # count against the policy: `base` of them came first, and the budget starts after.
        base = begun if self._generation else 0
        if self._generation:
            for number in range(1, begun + 1):
                began = self._records[_step_key(key, "attempt", number)]
                if isinstance(began, dict) and began.get("generation") == self._generation:
                    base = number - 1
                    break
        most = base + policy.max_attempts if policy is not None else None
        if begun:
            failed = self._records.get(_step_key(key, "failed", begun))
            if failed is None:
                # Attempt `begun` began and never ended: its process died or its pass lost
                # the claim mid-effect. The effect may have happened.
                self._begin(key)
                try:
                    if reconcile is not None:
                        found = await _call(reconcile, self.context(key, begun), seconds)
                        if found is not None:
                            await self._write(
                                _step_key(key, "reconciled", begun), {"attempt": begun, "of": most}
                            )
                            return (await self._write(key, found, "step")).value
                    lost = Failure(
                        ATTEMPT_LOST,
                        "the attempt began and never ended: its process died, or its pass "
                        "lost the claim, during the effect",
                        "",
                        begun,
                    )
                    spent = most is not None and begun >= most
                    failed = await self._record_failure(key, begun, most, lost, final=spent)
                finally:
                    self._finish(key)
            if begun > base and (
                (isinstance(failed, dict) and failed.get("final"))
                or (most is not None and begun >= most)
            ):
                raise StepFailed(self.workflow, key, begun, _failure_of_record(failed, begun))
        failed_here = False
        while True:
            attempt = begun + 1
            if begun > base and policy is not None:
                wait = policy.backoff(begun - base)
                # A recorded deadline is kept whatever this pass's jitter draws.
                if _step_key(key, "retry", attempt) in self._records or wait > policy.suspend_after:
                    await self._retry_at(key, attempt, wait)
                elif failed_here:
                    await asyncio.sleep(wait.total_seconds())
            self._begin(key)
            try:
                intent: dict[str, object] = {
                    "attempt": attempt,
                    "of": most,
                    "token": self._holder.token,
                }
                if self._generation:
                    intent["generation"] = self._generation
                await self._write(_step_key(key, "attempt", attempt), intent)
                try:
                    produced = await _call(
                        effect, self.context(key, attempt) if context else None, seconds
                    )
                except Exception as error:
                    final = policy is not None and policy.gives_up(error, attempt - base)
                    failure = failure_of(error, attempt)
                    await self._record_failure(key, attempt, most, failure, final=final)
                    if policy is None:
                        raise
                    if final:
                        raise StepFailed(self.workflow, key, attempt, failure) from error
                    log.warning(
                        "workflow %r: %s",
                        self.workflow,
                        step_entry(
                            _step_key(key, "failed", attempt),
                            {"of": most, "type": failure.type, "message": failure.message},
                        ),
                    )
                    begun, failed_here = attempt, True
                    continue
                return (await self._write(key, produced, "step")).value
            finally:
                self._finish(key)

    async def _record_failure(
        self, key: str, attempt: int, most: int | None, failure: Failure, *, final: bool
    ) -> object:
        recorded = await self._write(
            _step_key(key, "failed", attempt),
            {
                "attempt": attempt,
                "of": most,
                "type": failure.type,
                "message": failure.message,
                "traceback": failure.traceback,
                "final": final,
            },
        )
        return recorded.value

    async def _retry_at(self, key: str, attempt: int, wait: timedelta) -> None:
        """Sleep durably until ``attempt`` of step ``key`` may begin: the pass ends here
        (Sleeping) unless the recorded deadline has passed."""
        marker = _step_key(key, "retry", attempt)
        if marker in self._records:
            stored = self._records[marker]
        else:
            self._begin(key)
            try:
                stored = (await self._write(marker, (self.now() + wait).isoformat())).value
            finally:
                self._finish(key)
        until = self._parse(marker, stored, _as_deadline)
        if self.now() >= until:
            return
        self._sleeps[marker] = until
        self._suspend(marker, f"retries step {key!r} at {until.isoformat()}:")

    async def transact(self, key: str, effect: E, parse: Callable[[object], T]) -> T:
        """Have the store perform ``effect`` and record its result in one commit: exactly
        once, for an effect that lives in the store. What ``effect`` is depends on the store
        (a Lua script, a callback handed a cursor)."""
        self._use(key, "transact")
        if key in self._records:
            return self._parse(key, self._records[key], parse)
        self._begin(key)
        try:
            recorded = await self._checkpointer.transact(self._holder, key, effect)
        finally:
            self._finish(key)
        if self._operational:
            self._operations[key] = "transact"
        self._keep(key, recorded)
        return self._parse(key, recorded.value, parse)

    async def start_child(
        self,
        kind: Kind[Any, Any] | str,
        key: str,
        input: object = None,
        *,
        workflow: str | None = None,
        cancel_with_parent: bool = True,
    ) -> ChildHandle:
        """Start a child workflow of ``kind`` on ``input``, once across every pass: its id is
        ``workflow``, or ``<this workflow>/<key>``. ``key`` is a key like a step's (one use
        per pass). Returns the handle to await with :meth:`outcome` or :meth:`gather`.
        Cancelling this workflow cancels the child unless ``cancel_with_parent`` is False.
        See :mod:`durable.children`."""
        from durable import children

        return await children.start_child(
            self, kind, key, input, workflow=workflow, cancel_with_parent=cancel_with_parent
        )

    @overload
    async def outcome(self, handle: ChildHandle) -> object: ...

    @overload
    async def outcome(self, handle: ChildHandle, parse: Callable[[object], T]) -> T: ...

    async def outcome(self, handle: ChildHandle, parse: Callable[[object], Any] = _as_is) -> Any:
        """The child's value through ``parse``; until it ends the pass stops here and this
        workflow is blocked, holding no claim, until the outcome arrives. A failed child
        raises ``ChildFailed`` (carrying its ``Failure``), a cancelled one ``ChildCancelled``."""
        from durable import children

        return await children.outcome(self, handle, parse)

    @overload
    async def gather(self, *handles: ChildHandle) -> list[object]: ...

    @overload
    async def gather(self, *handles: ChildHandle, parse: Callable[[object], T]) -> list[T]: ...

    async def gather(
        self, *handles: ChildHandle, parse: Callable[[object], Any] = _as_is
    ) -> list[Any]:
        """The outcomes of ``handles``, in order, once every one has ended: the pass is
        blocked on all the missing ones at once. The first failed or cancelled child (in
        order) raises, as :meth:`outcome` would."""
        from durable import children

        return await children.gather(self, handles, parse)

    @overload
    async def child(
        self,
        kind: Kind[Any, Any] | str,
        key: str,
        input: object = None,
        *,
        workflow: str | None = None,
        cancel_with_parent: bool = True,
    ) -> object: ...

    @overload
    async def child(
        self,
        kind: Kind[Any, Any] | str,
        key: str,
        input: object = None,
        *,
        parse: Callable[[object], T],
        workflow: str | None = None,
        cancel_with_parent: bool = True,
    ) -> T: ...

    async def child(
        self,
        kind: Kind[Any, Any] | str,
        key: str,
        input: object = None,
        *,
        parse: Callable[[object], Any] = _as_is,
        workflow: str | None = None,
        cancel_with_parent: bool = True,
    ) -> Any:
        """:meth:`start_child`, then :meth:`outcome`."""
        handle = await self.start_child(
            kind, key, input, workflow=workflow, cancel_with_parent=cancel_with_parent
        )
        return await self.outcome(handle, parse)

    def _suspend(self, key: str, why: str) -> Never:
        self._waits.append(key)
        raise Suspended(f"workflow {self.workflow!r} {why} {key!r}")

    async def awaiting(self, key: str, parse: Callable[[object], T]) -> T:
        """The value somebody else supplies under ``key`` (``Durable.arrive``); until it is
        there, the pass stops here and the workflow is blocked on ``key``.

        Only a parser can establish its shape: another process wrote it, so there is
        nothing to compare it against.
        """
        self._use(key, "awaiting")
        if key in self._records:
            return self._parse(key, self._records[key], parse)
        self._suspend(key, "awaits a value under")

    async def sleep(self, key: str, duration: timedelta) -> datetime:
        """Sleep until ``duration`` after the first pass reached this key.

        The deadline is recorded (as an ISO string) the first time, so it survives restarts
        and is not pushed back by later passes. Returns the deadline once it has passed.
        """
        self._use(key, "sleep")
        check_duration("a sleep's duration", duration, workflow=self.workflow)
        if key in self._records:
            stored = self._records[key]
        else:
            self._begin(key)
            try:
                stored = (
                    await self._write(key, (self.now() + duration).isoformat(), "sleep")
                ).value
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
        self._use(key, "receive")
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
                await self._write(key, {RECEIVE_FIELD: untaken}, "receive")
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
            until = min(self._sleeps.values())
            if self._deadline is not None:
                until = min(until, self._deadline)
            return Sleeping(until, keys)
        return Blocked(keys, self._deadline)


def attempts_recorded(records: Mapping[str, object], key: str) -> int:
    """How many attempts of step ``key`` the records count (0 for a step without a retry
    policy or a probe, whose attempts are not recorded)."""
    n = 0
    while _step_key(key, "attempt", n + 1) in records:
        n += 1
    return n


class _TracedRun(Run[E]):
    """The ``Run`` of a pass with telemetry on: each operation the pass does (not one it
    replays from the records) is a span under the pass's. A subclass, so that a plain
    ``Run`` carries no telemetry code at all on its hot path."""

    _telemetry: telemetry.Telemetry

    async def step(
        self, key: str, effect: Callable[..., object], parse: Callable[[object], T], **options: Any
    ) -> T:
        doing = cast(Any, super().step)(key, effect, parse, **options)
        if key in self._records:
            return cast(T, await doing)
        before = attempts_recorded(self._records, key)
        return cast(T, await self._telemetry.operation(self, "step", key, doing, before))

    async def transact(self, key: str, effect: E, parse: Callable[[object], T]) -> T:
        if key in self._records:
            return await super().transact(key, effect, parse)
        return await self._telemetry.operation(
            self, "transact", key, super().transact(key, effect, parse)
        )

    async def sleep(self, key: str, duration: timedelta) -> datetime:
        if key in self._records:
            return await super().sleep(key, duration)
        return await self._telemetry.operation(self, "sleep", key, super().sleep(key, duration))

    async def awaiting(self, key: str, parse: Callable[[object], T]) -> T:
        if key in self._records:
            return await super().awaiting(key, parse)
        return await self._telemetry.operation(self, "await", key, super().awaiting(key, parse))

    async def receive(self, key: str, parse: Callable[[object], T]) -> T:
        if key in self._records:
            return await super().receive(key, parse)
        return await self._telemetry.operation(self, "receive", key, super().receive(key, parse))


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


async def recall(
    checkpointer: Checkpointer[Any], workflow: str
) -> tuple[dict[str, object], dict[str, str | None]]:
    """What a pass starts from: the workflow's records and, on a store that keeps them
    (:class:`~durable.interfaces.Operational`), the operation that wrote each, in one read.

    ``history`` rather than ``load`` plus a second read, because it is the one read that
    carries both, and two reads could straddle a discard; on a store without operations,
    ``load`` as always."""
    if not isinstance(checkpointer, Operational):
        return await checkpointer.load(workflow), {}
    entries = await checkpointer.history(workflow)
    return {e.key: e.value for e in entries}, {e.key: e.operation for e in entries}


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
    deadline: timedelta | None = None,
    kind: str | None = None,
    attempt: int | None = None,
) -> Outcome[T]:
    """Load ``holder``'s workflow and run ``body`` over it, renewing the claim meanwhile;
    neither claims nor releases (whoever took ``holder`` answers for it).

    The renewal runs every third of ``liveness`` and calls ``beat(holder, run.current)``
    when given (a lifecycle store's ``beat``, which also records the step in flight), else
    ``checkpointer.renew(holder)``. A refused renewal cancels the body and raises
    ``Fenced``. Returns as :func:`resume` does.

    ``deadline`` (a kind's) is recorded under :data:`DEADLINE_KEY`, from now, by the first
    pass that finds none there. Once the recorded deadline has passed the pass raises
    :class:`DeadlineExceeded`: before the body runs, or by cancelling it mid-effect, and a
    sleep or a durable backoff that would end after it wakes at it instead.

    ``kind`` and ``attempt`` (the worker's) only label the pass's span and metrics when
    telemetry is on (:mod:`durable.telemetry`).
    """
    records, operations = await recall(checkpointer, holder.workflow)
    hook = telemetry.hook
    if hook is None:
        run: Run[E] = Run(checkpointer, holder, records, clock=clock, operations=operations)
        return await _drive_pass(checkpointer, holder, run, body, liveness, beat, deadline)
    traced: Run[E] = _TracedRun(checkpointer, holder, records, clock=clock, operations=operations)
    return await hook.drive(
        traced,
        lambda: _drive_pass(checkpointer, holder, traced, body, liveness, beat, deadline),
        kind=kind,
        attempt=attempt,
    )


async def _drive_pass(
    checkpointer: Checkpointer[E],
    holder: Pass,
    run: Run[E],
    body: Callable[[Run[E]], Awaitable[T]],
    liveness: timedelta,
    beat: Callable[[Pass, str | None], Awaitable[Pass]] | None,
    deadline: timedelta | None,
) -> Outcome[T]:
    records = run.records
    if deadline is not None and DEADLINE_KEY not in records:
        check_duration("a deadline", deadline, workflow=holder.workflow)
        await run._write(DEADLINE_KEY, (run.now() + deadline).isoformat())
        run._deadline = run._parse(DEADLINE_KEY, run.records[DEADLINE_KEY], _as_deadline)
    if run.deadline is not None and run.now() >= run.deadline:
        raise DeadlineExceeded(holder.workflow, run.deadline)
    passing = asyncio.ensure_future(_drive(run, body))
    renewing = asyncio.ensure_future(
        _renew_until_stopped(checkpointer, holder, liveness.total_seconds() / 3, run, beat)
    )
    left = None if run.deadline is None else (run.deadline - run.now()).total_seconds()
    try:
        await asyncio.wait({passing, renewing}, return_when=asyncio.FIRST_COMPLETED, timeout=left)
    finally:
        overdue = not passing.done() and not renewing.done()
        if not passing.done():
            passing.cancel()
        renewing.cancel()
        await asyncio.gather(passing, renewing, return_exceptions=True)
    if overdue and run.deadline is not None:
        raise DeadlineExceeded(holder.workflow, run.deadline)
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
    deadline: timedelta | None = None,
) -> Outcome[T]:
    """Run one pass of ``body`` over ``workflow``.

    Claims the workflow (``Contended`` if another pass holds it), loads its records, and
    calls ``body`` with a :class:`Run`. While the body runs, the claim's liveness is renewed
    every third of ``liveness``; if renewal is refused (a newer pass, a discard, or the
    budget spent) the body is cancelled and ``Fenced`` is raised. The claim is released on
    the way out, whatever happened.

    Returns ``Finished`` when the body returns, ``Sleeping``/``Blocked`` when it reached a
    wait, and raises ``Swallowed`` when it returned after reaching one. ``deadline`` is the
    workflow's, as :func:`drive` records and enforces it (``DeadlineExceeded``).

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
        return await drive(
            checkpointer, holder, body, liveness=liveness, clock=clock, deadline=deadline
        )
    finally:
        try:
            await checkpointer.release(holder)
        except StoreUnavailable as error:
            # Nothing to act on: the claim lapses by itself once its liveness runs out, and
            # whoever drives this pass hears about the outage from its own calls.
            log.debug("could not release %s: the store is unreachable: %s", holder, error)
        except Exception:  # the pass's own outcome matters more than a failed release
            log.warning("could not release %s", holder, exc_info=True)
