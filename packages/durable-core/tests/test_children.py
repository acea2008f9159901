"""Child workflows on every store: start once, await durably, failures, cancellation,
fan-out, what ``show`` says, and a worker killed between a child's two writes.

Each test opens a store of its own through ``durable.open``: memory, an SQLite file, a
Postgres schema and a Redis key prefix (the shared servers; one that does not answer is
skipped with the reason). The crash test kills a real subprocess with SIGKILL, on every
store two processes can share. (The Redis Cluster version is in the Redis package's tests.)
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import durable
import durable.children
import pytest
from durable import ChildCancelled, ChildFailed, RetryPolicy, Status, Workflows
from durable.children import CHILD_PREFIX, OUTCOME_PREFIX, PARENT_KEY
from durable.parsers import exactly
from durable.run import Run
from durable.worker import work
from durable.workflows import LifecycleDurable

HERE = Path(__file__).resolve().parent
PATIENCE = 60.0


def spawn(script: Path, url: str, workflow: str) -> subprocess.Popen[bytes]:
    """The worker that dies between a child's two writes, in a process of its own."""
    return subprocess.Popen(
        [sys.executable, str(script), url, workflow],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


ONCE = RetryPolicy(max_attempts=1)
FAST = RetryPolicy(max_attempts=3, initial=timedelta(milliseconds=1), jitter=0.0)


@pytest.fixture
async def store(url: str) -> AsyncIterator[LifecycleDurable[Any]]:
    async with durable.open(url) as opened:
        assert isinstance(opened, LifecycleDurable)
        yield opened


async def serving(
    store: LifecycleDurable[Any], workflows: Workflows, then: Callable[[], Awaitable[None]]
) -> None:
    """Run a worker while ``then`` runs."""
    stop = asyncio.Event()
    worker = asyncio.create_task(
        work(
            store,
            workflows,
            poll=timedelta(milliseconds=20),
            tick=timedelta(milliseconds=50),
            idle=timedelta(seconds=1),
            liveness=timedelta(seconds=2),
            stop=stop,
        )
    )
    try:
        await then()
    finally:
        stop.set()
        await asyncio.wait_for(worker, PATIENCE)


async def until(check: Callable[[], Awaitable[bool]], what: str) -> None:
    give_up = time.monotonic() + PATIENCE
    while not await check():
        assert time.monotonic() < give_up, f"never: {what}"
        await asyncio.sleep(0.02)


async def status_of(store: LifecycleDurable[Any], workflow: str) -> Status | None:
    found = await store.status(workflow)
    return None if found is None else found.status


# --- one child --------------------------------------------------------------------------------


async def test_a_parent_blocks_without_a_claim_until_its_child_ends_and_starts_it_once(
    store: LifecycleDurable[Any],
) -> None:
    workflows = Workflows()
    child_runs: list[int] = []
    parent_passes: list[int] = []

    @workflows.kind("child")
    async def child(run: Run[Any], n: int) -> int:
        child_runs.append(n)
        go = await run.awaiting("go", exactly(int))
        return n + go

    @workflows.kind("parent")
    async def parent(run: Run[Any], _: object) -> int:
        parent_passes.append(1)
        handle = await run.start_child(child, "c", 40)
        assert handle.workflow == "p1/c"
        return await run.outcome(handle, exactly(int))

    async def scenario() -> None:
        handle = await store.start(parent, "p1")
        await until(lambda: _is(store, "p1/c", Status.BLOCKED), "the child blocks on 'go'")
        await until(lambda: _is(store, "p1", Status.BLOCKED), "the parent blocks on its child")
        blocked = await store.status("p1")
        assert blocked is not None
        assert blocked.keys == (OUTCOME_PREFIX + "c",)
        assert blocked.token is None, "a blocked parent holds no claim"
        await store.arrive("p1/c", "go", 2)
        assert await handle.result(timeout=PATIENCE) == 42

    await serving(store, workflows, scenario)
    assert child_runs == [40, 40], "the child ran one pass per wait, as one workflow"
    assert len(parent_passes) == 2, "the parent was woken once, by the outcome"
    page = await store.list(kind="child")
    assert [s.workflow for s in page.statuses] == ["p1/c"], "the child was started once"
    records = await store.checkpointer.load("p1/c")
    assert records[PARENT_KEY] == {"workflow": "p1", "key": "c"}


async def test_a_child_given_its_id_is_started_under_it_and_linked_to_its_parent(
    store: LifecycleDurable[Any],
) -> None:
    workflows = Workflows()

    @workflows.kind("named-child")
    async def child(run: Run[Any], n: int) -> int:
        return n * 2

    @workflows.kind("named-parent")
    async def parent(run: Run[Any], _: object) -> int:
        handle = await run.start_child(child, "c", 21, workflow="invoice-21")
        assert handle.workflow == "invoice-21"
        return await run.outcome(handle, exactly(int))

    async def scenario() -> None:
        handle = await store.start(parent, "p-named")
        assert await handle.result(timeout=PATIENCE) == 42

    await serving(store, workflows, scenario)
    page = await store.list(kind="named-child")
    assert [s.workflow for s in page.statuses] == ["invoice-21"], "not started under its id"
    assert await store.status("p-named/c") is None, "started under the derived id as well"
    records = await store.checkpointer.load("invoice-21")
    assert records[PARENT_KEY] == {"workflow": "p-named", "key": "c"}


async def _is(store: LifecycleDurable[Any], workflow: str, status: Status) -> bool:
    return await status_of(store, workflow) is status


async def test_a_pass_that_dies_between_the_start_and_the_link_starts_the_child_once(
    store: LifecycleDurable[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child started, and the parent's link to it was never recorded: the next pass
    starts it again, which finds it started (the same kind and input) and writes nothing."""
    workflows = Workflows()
    child_runs: list[int] = []
    real = Run._write
    failed: list[str] = []

    async def dies_once(
        self: Run[Any], key: str, value: object, operation: str | None = None
    ) -> Any:
        if key.startswith(CHILD_PREFIX) and not failed:
            failed.append(key)
            raise RuntimeError("the pass died before recording the link")
        return await real(self, key, value, operation)

    monkeypatch.setattr(Run, "_write", dies_once)

    @workflows.kind("child")
    async def child(run: Run[Any], n: int) -> int:
        child_runs.append(n)
        return n * 2

    @workflows.kind("parent", policy=FAST)
    async def parent(run: Run[Any], _: object) -> object:
        return await run.child(child, "c", 21)

    async def scenario() -> None:
        handle = await store.start(parent, "p8")
        assert await handle.result(timeout=PATIENCE) == 42

    await serving(store, workflows, scenario)
    assert failed == [CHILD_PREFIX + "c"]
    assert child_runs == [21]
    page = await store.list(kind="child")
    assert [s.workflow for s in page.statuses] == ["p8/c"]


async def test_a_failed_child_raises_child_failed_carrying_its_failure(
    store: LifecycleDurable[Any],
) -> None:
    workflows = Workflows()

    @workflows.kind("child", policy=ONCE)
    async def child(run: Run[Any], _: object) -> None:
        raise LookupError("no such parcel")

    @workflows.kind("parent")
    async def parent(run: Run[Any], _: object) -> dict[str, object]:
        try:
            await run.child(child, "c")
        except ChildFailed as failed:
            return {
                "child": failed.child,
                "type": failed.failure.type,
                "why": failed.failure.message,
            }
        return {}

    async def scenario() -> None:
        handle = await store.start(parent, "p2")
        assert await handle.result(timeout=PATIENCE) == {
            "child": "p2/c",
            "type": "LookupError",
            "why": "no such parcel",
        }

    await serving(store, workflows, scenario)


async def test_fan_out_gathers_every_outcome_in_order(store: LifecycleDurable[Any]) -> None:
    workflows = Workflows()

    @workflows.kind("square")
    async def square(run: Run[Any], n: int) -> int:
        return n * n

    @workflows.kind("parent")
    async def parent(run: Run[Any], n: int) -> list[int]:
        handles = [await run.start_child(square, f"sq-{i}", i) for i in range(n)]
        return await run.gather(*handles, parse=exactly(int))

    async def scenario() -> None:
        handle = await store.start(parent, "p3", 6)
        assert await handle.result(timeout=PATIENCE) == [0, 1, 4, 9, 16, 25]

    await serving(store, workflows, scenario)
    page = await store.list(kind="square")
    assert sorted(s.workflow for s in page.statuses) == [f"p3/sq-{i}" for i in range(6)]


async def test_cancelling_a_parent_cancels_its_unfinished_children_unless_told_not_to(
    store: LifecycleDurable[Any],
) -> None:
    workflows = Workflows()

    @workflows.kind("waiter")
    async def waiter(run: Run[Any], _: object) -> object:
        return await run.awaiting("go", exactly(int))

    @workflows.kind("parent")
    async def parent(run: Run[Any], _: object) -> object:
        kept = await run.start_child(waiter, "kept", cancel_with_parent=False)
        gone = await run.start_child(waiter, "gone")
        return await run.gather(kept, gone)

    async def scenario() -> None:
        await store.start(parent, "p4")
        await until(lambda: _is(store, "p4", Status.BLOCKED), "the parent blocks")
        await until(lambda: _is(store, "p4/gone", Status.BLOCKED), "a child blocks")
        await until(lambda: _is(store, "p4/kept", Status.BLOCKED), "the other blocks")
        await store.cancel("p4")
        assert await status_of(store, "p4") is Status.CANCELLED
        assert await status_of(store, "p4/gone") is Status.CANCELLED
        assert await status_of(store, "p4/kept") is Status.BLOCKED

    await serving(store, workflows, scenario)


async def test_a_cancelled_child_raises_child_cancelled_in_its_parent(
    store: LifecycleDurable[Any],
) -> None:
    workflows = Workflows()

    @workflows.kind("waiter")
    async def waiter(run: Run[Any], _: object) -> object:
        return await run.awaiting("go", exactly(int))

    @workflows.kind("parent")
    async def parent(run: Run[Any], _: object) -> str:
        try:
            await run.child(waiter, "w")
        except ChildCancelled as cancelled:
            return f"{cancelled.child} was cancelled"
        return "finished"

    async def scenario() -> None:
        handle = await store.start(parent, "p5")
        await until(lambda: _is(store, "p5/w", Status.BLOCKED), "the child blocks")
        await store.cancel("p5/w")
        assert await handle.result(timeout=PATIENCE) == "p5/w was cancelled"

    await serving(store, workflows, scenario)


async def test_a_parent_pass_repairs_an_outcome_that_never_arrived(
    store: LifecycleDurable[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child settled and its arrival lost: the parent's next pass (woken by anything)
    reads the child's status and records the outcome itself."""
    workflows = Workflows()

    @workflows.kind("child")
    async def child(run: Run[Any], _: object) -> str:
        return "done"

    @workflows.kind("parent")
    async def parent(run: Run[Any], _: object) -> object:
        return await run.child(child, "c")

    lost: list[str] = []

    async def dropped(_: object, parent_id: str, key: str, value: object) -> None:
        lost.append(parent_id)

    monkeypatch.setattr(durable.children, "deliver", dropped)

    async def first() -> None:
        await store.start(parent, "p6")
        await until(lambda: _is(store, "p6/c", Status.FINISHED), "the child finishes")
        await until(lambda: _is(store, "p6", Status.BLOCKED), "the parent blocks")

    await serving(store, workflows, first)
    monkeypatch.undo()
    assert lost == ["p6"]
    assert await status_of(store, "p6") is Status.BLOCKED

    async def second() -> None:
        await store.scheduler.make_ready("p6")  # any wake-up at all
        assert await store.handle("p6").result(timeout=PATIENCE) == "done"

    await serving(store, workflows, second)


def test_show_lists_a_parents_children_and_names_a_childs_parent(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    workflows = Workflows()

    @workflows.kind("child")
    async def child(run: Run[Any], _: object) -> str:
        return "ok"

    @workflows.kind("parent")
    async def parent(run: Run[Any], _: object) -> object:
        return await run.child(child, "c")

    async def run_it() -> None:
        async with durable.open(url) as store:
            assert isinstance(store, LifecycleDurable)

            async def scenario() -> None:
                assert await (await store.start(parent, "p7")).result(timeout=PATIENCE) == "ok"

            await serving(store, workflows, scenario)

    asyncio.run(run_it())

    def show(workflow: str) -> str:
        return subprocess.run(
            [sys.executable, "-m", "durable.cli", "show", url, workflow],
            capture_output=True,
            text=True,
            timeout=PATIENCE,
            check=True,
        ).stdout

    assert "children: 1\n  c  p7/c  finished\n" in show("p7")
    assert "parent: p7 (its child under key 'c')\n" in show("p7/c")


# --- a worker killed between the child's outcome and the parent's wake-up -------------------


async def test_a_worker_killed_between_the_childs_outcome_and_the_parents_wake_up(
    shared_url: str,
) -> None:
    await killed_between_the_writes(shared_url)


async def killed_between_the_writes(url: str) -> None:
    """Shared with the Redis Cluster test (durable-redis's tests import it)."""
    if url.startswith(("sqlite", "postgres")):
        # The killed worker's delivery comes back after its lease: a second, not thirty.
        url += ("&" if "?" in url else "?") + "delivery_lease=1"
    process = spawn(HERE / "children_child.py", url, "pk")
    try:
        code = await asyncio.to_thread(process.wait, PATIENCE)
    finally:
        if process.poll() is None:
            process.kill()
    assert code == -9, process.stderr.read().decode() if process.stderr else code
    workflows = Workflows()

    @workflows.kind("child")
    async def child(run: Run[Any], _: object) -> int:
        raise AssertionError("the child finished already; it never runs again")

    @workflows.kind("parent")
    async def parent(run: Run[Any], _: object) -> object:
        return await run.child("child", "c")

    async with durable.open(url) as store:
        assert isinstance(store, LifecycleDurable)
        assert await status_of(store, "pk/c") is Status.FINISHED, "the first write landed"
        assert await status_of(store, "pk") is Status.BLOCKED
        assert OUTCOME_PREFIX + "c" not in await store.checkpointer.load("pk"), (
            "the second write never happened"
        )

        async def scenario() -> None:
            assert await store.handle("pk").result(timeout=PATIENCE) == 42

        await serving(store, workflows, scenario)
