"""Queues: a scheduler that routes (``durable.interfaces.Routed``, the ``queues`` capability)
hands a taker only the workflows of the queues it asks for, so two services can share a store.

A workflow's queue is the one ``Lifecycle.admit`` recorded (a kind's ``queue``); each test
names queues of its own, so that workflows other tests leave ready never meet it.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections import Counter
from datetime import timedelta
from typing import Any, cast

import pytest
from durable.interfaces import Delivery, Routed, Status
from durable.parsers import exactly
from durable.run import Run
from durable.workflows import Kind, Workflows

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._lifecycle import lifecycle, lifecycle_durable
from durable_conformance.suite._support import PATIENCE
from durable_conformance.suite.lifecycle import INPUT, unique_kind
from durable_conformance.suite.worker import working

SHORT = timedelta(milliseconds=100)


def routed(store: StoreUnderTest, handle: Any = None) -> Routed:
    scheduler = store.scheduler if handle is None else handle.scheduler
    assert isinstance(scheduler, Routed), f"{store.name} declares 'queues' but is not Routed"
    return scheduler


def unique_queue(label: str) -> str:
    return f"{label}-{secrets.token_hex(4)}"


async def _take_all(scheduler: Routed, queues: frozenset[str], most: int) -> list[Delivery]:
    taken: list[Delivery] = []
    for _ in range(most):
        delivery = await scheduler.next_ready_in(queues, SHORT)
        if delivery is None:
            break
        taken.append(delivery)
    return taken


@requirement("queues.routes-by-queue", capability="queues")
async def test_queues_a_taker_is_handed_only_the_workflows_of_the_queues_it_asks_for(
    store: StoreUnderTest,
) -> None:
    """Three workflows in queue A and three in B, all ready: a taker asking for B, on each of
    two handles, is handed exactly B's three and none of A's; then one asking for A and B is
    handed A's three. A workflow with no lifecycle row is in "default", never in A or B."""
    lc = lifecycle(store)
    qa, qb, kind = unique_queue("qa"), unique_queue("qb"), unique_kind()
    in_a = [store.workflow(f"a{i}") for i in range(3)]
    in_b = [store.workflow(f"b{i}") for i in range(3)]
    bare = store.workflow("bare")
    for wf in in_a:
        await lc.admit(wf, kind, INPUT, queue=qa)
    for wf in in_b:
        await lc.admit(wf, kind, INPUT, queue=qb)
    for wf in [*in_a, *in_b, bare]:
        await store.scheduler.make_ready(wf)
    async with store.handles(2) as handles:
        taken = [
            d.workflow
            for handle in handles
            for d in await _take_all(routed(store, handle), frozenset({qb}), 5)
        ]
        assert sorted(taken) == sorted(in_b), f"asking for {qb} was handed {taken}"
        both = await _take_all(routed(store, handles[0]), frozenset({qa, qb}), 5)
        assert sorted(d.workflow for d in both) == sorted(in_a), both
    await store.scheduler.cancel(bare)


@requirement("queues.leaves-others-ready", capability="queues")
async def test_queues_a_workflow_passed_over_stays_ready_for_a_taker_of_its_queue(
    store: StoreUnderTest,
) -> None:
    """Takers of queue B race (on two handles, eight takes each) while one workflow of queue A
    is ready: none of them is handed it, and a taker of A then is handed it at once, as a
    first delivery (its scheduled time not pushed out by anyone passing over it)."""
    lc = lifecycle(store)
    qa, qb = unique_queue("qa"), unique_queue("qb")
    wf = store.workflow("waiting")
    await lc.admit(wf, unique_kind(), INPUT, queue=qa)
    await store.scheduler.make_ready(wf)
    async with store.handles(2) as handles:
        results = await asyncio.gather(
            *(
                routed(store, handle).next_ready_in(frozenset({qb}), SHORT)
                for handle in handles
                for _ in range(8)
            )
        )
        assert all(r is None for r in results), f"a taker of {qb} was handed {results}"
        delivery = await routed(store, handles[1]).next_ready_in(frozenset({qa}), SHORT)
        assert delivery is not None, f"a taker of {qa} was not handed {wf}"
        assert delivery.workflow == wf, delivery
        await handles[1].scheduler.done(delivery)


