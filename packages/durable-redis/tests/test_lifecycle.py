"""The Redis status index: truth in each workflow's slot, the index in a slot of its own.

A transition is three steps on this store (index add, truth script, index drop), so these
tests stop one after each step, by calling the steps themselves, and show that every
listing still equals the truth; then they start one workflow from 16 clients at once on a
real cluster and find one winner and an index with one member for it.
"""

from __future__ import annotations

import asyncio
import secrets
from contextlib import AsyncExitStack
from datetime import timedelta
from typing import Any

import pytest
from durable.interfaces import Failure, Settlement, StartConflict, Status
from durable.plugins import Testbed as Bed
from durable_redis import RedisCheckpointer, RedisDurable
from durable_redis.keys import kind_index, member_of, status_index
from durable_redis.servers import LocalCluster
from durable_redis.testing import testbed as fresh_testbed

LIVE = timedelta(seconds=30)
BUDGET = timedelta(minutes=5)
KINDS = ("pay", "ship")


def checkpointer_of(bed: Bed[Any]) -> RedisCheckpointer:
    assert isinstance(bed.durable, RedisDurable)
    return bed.durable.checkpointer


async def truths(
    cp: RedisCheckpointer, workflows: list[str]
) -> dict[str, tuple[Status, str | None]]:
    """Each workflow's (status, kind) as its life hash says, read one by one."""
    found = {}
    for workflow in workflows:
        status = await cp.status(workflow)
        if status is not None:
            found[workflow] = (status.status, status.kind)
    return found


async def listed(cp: RedisCheckpointer, **filters: Any) -> list[str]:
    """Every workflow a listing gives, page by page (small pages, so the cursor works too)."""
    seen: list[str] = []
    cursor = None
    while True:
        page = await cp.statuses(limit=2, cursor=cursor, **filters)
        seen.extend(status.workflow for status in page.statuses)
        if page.cursor is None:
            return seen
        cursor = page.cursor


async def assert_every_list_exact(cp: RedisCheckpointer, workflows: list[str]) -> None:
    truth = await truths(cp, workflows)
    everything = await listed(cp)
    assert sorted(everything) == sorted(truth), "the unfiltered listing"
    for status in Status:
        expected = sorted(wf for wf, (s, _) in truth.items() if s is status)
        assert sorted(await listed(cp, status=status)) == expected, f"status={status}"
        for kind in KINDS:
            expected = sorted(wf for wf, (s, k) in truth.items() if s is status and k == kind)
            got = sorted(await listed(cp, status=status, kind=kind))
            assert got == expected, f"status={status} kind={kind}"
    for kind in KINDS:
        expected = sorted(wf for wf, (_, k) in truth.items() if k == kind)
        assert sorted(await listed(cp, kind=kind)) == expected, f"kind={kind}"


async def members(cp: RedisCheckpointer, key: str) -> list[str]:
    return sorted(str(member) for member in await cp.client.zrange(key, 0, -1))


def life_keys(cp: RedisCheckpointer, workflow: str) -> tuple[str, str, str]:
    base = cp.hash_key(workflow)
    return f"{base}:records", f"{base}:claim", f"{base}:life"


async def index_add(cp: RedisCheckpointer, workflow: str, status: Status, kind: str | None) -> str:
    """Step 1 of a transition alone: returns its tx."""
    tx = secrets.token_hex(8)
    keys = [status_index(cp.prefix, status)]
    if kind is not None and status is not Status.RUNNING:
        keys.append(kind_index(cp.prefix, kind, status))
    await cp._index_scripts["index_add"](keys=keys, args=(member_of(tx, workflow),))
    return tx


async def begin_truth(cp: RedisCheckpointer, workflow: str, tx: str) -> int:
    """Step 2 of a begin alone (begin.lua), after its index_add: returns the token."""
    reply = await cp._scripts["begin"](
        keys=life_keys(cp, workflow),
        args=(int(LIVE.total_seconds() * 1000), int(BUDGET.total_seconds() * 1000), "0", "t:1", tx),
    )
    assert reply[0] is not None
    return int(reply[0])


async def fail_truth(cp: RedisCheckpointer, workflow: str, token: int, kind: str, tx: str) -> None:
    """Step 2 of a settle as failed alone (settle.lua)."""
    reply = await cp._scripts["settle"](
        keys=life_keys(cp, workflow),
        args=(
            str(token),
            tx,
            kind,
            "failed",
            "1",
            "",
            "0",
            "ValueError",
            "no",
            "",
            "1",
            "1",
            "",
            "",
            "0",
        ),
    )
    assert reply[0] == 1


