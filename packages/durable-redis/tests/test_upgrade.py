"""A Redis store written by the previous release upgrades in place.

``fixtures/v1.json`` is a type-aware dump of every key four workflows left behind under
the code at main 543208e (the last commit before lifecycle; see ``fixtures/write_v1.py``,
which wrote it). Each test restores it under a fresh prefix, opens it with this code,
which migrates it (``<prefix>:schema`` absent -> 2), and finds the four listed, then runs
them to their ends.
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


def _load_writer() -> ModuleType:
    spec = importlib.util.spec_from_file_location("write_v1", FIXTURES / "write_v1.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


writer = _load_writer()


async def restore(client: Client, prefix: str) -> None:
    """Write the dump's keys back, each under ``prefix`` instead of the one it was written
    under (the queue's hash tag is the prefix, so it is replaced there too)."""
    fixture = json.loads((FIXTURES / "v1.json").read_text("utf-8"))
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
    prefix = f"{bed.extras['prefix']}:v3"
    await cp.client.set(schema_key(prefix), "3")
    assert bed.url is not None
    with pytest.raises(SchemaTooNew, match="upgrade durable-redis"):
        async with open_redis(_with_prefix(bed.url, prefix)):
            pass
