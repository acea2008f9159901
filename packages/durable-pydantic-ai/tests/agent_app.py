"""The agent the tests run, in-process and in worker processes (``agent_worker.py``).

A scripted function model stands in for a real one (no network, no key): turn 1 asks for
``lookup``, turn 2 for ``lookup`` again, turn 3 for ``pay`` (whose effect is a ``transact``
moving a ledger that lives in the store), turn 4 for ``refund`` (which needs approval when
``AGENT_APPROVAL`` is set), and the last turn answers. Every model call appends its turn to
the file ``AGENT_CALLS`` names, so a test counts calls across processes; ``pay`` appends to
``AGENT_PAYS`` each time its body runs, and hangs after its transact when ``AGENT_HANG``
names a file that does not exist yet (it writes its process id there: the first worker to
get that far only), so that a SIGKILL lands between the effect's commit and the tool's own
record.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from durable.run import Run
from durable.workflows import Workflows
from durable_pydantic_ai import Durability, agent_kind, current_run, transact
from pydantic_ai import Agent
from pydantic_ai.capabilities import HandleDeferredToolCalls
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

APPROVAL_KEY = "agent:input:deferred_tool_calls:1"


def _note(variable: str, line: str) -> None:
    path = os.environ.get(variable)
    if path:
        with Path(path).open("a") as file:
            file.write(line + "\n")


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    turn = 1 + sum(1 for message in messages if message.kind == "response")
    _note("AGENT_CALLS", str(turn))
    if turn in (1, 2):
        return ModelResponse(
            parts=[ToolCallPart("lookup", {"order": turn}, tool_call_id=f"look-{turn}")]
        )
    if turn == 3:
        return ModelResponse(parts=[ToolCallPart("pay", {"amount": 45}, tool_call_id="pay-1")])
    if turn == 4:
        return ModelResponse(parts=[ToolCallPart("refund", {"order": 7}, tool_call_id="refund-1")])
    return ModelResponse(parts=[TextPart(f"done after {turn - 1} turns")])


def ledger_effect(run: Run[Any], amount: int) -> object:
    """A ledger move in the store's own language: the effect ``transact`` commits with
    its record."""
    checkpointer: Any = run.checkpointer
    scheme = type(checkpointer).__module__.partition(".")[0]
    if scheme == "durable_sqlite":

        def in_sqlite(cursor: sqlite3.Cursor) -> object:
            cursor.execute(
                "CREATE TABLE IF NOT EXISTS ledger (account TEXT PRIMARY KEY, moved INT)"
            )
            row = cursor.execute(
                "INSERT INTO ledger VALUES ('acme', ?) ON CONFLICT (account) DO UPDATE "
                "SET moved = moved + excluded.moved RETURNING moved",
                (amount,),
            ).fetchone()
            return row[0]

        return in_sqlite
    if scheme == "durable_postgres":
        table = f'"{checkpointer.schema}".ledger'

        async def in_postgres(cursor: Any) -> object:
            await cursor.execute(
                f"CREATE TABLE IF NOT EXISTS {table} (account TEXT PRIMARY KEY, moved INT)"
            )
            await cursor.execute(
                f"INSERT INTO {table} VALUES ('acme', %s) ON CONFLICT (account) DO UPDATE "
                f"SET moved = {table}.moved + excluded.moved RETURNING moved",
                (amount,),
            )
            return (await cursor.fetchone())[0]

        return in_postgres
    if scheme == "durable_redis":
        from durable_redis import LuaEffect

        return LuaEffect(
            source="return cjson.encode(redis.call('HINCRBY', KEYS[1], 'acme', tonumber(ARGV[1])))",
            keys=(f"{checkpointer.hash_key(run.workflow)}:ledger",),
            args=(str(amount),),
        )

    def in_memory(data: dict[str, Any]) -> object:
        data["acme"] = data.get("acme", 0) + amount
        return data["acme"]

    return in_memory


def as_count(value: object) -> int:
    if not isinstance(value, int):
        raise TypeError(f"a ledger holds an int, got {value!r}")
    return value


def _ask(ctx: Any, requests: Any, token: str) -> None:
    _note("AGENT_ASKED", token)


def build(approval: bool) -> Agent[None, str]:
    capabilities: list[Any] = [Durability()]
    if approval:
        capabilities.append(HandleDeferredToolCalls(_ask))
    agent = Agent(FunctionModel(script), name="support", capabilities=capabilities)

    @agent.tool_plain
    def lookup(order: int) -> str:
        return f"order {order}: 45 EUR"

    @agent.tool_plain
    async def pay(amount: int) -> str:
        _note("AGENT_PAYS", "pay")
        moved = await transact(ledger_effect(current_run(), amount), as_count)
        hang = os.environ.get("AGENT_HANG")
        if hang and not os.path.exists(hang):  # noqa: ASYNC240 (a test's flag file)
            Path(hang).write_text(str(os.getpid()))  # noqa: ASYNC240 (which worker to kill)
            await asyncio.sleep(3600)  # the test kills this process here
        return f"paid {amount}; the ledger holds {moved}"

    @agent.tool_plain(requires_approval=approval)
    def refund(order: int) -> str:
        return f"refunded order {order}"

    return agent


agent = build(approval=bool(os.environ.get("AGENT_APPROVAL")))
workflows = Workflows()
support = agent_kind(agent, workflows=workflows)


def schema_of(url: str) -> str:
    return parse_qs(urlsplit(url).query).get("schema", ["public"])[0]