@pytest.fixture
async def filled(bed: Bed[Any]) -> tuple[RedisCheckpointer, list[str]]:
    """Six workflows of two kinds: ready, running, finished, failed, sleeping, blocked."""
    cp = checkpointer_of(bed)
    workflows = [f"wf-{n}" for n in range(6)]
    for n, workflow in enumerate(workflows):
        await cp.admit(workflow, KINDS[n % 2], {"n": n})
    for workflow, settlement in zip(
        workflows[1:],
        (
            None,
            Settlement(Status.FINISHED, 1, value={"ok": True}),
            Settlement(Status.FAILED, 1, failure=Failure("ValueError", "no", "", 1)),
            Settlement(Status.SLEEPING, 0, until=cp_epoch_plus_hour()),
            Settlement(Status.BLOCKED, 0, keys=("approval",)),
        ),
        strict=True,
    ):
        began = await cp.begin(workflow, liveness=LIVE, budget=BUDGET, owner="test:1")
        assert began is not None
        assert began.holder is not None
        if settlement is not None:
            await cp.settle(began.holder, settlement)
    return cp, workflows


def cp_epoch_plus_hour() -> Any:
    from datetime import UTC, datetime

    return datetime.now(UTC) + timedelta(hours=1)


async def test_the_lists_start_exact(filled: tuple[RedisCheckpointer, list[str]]) -> None:
    cp, workflows = filled
    await assert_every_list_exact(cp, workflows)
    assert (await truths(cp, workflows))["wf-1"] == (Status.RUNNING, "ship")


async def test_a_transition_stopped_after_its_index_add_leaves_every_list_exact(
    filled: tuple[RedisCheckpointer, list[str]],
) -> None:
    cp, workflows = filled
    # A start that never reached its truth script: a member for a workflow with no life.
    await index_add(cp, "never-started", Status.READY, "pay")
    # A begin of the ready one, and a settle of the running one, each stopped the same way.
    await index_add(cp, "wf-0", Status.RUNNING, None)
    await index_add(cp, "wf-1", Status.FAILED, "ship")
    assert len(await members(cp, status_index(cp.prefix, Status.RUNNING))) == 2  # debris is there
    assert len(await members(cp, kind_index(cp.prefix, "ship", Status.FAILED))) == 2  # wf-3, wf-1
    await assert_every_list_exact(cp, [*workflows, "never-started"])
    assert await cp.status("never-started") is None


async def test_a_transition_stopped_after_its_truth_script_leaves_every_list_exact(
    filled: tuple[RedisCheckpointer, list[str]],
) -> None:
    cp, workflows = filled
    # wf-0 is begun (ready -> running) and wf-1 fails (running -> failed), each without the
    # drop of the member it superseded: the old members stay in s:ready and s:running.
    tx = await index_add(cp, "wf-0", Status.RUNNING, None)
    token = await begin_truth(cp, "wf-0", tx)
    running = await cp.status("wf-1")
    assert running is not None
    assert running.token is not None
    tx = await index_add(cp, "wf-1", Status.FAILED, "ship")
    await fail_truth(cp, "wf-1", running.token, "ship", tx)
    assert any(
        m.endswith("|wf-0") for m in await members(cp, status_index(cp.prefix, Status.READY))
    )
    assert any(
        m.endswith("|wf-1") for m in await members(cp, status_index(cp.prefix, Status.RUNNING))
    )
    await assert_every_list_exact(cp, workflows)
    truth = await truths(cp, workflows)
    assert truth["wf-0"] == (Status.RUNNING, "pay")
    assert truth["wf-1"] == (Status.FAILED, "ship")
    # The next full transitions of both still leave every list exact, and drop what they
    # supersede (the debris of the interrupted ones stays until a reader's filter skips it).
    from durable.interfaces import Pass

    await cp.settle(Pass("wf-0", token), Settlement(Status.FINISHED, 1, value=0))
    await cp.readmit("wf-1")
    await assert_every_list_exact(cp, workflows)


async def test_a_resent_script_keeps_its_member(bed: Bed[Any]) -> None:
    """redis-py sends a command again when its connection drops before the answer; a truth
    script that already ran must not then report "nothing changed", or the client would
    drop the member the truth now holds."""
    cp = checkpointer_of(bed)
    tx = await index_add(cp, "again", Status.READY, "pay")
    args = ("pay", '"x"', "default", tx, "0")
    first = await cp._scripts["admit"](keys=life_keys(cp, "again"), args=args)
    resent = await cp._scripts["admit"](keys=life_keys(cp, "again"), args=args)
    assert first[0] == 1
    assert resent == [2]
    assert await listed(cp, status=Status.READY) == ["again"]


