"""OpenTelemetry traces and metrics (durable.telemetry), read back from the SDK's in-memory
span exporter and metric reader, over real passes on real stores."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, AbstractContextManager, asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape as xml_escape

import pytest
from durable import plugins, telemetry
from durable.interfaces import Status
from durable.memory import MemoryDurable
from durable.parsers import as_is
from durable.policy import RetryPolicy
from durable.run import Run, resume
from durable.store_fixtures import redis_url, store_url
from durable.worker import work
from durable.workflows import LifecycleDurable, Workflows
from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

PATIENCE = 30.0
"""Seconds a test waits for a workflow before it fails rather than hangs (never asserted)."""

NAP = 0.5
"""The workflow's sleep: long enough for the first worker to stop before it is due."""


class Otel:
    """The SDK wired to in-memory exporters, and durable.telemetry on for one test."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.metrics = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.metrics])
        self.hook = telemetry.enable(self.tracer_provider, self.meter_provider)

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())

    def points(self, name: str) -> list[tuple[dict[str, Any], Any]]:
        """``(attributes, value)`` of each data point of metric ``name``."""
        data = self.metrics.get_metrics_data()
        found = []
        assert data is not None
        for resource in data.resource_metrics:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == name:
                        for point in metric.data.data_points:
                            value = getattr(point, "value", None)
                            if value is None:
                                value = point.count  # type: ignore[union-attr]
                            found.append((dict(point.attributes or {}), value))
        return found


@pytest.fixture
def otel() -> Iterator[Otel]:
    saved = telemetry.hook, telemetry._decided, telemetry._explicit
    try:
        yield Otel()
    finally:
        telemetry.hook, telemetry._decided, telemetry._explicit = saved


Opener = tuple[
    "AbstractAsyncContextManager[LifecycleDurable[Any]]",
    "AbstractAsyncContextManager[LifecycleDurable[Any]]",
]


@pytest.fixture(params=["memory", "sqlite", "postgres", "redis"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A factory of two handles on one store: one per worker (two connections, on every
    store but memory, where the handle is the store)."""
    if request.param == "memory":
        shared = MemoryDurable()

        @asynccontextmanager
        async def memory() -> AsyncIterator[Any]:
            yield shared

        yield memory
        return
    fresh: AbstractContextManager[str]
    if request.param == "redis":
        fresh = redis_url("otel", single_node=True)  # one Redis node is enough here
    else:
        fresh = store_url(request.param, "otel", tmp_path)
    with fresh as url:

        @asynccontextmanager
        async def opened() -> AsyncIterator[Any]:
            async with plugins.open(url) as store:
                yield store

        yield opened


registry = Workflows()


@registry.kind("napper", policy=RetryPolicy(max_attempts=3))
async def napper(run: Run[Any], _: object) -> str:
    first = await run.step("a", lambda: 1, as_is)
    await run.sleep("nap", timedelta(seconds=NAP))
    second = await run.step("b", lambda: 2, as_is)
    return f"{first}+{second}"


async def _until(store: LifecycleDurable[Any], workflow: str, wanted: Status) -> None:
    async with asyncio.timeout(PATIENCE):
        while (found := await store.status(workflow)) is None or found.status is not wanted:  # noqa: ASYNC110
            await asyncio.sleep(0.01)


FAST = timedelta(milliseconds=20)


