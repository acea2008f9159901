"""Group commit: records sent together share a transaction, and each keeps its own verdict."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import psycopg
import psycopg.sql
import pytest
from durable.interfaces import KeyReused, Recorded
from durable.plugins import Testbed
from durable_postgres import PostgresCheckpointer, PostgresEffect
from durable_postgres.errors import UnstorableValue
from durable_postgres.plugin import PostgresOptions, open_postgres

WRITES = 40


class _Verbatim:
    """A codec that stores strings as they are, so a NUL reaches the server, which refuses it."""

    def encode(self, value: object) -> str:
        if not isinstance(value, str):
            raise TypeError("only strings")
        return value

    def decode(self, encoded: str) -> object:
        return encoded


@pytest.mark.parametrize("group_commit", [True, False], ids=["on", "off"])
async def test_a_value_the_server_refuses_fails_only_its_own_record(
    bed: Testbed[PostgresEffect], group_commit: bool
) -> None:
    """Records sent at once, some with a value the server refuses mid-batch: those raise
    UnstorableValue by name and leave nothing; every other lands, first writer of its key."""
    assert bed.url is not None
    async with open_postgres(bed.url, codec=_Verbatim(), group_commit=group_commit) as store:
        cp = store.checkpointer
        holder = await cp.claim("wf", liveness=timedelta(minutes=1), budget=timedelta(minutes=5))
        assert holder is not None
        refused = {n for n in range(WRITES) if n % 9 == 4}

        async def one(n: int) -> object:
            value = f"bad\x00{n}" if n in refused else f"v{n}"
            try:
                return await cp.record(holder, f"k{n}", value)
            except UnstorableValue as error:
                return error

        async with asyncio.timeout(30):
            outcomes = await asyncio.gather(*(one(n) for n in range(WRITES)))
        for n, outcome in enumerate(outcomes):
            if n in refused:
                assert isinstance(outcome, UnstorableValue), (n, outcome)
                assert f"key 'k{n}'" in str(outcome)
            else:
                assert outcome == Recorded(f"v{n}", True), (n, outcome)
        loaded = await cp.load("wf")
        assert loaded == {f"k{n}": f"v{n}" for n in range(WRITES) if n not in refused}


def test_the_url_turns_group_commit_off() -> None:
    url = "postgresql://app@db/orders"
    assert PostgresOptions.read(url, {})[1].group_commit is True
    assert PostgresOptions.read(url + "?group_commit=false", {})[1].group_commit is False
    with pytest.raises(ValueError, match="group_commit"):
        PostgresOptions.read(url + "?group_commit=maybe", {})


async def _blocked(watch: psycopg.AsyncConnection[Any], schema: str, text: str) -> None:
    """Until a backend of this test's schema, whose statement contains ``text``, waits on a
    lock (bounded by the caller's timeout)."""
    while True:
        cursor = await watch.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND query LIKE %s AND query LIKE %s",
            (f"%{schema}%", f"%{text}%"),
        )
        row = await cursor.fetchone()
        if row is not None and row[0] > 0:
            return
        await asyncio.sleep(0.02)


async def test_a_batched_record_that_loses_its_key_meanwhile_gets_the_winner(
    bed: Testbed[PostgresEffect], server: str
) -> None:
    """A key taken by a write that commits while the multi-row statement runs is invisible
    to that statement's snapshot: the record is asked again alone and answers the winner's
    value (first=False), while the others of its batch land as first writers."""
    cp = bed.durable.checkpointer
    schema = str(bed.extras["schema"])
    holder = await cp.claim("wf", liveness=timedelta(minutes=1), budget=timedelta(minutes=5))
    assert holder is not None
    insert = psycopg.sql.SQL(
        "INSERT INTO {}.workflow_checkpoint (workflow, key, value) VALUES ('wf', %s, %s)"
    )
    async with (
        await psycopg.AsyncConnection.connect(server, autocommit=True) as watch,
        await psycopg.AsyncConnection.connect(server) as first,
        await psycopg.AsyncConnection.connect(server) as second,
        asyncio.timeout(30),
    ):
        table = psycopg.sql.Identifier(schema)
        await first.execute(insert.format(table), ("a", '"theirs a"'))
        await second.execute(insert.format(table), ("k", '"theirs k"'))
        # "a" goes alone and waits for `first`; k, b and c queue behind it, then go as one
        # multi-row statement, which waits for `second` on k.
        alone = asyncio.ensure_future(cp.record(holder, "a", "ours a"))
        await _blocked(watch, schema, "workflow_checkpoint")
        batch = [asyncio.ensure_future(cp.record(holder, key, f"ours {key}")) for key in "kbc"]
        await asyncio.sleep(0.05)  # let them queue behind "a"
        await first.commit()
        await _blocked(watch, schema, "json_array_elements")
        await second.commit()
        outcomes = await asyncio.gather(alone, *batch)
    assert outcomes == [
        Recorded("theirs a", False),
        Recorded("theirs k", False),
        Recorded("ours b", True),
        Recorded("ours c", True),
    ]
    assert await cp.load("wf") == {"a": "theirs a", "k": "theirs k", "b": "ours b", "c": "ours c"}


