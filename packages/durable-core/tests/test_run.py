"""What a workflow body can do with its ``Run``: steps, transactions, waits, the inbox, and
the errors that stop a body written against the rules."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

import pytest
from durable.clock import ManualClock
from durable.interfaces import INBOX_PREFIX, Swallowed
from durable.memory import MemoryDurable, MemoryEffect
from durable.parsers import exactly as expect
from durable.run import (
    RECEIVE_FIELD,
    Blocked,
    DuplicateKey,
    Finished,
    ParseFailed,
    Run,
    Sleeping,
    resume,
)

T = TypeVar("T")
WORKFLOW = "wf-order-1"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def durable(clock: ManualClock) -> MemoryDurable:
    return MemoryDurable(clock=clock)


# -- step ------------------------------------------------------------------------------


async def test_a_step_runs_its_effect_and_records_what_it_returned(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    async def charge() -> object:
        return {"charge": "ch_1", "cents": 1200}

    async def body(run: Run[Any]) -> dict[Any, Any]:
        return await run.step("charge", charge, expect(dict))

    outcome = await resume(durable, WORKFLOW, body, clock=clock)

    assert outcome == Finished({"charge": "ch_1", "cents": 1200})
    assert await durable.checkpointer.load(WORKFLOW) == {
        "charge": {"charge": "ch_1", "cents": 1200}
    }


async def test_a_step_takes_a_plain_function_as_well_as_an_async_one(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    async def two() -> int:
        await asyncio.sleep(0)
        return 2

    async def body(run: Run[Any]) -> list[int]:
        return [
            await run.step("plain", lambda: 1, expect(int)),
            await run.step("awaited", two, expect(int)),
        ]

    assert await resume(durable, WORKFLOW, body, clock=clock) == Finished([1, 2])


async def test_a_tuple_comes_back_a_list_on_the_pass_that_ran_the_step(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    seen: list[object] = []

    def parse(value: object) -> list[Any]:
        seen.append(value)
        return expect(list)(value)

    async def body(run: Run[Any]) -> list[Any]:
        return await run.step("pair", lambda: ("ch_1", 1200), parse)

    assert await resume(durable, WORKFLOW, body, clock=clock) == Finished(["ch_1", 1200])
    assert seen == [["ch_1", 1200]]
    assert type(seen[0]) is list


async def test_a_key_used_twice_in_one_pass_is_refused_before_the_second_effect_runs(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    ran: list[str] = []

    def charge(name: str) -> Callable[[], int]:
        def effect() -> int:
            ran.append(name)
            return len(ran)

        return effect

    async def body(run: Run[Any]) -> None:
        await run.step("charge", charge("first"), expect(int))
        await run.step("charge", charge("second"), expect(int))

    with pytest.raises(DuplicateKey, match="'charge'"):
        await resume(durable, WORKFLOW, body, clock=clock)
    assert ran == ["first"]
    assert await durable.checkpointer.load(WORKFLOW) == {"charge": 1}


@pytest.mark.parametrize("second", ["step", "awaiting", "sleep", "receive", "transact"])
async def test_a_wait_or_step_reusing_a_key_is_refused_even_when_it_is_recorded(
    durable: MemoryDurable, clock: ManualClock, second: str
) -> None:
    await durable.arrive(WORKFLOW, "approval", True)

    async def body(run: Run[MemoryEffect]) -> None:
        await run.awaiting("approval", expect(bool))
        if second == "step":
            await run.step("approval", lambda: 1, expect(int))
        elif second == "awaiting":
            await run.awaiting("approval", expect(bool))
        elif second == "sleep":
            await run.sleep("approval", timedelta(seconds=1))
        elif second == "receive":
            await run.receive("approval", expect(str))
        else:
            await run.transact("approval", lambda data: 1, expect(int))

    with pytest.raises(DuplicateKey):
        await resume(durable, WORKFLOW, body, clock=clock)


async def test_a_parser_failure_names_the_workflow_the_key_and_the_stored_value(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    async def body(run: Run[Any]) -> int:
        return await run.step("cents", lambda: "twelve hundred", expect(int))

    with pytest.raises(ParseFailed) as caught:
        await resume(durable, WORKFLOW, body, clock=clock)

    error = caught.value
    assert (error.workflow, error.key, error.value) == (WORKFLOW, "cents", "twelve hundred")
    message = str(error)
    assert repr(WORKFLOW) in message
    assert "'cents'" in message
    assert "'twelve hundred'" in message
    assert isinstance(error.__cause__, TypeError)


async def test_a_parser_failure_on_a_replayed_value_is_refused_the_same_way(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    await durable.arrive(WORKFLOW, "approval", "yes please")

    async def body(run: Run[Any]) -> bool:
        return await run.awaiting("approval", expect(bool))

    with pytest.raises(ParseFailed, match="'approval'") as caught:
        await resume(durable, WORKFLOW, body, clock=clock)
    assert caught.value.value == "yes please"


# -- transact --------------------------------------------------------------------------


async def test_transact_on_memory_records_the_effects_return_and_runs_once_in_ten_passes(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    def reserve(data: dict[str, object]) -> object:
        reserved = data.get("piano", 0)
        assert isinstance(reserved, int)
        data["piano"] = reserved + 1
        return reserved + 1

    async def body(run: Run[MemoryEffect]) -> int:
        return await run.transact("reserved", reserve, expect(int))

    outcomes = [await resume(durable, WORKFLOW, body, clock=clock) for _ in range(10)]

    assert outcomes == [Finished(1)] * 10
    assert durable.checkpointer.data == {"piano": 1}
    assert await durable.checkpointer.load(WORKFLOW) == {"reserved": 1}


# -- awaiting and sleep ----------------------------------------------------------------


async def test_awaiting_a_value_not_yet_supplied_blocks_on_its_key(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    async def body(run: Run[Any]) -> bool:
        return await run.awaiting("approval", expect(bool))

    assert await resume(durable, WORKFLOW, body, clock=clock) == Blocked(("approval",))
    await durable.arrive(WORKFLOW, "approval", True)
    assert await resume(durable, WORKFLOW, body, clock=clock) == Finished(True)


async def test_a_sleep_records_its_deadline_as_an_iso_string_and_reports_it(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    async def body(run: Run[Any]) -> None:
        await run.sleep("settle", timedelta(minutes=5))

    deadline = clock.now() + timedelta(minutes=5)

    assert await resume(durable, WORKFLOW, body, clock=clock) == Sleeping(deadline, ("settle",))
    assert await durable.checkpointer.load(WORKFLOW) == {"settle": deadline.isoformat()}


@pytest.mark.parametrize("duration", [timedelta(0), timedelta(seconds=-1)])
async def test_a_sleep_of_no_time_is_refused_and_nothing_is_written(
    durable: MemoryDurable, clock: ManualClock, duration: timedelta
) -> None:
    async def body(run: Run[Any]) -> None:
        await run.sleep("settle", duration)

    with pytest.raises(ValueError, match=WORKFLOW):
        await resume(durable, WORKFLOW, body, clock=clock)
    assert await durable.checkpointer.load(WORKFLOW) == {}


async def test_run_now_reads_the_injected_clock(durable: MemoryDurable, clock: ManualClock) -> None:
    async def body(run: Run[Any]) -> str:
        return run.now().isoformat()

    assert await resume(durable, WORKFLOW, body, clock=clock) == Finished(clock.now().isoformat())


# -- receive ---------------------------------------------------------------------------


async def test_receive_takes_inbox_entries_in_the_order_they_were_sent(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    for note in ["first", "second", "third"]:
        await durable.send(WORKFLOW, note)

    async def body(run: Run[Any]) -> list[str]:
        return [await run.receive(f"note-{i}", expect(str)) for i in range(3)]

    assert await resume(durable, WORKFLOW, body, clock=clock) == Finished(
        ["first", "second", "third"]
    )


async def test_receive_records_a_reference_to_the_entry_not_a_copy(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    sent = await durable.send(WORKFLOW, {"sku": "piano"})

    async def body(run: Run[Any]) -> dict[Any, Any]:
        return await run.receive("order", expect(dict))

    assert await resume(durable, WORKFLOW, body, clock=clock) == Finished({"sku": "piano"})
    assert sent.startswith(INBOX_PREFIX)
    assert await durable.checkpointer.load(WORKFLOW) == {
        sent: {"sku": "piano"},
        "order": {RECEIVE_FIELD: sent},
    }


async def test_two_receives_take_two_messages_and_a_replay_returns_the_same_ones(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    await durable.send(WORKFLOW, "one")

    async def body(run: Run[Any]) -> list[str]:
        return [await run.receive("a", expect(str)), await run.receive("b", expect(str))]

    assert await resume(durable, WORKFLOW, body, clock=clock) == Blocked(("b",))
    await durable.send(WORKFLOW, "two")
    assert await resume(durable, WORKFLOW, body, clock=clock) == Finished(["one", "two"])
    await durable.send(WORKFLOW, "three")
    assert await resume(durable, WORKFLOW, body, clock=clock) == Finished(["one", "two"])


async def test_concurrent_receives_in_one_pass_take_distinct_messages(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    await durable.send(WORKFLOW, "one")
    await durable.send(WORKFLOW, "two")

    async def body(run: Run[Any]) -> list[str]:
        return list(
            await asyncio.gather(run.receive("a", expect(str)), run.receive("b", expect(str)))
        )

    outcome = await resume(durable, WORKFLOW, body, clock=clock)
    assert isinstance(outcome, Finished)
    assert sorted(outcome.value) == ["one", "two"]


async def test_a_receive_key_that_holds_no_reference_is_refused(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    await durable.send(WORKFLOW, "one")
    await durable.arrive(WORKFLOW, "note", "not a reference")

    async def body(run: Run[Any]) -> str:
        return await run.receive("note", expect(str))

    with pytest.raises(ParseFailed, match="'note'"):
        await resume(durable, WORKFLOW, body, clock=clock)


# -- waits that are captured instead of propagated, and fan-outs ------------------------


async def test_a_fan_out_of_awaits_through_gather_reports_every_key(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    async def body(run: Run[Any]) -> list[bool]:
        return list(
            await asyncio.gather(
                run.awaiting("finance", expect(bool)),
                run.awaiting("legal", expect(bool)),
                run.awaiting("ops", expect(bool)),
            )
        )

    assert await resume(durable, WORKFLOW, body, clock=clock) == Blocked(
        ("finance", "legal", "ops")
    )
    await durable.arrive(WORKFLOW, "legal", True)
    assert await resume(durable, WORKFLOW, body, clock=clock) == Blocked(("finance", "ops"))


async def test_a_fan_out_names_the_wait_of_a_branch_one_round_trip_behind(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    # gather raises the first Suspended while the other branch is still recording its
    # step; the pass gives that branch its turn, so its wait is named too.
    async def quote() -> object:
        await asyncio.sleep(0)
        return 100

    async def quote_then_confirm(run: Run[Any]) -> bool:
        await run.step("quote", quote, expect(int))
        return await run.awaiting("confirmation", expect(bool))

    async def body(run: Run[Any]) -> None:
        await asyncio.gather(run.awaiting("approval", expect(bool)), quote_then_confirm(run))

    assert await resume(durable, WORKFLOW, body, clock=clock) == Blocked(
        ("approval", "confirmation")
    )
    assert await durable.checkpointer.load(WORKFLOW) == {"quote": 100}


async def test_a_fan_out_of_sleeps_and_awaits_sleeps_until_the_earliest_deadline(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    async def body(run: Run[Any]) -> None:
        await asyncio.gather(
            run.sleep("remind", timedelta(hours=2)),
            run.awaiting("approval", expect(bool)),
            run.sleep("escalate", timedelta(hours=1)),
        )

    outcome = await resume(durable, WORKFLOW, body, clock=clock)

    assert isinstance(outcome, Sleeping)
    assert outcome.until == clock.now() + timedelta(hours=1)
    assert set(outcome.keys) == {"remind", "approval", "escalate"}


async def test_a_fan_out_through_a_task_group_reports_every_key(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    async def body(run: Run[Any]) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(run.awaiting("finance", expect(bool)))
            group.create_task(run.awaiting("legal", expect(bool)))

    assert await resume(durable, WORKFLOW, body, clock=clock) == Blocked(("finance", "legal"))


async def test_a_wait_captured_by_gather_return_exceptions_is_refused_naming_every_wait(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    async def body(run: Run[Any]) -> str:
        await asyncio.gather(
            run.awaiting("finance", expect(bool)),
            run.sleep("cool-off", timedelta(days=1)),
            run.receive("note", expect(str)),
            return_exceptions=True,
        )
        return "shipped"

    with pytest.raises(Swallowed) as caught:
        await resume(durable, WORKFLOW, body, clock=clock)

    assert caught.value.workflow == WORKFLOW
    assert set(caught.value.keys) == {"finance", "cool-off", "note"}
    for key in ("finance", "cool-off", "note"):
        assert repr(key) in str(caught.value)


async def test_a_wait_captured_by_asyncio_wait_is_refused_naming_every_wait(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    async def body(run: Run[Any]) -> str:
        waits = {
            asyncio.ensure_future(run.awaiting("finance", expect(bool))),
            asyncio.ensure_future(run.awaiting("legal", expect(bool))),
        }
        await asyncio.wait(waits)
        return "shipped"

    with pytest.raises(Swallowed) as caught:
        await resume(durable, WORKFLOW, body, clock=clock)
    assert set(caught.value.keys) == {"finance", "legal"}


async def test_a_wait_caught_by_except_base_exception_is_refused(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    async def body(run: Run[Any]) -> str:
        with contextlib.suppress(BaseException):
            await run.awaiting("approval", expect(bool))
        return "shipped"

    with pytest.raises(Swallowed, match="'approval'"):
        await resume(durable, WORKFLOW, body, clock=clock)


async def test_a_sleep_whose_deadline_has_passed_is_not_a_wait(
    durable: MemoryDurable, clock: ManualClock
) -> None:
    async def body(run: Run[Any]) -> str:
        woke = await run.sleep("settle", timedelta(seconds=1))
        return woke.isoformat()

    assert isinstance(await resume(durable, WORKFLOW, body, clock=clock), Sleeping)
    clock.advance(timedelta(seconds=1))
    assert await resume(durable, WORKFLOW, body, clock=clock) == Finished(clock.now().isoformat())
