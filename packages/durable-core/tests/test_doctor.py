"""``durable doctor``: each finding made real on every store (memory, SQLite, Postgres, Redis),
by killing a worker mid-pass (SIGKILL) and by writing the store's own rows and keys the way a
crash leaves them, then found by ``durable.doctor.examine`` and by the command.

A server that does not answer is skipped with the reason (the fixtures of test_guards.py)."""

from __future__ import annotations

import asyncio
import json
import os
import queue
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import durable
import pytest
from durable import doctor
from durable.interfaces import Durable, Failure, Lifecycle, Settlement, Status
from durable.workflows import LifecycleDurable

HERE = Path(__file__).parent
PATIENCE = 30.0


@pytest.fixture
async def store(url: str) -> AsyncIterator[Durable[Any]]:
    async with durable.open(url) as opened:
        yield opened


def _option(url: str, name: str) -> str:
    return parse_qs(urlsplit(url).query)[name][0]


def _lifecycle(store: Durable[Any]) -> Lifecycle:
    checkpointer: object = store.checkpointer
    assert isinstance(checkpointer, Lifecycle)
    return checkpointer


async def _unqueue(url: str, store: Durable[Any], workflow: str) -> None:
    """Remove ``workflow``'s queue entry the way a crash (or a lost key) leaves it: by the
    store's own rows and keys, not through its API."""
    scheme = urlsplit(url).scheme
    if scheme == "memory":
        scheduler: Any = store.scheduler
        del scheduler._entries[workflow]
    elif scheme == "sqlite":
        with sqlite3.connect(urlsplit(url).path) as raw:
            raw.execute("DELETE FROM durable_queue WHERE workflow = ?", (workflow,))
    elif scheme.startswith("postgres"):
        import psycopg

        schema = _option(url, "schema")
        with psycopg.connect(url.split("?")[0], autocommit=True) as raw:
            raw.execute(f'DELETE FROM "{schema}".workflow_queue WHERE workflow = %s', (workflow,))
    else:
        sched: Any = store.scheduler
        client = sched.client
        await client.hdel(sched.current_key, workflow)
        await client.zrem(sched.deadlines_key, workflow)


def _names(report: doctor.Report, name: str) -> tuple[str, ...]:
    found = report.finding(name)
    assert found is not None, f"no {name} finding in {report.as_json()}"
    return found.ids


async def test_a_clean_store_needs_nothing(store: Durable[Any]) -> None:
    assert isinstance(store, LifecycleDurable)
    await store.start("payout", "wf-ready", {"amount": 1})
    report = await doctor.examine(store)
    assert not report.attention, report.as_json()
    assert report.examined == 1
    assert all(f.count == 0 for f in report.findings if f.name != "schema")


async def test_records_without_a_queue_entry_are_orphans_and_repair_requeues_them(
    url: str, store: Durable[Any]
) -> None:
    assert isinstance(store, LifecycleDurable)
    # A record written by the checkpointer alone: a split store's crash before it queued.
    await store.checkpointer.supply("wf-supplied", "confirm", True)
    # A started workflow whose queue row (key) is gone.
    await store.start("payout", "wf-started", {"amount": 1})
    await _unqueue(url, store, "wf-started")
    # Blocked and sleeping workflows are not orphans, nor is a queued one.
    await store.start("payout", "wf-queued", None)
    report = await doctor.examine(store)
    assert _names(report, "orphans") == ("wf-started", "wf-supplied")
    assert report.attention
    repaired = await doctor.examine(store, repair=True)
    orphans = repaired.finding("orphans")
    assert orphans is not None
    assert orphans.repaired
    assert not repaired.attention
    assert "wf-started" in orphans.repaired[0]
    for workflow in ("wf-started", "wf-supplied"):
        assert await store.scheduler.scheduled(workflow) is not None  # type: ignore[attr-defined]
    assert _names(await doctor.examine(store), "orphans") == ()