async def test_sixteen_concurrent_starters_on_a_cluster_find_one_winner(
    cluster: LocalCluster,
) -> None:
    async with fresh_testbed(cluster.url) as bed, AsyncExitStack() as stack:
        handles = []
        assert bed.reopen is not None
        for _ in range(16):  # 16 clients, each with its own connections
            durable = await stack.enter_async_context(bed.reopen())
            assert isinstance(durable, RedisDurable)
            handles.append(durable.checkpointer)

        async def race(workflow: str, inputs: list[object]) -> list[bool | StartConflict]:
            gate = asyncio.Event()

            async def start(cp: RedisCheckpointer, input: object) -> bool | StartConflict:
                await gate.wait()
                try:
                    return (await cp.admit(workflow, "pay", input)).created
                except StartConflict as conflict:
                    return conflict

            tasks = [
                asyncio.create_task(start(cp, i)) for cp, i in zip(handles, inputs, strict=True)
            ]
            await asyncio.sleep(0.05)
            gate.set()
            return await asyncio.gather(*tasks)

        same = await race("same", [{"order": 1}] * 16)
        assert sorted(same, key=str) == [False] * 15 + [True]

        split = await race("split", [{"order": n % 2} for n in range(16)])
        winner = next(r for r in split if r is True)
        assert winner is True
        assert sum(r is True for r in split) == 1
        assert sum(isinstance(r, StartConflict) for r in split) == 8
        assert sum(r is False for r in split) == 7

        cp = handles[0]
        # Every loser dropped its own member: the index holds exactly the two winners'.
        assert len(await members(cp, status_index(cp.prefix, Status.READY))) == 2
        assert len(await members(cp, kind_index(cp.prefix, "pay", Status.READY))) == 2
        assert sorted(await listed(cp, status=Status.READY)) == ["same", "split"]

        # 16 distinct workflows started at once from the 16 clients: each listed once.
        distinct = await asyncio.gather(
            *(cp.admit(f"order-{n}", "pay", n) for n, cp in enumerate(handles))
        )
        assert all(admitted.created for admitted in distinct)
        everyone = ["same", "split", *(f"order-{n}" for n in range(16))]
        await assert_every_list_exact(cp, everyone)
        assert len(await members(cp, status_index(cp.prefix, Status.READY))) == 18


async def test_a_reader_removes_members_only_of_workflows_expired_past_the_ttl(
    bed: Bed[Any],
) -> None:
    store = checkpointer_of(bed)
    cp = RedisCheckpointer(store.client, prefix=store.prefix, ttl=timedelta(milliseconds=300))
    await cp.admit("expires", "pay", 1)
    # A move in flight: its member is in, its truth script has not run yet (no life).
    await index_add(cp, "in-flight", Status.READY, "pay")
    ready = status_index(cp.prefix, Status.READY)
    assert await listed(cp, status=Status.READY) == ["expires"]
    assert len(await members(cp, ready)) == 2  # the in-flight member is young: kept
    await asyncio.sleep(0.6)
    assert await cp.status("expires") is None  # the whole workflow expired
    assert await listed(cp, status=Status.READY) == []
    assert await members(cp, ready) == []  # both older than the TTL: removed by the reader


async def test_a_settle_indexes_under_the_kind_a_start_adopted_mid_pass(bed: Bed[Any]) -> None:
    """The pass began kind-less; a start then gave the workflow a kind. settle indexed
    under no kind, its script refuses (writing nothing), and it starts over under the
    kind it is told: the finished workflow is listed under its kind."""
    cp = checkpointer_of(bed)
    began = await cp.begin("adopted", liveness=LIVE, budget=BUDGET, owner="test:1")
    assert began is not None
    assert began.holder is not None
    assert began.kind is None
    admitted = await cp.admit("adopted", "pay", {"order": 7})
    assert admitted.created
    settle = cp._scripts["settle"]
    replies: list[object] = []

    async def watched(**call: Any) -> Any:
        reply = await settle(**call)
        replies.append(reply)
        return reply

    cp._scripts._scripts["settle"] = watched  # type: ignore[assignment]
    await cp.settle(began.holder, Settlement(Status.FINISHED, 1, value="paid"))
    assert [reply[0] for reply in replies] == [0, 1]  # type: ignore[index]
    assert replies[0] == [0, "pay"]
    assert await listed(cp, status=Status.FINISHED, kind="pay") == ["adopted"]
    await assert_every_list_exact(cp, ["adopted"])
    # The refused first attempt dropped its own member: one finished member, no debris.
    assert len(await members(cp, status_index(cp.prefix, Status.FINISHED))) == 1
