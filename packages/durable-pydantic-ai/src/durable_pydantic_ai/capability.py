"""The engine: Pydantic AI's durable-execution capability, backed by a durable ``Run``.

Pydantic AI (2.x) hands a third-party engine every model request, tool call and wait of an
agent run as a *durable operation* (``pydantic_ai.durable_exec``): the engine binds each
operation to its own primitive and decides what a replay returns. Here that primitive is
``Run.step``: each operation becomes one recorded step, keyed by what identifies it across
passes rather than by its position, and a later pass over the same workflow hands back the
recorded result instead of calling the model or the tool again.

Keys, under the agent run's prefix (``agent`` unless ``run_agent`` is given another):

- ``<prefix>:model:<turn>``: the model response of turn ``<turn>`` (Pydantic AI's
  ``run_step``, which counts model requests from 1 in every run);
- ``<prefix>:tool:<turn>:<tool call id>``: a tool's result (or the retry, deferral or
  approval it asked for), under the turn whose response asked for it and the id the model
  gave the call, which the recorded response replays (the turn too, because some models
  number their calls afresh each turn);
- ``<prefix>:input:<name>:<n>`` and ``...:ask``: the ``n``-th wait for outside input of that
  name (``HandleDeferredToolCalls``' approvals), and what its ``ask`` answered;
- ``<prefix>:<kind>:<n>`` for everything else Pydantic AI routes through an engine
  (discovery of MCP and dynamic toolsets, event-handler deliveries, capability
  operations): the ``n``-th of that kind in the run, which is stable because a replay asks
  for them in the order the recorded responses lead it.

Every result crosses the store's codec in its JSON form, made and read back by Pydantic's
own serialisation (``TypeAdapter(...).dump_python(mode="json")`` and ``validate_python``,
Pydantic AI's ``JSON_CODEC``), so a ``ModelResponse`` comes back a ``ModelResponse`` on any
store, with any codec that carries JSON values.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, Literal, TypeVar

from durable.parsers import as_is
from durable.policy import RetryPolicy
from durable.run import Run, StepContext
from pydantic import JsonValue
from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    BoundDurableOperation,
    CapabilityOperationId,
    DurabilityEngineSpec,
    DurableOperation,
    DurableOperationBackend,
    EventStreamHandlerId,
    ExternalEventWaiter,
    ModelCancelSuspendedResponseId,
    ModelCompactMessagesId,
    ModelRequestId,
    ToolsetCallToolId,
    ToolsetGetInstructionsId,
    ToolsetGetToolsId,
    ToolsetValidateToolArgumentsId,
    durable_unit_scope,
    external_event_scope,
    record_durable_unit,
    replay_scope,
)
from pydantic_ai.exceptions import UserError
from pydantic_ai.models import Model
from pydantic_ai.run import AgentRunResult
from pydantic_ai.tools import AgentDepsT, RunContext

__all__ = ["Durability", "current_run", "step", "transact"]

T = TypeVar("T")
P = TypeVar("P")
W = TypeVar("W")
R = TypeVar("R")


@dataclass(eq=False)
class _Scope:
    """One agent run inside one pass: the ``Run`` it records on and its key prefix."""

    run: Run[Any]
    prefix: str
    counts: dict[str, int] = field(default_factory=dict)

    def next(self, what: str) -> int:
        self.counts[what] = self.counts.get(what, 0) + 1
        return self.counts[what]


@dataclass(frozen=True, slots=True)
class _ToolCall:
    run: Run[Any]
    key: str


_scope: ContextVar[_Scope | None] = ContextVar("durable_pydantic_ai.scope", default=None)
_tool: ContextVar[_ToolCall | None] = ContextVar("durable_pydantic_ai.tool", default=None)


@contextmanager
def agent_scope(run: Run[Any], prefix: str) -> Iterator[None]:
    """Record the agent runs started inside on ``run``, under keys starting ``prefix``.

    Also Pydantic AI's ``replay_scope``: with instrumentation on, the spans and token
    metrics of a step handed back from the record are not reported a second time."""
    token = _scope.set(_Scope(run, prefix))
    try:
        with replay_scope():
            yield
    finally:
        _scope.reset(token)


def current_run() -> Run[Any]:
    """The durable ``Run`` of the agent run this code is part of (a tool, an ``ask``).

    ``RuntimeError`` outside one: the tool was called by an agent run that ``run_agent`` did
    not start, so there is no workflow to record on.
    """
    call = _tool.get()
    if call is not None:
        return call.run
    scope = _scope.get()
    if scope is None:
        raise RuntimeError(
            "no durable agent run is in progress here: call the agent through "
            "durable_pydantic_ai.run_agent (or a kind from agent_kind) inside a workflow body"
        )
    return scope.run


async def transact(effect: object, parse: Callable[[object], T] = as_is) -> T:  # type: ignore[assignment]
    """Have the store perform ``effect`` and record its result in one commit, from a tool.

    The effect is the store's own kind (a callback handed a cursor on SQL stores, a
    ``LuaEffect`` on Redis, a function of a dict on the memory store: see ``Run.transact``).
    It is recorded under ``<the tool call's key>:transact``, so it happens exactly once for
    that call however often the call itself is repeated: a crash after the commit and before
    the tool's own result is recorded runs the tool again, and this returns the recorded
    result without performing the effect a second time. One ``transact`` per tool call.
    """
    call = _tool.get()
    if call is None:
        raise RuntimeError(
            "transact() is for a tool called by a durable agent run (run_agent or agent_kind); "
            "outside one there is no workflow to commit the effect with"
        )
    return await call.run.transact(f"{call.key}:transact", effect, parse)


async def step(
    effect: Callable[[StepContext], Awaitable[object]] | Callable[[StepContext], object],
    parse: Callable[[object], T] = as_is,  # type: ignore[assignment]
    *,
    retry: RetryPolicy | None = None,
    timeout: timedelta | float | None = None,  # noqa: ASYNC109 (Run.step's, passed on)
    reconcile: Callable[[StepContext], Awaitable[object]]
    | Callable[[StepContext], object]
    | None = None,
) -> T:
    """Run a tool's effect on the world as a step of its own, from the tool: ``Run.step``
    with ``context=True``, recorded under ``<the tool call's key>:step``.

    ``effect`` is handed the step's :class:`~durable.run.StepContext`, whose
    ``idempotency_key`` is the same for every attempt in every pass: hand it to a service
    that deduplicates requests (a payment gateway). ``retry``, ``timeout`` and ``reconcile``
    are ``Run.step``'s: attempts counted durably, and after a crash that left an attempt
    begun and unrecorded, the probe asked whether its effect happened before it runs again
    (``docs/steps.md``). One ``step`` per tool call.
    """
    call = _tool.get()
    if call is None:
        raise RuntimeError(
            "step() is for a tool called by a durable agent run (run_agent or agent_kind); "
            "outside one there is no workflow to record the effect on"
        )
    return await call.run.step(
        f"{call.key}:step",
        effect,
        parse,
        retry=retry,
        timeout=timeout,
        reconcile=reconcile,
        context=True,
    )


def _turn(context: RunContext[Any] | None) -> int:
    return 0 if context is None else context.run_step


class _Bound(BoundDurableOperation[P, W, R], Generic[P, W, R]):
    """One operation, run as a step of the current agent run's workflow."""

    def __init__(self, operation: DurableOperation[P, W, R]) -> None:
        self._operation = operation

    @property
    def operation(self) -> DurableOperation[P, W, R]:
        return self._operation

    async def __call__(self, params: P, *, config: object | None = None) -> R:
        operation = self._operation
        scope = _scope.get()
        if scope is None:
            # Pydantic AI only routes an operation here inside a durable context; one that
            # arrives outside (a capability's operation called directly) is not recorded.
            with durable_unit_scope():
                return await operation.handler(params)
        key = _key(scope, operation, params)
        is_tool = isinstance(operation.operation_id, ToolsetCallToolId)

        async def effect() -> object:
            token = _tool.set(_ToolCall(scope.run, key)) if is_tool else None
            try:
                with durable_unit_scope():
                    return operation.result_codec.dump(await operation.handler(params))
            finally:
                if token is not None:
                    _tool.reset(token)

        executed = key not in scope.run.records
        payload = await scope.run.step(key, effect, as_is)
        record_durable_unit(executed=executed)
        return operation.result_codec.load(payload)