async def test_a_running_workflow_whose_pass_died_has_a_lapsed_claim(
    url: str, store: Durable[Any], tmp_path: Path
) -> None:
    assert isinstance(store, LifecycleDurable)
    if url == "memory://":
        # No other process can share a memory store: the pass begins here and is abandoned.
        began = await _lifecycle(store).begin(
            "wf-1",
            liveness=timedelta(milliseconds=200),
            budget=timedelta(minutes=1),
            owner="gone",
        )
        assert began is not None
        await asyncio.sleep(0.4)
    else:
        await store.start("hang", "wf-1", None)
        worker = _Worker(url, "doctor_bodies:hang", "--liveness", "1")
        try:
            worker.wait_for("began wf-1")
        finally:
            worker.kill()
        await asyncio.sleep(1.5)  # the liveness of the killed pass lapses
    report = await doctor.examine(store)
    assert _names(report, "lapsed_claims") == ("wf-1",)
    assert report.attention


async def test_ready_and_untaken_for_too_long_is_stale(store: Durable[Any]) -> None:
    assert isinstance(store, LifecycleDurable)
    await store.start("payout", "wf-1", None)
    assert _names(await doctor.examine(store), "stale_ready") == ()
    later = datetime.now(UTC) + timedelta(hours=1)
    report = await doctor.examine(store, now=later)
    assert _names(report, "stale_ready") == ("wf-1",)


async def test_failed_and_repeatedly_attempted_workflows_are_failing(
    store: Durable[Any],
) -> None:
    assert isinstance(store, LifecycleDurable)
    lifecycle = _lifecycle(store)
    for workflow in ("wf-failed", "wf-retrying"):
        await store.start("payout", workflow, None)
        began = await lifecycle.begin(
            workflow, liveness=timedelta(minutes=1), budget=timedelta(minutes=1), owner="me"
        )
        assert began is not None
        assert began.holder is not None
        failure = Failure("ValueError", "no", "", 4)
        if workflow == "wf-failed":
            settlement = Settlement(Status.FAILED, attempts=1, failure=failure)
        else:
            until = datetime.now(UTC) + timedelta(hours=1)
            settlement = Settlement(Status.SLEEPING, attempts=4, failure=failure, until=until)
        await lifecycle.settle(began.holder, settlement)
    report = await doctor.examine(store)
    assert _names(report, "failing") == ("wf-failed", "wf-retrying")
    assert _names((await doctor.examine(store, attempts=5)), "failing") == ("wf-failed",)


async def test_messages_an_ended_workflow_never_read_are_dead_letters(
    store: Durable[Any],
) -> None:
    assert isinstance(store, LifecycleDurable)
    lifecycle = _lifecycle(store)
    await store.start("payout", "wf-1", None)
    await store.send("wf-1", "late")
    began = await lifecycle.begin(
        "wf-1", liveness=timedelta(minutes=1), budget=timedelta(minutes=1), owner="me"
    )
    assert began is not None
    assert began.holder is not None
    await lifecycle.settle(began.holder, Settlement(Status.FINISHED, attempts=1, value="ok"))
    report = await doctor.examine(store)
    assert _names(report, "dead_letters") == ("wf-1",)
    dead = report.finding("dead_letters")
    assert dead is not None
    assert dead.advice.startswith("1 inbox message")


async def test_a_schema_behind_the_release_has_pending_migrations(
    url: str, store: Durable[Any]
) -> None:
    scheme = urlsplit(url).scheme
    report = await doctor.examine(store)
    if scheme == "memory":
        assert report.finding("schema") is None
        assert any("schema" in said for said in report.unreported)
        return
    schema = report.finding("schema")
    assert schema is not None
    assert not schema.attention
    # SQLite and Postgres are at 4 (3 queue limits, 4 operations), Redis at 2: current
    # either way, the store's own version and the release's the same.
    assert re.search(r"schema version (\d+) of \1\b", schema.advice), schema.advice
    if scheme == "sqlite":
        with sqlite3.connect(urlsplit(url).path) as raw:
            raw.execute("UPDATE durable_meta SET value = 1 WHERE name = 'schema_version'")
    elif scheme.startswith("postgres"):
        import psycopg

        name = _option(url, "schema")
        with psycopg.connect(url.split("?")[0], autocommit=True) as raw:
            raw.execute(f'DELETE FROM "{name}".workflow_schema_version')
            raw.execute(f'INSERT INTO "{name}".workflow_schema_version (version) VALUES (1)')
    else:
        client: Any = store.checkpointer.client  # type: ignore[attr-defined]
        await client.set(f"{_option(url, 'prefix')}:schema", "1")
    behind = await doctor.examine(store)
    found = behind.finding("schema")
    assert found is not None
    assert found.attention
    assert "pending" in found.advice
    assert behind.attention