@requirement("queues.refuses-bad-queues", capability="queues")
async def test_queues_next_ready_in_refuses_a_bad_set_of_queues(store: StoreUnderTest) -> None:
    """An empty set, a bad name or a bare str is refused and nothing is taken."""
    lc = lifecycle(store)
    q = unique_queue("q")
    wf = store.workflow("refused")
    await lc.admit(wf, unique_kind(), INPUT, queue=q)
    await store.scheduler.make_ready(wf)
    scheduler = routed(store)
    for bad, error in ((frozenset(), ValueError), (frozenset({"a b"}), ValueError), (q, TypeError)):
        with pytest.raises(error):
            await scheduler.next_ready_in(cast(Any, bad), SHORT)
    delivery = await scheduler.next_ready_in(frozenset({q}), SHORT)
    assert delivery is not None, f"nothing ready in {q} after the refusals"
    assert delivery.workflow == wf, delivery
    await store.scheduler.done(delivery)


@requirement("queues.two-services-share-a-store", capability="queues")
async def test_queues_two_workers_serving_their_own_queues_share_one_store(
    store: StoreUnderTest,
) -> None:
    """Two workers on two handles, each with a registry of its own kind and serving only its
    kind's queue: every workflow finishes, run only by the worker of its queue, at its first
    attempt. A workflow of a kind service A does not know yet (a rolling deploy), in A's
    queue, is deferred, not failed, until a worker that knows it serves the queue (the old
    worker having stopped, as it does at the end of a rolling deploy)."""
    durable = lifecycle_durable(store)
    qa, qb = unique_queue("svc-a"), unique_queue("svc-b")
    ran: Counter[tuple[str, str]] = Counter()
    services: list[tuple[Workflows, Kind[Any, Any]]] = []
    for label, queue in (("a", qa), ("b", qb)):
        registry = Workflows()

        def body_for(service: str) -> Any:
            async def body(run: Run[Any], number: int) -> int:
                ran[(service, run.workflow)] += 1
                return number

            return body

        kind = registry.kind(unique_kind(label), input=exactly(int), queue=queue)(body_for(label))
        services.append((registry, kind))
    deployed = Workflows()
    newer = deployed.kind(unique_kind("a-v2"), input=exactly(int), queue=qa)(body_for("a"))
    tag = store.workflow("svc")
    lc = lifecycle(store)
    async with (
        store.handles(2) as handles,
        contextlib.AsyncExitStack() as service_a,
        working(handles[1], services[1][0], queues=[qb]),
    ):
        await service_a.enter_async_context(working(handles[0], services[0][0], queues=[qa]))
        started = []
        for i in range(5):
            started.append(("a", await durable.start(services[0][1], f"{tag}-a{i}", i)))
            started.append(("b", await durable.start(services[1][1], f"{tag}-b{i}", i)))
        for _, handle in started:
            await handle.result(timeout=PATIENCE * 3)
        rolled = await durable.start(newer, f"{tag}-a-new", 7)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + PATIENCE
        while True:
            st = await lc.status(rolled.workflow)
            assert st is not None, rolled.workflow
            assert not st.status.terminal, st
            if st.status == Status.SLEEPING:
                break
            assert loop.time() < give_up, f"the unknown kind was never deferred: {st}"
            await asyncio.sleep(0.01)
        assert st.attempts == 0, st
        # The rolling deploy ends: A's old worker stops and the new one takes its place. (With
        # both serving A's queue, the old one may keep winning the deferred workflow's hand-outs,
        # and deferring it again, for as long as chance lets it.)
        await service_a.aclose()
        async with working(handles[0], deployed, queues=[qa]):
            assert await rolled.result(timeout=PATIENCE * 3) == 7
    for service, handle in started:
        assert ran[(service, handle.workflow)] == 1, (service, handle.workflow, ran)
        st = await lc.status(handle.workflow)
        assert st is not None, handle.workflow
        assert (st.status, st.attempts) == (Status.FINISHED, 1), st
    wrong = [key for key in ran if not key[1].startswith(f"{tag}-{key[0]}")]
    assert not wrong, f"run by the other service: {wrong}"