def _key(scope: _Scope, operation: DurableOperation[Any, Any, Any], params: Any) -> str:
    prefix = scope.prefix
    match operation.operation_id:
        case ModelRequestId():
            return f"{prefix}:model:{_turn(params.run_context)}"
        case ModelCompactMessagesId():
            return f"{prefix}:compact:{_turn(params.run_context)}"
        case ModelCancelSuspendedResponseId():
            return f"{prefix}:cancel:{_turn(params.run_context)}"
        case ToolsetCallToolId():
            turn, call_id = _turn(params.ctx), params.ctx.tool_call_id
            if call_id:
                return f"{prefix}:tool:{turn}:{call_id}"
            return f"{prefix}:tool:{turn}:{params.name}:{scope.next(f'tool:{turn}:{params.name}')}"
        case ToolsetValidateToolArgumentsId():
            return f"{prefix}:validate:{params.ctx.tool_call_id or scope.next('validate')}"
        case (
            ToolsetGetToolsId(toolset_id=toolset_id)
            | ToolsetGetInstructionsId(toolset_id=toolset_id)
        ):
            what = (
                "tools" if isinstance(operation.operation_id, ToolsetGetToolsId) else "instructions"
            )
            return f"{prefix}:{what}:{toolset_id}:{scope.next(what + ':' + toolset_id)}"
        case EventStreamHandlerId():
            return f"{prefix}:event:{scope.next('event')}"
        case CapabilityOperationId(capability_id=capability, operation=name):
            what = f"{capability}.{name}"
            return f"{prefix}:capability:{what}:{scope.next(what)}"
    # The union grows in minor releases of Pydantic AI: a new operation still records, in
    # the order the run asks for it.
    return f"{prefix}:operation:{scope.next('operation')}"  # type: ignore[unreachable, unused-ignore]


