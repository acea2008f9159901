"""Durable: the pair, and the moves that have to cross both halves.

Recording the value a workflow waits on and making it runnable are durable only together,
so they are one call and a caller can never hold half of one. What varies between stores
is not whether the moves exist but what they guarantee (``atomic``); what every store owes
is that after the move returns, both halves are there.
"""

from __future__ import annotations

import asyncio

from durable.interfaces import INBOX_PREFIX, Checkpointer, Scheduler

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._support import (
    PATIENCE,
    claimed,
    delivered_during,
    fenced,
    next_delivery,
)

PROMPTLY = 3.0


@requirement("durable.exposes-its-pair")
async def test_durable_exposes_a_checkpointer_a_scheduler_and_whether_it_is_atomic(
    store: StoreUnderTest,
) -> None:
    """A Durable's checkpointer and scheduler satisfy their protocols, and atomic is a bool."""
    d = store.durable
    assert isinstance(d.checkpointer, Checkpointer), f"{d.checkpointer!r} is not a Checkpointer"
    assert isinstance(d.scheduler, Scheduler), f"{d.scheduler!r} is not a Scheduler"
    assert isinstance(d.atomic, bool), f"atomic is {d.atomic!r}, not a bool"


@requirement("durable.arrive-supplies-and-readies")
async def test_durable_arrive_supplies_the_value_and_makes_the_workflow_ready(
    store: StoreUnderTest,
) -> None:
    """arrive writes first-writer-wins like supply, returns what the key holds, and makes
    the workflow ready; a second arrive keeps the first value and readies it again."""
    d = store.durable
    wf = store.workflow()
    assert await d.arrive(wf, "approval", ("yes",)) == ["yes"]
    assert await d.checkpointer.load(wf) == {"approval": ["yes"]}
    delivery = await next_delivery(d.scheduler, workflow=wf, within=PROMPTLY)
    assert delivery is not None, "arrive recorded the value but did not make the workflow ready"
    await d.scheduler.done(delivery)
    assert await d.arrive(wf, "approval", ("no",)) == ["yes"]
    assert await next_delivery(d.scheduler, workflow=wf, within=PROMPTLY) is not None


@requirement("durable.arrive-during-a-pass")
async def test_durable_arrive_while_a_pass_runs_is_neither_blocked_nor_lost(
    store: StoreUnderTest,
) -> None:
    """A value arriving while a pass holds the workflow is written at once, the pass keeps
    its claim, and the workflow is delivered again after the pass answers."""
    wf = store.workflow()
    async with store.handles(2) as handles:
        worker, handler = handles[0], handles[-1]
        await worker.scheduler.make_ready(wf)
        delivery = await next_delivery(worker.scheduler, workflow=wf)
        assert delivery is not None
        holder = await claimed(worker.checkpointer, wf)
        stored = await asyncio.wait_for(handler.arrive(wf, "approval", "yes"), 5)
        assert stored == "yes"
        assert (await worker.checkpointer.record(holder, "charged", True)).first
        await worker.checkpointer.release(holder)
        await worker.scheduler.done(delivery)
    assert await next_delivery(store.scheduler, workflow=wf, within=PROMPTLY) is not None


@requirement("durable.send-appends-and-readies")
async def test_durable_send_appends_to_the_inbox_and_makes_the_workflow_ready(
    store: StoreUnderTest,
) -> None:
    """send appends under a store-picked inbox key, returns it, and makes the workflow
    ready; concurrent sends from several handles all land."""
    wf = store.workflow()
    async with store.handles(3) as handles:
        keys = await asyncio.gather(
            *(handles[i % len(handles)].send(wf, {"message": i}) for i in range(60))
        )
    assert len(set(keys)) == 60
    assert all(k.startswith(INBOX_PREFIX) for k in keys)
    loaded = await store.checkpointer.load(wf)
    assert [loaded[k] for k in keys] == [{"message": i} for i in range(60)]
    assert list(loaded) == sorted(keys)
    assert await next_delivery(store.scheduler, workflow=wf, within=PROMPTLY) is not None


