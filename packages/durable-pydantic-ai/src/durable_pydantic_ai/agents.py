"""An agent run as a workflow: ``run_agent`` inside a body, ``agent_kind`` as a kind.

``run_agent(run, agent, prompt)`` is the whole integration from a body's side: it runs
``agent.run(prompt)`` with its model requests and tool calls recorded on ``run`` (see
:mod:`durable_pydantic_ai.capability` for the keys), so the body may do anything else a
body does before and after (steps, sleeps, children). ``agent_kind`` is the common case
made a kind: its input is the prompt, its result the run's output, so that ``durable
start``, ``list``, ``show`` and ``result`` work on agent runs as on any workflow.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from durable.boundary import check_key
from durable.policy import RetryPolicy
from durable.run import Run
from durable.workflows import Kind, Workflows
from pydantic import TypeAdapter
from pydantic_ai.agent import AbstractAgent
from pydantic_ai.messages import ModelMessage
from pydantic_ai.run import AgentRunResult

from durable_pydantic_ai.capability import agent_scope, durability_of

__all__ = ["AgentInput", "agent_kind", "as_agent_input", "run_agent"]

Deps = TypeVar("Deps")
Out = TypeVar("Out")


async def run_agent(
    run: Run[Any],
    agent: AbstractAgent[Deps, Out],
    prompt: str | None = None,
    *,
    key: str = "agent",
    deps: Deps = None,  # type: ignore[assignment]
    message_history: Sequence[ModelMessage] | None = None,
    **options: Any,
) -> AgentRunResult[Out]:
    """``agent.run(prompt, ...)`` as part of ``run``'s workflow.

    Each model request is recorded under ``<key>:model:<turn>`` and each tool call under
    ``<key>:tool:<turn>:<tool call id>``; a later pass over the workflow gets the recorded
    responses and results back, so a resumed run pays for no model call it already made.
    ``key`` tells two agent runs of one workflow apart (a triage agent, then a writer).
    ``options`` are ``agent.run``'s (``output_type``, ``model_settings``, ``usage_limits``).

    The agent must carry a :class:`~durable_pydantic_ai.Durability` capability; without it
    nothing would be recorded, so that is refused (``UserError``) before the agent runs.
    Everything the agent does between recorded steps runs again on every pass, so it
    must be deterministic given the records: the prompt and the deps a pass passes in
    should be the same each time (take them from the workflow's input or from steps).
    """
    check_key(run.workflow, key)
    durability_of(agent)
    with agent_scope(run, key):
        return await agent.run(prompt, deps=deps, message_history=message_history, **options)


AgentInput = Mapping[str, Any]


def as_agent_input(value: object) -> dict[str, Any]:
    """An agent kind's input: a prompt (a string), or ``{"prompt": ..., "message_history":
    [...]}`` with the history in Pydantic AI's JSON form (``ModelMessagesTypeAdapter``)."""
    if isinstance(value, str):
        return {"prompt": value}
    if isinstance(value, Mapping) and isinstance(value.get("prompt"), str | None):
        unknown = set(value) - {"prompt", "message_history"}
        if unknown:
            raise ValueError(
                f"an agent's input has a prompt and a message_history, not {sorted(unknown)}"
            )
        history = value.get("message_history")
        if history is not None:
            _HISTORY.validate_python(history)
        return dict(value)
    raise ValueError(
        'an agent\'s input is a prompt (a string) or {"prompt": ..., "message_history": [...]}, '
        f"got {value!r}"
    )


_HISTORY: TypeAdapter[list[ModelMessage]] = TypeAdapter(list[ModelMessage])


def agent_kind(
    agent: AbstractAgent[Deps, Out],
    *,
    name: str | None = None,
    workflows: Workflows | None = None,
    deps: Callable[[Run[Any]], Deps] | None = None,
    policy: RetryPolicy | None = None,
    queue: str = "default",
    deadline: timedelta | None = None,
) -> Kind[dict[str, Any], object]:
    """The kind that runs ``agent`` on the prompt it is started with, and finishes with the
    run's output in its JSON form (Pydantic's ``to_jsonable_python``; a ``str`` stays one).

    ``name`` defaults to the agent's name. ``deps`` builds the agent's dependencies for a
    pass from its ``Run`` (a client, a connection): they are not recorded, so they must not
    decide anything a replay would decide otherwise. With ``workflows`` the kind is also
    registered there. An approval the agent waits for (``HandleDeferredToolCalls``) blocks the
    workflow on its key until ``durable arrive`` supplies it.
    """
    kind_name = name or agent.name
    if not kind_name:
        raise ValueError("agent_kind needs a name: give the agent one, or pass name=")
    output: TypeAdapter[Any] = TypeAdapter(Any)

    async def body(run: Run[Any], input: dict[str, Any]) -> object:
        history = input.get("message_history")
        result: AgentRunResult[Out] = await run_agent(
            run,
            agent,
            input.get("prompt"),
            deps=None if deps is None else deps(run),  # type: ignore[misc]
            message_history=None if history is None else _HISTORY.validate_python(history),
        )
        return output.dump_python(result.output, mode="json")

    body.__name__ = body.__qualname__ = kind_name
    made: Kind[dict[str, Any], object] = Kind(
        kind_name,
        body,
        as_agent_input,
        RetryPolicy() if policy is None else policy,
        queue,
        deadline,
    )
    if workflows is not None:
        workflows.add(made)
    return made
