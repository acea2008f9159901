"""run_durably over the store: a graph of named nodes, each recorded under its name.

The graph verifies rather than parses: it holds both what a node returned and what the
store now has, so a node whose result does not survive the store's codec is refused by
name on the pass that wrote it. And it leans on ``Recorded.first`` being the store's
answer, not an inference from equality, which is why a store that reports ``first``
wrongly fails here as well as under ``record``.
"""

from __future__ import annotations

import asyncio
from collections import Counter

from durable.graph import Graph, Unfaithful, run_durably

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._support import raised


def _diamond(
    ran: Counter[str], *, failing: set[str] | None = None, failed: asyncio.Event | None = None
) -> Graph:
    graph = Graph()
    failing = failing if failing is not None else set()

    @graph.node()
    async def order() -> dict[str, object]:
        ran["order"] += 1
        return {"sku": "piano", "amount": 10}

    @graph.node(after=["order"])
    async def charge(order: dict[str, object]) -> str:
        ran["charge"] += 1
        if failed is not None and not failed.is_set():
            await failed.wait()  # set by 'reserve' just before it raises
            # Still working when the graph learns of the failure: a run that cancelled
            # its siblings would cancel this one here.
            await asyncio.sleep(0.02)
        return f"charged {order['amount']}"

    @graph.node(after=["order"])
    async def reserve(order: dict[str, object]) -> list[str]:
        ran["reserve"] += 1
        if "reserve" in failing:
            failing.discard("reserve")
            if failed is not None:
                failed.set()
            raise RuntimeError("the warehouse is down, this once")
        return [str(order["sku"])]

    @graph.node(after=["charge", "reserve"])
    async def ship(charge: str, reserve: list[str]) -> str:
        ran["ship"] += 1
        return f"{charge}; shipped {reserve[0]}"

    return graph


@requirement("graph.each-node-once")
async def test_graph_each_node_runs_once_and_a_rerun_returns_the_recorded_results(
    store: StoreUnderTest,
) -> None:
    """run_durably runs every node once and records each under its name; running the
    graph again runs nothing and returns the same results, from this handle or another."""
    wf = store.workflow()
    ran: Counter[str] = Counter()
    graph = _diamond(ran)
    first = await run_durably(store.checkpointer, wf, graph)
    async with store.handles(2) as handles:
        again = await run_durably(handles[-1].checkpointer, wf, graph)
    expected = {
        "order": {"sku": "piano", "amount": 10},
        "charge": "charged 10",
        "reserve": ["piano"],
        "ship": "charged 10; shipped piano",
    }
    assert first == again == expected
    assert ran == Counter({"order": 1, "charge": 1, "reserve": 1, "ship": 1})
    assert await store.checkpointer.load(wf) == expected


@requirement("graph.resumes-where-it-failed")
async def test_graph_a_failed_node_is_run_again_and_only_it_and_its_dependents(
    store: StoreUnderTest,
) -> None:
    """A node that fails stops the run; the next run runs that node and what depends on
    it, and nothing already recorded. A sibling still running when it failed (here
    ``charge``, which goes on only once ``reserve`` has failed) ends and is recorded: it is
    not run again."""
    wf = store.workflow()
    ran: Counter[str] = Counter()
    failed = asyncio.Event()
    graph = _diamond(ran, failing={"reserve"}, failed=failed)
    await raised(
        run_durably(store.checkpointer, wf, graph), "a graph whose node fails", RuntimeError
    )
    kept = await store.checkpointer.load(wf)
    assert "ship" not in kept
    assert kept.get("charge") == "charged 10", (
        f"the sibling in flight when 'reserve' failed was not recorded: {kept!r}"
    )
    results = await run_durably(store.checkpointer, wf, graph)
    assert results["ship"] == "charged 10; shipped piano"
    assert ran == Counter({"order": 1, "charge": 1, "reserve": 2, "ship": 1})


@requirement("graph.independent-nodes-concurrently")
async def test_graph_independent_nodes_run_at_the_same_time(store: StoreUnderTest) -> None:
    """Nodes with no path between them run concurrently: two that each wait for the other
    to have started both finish."""
    wf = store.workflow()
    started: Counter[str] = Counter()
    both = asyncio.Event()
    graph = Graph()

    async def meet(name: str) -> str:
        started[name] += 1
        if len(started) == 2:
            both.set()
        await asyncio.wait_for(both.wait(), 5)
        return name

    @graph.node()
    async def left() -> str:
        return await meet("left")

    @graph.node()
    async def right() -> str:
        return await meet("right")

    assert await run_durably(store.checkpointer, wf, graph) == {"left": "left", "right": "right"}


@requirement("graph.refuses-an-unfaithful-node")
async def test_graph_a_node_whose_result_the_codec_changes_is_refused_by_name(
    store: StoreUnderTest,
) -> None:
    """A node returning what the store's codec gives back changed (a tuple, under
    JsonCodec) is refused, naming the node, on the pass that computed it; a node returning
    what round-trips is not (which needs ``first`` to be the store's answer)."""
    wf = store.workflow()
    graph = Graph()

    @graph.node()
    async def faithful() -> list[int]:
        return [1, 2]

    @graph.node(after=["faithful"])
    async def pair(faithful: list[int]) -> tuple[int, int]:
        return (faithful[0], faithful[1])

    refused = await raised(
        run_durably(store.checkpointer, wf, graph),
        "a graph whose node returns a tuple under JsonCodec",
        Unfaithful,
    )
    assert isinstance(refused, Unfaithful)
    assert refused.node == "pair", f"the graph blamed {refused.node!r}"