async def test_a_pass_that_sleeps_and_resumes_on_another_worker_is_one_trace(
    otel: Otel, stores: Any, request: pytest.FixtureRequest
) -> None:
    tracer = otel.tracer_provider.get_tracer("the-app")
    async with stores() as first_store:
        with tracer.start_as_current_span("POST /orders"):
            handle = await first_store.start(napper, "order-1")
        stop = asyncio.Event()
        first = asyncio.ensure_future(
            work(first_store, registry, stop=stop, name="w1", poll=FAST, tick=FAST)
        )
        await _until(first_store, "order-1", Status.SLEEPING)
        stop.set()
        async with asyncio.timeout(PATIENCE):
            await first
    # The first worker has stopped, its connection closed: the rest is another worker's.
    async with stores() as second_store:
        stop = asyncio.Event()
        second = asyncio.ensure_future(
            work(second_store, registry, stop=stop, name="w2", poll=FAST, tick=FAST)
        )
        try:
            assert await second_store.handle("order-1").result(PATIENCE) == "1+2"
        finally:
            stop.set()
            async with asyncio.timeout(PATIENCE):
                await second
    assert handle.workflow == "order-1"

    spans = otel.finished()
    by_id = {span.context.span_id: span for span in spans}

    def children(parent: ReadableSpan) -> list[ReadableSpan]:
        found = [
            s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id
        ]
        return sorted(found, key=lambda s: s.start_time or 0)

    def tree(span: ReadableSpan) -> tuple[Any, ...]:
        attributes = span.attributes or {}
        key = attributes.get("durable.key")
        label = span.name + ("" if key is None else f" {key!s}")
        label += f" [{attributes.get('durable.outcome', '')!s}]"
        return (label, tuple(tree(child) for child in children(span)))

    [root] = [s for s in spans if s.name == "POST /orders"]
    assert tree(root) == (
        "POST /orders []",
        (
            (
                "durable.start []",
                (
                    (
                        "durable.pass [sleeping]",
                        (("durable.step a [done]", ()), ("durable.sleep nap [suspended]", ())),
                    ),
                    ("durable.pass [finished]", (("durable.step b [done]", ()),)),
                ),
            ),
        ),
    )
    # One trace, from the request to the last step.
    assert {span.context.trace_id for span in spans} == {root.context.trace_id}
    assert all(s.parent is None or s.parent.span_id in by_id for s in spans)
    passes = [s for s in spans if s.name == "durable.pass"]
    assert [(p.attributes or {}).get("durable.workflow") for p in passes] == ["order-1"] * 2
    assert [(p.attributes or {}).get("durable.kind") for p in passes] == ["napper"] * 2
    assert [(p.attributes or {}).get("durable.attempt") for p in passes] == [1, 1]
    tokens = [(p.attributes or {})["durable.token"] for p in passes]
    assert tokens[0] < tokens[1]  # type: ignore[operator]
    nap = next(s for s in spans if s.name == "durable.sleep")
    assert (nap.attributes or {})["durable.token"] == tokens[0]
    assert "durable.until" in (nap.attributes or {})
    assert nap.status.status_code is trace.StatusCode.UNSET  # a sleep is not an error

    steps = otel.points("durable.steps")
    assert ({"durable.kind": "napper", "durable.op": "step", "durable.outcome": "done"}, 2) in steps
    passes_counted = otel.points("durable.passes")
    assert ({"durable.kind": "napper", "durable.outcome": "sleeping"}, 1) in passes_counted
    assert ({"durable.kind": "napper", "durable.outcome": "finished"}, 1) in passes_counted
    latency = otel.points("durable.step.duration")
    assert ({"durable.kind": "napper", "durable.op": "step", "durable.outcome": "done"}, 2) in (
        latency
    )
    picture = waterfall(spans)
    assert picture.count("<rect") == len(spans) + 1  # a bar per span, and the background
    if os.environ.get("DURABLE_DOCS_SCREENSHOT") and request.node.callspec.id == "sqlite":
        DOCS_TRACE.write_text(picture, encoding="utf-8")


DOCS_TRACE = Path(__file__).parents[3] / "docs" / "img" / "trace.svg"
"""Where ``DURABLE_DOCS_SCREENSHOT=1`` keeps the trace of the SQLite run for the docs."""