async def test_one_batch_answers_held_keys_and_its_own_duplicates_as_alone(
    bed: Testbed[PostgresEffect],
) -> None:
    """In one multi-row statement: a key already stored answers the stored value; of two
    records of one new key the earlier wins and the later reads its value (and its operation,
    so a different one is refused); two equal records of a key both count as first."""
    cp = bed.durable.checkpointer
    assert isinstance(cp, PostgresCheckpointer)
    holder = await cp.claim("wf", liveness=timedelta(minutes=1), budget=timedelta(minutes=5))
    assert holder is not None
    await cp.record(holder, "held", "old")
    writes = [
        cp.record(holder, "held", "new"),
        cp.record_as(holder, "d", "d1", "op1"),
        cp.record_as(holder, "d", "d2", "op1"),
        cp.record_as(holder, "e", "e1", "op_a"),
        cp.record_as(holder, "e", "e2", "op_b"),
        cp.record(holder, "f", "same"),
        cp.record(holder, "f", "same"),
    ]
    outcomes = await asyncio.gather(*writes, return_exceptions=True)
    assert outcomes[:4] == [
        Recorded("old", False),
        Recorded("d1", True),
        Recorded("d1", False),
        Recorded("e1", True),
    ]
    assert isinstance(outcomes[4], KeyReused)
    assert outcomes[5:] == [Recorded("same", True), Recorded("same", True)]
    assert await cp.load("wf") == {"held": "old", "d": "d1", "e": "e1", "f": "same"}


async def test_batched_releases_come_after_the_records_they_share_a_commit_with(
    bed: Testbed[PostgresEffect],
) -> None:
    """Passes that record and let go at once share commits: every record lands (the
    releases of a batch come after its records), every fresh release frees its workflow,
    and a stale holder's release, batched beside them, frees nothing."""
    cp = bed.durable.checkpointer
    live, ttl = timedelta(minutes=1), timedelta(minutes=5)
    fresh = []
    stale = []
    for n in range(WRITES):
        holder = await cp.claim(f"wf{n}", liveness=live, budget=ttl)
        assert holder is not None
        if n % 4 == 0:  # superseded: released, then claimed again by a newer pass
            await cp.release(holder)
            newer = await cp.claim(f"wf{n}", liveness=live, budget=ttl)
            assert newer is not None
            stale.append(holder)
            fresh.append(newer)
        else:
            fresh.append(holder)
    superseded = {holder.workflow for holder in stale}
    async with asyncio.timeout(30):
        outcomes = await asyncio.gather(
            *(
                step
                for holder in fresh
                if holder.workflow not in superseded
                for step in (cp.record(holder, "k", holder.workflow), cp.release(holder))
            ),
            *(cp.release(holder) for holder in stale),
        )
    recorded = [o for o in outcomes if o is not None]
    assert recorded == [Recorded(h.workflow, True) for h in fresh if h.workflow not in superseded]
    assert isinstance(cp, PostgresCheckpointer)
    for holder in fresh:
        claimed = await cp.claimed(holder.workflow)
        if holder.workflow in superseded:
            assert claimed is not None, holder
            assert claimed.token == holder.token, holder
        else:
            assert claimed is None, holder
            assert await cp.load(holder.workflow) == {"k": holder.workflow}


async def test_batched_claims_each_get_their_own_answer(bed: Testbed[PostgresEffect]) -> None:
    """Claims sent at once share commits and each is answered as alone: a free workflow is
    taken with its liveness and budget exact to the microsecond, a workflow a live pass
    holds is refused; and of two claims of one workflow in flight together exactly one
    takes it (the batch that holds both cannot upsert one row twice, and goes again as
    single-row statements)."""
    cp = bed.durable.checkpointer
    assert isinstance(cp, PostgresCheckpointer)
    live = timedelta(days=1, seconds=7, microseconds=3)
    ttl = timedelta(days=2, microseconds=11)
    held = {f"wf{n}" for n in range(0, WRITES, 5)}
    for workflow in held:
        assert await cp.claim(workflow, liveness=live, budget=ttl) is not None

    async def claims(asked: list[str]) -> dict[str, list[int]]:
        async with asyncio.timeout(30):
            answers = await asyncio.gather(
                *(cp.claim(workflow, liveness=live, budget=ttl) for workflow in asked)
            )
        taken: dict[str, list[int]] = {}
        for workflow, answer in zip(asked, answers, strict=True):
            if answer is not None:
                assert answer.workflow == workflow
                taken.setdefault(workflow, []).append(answer.token)
        return taken

    taken = await claims([f"wf{n}" for n in range(WRITES)])
    assert set(taken) == {f"wf{n}" for n in range(WRITES)} - held
    for workflow, tokens in taken.items():
        assert tokens == [1], (workflow, tokens)
        claimed = await cp.claimed(workflow)
        assert claimed is not None
        assert claimed.token == 1
        assert claimed.budget_until - claimed.live_until == ttl - live

    twice = [f"again{n}" for n in range(WRITES // 2)]
    taken = await claims(twice + twice)
    assert taken == {workflow: [1] for workflow in twice}


async def test_histories_read_together_each_get_their_own(bed: Testbed[PostgresEffect]) -> None:
    """Histories asked at once are read together, and each caller gets its own workflow's
    records, in order, exactly as a read of its own returns them (none for a workflow
    without records)."""
    cp = bed.durable.checkpointer
    assert isinstance(cp, PostgresCheckpointer)
    live, ttl = timedelta(minutes=1), timedelta(minutes=5)
    names = [f"wf{n}" for n in range(WRITES)]
    for n, workflow in enumerate(names):
        holder = await cp.claim(workflow, liveness=live, budget=ttl)
        assert holder is not None
        for k in range(n % 4):
            await cp.record_as(holder, f"k{k}", [workflow, k], f"op{k}")
    alone = [await cp.history(workflow) for workflow in names]
    async with asyncio.timeout(30):
        together = await asyncio.gather(*(cp.history(workflow) for workflow in names))
    assert together == alone
    assert [[(e.key, e.value, e.operation) for e in h] for h in together] == [
        [(f"k{k}", [workflow, k], f"op{k}") for k in range(n % 4)]
        for n, workflow in enumerate(names)
    ]
