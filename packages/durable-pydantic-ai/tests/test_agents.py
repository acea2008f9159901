"""A Pydantic AI agent run as a durable workflow, on every store.

The model is a scripted ``FunctionModel`` (``agent_app.script``): no network, no key. Each
model call appends its turn to a file, so a test counts calls across processes.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, urlsplit

import agent_app
import durable
import pytest
from durable.interfaces import Status
from durable.run import Blocked, Finished, StepContext, idempotency_key, resume
from durable.worker import work
from durable.workflows import InputRefused, LifecycleDurable, Workflows
from durable_pydantic_ai import Durability, agent_kind, run_agent, step, transact
from pydantic_ai import Agent
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelMessagesTypeAdapter
from pydantic_ai.models.test import TestModel

HERE = Path(__file__).parent
PATIENCE = 60.0
"""Seconds to wait for a worker or an outcome before failing (never asserted)."""


def lines(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


@pytest.fixture
def counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    files = {name: tmp_path / name for name in ("calls", "pays", "asked", "hang")}
    monkeypatch.setenv("AGENT_CALLS", str(files["calls"]))
    monkeypatch.setenv("AGENT_PAYS", str(files["pays"]))
    monkeypatch.setenv("AGENT_ASKED", str(files["asked"]))
    monkeypatch.delenv("AGENT_HANG", raising=False)
    return files


@asynccontextmanager
async def worker(store: Any, workflows: Workflows) -> AsyncIterator[None]:
    stop = asyncio.Event()
    task = asyncio.ensure_future(
        work(
            store,
            workflows,
            stop=stop,
            poll=timedelta(milliseconds=50),
            tick=timedelta(milliseconds=100),
        )
    )
    try:
        yield
    finally:
        stop.set()
        async with asyncio.timeout(PATIENCE):
            await task


async def test_a_multi_turn_run_with_tools_finishes_and_is_a_workflow_of_its_kind(
    url: str, counted: dict[str, Path]
) -> None:
    async with durable.open(url) as opened:
        store = cast(LifecycleDurable[Any], opened)
        handle = await store.start(agent_app.support, "agent-1", "pay order 7")
        async with worker(store, agent_app.workflows):
            assert await handle.result(timeout=PATIENCE) == "done after 4 turns"
        status = await handle.status()
        listed = await store.list(kind="support")
        records = await store.checkpointer.load("agent-1")
    assert status.status is Status.FINISHED
    assert [found.workflow for found in listed.statuses] == ["agent-1"]
    assert lines(counted["calls"]) == ["1", "2", "3", "4", "5"]
    assert lines(counted["pays"]) == ["pay"]
    steps = [key for key in records if key.startswith("agent:")]
    assert steps == [
        "agent:model:1",
        "agent:tool:1:look-1",
        "agent:model:2",
        "agent:tool:2:look-2",
        "agent:model:3",
        "agent:tool:3:pay-1:transact",
        "agent:tool:3:pay-1",
        "agent:model:4",
        "agent:tool:4:refund-1",
        "agent:model:5",
    ]
    assert records["agent:tool:3:pay-1:transact"] == 45
    assert records["agent:model:1"]["parts"][0]["tool_name"] == "lookup"  # type: ignore[index]


async def test_a_resumed_run_hands_back_recorded_responses_instead_of_calling_again(
    counted: dict[str, Path],
) -> None:
    async with durable.open("memory://") as store:

        async def body(run: Any) -> object:
            result = await run_agent(run, agent_app.agent, "pay order 7")
            return result.output

        first = await resume(store, "agent-2", body)
        again = await resume(store, "agent-2", body)
    assert first == again == Finished("done after 4 turns")
    assert lines(counted["calls"]) == ["1", "2", "3", "4", "5"]
    assert lines(counted["pays"]) == ["pay"]


async def test_an_approval_blocks_the_run_until_it_arrives(
    url: str, counted: dict[str, Path]
) -> None:
    approving = agent_app.build(approval=True)
    workflows = Workflows()
    kind = agent_kind(approving, name="support-approval", workflows=workflows)
    async with durable.open(url) as opened:
        store = cast(LifecycleDurable[Any], opened)
        handle = await store.start(kind, "agent-3", "refund order 7")
        async with worker(store, workflows):
            async with asyncio.timeout(PATIENCE):
                while (await handle.status()).status is not Status.BLOCKED:  # noqa: ASYNC110
                    await asyncio.sleep(0.05)
            blocked = await handle.status()
            records = await store.checkpointer.load("agent-3")
            assert "agent:tool:4:refund-1" not in records
            await store.arrive("agent-3", agent_app.APPROVAL_KEY, {"approvals": {"refund-1": True}})
            assert await handle.result(timeout=PATIENCE) == "done after 4 turns"
        records = await store.checkpointer.load("agent-3")
    assert agent_app.APPROVAL_KEY in str(blocked)
    assert lines(counted["asked"]) == [agent_app.APPROVAL_KEY]  # asked once, not per pass
    assert records["agent:tool:4:refund-1"]["result"] == "refunded order 7"  # type: ignore[index]
    assert lines(counted["calls"]) == ["1", "2", "3", "4", "5"]


async def test_a_denied_approval_reaches_the_model_and_the_tool_never_runs(
    counted: dict[str, Path],
) -> None:
    approving = agent_app.build(approval=True)

    async def body(run: Any) -> object:
        return (await run_agent(run, approving, "refund order 7")).output

    async with durable.open("memory://") as store:
        assert await resume(store, "agent-4", body) == Blocked((agent_app.APPROVAL_KEY,))
        await store.arrive("agent-4", agent_app.APPROVAL_KEY, {"approvals": {"refund-1": False}})
        assert await resume(store, "agent-4", body) == Finished("done after 4 turns")
        records = await store.checkpointer.load("agent-4")
    assert "agent:tool:4:refund-1" not in records
    assert "denied" in str(records["agent:model:5"]).lower() or "agent:model:5" in records


async def test_an_agent_without_the_capability_is_refused_before_it_runs() -> None:
    plain = Agent(TestModel(), name="plain")
    async with durable.open("memory://") as store:

        async def body(run: Any) -> object:
            return (await run_agent(run, plain, "hello")).output

        with pytest.raises(UserError, match=r"no durable_pydantic_ai\.Durability"):
            await resume(store, "agent-5", body)
        assert await store.checkpointer.load("agent-5") == {}


async def test_outside_a_workflow_the_agent_runs_as_an_ordinary_agent() -> None:
    agent = Agent(TestModel(), name="plain", capabilities=[Durability()])

    @agent.tool_plain
    def shout(word: str) -> str:
        return word.upper()

    result = await agent.run("hello")
    assert "shout" in result.output


async def test_transact_outside_a_durable_tool_call_is_refused_naming_why() -> None:
    with pytest.raises(RuntimeError, match="durable agent run"):
        await transact(lambda data: 1)


# --- a worker process killed mid-run (every store two processes can share) ------------------


def spawn(url: str, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(HERE / "agent_worker.py"), url],
        cwd=HERE,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
    )


async def ledger(url: str) -> int:
    """What the ledger holds, read beside the store, not through the workflow."""
    scheme = urlsplit(url).scheme
    query = parse_qs(urlsplit(url).query)
    if scheme == "sqlite":
        path = urlsplit(url).path
        connection = sqlite3.connect(path)
        try:
            row = connection.execute("SELECT moved FROM ledger WHERE account = 'acme'").fetchone()
        finally:
            connection.close()
        return int(row[0])
    if scheme.startswith("postgres"):
        import psycopg

        base = url.split("?")[0]
        async with await psycopg.AsyncConnection.connect(base) as pg:
            cursor = await pg.execute(
                f'SELECT moved FROM "{query["schema"][0]}".ledger WHERE account = %s', ("acme",)
            )
            row = await cursor.fetchone()
        assert row is not None
        return int(row[0])
    async with durable.open(url) as store:
        checkpointer: Any = store.checkpointer
        value = await checkpointer.client.hget(f"{checkpointer.hash_key('agent-k')}:ledger", "acme")
    return int(value)


async def test_a_killed_worker_resumes_without_calling_the_model_again_and_pays_once(
    shared_url: str, counted: dict[str, Path], tmp_path: Path
) -> None:
    # The URL's own query, not urlunsplit: that would drop an sqlite:/// URL's empty host.
    url = shared_url + ("&" if "?" in shared_url else "?") + "delivery_lease=1"
    env = {
        **os.environ,
        "AGENT_HANG": str(counted["hang"]),
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    log = tmp_path / "workers.log"
    async with durable.open(url) as opened:
        store = cast(LifecycleDurable[Any], opened)
        handle = await store.start(agent_app.support, "agent-k", "pay order 7")
        # Two workers from the start: one takes the run, the other waits for work. The one
        # that reaches pay's hang is killed; the other must take the run over.
        workers = [spawn(url, env, log), spawn(url, env, log)]
        try:
            give_up = time.monotonic() + PATIENCE
            while not counted["hang"].exists() or not counted["hang"].read_text():
                assert all(w.poll() is None for w in workers), log.read_text()
                assert time.monotonic() < give_up, f"no worker reached pay:\n{log.read_text()}"
                await asyncio.sleep(0.05)
            assert lines(counted["calls"]) == ["1", "2", "3"]
            assert await ledger(url) == 45
            pid = int(counted["hang"].read_text())
            (killed,) = [w for w in workers if w.pid == pid]
            killed.send_signal(signal.SIGKILL)  # after the third model request and pay's commit
            killed.wait(timeout=PATIENCE)
            assert await handle.result(timeout=PATIENCE) == "done after 4 turns"
        finally:
            for w in workers:
                if w.poll() is None:
                    w.send_signal(signal.SIGTERM)
            for w in workers:
                w.wait(timeout=PATIENCE)
    # Turns 1-3 were called once each, by the killed worker; the survivor called 4 and 5.
    assert lines(counted["calls"]) == ["1", "2", "3", "4", "5"], log.read_text()
    # pay's body ran in both workers, and its transact moved the ledger in the killed one only.
    assert lines(counted["pays"]) == ["pay", "pay"]
    assert await ledger(url) == 45


# --- a tool's effect as a step of its own, waits, streaming -------------------------------


async def test_a_tool_step_gets_one_idempotency_key_and_runs_once_across_passes() -> None:
    keys: list[str] = []

    def charge_model(messages: list[Any], info: Any) -> Any:
        from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart

        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("charge", {"cents": 4500}, tool_call_id="c")])
        return ModelResponse(parts=[TextPart("charged")])

    from pydantic_ai.models.function import FunctionModel

    agent = Agent(FunctionModel(charge_model), name="billing", capabilities=[Durability()])

    @agent.tool_plain
    async def charge(cents: int) -> str:
        async def at_gateway(context: StepContext) -> str:
            keys.append(context.idempotency_key)
            return f"ch_{cents}"

        return await step(at_gateway, str)

    async def body(run: Any) -> object:
        return (await run_agent(run, agent, "charge 45 EUR", key="billing")).output

    async with durable.open("memory://") as store:
        assert await resume(store, "agent-6", body) == Finished("charged")
        assert await resume(store, "agent-6", body) == Finished("charged")
        records = await store.checkpointer.load("agent-6")
    assert keys == [idempotency_key("agent-6", "billing:tool:1:c:step")]
    assert records["billing:tool:1:c:step"] == "ch_4500"


class Crash(BaseException):
    """The process dies here: nothing after it runs, nothing is recorded."""


async def test_a_tool_step_with_a_reconcile_probe_is_looked_up_not_run_again() -> None:
    gateway: dict[str, str] = {}
    charges: list[str] = []

    def charge_model(messages: list[Any], info: Any) -> Any:
        from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart

        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("charge", {"cents": 4500}, tool_call_id="c")])
        return ModelResponse(parts=[TextPart("charged")])

    from pydantic_ai.models.function import FunctionModel

    agent = Agent(FunctionModel(charge_model), name="billing", capabilities=[Durability()])

    @agent.tool_plain
    async def charge(cents: int) -> str:
        async def at_gateway(context: StepContext) -> str:
            charges.append(context.idempotency_key)
            gateway[context.idempotency_key] = f"ch_{cents}"
            raise Crash  # the charge went through; the process died before its record

        def look_up(context: StepContext) -> str | None:
            return gateway.get(context.idempotency_key)

        return await step(at_gateway, str, reconcile=look_up)

    async def body(run: Any) -> object:
        return (await run_agent(run, agent, "charge 45 EUR", key="billing")).output

    async with durable.open("memory://") as store:
        with pytest.raises(Crash):
            await resume(store, "agent-7", body)
        assert await resume(store, "agent-7", body) == Finished("charged")
        records = await store.checkpointer.load("agent-7")
    assert charges == [idempotency_key("agent-7", "billing:tool:1:c:step")], "charged again"
    assert records["billing:tool:1:c:step"] == "ch_4500"


async def test_a_wait_with_a_timeout_is_refused_naming_the_deadline_instead(
    counted: dict[str, Path],
) -> None:
    from pydantic_ai.capabilities import HandleDeferredToolCalls

    agent = Agent(
        agent_app.agent.model,
        name="support",
        capabilities=[
            Durability(),
            HandleDeferredToolCalls(lambda ctx, requests, token: None, timeout=timedelta(hours=1)),
        ],
    )

    @agent.tool_plain
    def lookup(order: int) -> str:
        return "found"

    @agent.tool_plain
    async def pay(amount: int) -> str:
        return "paid"

    @agent.tool_plain(requires_approval=True)
    def refund(order: int) -> str:
        return "refunded"

    async def body(run: Any) -> object:
        return (await run_agent(run, agent, "refund order 7")).output

    async with durable.open("memory://") as store:
        with pytest.raises(UserError, match="deadline"):
            await resume(store, "agent-7", body)


async def test_stream_events_reach_the_handler_live_and_are_not_streamed_again_on_replay() -> None:
    seen: list[str] = []

    async def handler(ctx: Any, events: Any) -> None:
        async for event in events:
            seen.append(type(event).__name__)

    agent = Agent(
        TestModel(custom_output_text="streamed"),
        name="streaming",
        capabilities=[Durability(event_stream_handler=handler)],
    )

    async def body(run: Any) -> object:
        return (await run_agent(run, agent, "hello")).output

    async with durable.open("memory://") as store:
        assert await resume(store, "agent-8", body) == Finished("streamed")
        live = list(seen)
        assert await resume(store, "agent-8", body) == Finished("streamed")
    assert any("PartStart" in name or "PartDelta" in name for name in live), live
    assert [n for n in seen[len(live) :] if "Part" in n] == []


async def test_an_agent_a_tool_delegates_to_is_recorded_as_the_tools_result() -> None:
    delegate = Agent(
        TestModel(custom_output_text="42"), name="delegate", capabilities=[Durability()]
    )
    asked: list[str] = []

    def ask_model(messages: list[Any], info: Any) -> Any:
        from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart

        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("consult", {"q": "6 x 7"}, tool_call_id="q")])
        return ModelResponse(parts=[TextPart("the delegate said 42")])

    from pydantic_ai.models.function import FunctionModel

    lead = Agent(FunctionModel(ask_model), name="lead", capabilities=[Durability()])

    @lead.tool_plain
    async def consult(q: str) -> str:
        asked.append(q)
        return (await delegate.run(q)).output

    async def body(run: Any) -> object:
        return (await run_agent(run, lead, "what is 6 x 7?")).output

    async with durable.open("memory://") as store:
        assert await resume(store, "agent-9", body) == Finished("the delegate said 42")
        assert await resume(store, "agent-9", body) == Finished("the delegate said 42")
        records = await store.checkpointer.load("agent-9")
    assert asked == ["6 x 7"]
    assert list(records) == ["agent:model:1", "agent:tool:1:q", "agent:model:2"]


async def test_an_agent_kind_refuses_an_input_that_is_no_prompt_writing_nothing() -> None:
    async with durable.open("memory://") as opened:
        store = cast(LifecycleDurable[Any], opened)
        with pytest.raises(InputRefused, match="prompt"):
            await store.start(agent_app.support, "agent-10", {"promt": "typo"})
        assert await store.status("agent-10") is None


async def test_an_agent_kind_continues_a_conversation_from_its_message_history() -> None:
    agent = Agent(TestModel(custom_output_text="again"), name="chat", capabilities=[Durability()])
    first = await agent.run("hello")
    history = ModelMessagesTypeAdapter.dump_python(first.all_messages(), mode="json")
    workflows = Workflows()
    kind = agent_kind(agent, workflows=workflows)
    async with durable.open("memory://") as opened:
        store = cast(LifecycleDurable[Any], opened)
        handle = await store.start(kind, "agent-11", {"prompt": "more", "message_history": history})
        async with worker(store, workflows):
            assert await handle.result(timeout=PATIENCE) == "again"
        records = await store.checkpointer.load("agent-11")
    # Each agent run counts its turns from 1, whatever history it continues.
    assert [key for key in records if key.startswith("agent:")] == ["agent:model:1"]
    assert len(records["agent:model:1"]["parts"]) == 1  # type: ignore[index]


async def test_a_replayed_run_reports_no_spans_for_the_work_it_did_not_do_again() -> None:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from pydantic_ai.capabilities.instrumentation import Instrumentation
    from pydantic_ai.models.instrumented import InstrumentationSettings

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    traced = Instrumentation(settings=InstrumentationSettings(tracer_provider=provider))
    agent = Agent(TestModel(), name="traced", capabilities=[Durability(), traced])

    @agent.tool_plain
    def shout(word: str) -> str:
        return word.upper()

    async def body(run: Any) -> object:
        return (await run_agent(run, agent, "hello")).output

    async with durable.open("memory://") as store:
        first = await resume(store, "agent-12", body)
        reported = sorted(span.name for span in exporter.get_finished_spans())
        exporter.clear()
        again = await resume(store, "agent-12", body)
    assert first == again
    assert reported.count("execute_tool shout") == 1
    assert exporter.get_finished_spans() == ()
