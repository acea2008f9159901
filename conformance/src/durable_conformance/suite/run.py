"""The run machinery over the store: ``Run`` and ``resume``, as a workflow author meets them.

The Checkpointer's guarantees are what make a replay safe, and these tests are where that
is seen from above: a step that ran is not run again on the next pass (even from another
handle), a value a pass waits for is the one somebody supplied, a sleep's deadline survives
the pass that chose it, an inbox message is taken once and by reference, and a pass that
has lost its claim stops instead of writing.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

from durable.interfaces import INBOX_PREFIX, Contended, Fenced, Swallowed
from durable.parsers import exactly
from durable.run import Blocked, DuplicateKey, Finished, Run, Sleeping, resume

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._support import PATIENCE, claimed, raised


@requirement("run.step-runs-once")
async def test_run_a_recorded_step_is_not_run_again_on_any_later_pass(
    store: StoreUnderTest,
) -> None:
    """A step's effect runs on the first pass only; every later pass, on this handle or
    another, is handed the recorded value, parsed (a tuple comes back a list even on the
    pass that ran it)."""
    wf = store.workflow()
    ran: Counter[str] = Counter()

    async def charge() -> tuple[str, int]:
        ran["charge"] += 1
        return ("ch_1", 10)

    async def body(run: Run[Any]) -> list[object]:
        charged = await run.step("charged", charge, exactly(list))
        shipped = await run.step("shipped", lambda: "parcel-1", exactly(str))
        return [charged, shipped]

    async with store.handles(2) as handles:
        outcomes = [await resume(handles[i % len(handles)], wf, body) for i in range(4)]
    assert all(o == Finished([["ch_1", 10], "parcel-1"]) for o in outcomes), outcomes
    assert ran["charge"] == 1, f"a recorded step ran {ran['charge']} times"
    assert await store.checkpointer.load(wf) == {"charged": ["ch_1", 10], "shipped": "parcel-1"}


@requirement("run.transact-exactly-once", capability="transact")
async def test_run_transact_moves_the_store_once_however_often_the_workflow_runs(
    store: StoreUnderTest,
) -> None:
    """A workflow whose step is ``run.transact`` with the store's own effect, resumed ten
    times, moves the store once."""
    wf = store.workflow()
    probe = store.probe

    async def body(run: Run[Any]) -> int:
        return await run.transact("reserved", probe.bump(wf, "stock"), exactly(int))

    outcomes = [await resume(store.durable, wf, body) for _ in range(10)]
    assert outcomes == [Finished(1)] * 10
    assert await probe.count(wf, "stock") == 1


@requirement("run.awaiting-takes-what-arrives")
async def test_run_awaiting_blocks_until_a_value_arrives_then_returns_it(
    store: StoreUnderTest,
) -> None:
    """A body awaiting a key is Blocked on it until ``arrive`` supplies it; the next pass
    gets the value, and the workflow was made ready for it."""
    d = store.durable
    wf = store.workflow()

    async def body(run: Run[Any]) -> str:
        return await run.awaiting("approval", exactly(str))

    assert await resume(d, wf, body) == Blocked(("approval",))
    await d.arrive(wf, "approval", "yes")
    assert await resume(d, wf, body) == Finished("yes")


@requirement("run.sleep-survives-its-pass")
async def test_run_a_sleeps_deadline_is_recorded_and_kept_by_later_passes(
    store: StoreUnderTest,
) -> None:
    """A sleep records its deadline (an ISO string) on the pass that first reaches it and
    answers Sleeping until then; later passes keep that deadline, and once it has passed
    the body goes on, handed the deadline as a datetime."""
    wf = store.workflow()

    async def body(run: Run[Any]) -> str:
        woke = await run.sleep("nap", timedelta(seconds=0.5))
        assert isinstance(woke, datetime)
        return woke.isoformat()

    first = await resume(store.durable, wf, body)
    assert isinstance(first, Sleeping), first
    assert first.keys == ("nap",), first
    recorded = (await store.checkpointer.load(wf))["nap"]
    assert isinstance(recorded, str)
    assert datetime.fromisoformat(recorded) == first.until
    await asyncio.sleep(0.1)
    again = await resume(store.durable, wf, body)
    assert again == first, "a later pass pushed the sleep's deadline back"
    await asyncio.sleep(max(0.0, (first.until - datetime.now(first.until.tzinfo)).total_seconds()))
    await asyncio.sleep(0.05)
    assert await resume(store.durable, wf, body) == Finished(first.until.isoformat())


@requirement("run.receive-takes-each-message-once")
async def test_run_receive_takes_inbox_messages_in_order_once_and_by_reference(
    store: StoreUnderTest,
) -> None:
    """Messages sent to a workflow are received in the order sent, each once; what is
    recorded is a reference to the inbox entry (which stays), and a replay receives the
    same messages under the same keys."""
    d = store.durable
    wf = store.workflow()

    async def body(run: Run[Any]) -> list[str]:
        return [await run.receive(f"message-{i}", exactly(str)) for i in range(3)]

    await d.send(wf, "first")
    assert await resume(d, wf, body) == Blocked(("message-1",))
    await d.send(wf, "second")
    await d.send(wf, "third")
    assert await resume(d, wf, body) == Finished(["first", "second", "third"])
    assert await resume(d, wf, body) == Finished(["first", "second", "third"])
    loaded = await store.checkpointer.load(wf)
    inbox = [k for k in loaded if k.startswith(INBOX_PREFIX)]
    assert [loaded[k] for k in inbox] == ["first", "second", "third"], "a message was consumed"
    assert all(loaded[f"message-{i}"] != loaded[inbox[i]] for i in range(3)), (
        "receive copied the message instead of recording a reference to it"
    )


@requirement("run.fan-out-names-every-wait")
async def test_run_a_fan_out_of_waits_reports_each_and_a_swallowed_one_is_refused(
    store: StoreUnderTest,
) -> None:
    """Concurrent waits report every key reached; a body that captures its waits
    (gather with return_exceptions) and returns is refused with Swallowed, naming them."""
    wf, swallowing = store.workflow(), store.workflow("swallowing")

    async def fan_out(run: Run[Any]) -> list[str]:
        a, b = await asyncio.gather(
            run.awaiting("a", exactly(str)), run.awaiting("b", exactly(str))
        )
        return [a, b]

    async def swallow(run: Run[Any]) -> str:
        await asyncio.gather(
            run.awaiting("a", exactly(str)), run.awaiting("b", exactly(str)), return_exceptions=True
        )
        return "finished?"

    outcome = await resume(store.durable, wf, fan_out)
    assert isinstance(outcome, Blocked), outcome
    assert sorted(outcome.keys) == ["a", "b"], outcome
    refused = await raised(
        resume(store.durable, swallowing, swallow),
        "a body that swallowed its waits and returned",
        Swallowed,
    )
    assert isinstance(refused, Swallowed)
    assert sorted(refused.keys) == ["a", "b"]


@requirement("run.one-key-once-per-pass")
async def test_run_two_steps_under_one_key_in_one_pass_are_refused(store: StoreUnderTest) -> None:
    """Two steps (or waits) under one key in one pass are an error, not a silent replay."""
    wf = store.workflow()

    async def body(run: Run[Any]) -> None:
        await run.step("charged", lambda: 1, exactly(int))
        await run.step("charged", lambda: 2, exactly(int))

    await raised(resume(store.durable, wf, body), "a second step under one key", DuplicateKey)
    assert await store.checkpointer.load(wf) == {"charged": 1}


@requirement("resume.contended-when-held")
async def test_resume_of_a_workflow_another_pass_holds_is_contended(store: StoreUnderTest) -> None:
    """resume refuses a workflow another pass holds (Contended), running nothing."""
    wf = store.workflow()
    await claimed(store.checkpointer, wf)
    ran = []

    async def body(run: Run[Any]) -> None:
        ran.append(run.holder)

    await raised(resume(store.durable, wf, body), "resume of a held workflow", Contended)
    assert ran == []


@requirement("resume.stops-a-superseded-pass")
async def test_resume_stops_a_pass_whose_workflow_was_discarded_under_it(
    store: StoreUnderTest,
) -> None:
    """A pass whose workflow is discarded while its body runs is stopped by its renewal
    (Fenced) and writes nothing further; the workflow is claimable at once."""
    wf = store.workflow()
    started = asyncio.Event()
    late_writes: list[object] = []

    async def body(run: Run[Any]) -> None:
        await run.step("first", lambda: 1, exactly(int))
        started.set()
        await asyncio.sleep(PATIENCE)
        late_writes.append(await run.step("second", lambda: 2, exactly(int)))

    async def discard_when_started() -> None:
        await started.wait()
        await store.durable.discard(wf)

    discarding = asyncio.create_task(discard_when_started())
    try:
        await raised(
            resume(store.durable, wf, body, liveness=timedelta(seconds=0.6)),
            "a pass whose workflow was discarded under it",
            Fenced,
        )
    finally:
        await discarding
    assert late_writes == []
    assert await store.checkpointer.load(wf) == {}
    await claimed(store.checkpointer, wf)