class _Backend(DurableOperationBackend[None]):
    """Binds each operation to a ``Run.step`` of the agent run in progress.

    No registration: a durable pass runs in the worker's own process, with the agent's
    objects at hand, so an operation's parameters never leave it and need no transport."""

    def bind(self, operation: DurableOperation[P, W, R]) -> BoundDurableOperation[P, W, R]:
        return _Bound(operation)

    def config_for_tool(
        self,
        operation: DurableOperation[P, W, R],
        *,
        tool: object | None,
        tool_name: str,
    ) -> Literal[False] | None:
        if isinstance(operation.operation_id, ToolsetValidateToolArgumentsId):
            # Validating a call's arguments is a pure function of the recorded arguments and
            # the tool's schema: it runs again on every pass rather than filling the
            # workflow's timeline with a record per call.
            return False
        return None

    def registrations(self) -> Sequence[Callable[..., object]]:
        return ()


class _Waiter(ExternalEventWaiter):
    """A wait for outside input (approvals, answers: ``HandleDeferredToolCalls`` with a
    handler that takes the resume token) as ``Run.awaiting``.

    The token handed to ``ask`` is the key to supply the answer under, so that
    ``durable arrive URL WORKFLOW KEY VALUE`` (or ``Durable.arrive``) resumes the run, on any
    worker, days later. ``ask`` runs once, as a step: a replay does not ask again.
    """

    async def wait(
        self,
        name: str,
        *,
        ask: Callable[[str], Awaitable[JsonValue]],
        timeout: timedelta | None,  # noqa: ASYNC109 (the protocol's)
    ) -> JsonValue:
        scope = _scope.get()
        if scope is None:  # pragma: no cover - installed only inside a scope
            raise RuntimeError("a durable wait outside a durable agent run")
        if timeout is not None:
            raise UserError(
                f"durable cannot time out the wait {name!r}: a wait here is a run.awaiting, "
                "which blocks the workflow until a value arrives, holding no worker. Give the "
                "wait no timeout, and bound the whole run with the workflow's deadline "
                "(start(..., deadline=) or the kind's deadline) instead"
            )
        key = f"{scope.prefix}:input:{name}:{scope.next('input:' + name)}"
        run = scope.run
        if key not in run.records:
            answered = await run.step(f"{key}:ask", lambda: ask(key), as_is)
            if answered is not None:
                return _as_json(answered)
        return await run.awaiting(key, _as_json)


