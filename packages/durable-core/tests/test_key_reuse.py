"""A key recorded by one kind of operation, replayed by code that uses it as another.

A key is an operation's identity across deployments, so a release that turns a step into
an ``awaiting`` under the same key would hand the awaiting the step's result. On a store
that keeps the operation with each record (``Operational``: every store here), the replay
is refused with ``KeyReused`` naming the workflow, the key and both operations, and nothing
is written; on one that does not, the replay reads the value as before.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import durable
import pytest
from durable.interfaces import KeyReused
from durable.memory import MemoryDurable
from durable.parsers import as_is, exactly
from durable.run import Blocked, Finished, Run, Sleeping, resume

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # pytest's importlib mode puts no test folder on the path
    sys.path.insert(0, str(HERE))
PlainCheckpointer: Any = importlib.import_module("plain_store").PlainCheckpointer

Body = Callable[[Run[Any]], Awaitable[object]]


async def step_then_wait(run: Run[Any]) -> object:
    charged = await run.step("charge", lambda: "receipt-1", exactly(str))
    return [charged, await run.awaiting("approval", as_is)]


async def awaits_the_charge(run: Run[Any]) -> object:
    return await run.awaiting("charge", as_is)


async def sleeps_then_waits(run: Run[Any]) -> object:
    await run.sleep("nap", timedelta(milliseconds=1))
    return await run.awaiting("approval", as_is)


async def steps_where_it_slept(run: Run[Any]) -> object:
    return await run.step("nap", lambda: "a step now", exactly(str))


@pytest.mark.parametrize(
    ("first", "then", "key", "recorded", "asked"),
    [
        (step_then_wait, awaits_the_charge, "charge", "step", "awaiting"),
        (sleeps_then_waits, steps_where_it_slept, "nap", "sleep", "step"),
    ],
)
async def test_a_replay_that_uses_a_key_as_another_operation_is_refused(
    url: str, first: Body, then: Body, key: str, recorded: str, asked: str
) -> None:
    async with durable.open(url) as store:
        outcome = await resume(store, "wf-reuse", first)
        assert isinstance(outcome, Blocked | Sleeping)
        before = await store.checkpointer.load("wf-reuse")
        with pytest.raises(KeyReused) as refused:
            await resume(store, "wf-reuse", then)
        error = refused.value
        assert (error.workflow, error.key, error.recorded, error.asked) == (
            "wf-reuse",
            key,
            recorded,
            asked,
        )
        text = str(error)
        for named in ("'wf-reuse'", repr(key), recorded, asked, "nothing was written"):
            assert named in text, f"{named} is not named in: {text}"
        assert await store.checkpointer.load("wf-reuse") == before
        # The code that wrote it still replays it.
        if first is step_then_wait:
            await store.arrive("wf-reuse", "approval", "yes")
            assert await resume(store, "wf-reuse", first) == Finished(["receipt-1", "yes"])


async def test_a_transact_replayed_as_a_step_is_refused_and_its_effect_never_repeats() -> None:
    store = MemoryDurable()

    def reserve(data: dict[str, object]) -> object:
        data["reserved"] = int(str(data.get("reserved", 0))) + 1
        return data["reserved"]

    async def transacts(run: Run[Any]) -> object:
        return await run.transact("reserve", reserve, exactly(int))

    async def steps(run: Run[Any]) -> object:
        return await run.step("reserve", lambda: 99, exactly(int))

    assert await resume(store, "wf-t", transacts) == Finished(1)
    with pytest.raises(KeyReused, match="recorded by a transact, and this code uses it as a step"):
        await resume(store, "wf-t", steps)
    assert store.checkpointer.data == {"reserved": 1}


async def test_a_value_that_arrived_from_outside_is_awaited_by_any_code() -> None:
    """A supplied record has no operation, so whoever reads it first is not refused."""
    store = MemoryDurable()
    await store.arrive("wf-s", "approval", "yes")
    entry = (await store.checkpointer.history("wf-s"))[0]
    assert (entry.key, entry.operation) == ("approval", None)

    async def awaits(run: Run[Any]) -> object:
        return await run.awaiting("approval", as_is)

    assert await resume(store, "wf-s", awaits) == Finished("yes")


async def test_a_store_that_keeps_no_operations_replays_as_before() -> None:
    """A checkpointer without ``record_as`` (a third party's, written before operations):
    the run records with ``record`` and refuses nothing, as it always did."""
    plain: Any = PlainCheckpointer()
    assert await resume(plain, "wf-p", step_then_wait) == Blocked(("approval",))
    assert await resume(plain, "wf-p", awaits_the_charge) == Finished("receipt-1")


def test_check_operation_keeps_refusing_what_it_never_passed() -> None:
    """check_operation remembers the names it passed (a bounded few), so a step's "step"
    skips the match; a bad name, a non-str and a str subclass still go to the match."""
    from durable.boundary import _OPERATIONS_KEPT, _OPERATIONS_SEEN, check_operation

    class Sly(str):
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = str.__hash__

    assert check_operation("wf", "k", "step") == "step"
    assert check_operation("wf", "k", "step") == "step"
    assert "step" in _OPERATIONS_SEEN
    for bad in ("Step", "", "9lives", "x" * 33, "has space", None, 7, Sly("STEP")):
        with pytest.raises(ValueError, match="is not allowed"):
            check_operation("wf", "k", bad)
    for n in range(2 * _OPERATIONS_KEPT):
        assert check_operation("wf", "k", f"op{n}") == f"op{n}"
    assert len(_OPERATIONS_SEEN) <= _OPERATIONS_KEPT
