"""Optional OpenTelemetry traces and metrics, at no cost when off.

Install ``durable-core[otel]`` (which adds ``opentelemetry-api`` and nothing else) and
configure a tracer provider (the SDK's, or a vendor's): each pass is then a span, with a
child span for every step, transact, sleep, await and receive the pass does, and the
worker reports metrics through the OpenTelemetry metrics API. See docs/observability.md.

**Off costs a None check.** :data:`hook` is this module's one switch: ``None`` unless
telemetry is on. It is chosen once, by :func:`configure` (which ``work()`` calls when it
starts, and ``start()`` the first time it is called) or explicitly by :func:`enable` and
:func:`disable`; nothing imports OpenTelemetry on the hot path, and nothing catches an
``ImportError`` per step. ``drive`` reads the hook once per pass: when it is ``None``, the
pass's body gets a plain :class:`~durable.run.Run`, whose ``step`` has no telemetry code
at all; when it is set, a subclass that wraps each operation in a span.

**One trace per workflow.** ``start`` opens a short ``durable.start`` span (a child of
whatever span is current: the request that started the workflow) and records its W3C
``traceparent`` among the workflow's records, under :data:`TRACE_KEY`, through the
ordinary ``supply`` (first writer wins; no schema of any store changes). Every pass,
whenever and wherever it runs, is a **child** of that span, so the whole life of a
workflow, hours of it across many workers, is one trace under the request that began it.
(A child, not a link: a link would put each pass in a trace of its own, and the question
an operator asks, "what happened to the order I placed", would need a query per pass.)
A workflow with no recorded context (started with telemetry off, or made by ``send`` or
``arrive``) has each pass under whatever span is current where it runs, usually none: a
trace per pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from durable.interfaces import Fenced, Lifecycle, Status, Suspended

if TYPE_CHECKING:
    from durable.run import Outcome, Run

__all__ = [
    "QUEUE_EVERY",
    "TRACE_KEY",
    "Telemetry",
    "configure",
    "disable",
    "enable",
    "hook",
]

log = logging.getLogger("durable.telemetry")

T = TypeVar("T")

TRACE_KEY = "durable.trace"
"""The record holding the W3C trace context a workflow was started in: a dict with
``traceparent`` (and ``tracestate`` when there is one), supplied by ``start``. A body may
not use this key."""

QUEUE_EVERY = timedelta(seconds=15)
"""How often a worker with telemetry on reads the ready workflows (``Lifecycle.statuses``)
for the queue depth and oldest-age gauges."""

QUEUE_MOST = 10_000
"""The most ready workflows one reading counts; a deeper queue reads as this many."""

hook: Telemetry | None = None
"""The telemetry in force, or None when it is off (the default)."""

_decided = False
_explicit = False


def enable(tracer_provider: Any = None, meter_provider: Any = None) -> Telemetry:
    """Turn telemetry on with these providers (default: the global ones), for every pass
    from now on; ``ImportError`` when ``opentelemetry-api`` is not installed."""
    global hook, _decided, _explicit
    hook = Telemetry(tracer_provider, meter_provider)
    _decided = _explicit = True
    return hook


def disable() -> None:
    """Turn telemetry off, for every pass from now on (``configure`` then leaves it off)."""
    global hook, _decided, _explicit
    hook = None
    _decided = _explicit = True


def configure() -> Telemetry | None:
    """Choose the hook, unless :func:`enable` or :func:`disable` already did: on when
    ``opentelemetry-api`` is importable and a tracer provider has been set globally
    (``trace.set_tracer_provider``), else off. ``work()`` calls this when it starts."""
    global hook, _decided
    if _explicit:
        return hook
    _decided = True
    try:
        from opentelemetry import trace
    except ImportError:
        hook = None
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider):
        hook = None
    elif hook is None:
        hook = Telemetry()
    return hook


def current() -> Telemetry | None:
    """The hook, choosing it first if nothing has yet (what ``start`` calls)."""
    return hook if _decided else configure()


class Telemetry:
    """The tracer, the meter and its instruments; made by :func:`enable` or
    :func:`configure`, never on the hot path."""

    def __init__(self, tracer_provider: Any = None, meter_provider: Any = None) -> None:
        from opentelemetry import metrics, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self._trace = trace
        self._propagator = TraceContextTextMapPropagator()
        self.tracer = trace.get_tracer("durable", tracer_provider=tracer_provider)
        meter = (
            metrics.get_meter("durable", meter_provider=meter_provider)
            if meter_provider is not None
            else metrics.get_meter("durable")
        )
        self.passes = meter.create_counter(
            "durable.passes", unit="{pass}", description="Passes run, by kind and outcome."
        )
        self.steps = meter.create_counter(
            "durable.steps",
            unit="{operation}",
            description="Steps, transacts, sleeps, awaits and receives done, by kind, "
            "operation and outcome (replayed ones are not counted).",
        )
        self.failures = meter.create_counter(
            "durable.failures",
            unit="{failure}",
            description="Passes and operations that raised, by kind and where (pass, step).",
        )
        self.retries = meter.create_counter(
            "durable.retries",
            unit="{retry}",
            description="Step attempts past the first, and passes of a workflow past its first "
            "attempt, by kind and where (step, pass).",
        )
        self.latency = meter.create_histogram(
            "durable.step.duration",
            unit="s",
            description="How long an operation took in its pass, by kind, operation, outcome.",
        )
        self._queue: dict[str, tuple[int, float]] = {}
        meter.create_observable_gauge(
            "durable.queue.depth",
            callbacks=[self._observe_depth],
            unit="{workflow}",
            description="Ready workflows, by queue (read every QUEUE_EVERY by a worker).",
        )
        meter.create_observable_gauge(
            "durable.queue.oldest_age",
            callbacks=[self._observe_age],
            unit="s",
            description="How long the oldest ready workflow has waited, by queue.",
        )

    # -- start -------------------------------------------------------------------------

    @contextlib.contextmanager
    def starting(self, workflow: str, kind: str) -> Iterator[dict[str, str]]:
        """A ``durable.start`` span (child of the current one) around a start; yields the
        W3C carrier of the span, to be recorded under :data:`TRACE_KEY`."""
        attributes = {"durable.workflow": workflow, "durable.kind": kind}
        with self.tracer.start_as_current_span(
            "durable.start", kind=self._trace.SpanKind.PRODUCER, attributes=attributes
        ):
            carrier: dict[str, str] = {}
            self._propagator.inject(carrier)
            yield carrier

    # -- a pass ------------------------------------------------------------------------

    async def drive(
        self,
        run: Run[Any],
        driving: Callable[[], Awaitable[Outcome[T]]],
        *,
        kind: str | None,
        attempt: int | None,
    ) -> Outcome[T]:
        """One pass as a ``durable.pass`` span, a child of the recorded start's span."""
        from durable.run import Blocked, DeadlineExceeded, Finished, Sleeping

        holder = run.holder
        carrier = run.records.get(TRACE_KEY)
        parent = (
            self._propagator.extract({str(k): str(v) for k, v in carrier.items()})
            if isinstance(carrier, Mapping)
            else None
        )
        named = kind if kind is not None else "?"
        attributes: dict[str, str | int] = {
            "durable.workflow": holder.workflow,
            "durable.kind": named,
            "durable.token": holder.token,
        }
        if attempt is not None:
            attributes["durable.attempt"] = attempt
            if attempt > 1:
                self.retries.add(1, {"durable.kind": named, "durable.where": "pass"})
        run._telemetry = self
        run._kind = named
        outcome = "failed"
        with self.tracer.start_as_current_span(
            "durable.pass",
            context=parent,
            kind=self._trace.SpanKind.CONSUMER,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            run._span = span
            try:
                result = await driving()
            except BaseException as error:
                if isinstance(error, Fenced):
                    outcome = "fenced"
                elif isinstance(error, asyncio.CancelledError):
                    outcome = "cancelled"
                elif isinstance(error, DeadlineExceeded):
                    outcome = "deadline"
                if outcome in ("failed", "deadline"):
                    self.failures.add(1, {"durable.kind": named, "durable.where": "pass"})
                    span.record_exception(error)
                    span.set_status(self._trace.StatusCode.ERROR, f"{type(error).__name__}")
                raise
            else:
                if isinstance(result, Finished):
                    outcome = "finished"
                elif isinstance(result, Sleeping):
                    outcome = "sleeping"
                    span.set_attribute("durable.until", result.until.isoformat())
                elif isinstance(result, Blocked):
                    outcome = "blocked"
                if isinstance(result, Sleeping | Blocked):
                    span.set_attribute("durable.waits", list(result.keys))
                return result
            finally:
                span.set_attribute("durable.outcome", outcome)
                self.passes.add(1, {"durable.kind": named, "durable.outcome": outcome})

    async def operation(
        self, run: Run[Any], op: str, key: str, doing: Awaitable[T], attempts_before: int = 0
    ) -> T:
        """One operation of a pass as a ``durable.<op>`` span under the pass's span."""
        from durable.run import attempts_recorded

        kind = run._kind
        attributes: dict[str, str | int] = {
            "durable.workflow": run.workflow,
            "durable.kind": kind,
            "durable.key": key,
            "durable.token": run.holder.token,
        }
        parent = self._trace.set_span_in_context(run._span) if run._span is not None else None
        outcome = "failed"
        began = time.perf_counter()
        with self.tracer.start_as_current_span(
            f"durable.{op}",
            context=parent,
            attributes=attributes,
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                value = await doing
            except BaseException as error:
                if isinstance(error, Suspended):
                    outcome = "suspended"
                    until = run._sleeps.get(key)
                    if until is not None:
                        span.set_attribute("durable.until", until.isoformat())
                elif isinstance(error, asyncio.CancelledError):
                    outcome = "cancelled"
                else:
                    self.failures.add(1, {"durable.kind": kind, "durable.where": "step"})
                    span.record_exception(error)
                    span.set_status(self._trace.StatusCode.ERROR, f"{type(error).__name__}")
                raise
            else:
                outcome = "done"
                return value
            finally:
                attempts = attempts_recorded(run.records, key) if op == "step" else 0
                span.set_attribute("durable.attempt", max(attempts, 1))
                span.set_attribute("durable.outcome", outcome)
                # Attempts begun in this pass past the first: (before, after] above 1.
                retried = attempts - max(attempts_before, 1)
                if retried > 0:
                    self.retries.add(retried, {"durable.kind": kind, "durable.where": "step"})
                labels = {"durable.kind": kind, "durable.op": op, "durable.outcome": outcome}
                self.steps.add(1, labels)
                self.latency.record(time.perf_counter() - began, labels)

    # -- the queue gauges --------------------------------------------------------------

    async def read_queue(self, lifecycle: Lifecycle) -> None:
        """Count the ready workflows by queue, and the age of the oldest in each, for the
        gauges (at most :data:`QUEUE_MOST` of them; ``statuses`` reads an index)."""
        depth: dict[str, int] = {}
        oldest: dict[str, datetime] = {}
        cursor: str | None = None
        seen = 0
        while seen < QUEUE_MOST:
            page = await lifecycle.statuses(status=Status.READY, limit=500, cursor=cursor)
            for row in page.statuses:
                depth[row.queue] = depth.get(row.queue, 0) + 1
                if row.queue not in oldest or row.updated_at < oldest[row.queue]:
                    oldest[row.queue] = row.updated_at
            seen += len(page.statuses)
            cursor = page.cursor
            if cursor is None:
                break
        now = datetime.now(UTC)
        queues = {name: (0, 0.0) for name in self._queue}
        for name, count in depth.items():
            queues[name] = (count, max((now - oldest[name]).total_seconds(), 0.0))
        self._queue = queues

    async def watch_queue(self, lifecycle: Lifecycle, every: timedelta = QUEUE_EVERY) -> None:
        """Read the queue now and every ``every`` until cancelled (a worker runs this)."""
        while True:
            try:
                await self.read_queue(lifecycle)
            except Exception as error:  # a gauge is never worth a worker
                log.debug("could not read the queue for the gauges: %s", error)
            task = asyncio.current_task()
            if task is not None and task.cancelling():  # a cancellation a driver lost
                raise asyncio.CancelledError
            await asyncio.sleep(every.total_seconds())

    def _observe_depth(self, _: Any) -> Iterator[Any]:
        from opentelemetry.metrics import Observation

        for name, (count, _age) in self._queue.items():
            yield Observation(count, {"durable.queue": name})

    def _observe_age(self, _: Any) -> Iterator[Any]:
        from opentelemetry.metrics import Observation

        for name, (_count, age) in self._queue.items():
            yield Observation(age, {"durable.queue": name})
