"""Pydantic AI agents as durable workflows, on any store durable certifies.

Attach :class:`Durability` to an agent, and run it with :func:`run_agent` inside a
workflow body (or serve :func:`agent_kind` from a worker): every model request and tool
call becomes a recorded step, a resumed run hands back what was recorded instead of
calling again, and a tool that needs approval blocks the workflow until ``durable arrive``.
Built on Pydantic AI's public API for durable execution engines (``pydantic_ai.durable_exec``).
"""

from durable_pydantic_ai.agents import AgentInput, agent_kind, as_agent_input, run_agent
from durable_pydantic_ai.capability import Durability, current_run, step, transact

__all__ = [
    "AgentInput",
    "Durability",
    "agent_kind",
    "as_agent_input",
    "current_run",
    "run_agent",
    "step",
    "transact",
]