@requirement("durable.send-with-message-id-once")
async def test_durable_send_with_a_message_id_appends_once_and_readies_every_time(
    store: StoreUnderTest,
) -> None:
    """A send whose message id the workflow holds appends nothing and returns the first
    send's key, and still makes the workflow ready; concurrent sends with one id from
    several handles append one entry."""
    d = store.durable
    wf = store.workflow()
    key = await d.send(wf, {"order": 1}, message_id="order-1")
    delivery = await next_delivery(d.scheduler, workflow=wf, within=PROMPTLY)
    assert delivery is not None, "send appended but did not make the workflow ready"
    await d.scheduler.done(delivery)
    assert await d.send(wf, {"order": 1}, message_id="order-1") == key
    assert await d.checkpointer.load(wf) == {key: {"order": 1}}
    assert await next_delivery(d.scheduler, workflow=wf, within=PROMPTLY) is not None, (
        "a repeated send did not make the workflow ready"
    )
    async with store.handles(3) as handles:
        keys = await asyncio.gather(
            *(handles[i % len(handles)].send(wf, {"copy": i}, message_id="m") for i in range(12))
        )
    assert len(set(keys)) == 1, f"12 sends with one message id got {len(set(keys))} keys"
    loaded = await d.checkpointer.load(wf)
    assert len(loaded) == 2, f"12 sends with one message id left {len(loaded) - 1} entries"
    assert list(loaded) == sorted([key, keys[0]])


@requirement("durable.discard-discards-and-cancels")
async def test_durable_discard_forgets_the_records_fences_the_pass_and_cancels_the_runs(
    store: StoreUnderTest,
) -> None:
    """Durable.discard forgets every record, refuses the pass in flight, leaves the id
    claimable with a higher token, and cancels the workflow's pending runs."""
    d = store.durable
    wf = store.workflow()
    in_flight = await claimed(d.checkpointer, wf)
    await d.checkpointer.record(in_flight, "step", 1)
    await d.arrive(wf, "approval", "yes")
    await d.discard(wf)
    assert await d.checkpointer.load(wf) == {}
    await fenced(d.checkpointer.record(in_flight, "step-2", 2), f"record by {in_flight}")
    successor = await claimed(d.checkpointer, wf)
    assert successor.token > in_flight.token
    seen = await delivered_during(d.scheduler, 0.5)
    assert [x.workflow for x in seen] == [], "a discarded workflow was still delivered"


@requirement("durable.moves-under-concurrency")
async def test_durable_concurrent_arrivals_for_many_workflows_are_all_recorded_and_delivered(
    store: StoreUnderTest,
) -> None:
    """Hundreds of arrivals for many workflows, from several handles at once: every value
    is recorded and every workflow delivered."""
    tag = store.workflow("arrivals")
    workflows = [f"{tag}-{i}" for i in range(100)]
    async with store.handles(4) as handles:
        await asyncio.gather(
            *(
                handles[(i + k) % len(handles)].arrive(wf, f"part-{k}", k)
                for i, wf in enumerate(workflows)
                for k in range(3)
            )
        )
    for wf in workflows:
        loaded = await store.checkpointer.load(wf)
        assert sorted(loaded.items()) == [(f"part-{k}", k) for k in range(3)], f"{wf!r}: {loaded}"
    delivered: set[str] = set()
    loop = asyncio.get_running_loop()
    give_up = loop.time() + PATIENCE * 2
    while delivered != set(workflows) and loop.time() < give_up:
        delivery = await next_delivery(store.scheduler, within=1.0)
        if delivery is not None:
            delivered.add(delivery.workflow)
            await store.scheduler.done(delivery)
    assert delivered == set(workflows), f"{len(set(workflows) - delivered)} were never delivered"