def waterfall(spans: list[ReadableSpan]) -> str:
    """The trace as a viewer draws it, as SVG: a row per span, indented under its parent,
    and a bar from its start to its end on one time axis, labelled with its duration.

    Drawn from the spans a real run exported (not from a description), so the picture in
    docs/observability.md is what a trace of that workflow looks like."""
    by_id = {span.context.span_id: span for span in spans}

    def depth(span: ReadableSpan) -> int:
        parent = span.parent
        return (
            0 if parent is None or parent.span_id not in by_id else 1 + depth(by_id[parent.span_id])
        )

    def order(span: ReadableSpan) -> list[ReadableSpan]:
        below = sorted(
            (s for s in spans if s.parent is not None and s.parent.span_id == span.context.span_id),
            key=lambda s: s.start_time or 0,
        )
        return [span, *(row for child in below for row in order(child))]

    roots = [s for s in spans if s.parent is None or s.parent.span_id not in by_id]
    rows = [row for root in sorted(roots, key=lambda s: s.start_time or 0) for row in order(root)]
    begin = min(s.start_time or 0 for s in spans)
    end = max(s.end_time or 0 for s in spans)
    width, label_width, row_height = 900, 300, 26
    scale = (width - label_width - 90) / max(end - begin, 1)
    height = row_height * len(rows) + 40
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif" font-size="13">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    for index, span in enumerate(rows):
        y = 20 + index * row_height
        attributes = span.attributes or {}
        key = attributes.get("durable.key")
        name = span.name + ("" if key is None else f" {key!s}")
        outcome = attributes.get("durable.outcome")
        if outcome is not None:
            name += f" [{outcome!s}]"
        x = label_width + ((span.start_time or 0) - begin) * scale
        bar = max(((span.end_time or 0) - (span.start_time or 0)) * scale, 2)
        took = ((span.end_time or 0) - (span.start_time or 0)) / 1e6
        colour = "#7e57c2" if span.name.startswith("durable.") else "#26a69a"
        out.append(f'<text x="{10 + 16 * depth(span)}" y="{y + 16}">{xml_escape(name)}</text>')
        out.append(f'<rect x="{x:.1f}" y="{y + 4}" width="{bar:.1f}" height="16" fill="{colour}"/>')
        out.append(f'<text x="{x + bar + 6:.1f}" y="{y + 16}" fill="#555">{took:.1f} ms</text>')
    total = (end - begin) / 1e6
    out.append(
        f'<text x="{label_width}" y="{height - 6}" fill="#555">0 ms</text>'
        f'<text x="{width - 90}" y="{height - 6}" fill="#555" text-anchor="end">'
        f"{total:.0f} ms</text>"
    )
    out.append("</svg>")
    return "\n".join(out) + "\n"


flaky_registry = Workflows()
calls: list[int] = []


@flaky_registry.kind("flaky", policy=RetryPolicy(max_attempts=2, initial=timedelta(milliseconds=1)))
async def flaky(run: Run[Any], _: object) -> int:
    def charge() -> int:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("the gateway hung up")
        return len(calls)

    policy = RetryPolicy(max_attempts=5, initial=timedelta(milliseconds=1))
    await run.step("charge", charge, as_is, retry=policy)
    await run.awaiting("approval", as_is)
    raise RuntimeError("refused")


async def test_failures_retries_and_waits_are_counted_and_marked(otel: Otel) -> None:
    calls.clear()
    store = MemoryDurable()
    await store.start("flaky", "pay-1")
    stop = asyncio.Event()
    worker = asyncio.ensure_future(work(store, flaky_registry, stop=stop, poll=FAST, tick=FAST))
    try:
        await _until(store, "pay-1", Status.BLOCKED)
        await store.arrive("pay-1", "approval", True)
        await _until(store, "pay-1", Status.FAILED)
    finally:
        stop.set()
        await worker
    spans = otel.finished()
    charge = next(s for s in spans if s.name == "durable.step")
    assert (charge.attributes or {})["durable.attempt"] == 3
    waits = [s for s in spans if s.name == "durable.await"]
    assert [(w.attributes or {})["durable.outcome"] for w in waits] == ["suspended"]
    failed = [s for s in spans if (s.attributes or {}).get("durable.outcome") == "failed"]
    assert [s.name for s in failed] == ["durable.pass", "durable.pass"]
    assert all(s.status.status_code is trace.StatusCode.ERROR for s in failed)
    assert [(s.attributes or {})["durable.attempt"] for s in failed] == [1, 2]
    assert ({"durable.kind": "flaky", "durable.where": "step"}, 2) in otel.points("durable.retries")
    assert ({"durable.kind": "flaky", "durable.where": "pass"}, 1) in otel.points("durable.retries")
    assert ({"durable.kind": "flaky", "durable.where": "pass"}, 2) in otel.points(
        "durable.failures"
    )


ledger_registry = Workflows()


@ledger_registry.kind("ledger")
async def ledger(run: Run[Any], _: object) -> str:
    def reserve(data: dict[str, object]) -> object:
        data["reserved"] = 1
        return 1

    reserved = await run.transact("reserve", reserve, as_is)
    note = await run.receive("note", as_is)
    return f"{reserved}:{note}"


