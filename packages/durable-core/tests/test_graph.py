"""``run_durably`` and ``Graph``: named nodes, run concurrently where they can be, each result
recorded under its node's name and checked against the store's codec."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta

import pytest
from durable.clock import ManualClock
from durable.graph import Graph, GraphError, Node, Unfaithful, run_durably
from durable.interfaces import Contended
from durable.memory import MemoryCheckpointer

WORKFLOW = "wf-report-1"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def checkpointer(clock: ManualClock) -> MemoryCheckpointer:
    return MemoryCheckpointer(clock=clock)


async def test_independent_nodes_run_concurrently(
    checkpointer: MemoryCheckpointer, clock: ManualClock
) -> None:
    # Each node waits for the other to have started: run one after the other, neither ends.
    orders_started = asyncio.Event()
    refunds_started = asyncio.Event()

    async def orders() -> object:
        orders_started.set()
        await refunds_started.wait()
        return 10

    async def refunds() -> object:
        refunds_started.set()
        await orders_started.wait()
        return 2

    graph = Graph([Node("orders", orders), Node("refunds", refunds)])

    results = await asyncio.wait_for(run_durably(checkpointer, WORKFLOW, graph, clock=clock), 2)

    assert results == {"orders": 10, "refunds": 2}


async def test_each_node_gets_its_dependencies_results_by_name_and_is_recorded(
    checkpointer: MemoryCheckpointer, clock: ManualClock
) -> None:
    graph = Graph()

    @graph.node()
    async def orders() -> object:
        return 10

    @graph.node()
    async def refunds() -> object:
        return 2

    @graph.node(after=["orders", "refunds"])
    async def net(orders: int, refunds: int) -> object:
        return orders - refunds

    results = await run_durably(checkpointer, WORKFLOW, graph, clock=clock)

    assert results == {"orders": 10, "refunds": 2, "net": 8}
    assert await checkpointer.load(WORKFLOW) == {"orders": 10, "refunds": 2, "net": 8}


async def test_recorded_nodes_are_not_run_again(
    checkpointer: MemoryCheckpointer, clock: ManualClock
) -> None:
    ran: Counter[str] = Counter()

    async def orders() -> object:
        ran["orders"] += 1
        return [1, 2, 3]

    async def total(orders: list[int]) -> object:
        ran["total"] += 1
        return sum(orders)

    graph = Graph([Node("orders", orders), Node("total", total, after=("orders",))])

    first = await run_durably(checkpointer, WORKFLOW, graph, clock=clock)
    again = await run_durably(checkpointer, WORKFLOW, graph, clock=clock)

    assert first == again == {"orders": [1, 2, 3], "total": 6}
    assert ran == {"orders": 1, "total": 1}


async def test_a_dependent_is_fed_the_recorded_result_after_a_failed_pass(
    checkpointer: MemoryCheckpointer, clock: ManualClock
) -> None:
    ran: Counter[str] = Counter()
    fed: list[object] = []

    async def quote() -> object:
        ran["quote"] += 1
        return {"eur": 100 * ran["quote"]}

    async def invoice(quote: dict[str, int]) -> object:
        ran["invoice"] += 1
        fed.append(quote)
        if ran["invoice"] == 1:
            raise ConnectionError("invoicing is down")
        return f"invoice for {quote['eur']}"

    graph = Graph([Node("quote", quote), Node("invoice", invoice, after=("quote",))])

    with pytest.raises(ConnectionError):
        await run_durably(checkpointer, WORKFLOW, graph, clock=clock)
    results = await run_durably(checkpointer, WORKFLOW, graph, clock=clock)

    assert results == {"quote": {"eur": 100}, "invoice": "invoice for 100"}
    assert ran == {"quote": 1, "invoice": 2}
    assert fed == [{"eur": 100}, {"eur": 100}]


async def test_a_node_whose_result_does_not_survive_the_codec_is_refused_by_name(
    checkpointer: MemoryCheckpointer, clock: ManualClock
) -> None:
    dependents: list[object] = []

    async def span() -> object:
        return ("2026-01-01", "2026-01-31")  # a tuple comes back from JSON as a list

    async def report(span: object) -> object:
        dependents.append(span)
        return "report"

    graph = Graph([Node("span", span), Node("report", report, after=("span",))])

    with pytest.raises(Unfaithful) as caught:
        await run_durably(checkpointer, WORKFLOW, graph, clock=clock)

    assert caught.value.workflow == WORKFLOW
    assert caught.value.node == "span"
    assert "'span'" in str(caught.value)
    assert dependents == []


async def test_a_node_whose_result_the_codec_cannot_encode_is_refused_by_name(
    checkpointer: MemoryCheckpointer, clock: ManualClock
) -> None:
    async def ratio() -> object:
        return float("nan")

    graph = Graph([Node("ratio", ratio)])

    with pytest.raises(TypeError, match="'ratio'"):
        await run_durably(checkpointer, WORKFLOW, graph, clock=clock)
    assert await checkpointer.load(WORKFLOW) == {}


async def test_a_failing_node_lets_the_nodes_running_beside_it_finish_and_be_recorded(
    checkpointer: MemoryCheckpointer, clock: ManualClock
) -> None:
    """A sibling in flight when a node fails has done its work: cancelling it would lose
    the result and pay for it again on the next pass. Nothing new is started, though."""
    failed = asyncio.Event()
    started: list[str] = []

    async def slow() -> object:
        started.append("slow")
        await failed.wait()
        await asyncio.sleep(0.02)
        return "slow"

    async def broken() -> object:
        started.append("broken")
        await asyncio.sleep(0)
        failed.set()
        raise RuntimeError("broken node")

    async def after_slow(slow: object) -> object:
        started.append("after_slow")
        return "never"

    graph = Graph([Node("slow", slow), Node("broken", broken)])
    graph.add("after_slow", after_slow, after=["slow"])

    with pytest.raises(RuntimeError, match="broken node"):
        await asyncio.wait_for(run_durably(checkpointer, WORKFLOW, graph, clock=clock), 5)
    assert await checkpointer.load(WORKFLOW) == {"slow": "slow"}
    assert started == ["slow", "broken"]


async def test_cancelling_a_graph_run_cancels_the_nodes_running(
    checkpointer: MemoryCheckpointer, clock: ManualClock
) -> None:
    cancelled = asyncio.Event()

    async def slow() -> object:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "slow"

    graph = Graph([Node("slow", slow)])

    with pytest.raises(TimeoutError):
        await asyncio.wait_for(run_durably(checkpointer, WORKFLOW, graph, clock=clock), 0.05)
    assert cancelled.is_set()
    assert await checkpointer.load(WORKFLOW) == {}


async def test_a_graph_run_on_a_held_workflow_is_contended(
    checkpointer: MemoryCheckpointer, clock: ManualClock
) -> None:
    async def node() -> object:
        raise AssertionError("must not run")

    held = await checkpointer.claim(
        WORKFLOW, liveness=timedelta(seconds=30), budget=timedelta(minutes=5)
    )
    assert held is not None

    with pytest.raises(Contended):
        await run_durably(checkpointer, WORKFLOW, Graph([Node("node", node)]), clock=clock)


# -- building a graph --------------------------------------------------------------------


async def nothing() -> object:
    return None


def test_a_node_depending_on_an_unknown_node_is_refused() -> None:
    graph = Graph([Node("orders", nothing)])

    with pytest.raises(GraphError, match="'refunds'"):
        graph.add("net", nothing, after=["orders", "refunds"])
    assert list(graph.nodes) == ["orders"]


def test_a_node_must_be_added_after_what_it_depends_on() -> None:
    with pytest.raises(GraphError, match="'orders'"):
        Graph([Node("net", nothing, after=("orders",)), Node("orders", nothing)])


def test_a_node_name_used_twice_is_refused() -> None:
    graph = Graph([Node("orders", nothing)])

    with pytest.raises(GraphError, match="already"):
        graph.add("orders", nothing)


@pytest.mark.parametrize("name", ["", "net-total", "2nd", "net total", "durable.inbox:1"])
def test_a_node_name_that_is_not_an_identifier_is_refused(name: str) -> None:
    with pytest.raises(GraphError, match="identifier"):
        Graph().add(name, nothing)


def test_a_dependency_named_twice_is_refused() -> None:
    graph = Graph([Node("orders", nothing)])

    with pytest.raises(GraphError, match="twice"):
        graph.add("net", nothing, after=["orders", "orders"])


def test_the_decorator_names_a_node_after_its_function_unless_told_otherwise() -> None:
    graph = Graph()

    @graph.node()
    async def orders() -> object:
        return 1

    @graph.node(after=["orders"], name="net")
    async def compute(orders: int) -> object:
        return orders

    assert graph.nodes["orders"] == Node("orders", orders)
    assert graph.nodes["net"] == Node("net", compute, ("orders",))
