"""A small graph of named nodes, run durably: each node's result is recorded under its name.

``run_durably`` names no parsers, and the asymmetry with ``Run.step`` is the point. When it
records a node's result it holds both values, what the node returned and what the store
now has, so it verifies instead of parsing: a node whose result does not survive the
store's codec is refused, by name, on the pass that wrote it. That matters more for a
graph than a parser would, because a graph feeds a node's result straight to its
dependents, which would otherwise see a tuple on the pass that computed it and a list on
the pass that restored it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from durable.clock import Clock
from durable.interfaces import Checkpointer, KeyReused
from durable.run import DEFAULT_BUDGET, DEFAULT_LIVENESS, Finished, Run, resume

__all__ = ["Graph", "GraphError", "Node", "Unfaithful", "run_durably"]

log = logging.getLogger(__name__)

NodeFunction = Callable[..., Awaitable[object]]


class GraphError(ValueError):
    """The graph cannot run: an unknown dependency, a cycle, a name used twice."""


class Unfaithful(ValueError):
    """A node's result changed on its way through the store's codec."""

    def __init__(self, workflow: str, node: str, produced: object, stored: object) -> None:
        self.workflow = workflow
        self.node = node
        super().__init__(
            f"workflow {workflow!r}: node {node!r} returned {produced!r}, which the store's "
            f"codec gives back as {stored!r}; its dependents would see one on this pass and "
            "the other after a restart. Return a value the codec round-trips (a list rather "
            "than a tuple under JsonCodec) or configure a codec that keeps it."
        )


@dataclass(frozen=True, slots=True)
class Node:
    """A named unit of work. ``run`` is called with one keyword argument per dependency,
    named after it and bound to its result, so dependency names must be identifiers."""

    name: str
    run: NodeFunction
    after: tuple[str, ...] = ()


class Graph:
    """Nodes by name, checked when added: names are unique identifiers, dependencies exist
    (nodes are added after what they depend on), and so there can be no cycle."""

    def __init__(self, nodes: Iterable[Node] = ()) -> None:
        self.nodes: dict[str, Node] = {}
        for node in nodes:
            self.add(node.name, node.run, after=node.after)

    def add(self, name: str, run: NodeFunction, *, after: Iterable[str] = ()) -> Node:
        needs = tuple(after)
        if not isinstance(name, str) or not name.isidentifier():
            raise GraphError(f"a node name must be an identifier, got {name!r}")
        if name in self.nodes:
            raise GraphError(f"the graph already has a node called {name!r}")
        for dependency in needs:
            if dependency not in self.nodes:
                known = ", ".join(self.nodes) or "none yet"
                raise GraphError(
                    f"node {name!r} depends on {dependency!r}, which is not in the graph "
                    f"(add it first; nodes so far: {known})"
                )
        if len(set(needs)) != len(needs):
            raise GraphError(f"node {name!r} names a dependency twice: {needs!r}")
        node = Node(name, run, needs)
        self.nodes[name] = node
        return node

    def node(
        self, *, after: Iterable[str] = (), name: str | None = None
    ) -> Callable[[NodeFunction], NodeFunction]:
        """Decorator form of :meth:`add`; the node is named after the function by default."""

        def register(run: NodeFunction) -> NodeFunction:
            self.add(name or run.__name__, run, after=after)
            return run

        return register


async def _execute(run: Run[Any], graph: Graph) -> dict[str, object]:
    results: dict[str, object] = {}
    recorded: Mapping[str, object] = run.records
    running: dict[asyncio.Future[object], str] = {}
    waiting = dict(graph.nodes)

    async def perform(node: Node) -> object:
        if node.name in recorded:
            kept = run._operations.get(node.name)
            if kept is not None and kept != "node":
                raise KeyReused(run.workflow, node.name, kept, "node")
            return recorded[node.name]
        produced = await node.run(**{dep: results[dep] for dep in node.after})
        outcome = await run._write(node.name, produced, "node")
        if outcome.first and outcome.value != produced:
            raise Unfaithful(run.workflow, node.name, produced, outcome.value)
        return outcome.value

    failure: BaseException | None = None
    try:
        while running or (waiting and failure is None):
            if failure is None:
                for name, node in list(waiting.items()):
                    if all(dep in results for dep in node.after):
                        del waiting[name]
                        running[asyncio.ensure_future(perform(node))] = name
            finished, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for future in finished:
                name = running.pop(future)
                error = future.exception()
                if error is None:
                    results[name] = future.result()
                elif failure is None:
                    # Start nothing more, but let the nodes already running end: one
                    # cancelled now would lose a result it may have earned (its effect
                    # done, its record on its way) and run again on the next pass.
                    failure = error
                else:
                    log.warning(
                        "workflow %r: node %r failed too, while the graph was stopping "
                        "after an earlier failure: %r",
                        run.workflow,
                        name,
                        error,
                    )
    finally:
        # Only a cancellation of the whole pass (or an error of the loop itself) finds
        # nodes still running here; they are cancelled with it.
        for future in running:
            future.cancel()
        await asyncio.gather(*running, return_exceptions=True)
    if failure is not None:
        raise failure
    return results


async def run_durably(
    checkpointer: Checkpointer[Any],
    workflow: str,
    graph: Graph,
    *,
    liveness: timedelta = DEFAULT_LIVENESS,
    budget: timedelta = DEFAULT_BUDGET,
    clock: Clock | None = None,
) -> dict[str, object]:
    """Run every node of ``graph`` once for ``workflow``, independent nodes concurrently.

    Nodes already recorded are not run again; their recorded results feed their
    dependents. Claims the workflow for the pass like ``resume`` (``Contended`` when held,
    ``Fenced`` when superseded). Returns every node's result by name.

    A node that raises stops the graph: nothing more is started, the nodes already running
    are let finish (so what they earned is recorded and not paid for again on the next
    pass), and then the first failure propagates. Cancelling the pass cancels them all.
    """

    async def body(run: Run[Any]) -> dict[str, object]:
        return await _execute(run, graph)

    outcome = await resume(
        checkpointer, workflow, body, liveness=liveness, budget=budget, clock=clock
    )
    assert isinstance(outcome, Finished), "graph nodes cannot reach a wait"
    return outcome.value
