"""A Redis store written by an earlier release upgrades in place.

``fixtures/v1.json`` is a type-aware dump of every key four workflows left behind under
the code at main 543208e (the last commit before lifecycle; see ``fixtures/write_v1.py``,
which wrote it). Each test restores it under a fresh prefix, opens it with this code,
which migrates it (``<prefix>:schema`` absent -> the current version), and finds the four
listed, then runs them to their ends.

``fixtures/v2.json`` is the same dump of schema 2 (main a321884, the last commit before
Redis routed by queue; ``fixtures/write_v2.py``): workflows of queue ``payments`` waiting
on the one stream version 2 had. The upgrade to 3 routes them to their queue.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from durable.interfaces import Status
from durable.plugins import Testbed as Bed
from durable.worker import work
from durable.workflows import Workflows
from durable_redis import RedisDurable, SchemaTooNew
from durable_redis.durable import SCHEMA_VERSION
from durable_redis.keys import schema_key, status_index
from durable_redis.plugin import open_redis
from durable_redis.scripts import Client
from durable_redis.testing import _with_prefix

FIXTURES = Path(__file__).parent / "fixtures"


def _load_writer(name: str = "write_v1") -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, FIXTURES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


writer = _load_writer()
writer_v2 = _load_writer("write_v2")


async def restore(client: Client, prefix: str, dump: str = "v1.json") -> None:
    """Write the dump's keys back, each under ``prefix`` instead of the one it was written
    under (the queue's hash tag is the prefix, so it is replaced there too)."""
    fixture = json.loads((FIXTURES / dump).read_text("utf-8"))
    old = fixture["prefix"]
    for entry in fixture["keys"]:
        key = entry["key"].replace(old, prefix)
        value = entry["value"]
        if entry["type"] == "hash":
            await client.hset(key, mapping=value)
        elif entry["type"] == "zset":
            await client.zadd(key, {member: score for member, score in value})
        elif entry["type"] == "string":
            await client.set(key, value)
        elif entry["type"] == "stream":
            for id_, fields in value:
                await client.xadd(key, fields, id=id_)
            for group in entry["groups"]:
                await client.xgroup_create(key, group["name"], id=group["last_delivered_id"])
        else:
            raise AssertionError(f"no restore for {entry['type']}")


@pytest.fixture
async def v1(bed: Bed[Any]) -> str:
    """The URL of a store restored from the fixture, not yet opened by this code. Its
    prefix sits under the testbed's, so the testbed's cleanup removes it."""
    assert isinstance(bed.durable, RedisDurable)
    prefix = f"{bed.extras['prefix']}:v1"
    await restore(bed.durable.checkpointer.client, prefix)
    assert bed.url is not None
    return _with_prefix(bed.url, prefix)


async def test_the_previous_release_upgrades_in_place(v1: str) -> None:
    async with open_redis(v1) as first, open_redis(v1) as second:
        pass  # two preparers, one after the other while the first is open
    async with open_redis(v1) as durable:
        cp = durable.checkpointer
        assert await cp.client.get(schema_key(cp.prefix)) == str(SCHEMA_VERSION)
        assert await durable.migrate() == 0  # a later open migrates nothing
        del first, second

        page = await durable.list()
        found = {status.workflow: status for status in page.statuses}
        assert sorted(found) == sorted(writer.WORKFLOWS)
        assert {wf: s.status for wf, s in found.items()} == {
            "v1-queued": Status.READY,
            "v1-sleeping": Status.SLEEPING,
            "v1-blocked": Status.BLOCKED,
            "v1-done": Status.BLOCKED,  # nothing in version 1 tells finished from blocked
        }
        assert all(status.kind is None and status.attempts == 0 for status in found.values())
        sleeping = found["v1-sleeping"]
        assert sleeping.until is not None
        assert sleeping.until > datetime.now(UTC) + timedelta(days=300)
        # Each one is in exactly one status zset, once.
        for status in Status:
            members = await cp.client.zrange(status_index(cp.prefix, status), 0, -1)
            assert len(members) == sum(s.status is status for s in found.values())

        stop = asyncio.Event()
        worker = asyncio.create_task(
            work(
                durable,
                Workflows.of(writer.body),
                poll=timedelta(milliseconds=50),
                tick=timedelta(milliseconds=50),
                stop=stop,
            )
        )
        try:
            queued = await durable.handle("v1-queued").result(timeout=30)
            assert queued == {"message": "hello from v1", "greeting": "hello v1-queued"}
            await durable.arrive("v1-blocked", "approval", True)
            blocked = await durable.handle("v1-blocked").result(timeout=30)
            assert blocked == {"approved": True, "greeting": "hello v1-blocked"}
        finally:
            stop.set()
            await worker
        for workflow in ("v1-queued", "v1-blocked"):
            now = await durable.status(workflow)
            assert now is not None
            assert now.status is Status.FINISHED
        finished = await durable.list(status=Status.FINISHED)
        assert sorted(s.workflow for s in finished.statuses) == ["v1-blocked", "v1-queued"]
        assert (await durable.status("v1-sleeping")).status is Status.SLEEPING  # type: ignore[union-attr]


async def test_two_preparers_at_once_migrate_each_workflow_once(v1: str) -> None:
    async def open_and_count() -> int:
        async with open_redis(v1) as durable:
            return len((await durable.list()).statuses)

    assert await asyncio.gather(*(open_and_count() for _ in range(4))) == [4, 4, 4, 4]
    async with open_redis(v1) as durable:
        cp = durable.checkpointer
        members: list[str] = []
        for status in Status:
            members += [
                str(m) for m in await cp.client.zrange(status_index(cp.prefix, status), 0, -1)
            ]
        assert sorted(m.split("|", 1)[1] for m in members) == sorted(writer.WORKFLOWS)


async def test_a_newer_schema_is_refused(bed: Bed[Any]) -> None:
    assert isinstance(bed.durable, RedisDurable)
    cp = bed.durable.checkpointer
    prefix = f"{bed.extras['prefix']}:v9"
    await cp.client.set(schema_key(prefix), str(SCHEMA_VERSION + 1))
    assert bed.url is not None
    with pytest.raises(SchemaTooNew, match="upgrade durable-redis"):
        async with open_redis(_with_prefix(bed.url, prefix)):
            pass


@pytest.fixture
async def v2(bed: Bed[Any]) -> str:
    """The URL of a store restored from the schema 2 fixture, not yet opened by this code."""
    assert isinstance(bed.durable, RedisDurable)
    prefix = f"{bed.extras['prefix']}:v2"
    await restore(bed.durable.checkpointer.client, prefix, "v2.json")
    assert bed.url is not None
    return _with_prefix(bed.url, prefix)


async def _entries(durable: RedisDurable, queue: str) -> list[str]:
    scheduler = durable.scheduler
    entries: Any = await scheduler.client.xrange(scheduler.stream_of(queue))
    return [str(fields["w"]) for _, fields in entries]


async def test_schema_2_upgrades_in_place_and_routes_what_waits(v2: str) -> None:
    """Three preparers at once migrate it once: the payments workflow that version 2 queued
    on its one stream moves to the payments stream, and every pending workflow has its
    route. A worker of "default" then runs only the default one; the payments one waits,
    ready, for a worker of "payments"; the sleeper wakes into "payments"."""

    async def open_and_list() -> int:
        async with open_redis(v2) as durable:
            return len((await durable.list()).statuses)

    assert await asyncio.gather(*(open_and_list() for _ in range(3))) == [4, 4, 4]
    quick = timedelta(milliseconds=50)
    async with open_redis(v2) as durable:
        cp, scheduler = durable.checkpointer, durable.scheduler
        assert await cp.client.get(schema_key(cp.prefix)) == str(SCHEMA_VERSION) == "3"
        assert await durable.migrate() == 0
        assert await _entries(durable, "payments") == ["v2-pay-ready"]
        assert await _entries(durable, "default") == ["v2-mail-ready"]
        assert await scheduler.queues() == ["default", "payments"]
        assert await cp.client.hgetall(scheduler.routes_key) == {
            "v2-pay-ready": "payments",
            "v2-mail-ready": "default",
            "v2-pay-sleeping": "payments",
        }
        found = {s.workflow: s.status for s in (await durable.list()).statuses}
        assert found == {
            "v2-pay-sleeping": Status.SLEEPING,
            "v2-pay-ready": Status.READY,
            "v2-mail-ready": Status.READY,
            "v2-done": Status.FINISHED,
        }

        stop = asyncio.Event()
        worker = asyncio.create_task(
            work(durable, writer_v2.registry, queues=["default"], poll=quick, tick=quick, stop=stop)
        )
        try:
            mailed = await durable.handle("v2-mail-ready").result(timeout=30)
            assert mailed == {"mailed": "mailed o-4"}
        finally:
            stop.set()
            await asyncio.wait_for(worker, 60)
        paying = await durable.status("v2-pay-ready")
        assert paying is not None
        assert (paying.status, paying.attempts) == (Status.READY, 0)

        stop = asyncio.Event()
        worker = asyncio.create_task(
            work(
                durable, writer_v2.registry, queues=["payments"], poll=quick, tick=quick, stop=stop
            )
        )
        try:
            paid = await durable.handle("v2-pay-ready").result(timeout=30)
            assert paid == {"paid": "paid o-3"}
        finally:
            stop.set()
            await asyncio.wait_for(worker, 60)

        far = datetime.now(UTC) + timedelta(days=20 * 365)
        assert await scheduler.wake_due(far) == ("v2-pay-sleeping",)
        assert await scheduler.next_ready_in(frozenset({"default"}), quick) is None
        woken = await scheduler.next_ready_in(frozenset({"payments"}), quick)
        assert woken is not None
        assert woken.workflow == "v2-pay-sleeping"
        await scheduler.wake_at(woken, far)


async def test_records_the_previous_release_wrote_read_as_written_before_operations(
    v1: str,
) -> None:
    """A record packed before operations were kept (``<position>:<microseconds>:<encoding>``,
    no comma) reads as it did, with no operation, and is refused to no operation; a record
    written now keeps its own, beside it in the same hash. The packing changed by an
    optional suffix, so no migration is needed and none is run for it."""
    async with open_redis(v1) as durable:
        cp = durable.checkpointer
        old = await cp.history("v1-blocked")
        assert [(e.key, e.operation) for e in old] == [("greet", None)]
        assert await cp.load("v1-blocked") == {"greet": "hello v1-blocked"}
        holder = await cp.claim(
            "v1-blocked", liveness=timedelta(minutes=1), budget=timedelta(minutes=5)
        )
        assert holder is not None
        kept = await cp.record_as(holder, "greet", "other", "awaiting")
        assert (kept.value, kept.first) == ("hello v1-blocked", False)
        await cp.record_as(holder, "later", 1, "step")
        assert [(e.key, e.operation) for e in await cp.history("v1-blocked")] == [
            ("greet", None),
            ("later", "step"),
        ]
        await cp.release(holder)