async def test_a_transact_and_a_receive_are_spans_of_their_own(otel: Otel) -> None:
    store = MemoryDurable()
    await store.start("ledger", "ledger-1")
    stop = asyncio.Event()
    worker = asyncio.ensure_future(work(store, ledger_registry, stop=stop, poll=FAST, tick=FAST))
    try:
        await _until(store, "ledger-1", Status.BLOCKED)
        await store.send("ledger-1", "thanks")
        await _until(store, "ledger-1", Status.FINISHED)
    finally:
        stop.set()
        await worker
    spans = otel.finished()
    by_name = {s.name: s for s in spans if s.name in ("durable.transact", "durable.receive")}
    assert set(by_name) == {"durable.transact", "durable.receive"}, [s.name for s in spans]
    transact = by_name["durable.transact"].attributes or {}
    assert (transact["durable.key"], transact["durable.outcome"]) == ("reserve", "done")
    receives = [
        (s.attributes or {})["durable.outcome"] for s in spans if s.name == "durable.receive"
    ]
    assert receives == ["suspended", "done"], receives
    passes = [s for s in spans if s.name == "durable.pass"]
    assert len(passes) == 2
    assert all(
        s.parent is not None and s.parent.span_id in {p.context.span_id for p in passes}
        for s in spans
        if s.name in ("durable.transact", "durable.receive")
    )


async def test_the_queue_gauges_count_ready_workflows_and_the_oldest_wait(otel: Otel) -> None:
    store = MemoryDurable()
    for i in range(3):
        await store.start("napper", f"q-{i}")
    await asyncio.sleep(0.05)
    await otel.hook.read_queue(store.checkpointer)
    [(labels, depth)] = otel.points("durable.queue.depth")
    assert (labels, depth) == ({"durable.queue": "default"}, 3)
    [(labels, age)] = otel.points("durable.queue.oldest_age")
    assert labels == {"durable.queue": "default"}
    assert age >= 0.05


async def test_a_pass_with_no_recorded_trace_is_a_child_of_the_current_span(
    otel: Otel,
) -> None:
    store = MemoryDurable()

    async def body(run: Run[Any]) -> object:
        return await run.step("one", lambda: 1, as_is)

    tracer = otel.tracer_provider.get_tracer("the-app")
    with tracer.start_as_current_span("cron") as cron:
        await resume(store, "plain", body)
    [pass_span] = [s for s in otel.finished() if s.name == "durable.pass"]
    assert pass_span.parent is not None
    assert pass_span.parent.span_id == cron.get_span_context().span_id
    assert (pass_span.attributes or {})["durable.kind"] == "?"


async def test_with_telemetry_off_a_pass_gets_a_plain_run_and_nothing_is_recorded() -> None:
    saved = telemetry.hook, telemetry._decided, telemetry._explicit
    try:
        telemetry.disable()
        store = MemoryDurable()
        seen: list[type] = []

        async def body(run: Run[Any], _: object) -> None:
            seen.append(type(run))

        plain = Workflows()
        plain.kind("plain")(body)
        await store.start("plain", "off-1")
        stop = asyncio.Event()
        worker = asyncio.ensure_future(work(store, plain, stop=stop, poll=FAST, tick=FAST))
        try:
            await _until(store, "off-1", Status.FINISHED)
        finally:
            stop.set()
            await worker
        assert seen == [Run]
        assert telemetry.TRACE_KEY not in await store.checkpointer.load("off-1")
    finally:
        telemetry.hook, telemetry._decided, telemetry._explicit = saved


def test_configure_stays_off_without_a_global_tracer_provider() -> None:
    saved = telemetry.hook, telemetry._decided, telemetry._explicit
    try:
        telemetry.hook, telemetry._decided, telemetry._explicit = None, False, False
        if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            pytest.skip("something in this process set a global tracer provider")
        assert telemetry.configure() is None
        assert telemetry.current() is None
    finally:
        telemetry.hook, telemetry._decided, telemetry._explicit = saved


async def test_a_body_may_not_use_the_trace_key() -> None:
    store = MemoryDurable()

    async def body(run: Run[Any]) -> object:
        return await run.step(telemetry.TRACE_KEY, lambda: 1, as_is)

    with pytest.raises(ValueError, match="kept by durable itself"):
        await resume(store, "forger", body)