def _as_json(value: object) -> JsonValue:
    return value  # type: ignore[return-value]


class Durability(BaseDurabilityCapability[AgentDepsT]):
    """Make an agent durable with durable: attach it, and run the agent with ``run_agent``.

    ::

        agent = Agent(model, name="support", capabilities=[Durability()])

    Outside a workflow (an ``agent.run`` of your own) it changes nothing: the run is an
    ordinary, non-durable one. Inside ``run_agent``, every model request and tool call is
    a step of the workflow, and a wait for outside input (``HandleDeferredToolCalls``) is an
    awaiting.

    ``event_stream_handler`` receives the model's stream events live, inside the model
    request's step: a request replayed from the record streams nothing again. ``models``
    registers other models by id, as Pydantic AI's other engines do.
    """

    engine_spec = DurabilityEngineSpec(
        engine_name="durable",
        durable_unit_noun="step",
        durable_unit_plural="steps",
        durable_container_noun="workflow",
        codec=JSON_CODEC,
        wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        toolset_lifecycles={
            "function": "enter-always",
            "mcp": "enter-in-durable-unit",
            "dynamic": "enter-never",
        },
        journal_discovery=True,
        sequential_tools_in_durable_context=False,
        tool_config_key=None,
    )

    def __init__(
        self,
        *,
        models: Mapping[str, Model] | None = None,
        event_stream_handler: EventStreamHandler[AgentDepsT] | None = None,
        name: str | None = None,
    ) -> None:
        super().__init__(models=models, event_stream_handler=event_stream_handler, name=name)
        self._backend = _Backend()

    @property
    def in_durable_context(self) -> bool:
        """Inside ``run_agent``, and not inside a tool call: the tool call is the step, so
        an agent a tool runs (a delegate) runs as an ordinary agent, and its whole answer is
        recorded as the tool's result."""
        return _scope.get() is not None and _tool.get() is None

    def get_durable_operation_backend(self) -> DurableOperationBackend[Any]:
        return self._backend

    async def wrap_run(self, ctx: RunContext[AgentDepsT], *, handler: Any) -> AgentRunResult[Any]:
        if not self.in_durable_context:
            return await super().wrap_run(ctx, handler=handler)
        with external_event_scope(_Waiter()):
            return await super().wrap_run(ctx, handler=handler)


def durability_of(agent: Any) -> Durability[Any]:
    """The agent's bound ``Durability``; ``UserError`` naming the agent when it has none."""
    found = Durability.from_agent(agent)
    if found is None:
        raise UserError(
            f"agent {getattr(agent, 'name', None)!r} has no durable_pydantic_ai.Durability "
            "capability: without it, its model requests and tool calls would run unrecorded "
            "and be repeated by every pass. Add capabilities=[Durability()] to the Agent"
        )
    return found