async def test_redis_consumers_of_killed_workers_are_found_and_the_idle_removed(
    url: str, store: Durable[Any]
) -> None:
    if not url.startswith("redis"):
        pytest.skip("consumer groups are Redis's")
    assert isinstance(store, LifecycleDurable)
    await store.start("quick", "wf-quick", None)
    sched: Any = store.scheduler
    idle = _Worker(url, "doctor_bodies:quick")
    try:
        idle.wait_for("finished wf-quick")
        # Killed once it has answered for its delivery: it holds nothing pending.
        deadline = time.monotonic() + PATIENCE
        while (await sched.client.xpending(sched.stream_key, sched.group))["pending"]:
            assert time.monotonic() < deadline, "the worker never answered for wf-quick"
            await asyncio.sleep(0.05)
    finally:
        idle.kill()
    await store.start("hang", "wf-hang", None)
    holding = _Worker(url, "doctor_bodies:hang")
    try:
        holding.wait_for("began wf-hang")
    finally:
        holding.kill()
    before = await sched.client.xinfo_consumers(sched.stream_key, sched.group)
    assert len(before) == 2
    report = await doctor.examine(store, stale=timedelta(0))
    assert len(_names(report, "dead_consumers")) == 2
    repaired = await doctor.examine(store, stale=timedelta(0), repair=True)
    found = repaired.finding("dead_consumers")
    assert found is not None
    assert found.repaired
    assert "removed 1" in found.repaired[0]
    assert found.attention  # the one still holding a delivery is left for a person
    after = await sched.client.xinfo_consumers(sched.stream_key, sched.group)
    assert [int(c["pending"]) for c in after] == [1]


def test_the_command_exits_9_with_findings_and_0_once_repaired(url: str) -> None:
    if url == "memory://":
        pytest.skip("a memory store lives in one process; the command opens its own")
    environment = _environment()
    # `start`, then lose the queue entry the way a crash would.
    subprocess.run(
        [sys.executable, "-m", "durable.cli", "start", url, "payout", "wf-1"],
        env=environment,
        check=True,
        capture_output=True,
    )

    async def unqueue() -> None:
        async with durable.open(url) as opened:
            await _unqueue(url, opened, "wf-1")

    asyncio.run(unqueue())

    def doctor_says(*options: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "durable.cli", "doctor", url, *options],
            env=environment,
            capture_output=True,
            text=True,
            timeout=PATIENCE,
            check=False,
        )

    found = doctor_says("--json")
    assert found.returncode == 9, found.stderr
    shown = json.loads(found.stdout)
    assert shown["attention"] is True
    orphans = next(f for f in shown["findings"] if f["name"] == "orphans")
    assert (orphans["count"], orphans["ids"]) == (1, ["wf-1"])
    repaired = doctor_says("--repair")
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    assert "repaired: requeued 1 orphaned workflow(s): wf-1" in repaired.stdout
    assert doctor_says().returncode == 0


def _environment() -> dict[str, str]:
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    return environment


class _Worker:
    """``durable worker`` in a subprocess, killed with SIGKILL: no chance to clean up."""

    def __init__(self, url: str, body: str, *options: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "durable.cli", "worker", url, body, *options],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=_environment(),
        )
        self.log: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._lines.put(line)
        self._lines.put(None)

    def wait_for(self, text: str) -> None:
        deadline = time.monotonic() + PATIENCE
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.log.append(line)
            if text in line:
                return
        raise AssertionError(f"the worker never logged {text!r}; its log:\n{''.join(self.log)}")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=PATIENCE)
