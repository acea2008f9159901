"""``durable.guards``: the careful way to write to a workflow from outside a pass, on every
store (memory, SQLite, Postgres, Redis), through the Python API (the CLI's tests are in
test_cli_stores.py). A server that does not answer is skipped with the reason."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import durable
import pytest
from durable import guards
from durable.interfaces import Durable, UnknownWorkflow
from durable.run import Run
from durable.workflows import Kind, LifecycleDurable, Workflows, as_is


@pytest.fixture
async def store(url: str) -> AsyncIterator[Durable[Any]]:
    async with durable.open(url) as opened:
        yield opened


def lifecycled(store: Durable[Any]) -> LifecycleDurable[Any]:
    if not isinstance(store.checkpointer, durable.interfaces.Lifecycle):
        pytest.skip(f"{store!r} does not offer lifecycle")
    assert isinstance(store, LifecycleDurable)
    return store


def as_bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {value!r}")
    return value


def as_text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text, got {value!r}")
    return value


registry = Workflows()


@registry.kind("approval", signals={"confirm": as_bool}, messages=as_text)
async def approval(run: Run[Any], _: object) -> bool:
    return await run.awaiting("confirm", as_bool)


@registry.kind("free")
async def free(run: Run[Any], _: object) -> object:
    return await run.awaiting("anything", lambda v: v)


async def test_arrive_says_whether_this_write_won_and_a_loser_changes_nothing(
    store: Durable[Any],
) -> None:
    won = await guards.arrive(store, "wf-1", "approval", {"by": "ana"}, create=True)
    same = await guards.arrive(store, "wf-1", "approval", {"by": "ana"})
    lost = await guards.arrive(store, "wf-1", "approval", {"by": "bo"})

    assert (won.value, won.first) == ({"by": "ana"}, True)
    assert (same.value, same.first) == ({"by": "ana"}, True), "an equal encoding counts as first"
    assert (lost.value, lost.first) == ({"by": "ana"}, False)
    assert await store.checkpointer.load("wf-1") == {"approval": {"by": "ana"}}


async def test_an_unknown_id_needs_create_and_is_refused_with_nothing_written(
    store: Durable[Any],
) -> None:
    with pytest.raises(UnknownWorkflow, match=r"no workflow 'typo'.*nothing was supplied"):
        await guards.arrive(store, "typo", "approval", True)
    with pytest.raises(UnknownWorkflow, match="nothing was sent"):
        await guards.send(store, "typo", "hi", message_id="m-1")
    with pytest.raises(UnknownWorkflow, match="nothing was discarded"):
        await guards.discard(store, "typo")
    assert not await guards.exists(store, "typo")

    key = await guards.send(store, "wf-1", "hi", create=True)
    again = await guards.send(store, "wf-1", "again")
    assert await guards.exists(store, "wf-1")
    assert [e.key for e in await store.checkpointer.history("wf-1")] == [key, again]
    await guards.discard(store, "wf-1")
    assert not await guards.exists(store, "wf-1"), "a discarded workflow is unknown again"


async def test_a_started_workflow_with_no_records_is_known(store: Durable[Any]) -> None:
    await lifecycled(store).start("free", "wf-1")
    recorded = await guards.arrive(store, "wf-1", "anything", 1)
    assert recorded.first


async def test_values_the_kind_refuses_are_refused_naming_kind_key_value_and_error(
    store: Durable[Any],
) -> None:
    await lifecycled(store).start("approval", "wf-1")
    with pytest.raises(guards.SignalRefused) as wrong:
        await guards.arrive(store, "wf-1", "confirm", "yes", workflows=registry)
    with pytest.raises(guards.SignalRefused, match="awaits no such key"):
        await guards.arrive(store, "wf-1", "confrim", True, workflows=registry)
    with pytest.raises(guards.SignalRefused, match="message parser as_text says"):
        await guards.send(store, "wf-1", 5, workflows=registry)
    assert await store.checkpointer.history("wf-1") == [], "a refused value was written"

    assert str(wrong.value) == (
        "workflow 'wf-1' (kind 'approval') refuses 'yes' under 'confirm': its parser as_bool "
        "says expected true or false, got 'yes' (nothing was written)"
    )
    assert (wrong.value.kind, wrong.value.key, wrong.value.value) == ("approval", "confirm", "yes")
    assert (await guards.arrive(store, "wf-1", "confirm", True, workflows=registry)).first
    await guards.send(store, "wf-1", "a note", workflows=registry)


async def test_a_kind_that_declares_nothing_checks_nothing_and_an_unserved_kind_is_refused(
    store: Durable[Any],
) -> None:
    lifecycle = lifecycled(store)
    await lifecycle.start("free", "wf-1")
    await lifecycle.start("elsewhere", "wf-2")
    assert (await guards.arrive(store, "wf-1", "anything", [1], workflows=registry)).first
    with pytest.raises(ValueError, match="the registry has no kind 'elsewhere'"):
        await guards.send(store, "wf-2", "hi", workflows=registry)
    assert await store.checkpointer.history("wf-2") == []


async def test_dead_letters_are_the_messages_an_ended_workflow_never_read(
    store: Durable[Any],
) -> None:
    lifecycle = lifecycled(store)
    await lifecycle.start("approval", "wf-1")
    key = await guards.send(store, "wf-1", "too late")
    assert await guards.dead_letters(store, "wf-1") == [], "it may still read it"
    await lifecycle.cancel("wf-1")

    dead = await guards.dead_letters(store, "wf-1")

    assert [(e.key, e.value) for e in dead] == [(key, "too late")]


def test_a_kinds_declared_signals_are_a_read_only_copy_and_the_kind_stays_hashable() -> None:
    given: dict[str, Callable[[object], object]] = {"confirm": as_bool}

    async def body(run: Run[Any], _: object) -> object:
        return None

    kind: Kind[object, object] = Kind("k", body, as_is, signals=given)
    given["other"] = as_text

    assert kind.signals is not None
    assert list(kind.signals) == ["confirm"]
    with pytest.raises(TypeError):
        kind.signals["x"] = as_text  # type: ignore[index]
    assert hash(kind) == hash(kind)
