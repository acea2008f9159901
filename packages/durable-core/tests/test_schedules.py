"""Schedules: ticks by cron and interval, the missed-tick policies, and one workflow per tick
however many workers race for it, on every store (and across processes on SQLite)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import durable
import pytest
from durable import ManualClock
from durable.interfaces import Durable
from durable.run import Run
from durable.schedules import (
    REGISTRY,
    Missed,
    Schedules,
    Ticker,
    UnknownSchedule,
    tick_workflow,
)
from durable.worker import work
from durable.workflows import Kind, LifecycleDurable, Workflows

T0 = datetime(2026, 1, 1, tzinfo=UTC)
MINUTE = timedelta(minutes=1)
WORKERS = 8

workflows = Workflows()


@workflows.kind("settle")
async def settle(run: Run[Any], day: object) -> object:
    return day


@pytest.fixture
async def handles(url: str) -> AsyncIterator[list[Durable[Any]]]:
    """``WORKERS`` handles on one store: separate connections, except for the in-memory
    store, which lives in one handle (its racers are tasks interleaving at every move)."""
    async with durable.open(url) as first:
        if url == "memory://":
            yield [first] * WORKERS
            return
        opened = [durable.open(url) for _ in range(WORKERS - 1)]
        others = [await each.__aenter__() for each in opened]
        try:
            yield [first, *others]
        finally:
            for each in opened:
                await each.__aexit__(None, None, None)


async def tick_ids(store: Durable[Any], kind: str = "settle") -> list[str]:
    lifecycle: Any = store
    found: list[str] = []
    cursor = None
    while True:
        page = await lifecycle.list(kind=kind, cursor=cursor, limit=500)
        found += [status.workflow for status in page.statuses]
        cursor = page.cursor
        if cursor is None:
            return sorted(found)


def one_per_tick(started: list[str], expected: list[str]) -> None:
    """The check the races make: exactly the expected tick workflows, each once."""
    assert started == sorted(expected), (
        f"{len(started)} workflows for {len(expected)} ticks; extra: "
        f"{sorted(set(started) - set(expected))[:5]}, missing: "
        f"{sorted(set(expected) - set(started))[:5]}"
    )


# --- ticks -------------------------------------------------------------------------------


async def test_an_interval_ticks_on_multiples_of_itself_since_the_epoch() -> None:
    async with durable.open("memory://") as store:
        made = await Schedules(store, clock=ManualClock(T0)).create(
            "five", "settle", every=timedelta(minutes=5)
        )
    ticks = made.ticks(T0 + timedelta(minutes=3), T0 + timedelta(minutes=15))
    assert ticks == [T0 + timedelta(minutes=m) for m in (5, 10, 15)]
    assert made.ticks(T0, T0 + timedelta(hours=1), most=2) == [
        T0 + timedelta(minutes=55),
        T0 + timedelta(minutes=60),
    ]
    assert tick_workflow("five", ticks[0]) == "five@2026-01-01T00:05:00Z"


async def test_a_cron_expression_is_read_in_the_schedules_time_zone() -> None:
    async with durable.open("memory://") as store:
        made = await Schedules(store, clock=ManualClock(T0)).create(
            "nightly", "settle", cron="30 2 * * *", zone="Europe/Berlin"
        )
    # 02:30 in Berlin is 01:30 UTC in winter, 00:30 UTC in summer; on 29 March 2026 02:30
    # does not exist (the clocks jump from 02:00 to 03:00) and cronsim runs it at 03:00.
    winter = made.ticks(datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 3, tzinfo=UTC))
    assert winter == [datetime(2026, 1, d, 1, 30, tzinfo=UTC) for d in (1, 2)]
    spring = made.ticks(
        datetime(2026, 3, 28, 12, tzinfo=UTC), datetime(2026, 3, 30, 12, tzinfo=UTC)
    )
    assert spring == [
        datetime(2026, 3, 29, 1, 0, tzinfo=UTC),
        datetime(2026, 3, 30, 0, 30, tzinfo=UTC),
    ]


async def test_a_bad_schedule_is_refused_before_anything_is_written() -> None:
    async with durable.open("memory://") as store:
        schedules = Schedules(store)
        for wrong in (
            {"cron": "61 * * * *"},
            {"cron": "* * * * *", "every": MINUTE},
            {},
            {"every": timedelta(milliseconds=500)},
            {"cron": "0 2 * * *", "zone": "Mars/Olympus"},
            {"every": MINUTE, "missed": "sometimes"},
        ):
            with pytest.raises(ValueError, match=r"cron|every|zone|missed"):
                await schedules.create("bad", "settle", **wrong)
        with pytest.raises(ValueError, match="schedule name"):
            await schedules.create("no spaces", "settle", every=MINUTE)
        assert await store.checkpointer.load(REGISTRY) == {}


# --- the API -----------------------------------------------------------------------------


async def test_schedules_are_created_listed_paused_resumed_and_deleted(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    clock = ManualClock(T0)
    async with durable.open(url) as store:
        schedules = Schedules(store, clock=clock)
        made = await schedules.create(
            "nightly", settle, cron="0 2 * * *", input={"ledger": "eu"}, zone="Europe/Berlin"
        )
        assert (made.kind, made.input, made.paused, made.missed) == (
            "settle",
            {"ledger": "eu"},
            False,
            Missed.SKIP,
        )
        # Created again exactly as it is: nothing appended.
        before = len(await store.checkpointer.load(REGISTRY))
        assert (
            await schedules.create(
                "nightly", settle, cron="0 2 * * *", input={"ledger": "eu"}, zone="Europe/Berlin"
            )
            == made
        )
        assert len(await store.checkpointer.load(REGISTRY)) == before
        await schedules.create("often", "settle", every=MINUTE, missed="each")
        clock.advance(MINUTE)
        assert (await schedules.pause("nightly")).paused
    # It survives a restart: another handle reads the same events.
    async with durable.open(url) as store:
        schedules = Schedules(store, clock=clock)
        assert [s.name for s in await schedules.list()] == ["nightly", "often"]
        clock.advance(MINUTE)
        resumed = await schedules.resume("nightly")
        assert not resumed.paused
        assert resumed.since == T0 + 2 * MINUTE
        await schedules.delete("often")
        assert [s.name for s in await schedules.list()] == ["nightly"]
        with pytest.raises(UnknownSchedule):
            await schedules.pause("often")
        assert await schedules.get("often") is None


# --- missed ticks ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("policy", "expected"),
    [("skip", []), ("once", [10]), ("each", list(range(1, 11)))],
)
async def test_ticks_missed_while_no_worker_ran_follow_the_policy(
    policy: str, expected: list[int]
) -> None:
    clock = ManualClock(T0)
    async with durable.open("memory://") as store:
        await Schedules(store, clock=clock).create(
            "often", "settle", every=2 * MINUTE, missed=policy
        )
        # Ten ticks fall due and the newest is 90 s old when the first worker looks: all missed.
        clock.advance(20 * MINUTE + timedelta(seconds=90))
        started = await Ticker(store, workflows, clock=clock).look()
        assert started == [tick_workflow("often", T0 + 2 * m * MINUTE) for m in expected]
        # A second worker starting now finds the last tick fired and starts nothing again.
        assert await Ticker(store, workflows, clock=clock).look() == []


async def test_a_running_worker_starts_each_tick_and_none_while_paused() -> None:
    clock = ManualClock(T0)
    async with durable.open("memory://") as store:
        schedules = Schedules(store, clock=clock)
        await schedules.create("often", "settle", every=MINUTE, input="x")
        ticker = Ticker(store, workflows, clock=clock)
        fired: list[str] = []
        for _ in range(3):
            clock.advance(MINUTE)
            fired += await ticker.look()
        await schedules.pause("often")
        for _ in range(3):
            clock.advance(MINUTE)
            fired += await ticker.look()
        await schedules.resume("often")
        clock.advance(timedelta(seconds=30))
        fired += await ticker.look()  # nothing due since the resume yet
        clock.advance(timedelta(seconds=30))
        fired += await ticker.look()
        assert fired == [tick_workflow("often", T0 + m * MINUTE) for m in (1, 2, 3, 7)]
        # A worker that does not serve the kind starts nothing.
        clock.advance(MINUTE)
        assert await Ticker(store, Workflows(), clock=clock).look() == []


# --- one workflow per tick, however many race --------------------------------------------


async def non_idempotent_start(
    store: LifecycleDurable[Any], kind: Kind[Any, Any], workflow: str, input: object
) -> object:
    """A starter that does not let the store pick one winner: each caller makes its own id."""
    return await store.start(kind, f"{workflow}~{uuid.uuid4().hex[:6]}", input)


async def race(
    handles: list[Durable[Any]], steps: int, **ticker: Any
) -> tuple[list[str], Counter[str]]:
    """``steps`` ticks, each looked at by one ticker per handle at once; the tick ids, and
    how many tickers started each."""
    clock = ManualClock(T0)
    await Schedules(handles[0], clock=clock).create("often", "settle", every=MINUTE, input=1)
    tickers = [Ticker(handle, workflows, clock=clock, **ticker) for handle in handles]
    attempts: Counter[str] = Counter()
    for _ in range(steps):
        clock.advance(MINUTE)
        for started in await asyncio.gather(*(t.look() for t in tickers)):
            attempts.update(started)
    return [tick_workflow("often", T0 + m * MINUTE) for m in range(1, steps + 1)], attempts


async def test_eight_tickers_racing_start_one_workflow_per_tick(
    handles: list[Durable[Any]],
) -> None:
    expected, attempts = await race(handles, steps=6)
    # The first tick may be found started by a ticker's first look; every later one is
    # started by all eight, and the store keeps one.
    assert [attempts[tick] for tick in expected[1:]] == [WORKERS] * 5
    one_per_tick(await tick_ids(handles[0]), expected)


async def test_the_race_catches_a_starter_that_double_fires(
    handles: list[Durable[Any]],
) -> None:
    expected, _ = await race(handles, steps=2, start=non_idempotent_start)
    with pytest.raises(AssertionError, match="workflows for 2 ticks"):
        one_per_tick(await tick_ids(handles[0]), expected)


async def test_eight_workers_racing_start_and_run_one_workflow_per_tick(
    handles: list[Durable[Any]],
) -> None:
    clock = ManualClock(T0)
    await Schedules(handles[0], clock=clock).create("often", "settle", every=MINUTE, input=7)
    stop = asyncio.Event()
    workers = [
        asyncio.create_task(
            work(
                handle,
                workflows,
                clock=clock,
                poll=timedelta(milliseconds=20),
                tick=timedelta(milliseconds=10),
                stop=stop,
            )
        )
        for handle in handles
    ]
    store: Any = handles[0]
    expected: list[str] = []
    try:
        for minute in range(1, 5):
            clock.advance(MINUTE)
            expected.append(tick_workflow("often", T0 + minute * MINUTE))
            for _ in range(3000):  # a worker starts it within a few of its 10 ms looks
                if await store.status(expected[-1]) is not None:
                    break
                await asyncio.sleep(0.01)
            assert await store.handle(expected[-1]).result(timeout=30) == 7
    finally:
        stop.set()
        await asyncio.gather(*workers)
    one_per_tick(await tick_ids(store), expected)


CHILD = textwrap.dedent(
    """
    import asyncio, sys
    from datetime import timedelta

    import durable
    from durable.worker import work
    from test_schedules import workflows

    async def main() -> None:
        stop = asyncio.Event()
        async with durable.open(sys.argv[1]) as store:
            task = asyncio.create_task(work(
                store, workflows, poll=timedelta(milliseconds=50),
                tick=timedelta(milliseconds=20), stop=stop,
            ))
            await asyncio.sleep(float(sys.argv[2]))
            stop.set()
            await task

    asyncio.run(main())
    """
)


def test_worker_processes_racing_on_one_sql_store_start_one_workflow_per_tick(
    sql_url: str,
) -> None:
    url = sql_url

    async def create() -> None:
        async with durable.open(url) as store:
            await Schedules(store).create("often", "settle", every=timedelta(seconds=1), input=3)

    asyncio.run(create())
    here = str(Path(__file__).resolve().parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])}
    children = [
        subprocess.Popen([sys.executable, "-c", CHILD, url, "4"], env=env) for _ in range(4)
    ]
    for child in children:
        assert child.wait(timeout=60) == 0

    async def check() -> None:
        async with durable.open(url) as store:
            started = await tick_ids(store)
            assert len(started) >= 2, started
            moments = [datetime.strptime(s.split("@")[1], "%Y-%m-%dT%H:%M:%S%z") for s in started]
            # consecutive seconds, none twice, none skipped between the first and the last
            expected = [
                tick_workflow("often", moments[0] + timedelta(seconds=n))
                for n in range(len(moments))
            ]
            one_per_tick(started, expected)

    asyncio.run(check())


# --- the command -------------------------------------------------------------------------


def test_the_schedule_command_creates_lists_pauses_resumes_and_deletes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from durable.cli import main

    url = f"sqlite:///{tmp_path / 'store.db'}"
    assert (
        main(
            [
                "schedule",
                url,
                "create",
                "nightly",
                "--kind",
                "settle",
                "--cron",
                "0 2 * * *",
                "--zone",
                "Europe/Berlin",
                "--input",
                '{"ledger": "eu"}',
            ]
        )
        == 0
    )
    monkeypatch.setenv("DURABLE_STORE", url)
    assert main(["schedule", "create", "often", "--kind", "settle", "--every", "60"]) == 0
    assert main(["schedule", "pause", "often"]) == 0
    capsys.readouterr()
    assert main(["schedule", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(s["name"], s["paused"], s["input"]) for s in listed] == [
        ("nightly", False, {"ledger": "eu"}),
        ("often", True, None),
    ]
    assert main(["schedule", url, "resume", "often"]) == 0
    assert main(["schedule", "delete", "often"]) == 0
    capsys.readouterr()
    assert main(["schedule", "list"]) == 0
    assert capsys.readouterr().out.startswith("nightly  active  settle  cron '0 2 * * *'")
    with pytest.raises(SystemExit) as gone:
        main(["schedule", "pause", "often"])
    assert gone.value.code == 3
    with pytest.raises(SystemExit) as wrong:
        main(["schedule", "create", "x", "--kind", "settle", "--cron", "bad"])
    assert wrong.value.code == 2
    assert "cron expression 'bad' is not valid" in capsys.readouterr().err


async def test_a_daily_tick_in_the_hour_that_happens_twice_runs_once() -> None:
    async with durable.open("memory://") as store:
        made = await Schedules(store, clock=ManualClock(T0)).create(
            "nightly", "settle", cron="30 2 * * *", zone="Europe/Berlin"
        )
    # On 25 October 2026 Berlin's clocks go back from 03:00 to 02:00: 02:30 happens twice.
    autumn = made.ticks(
        datetime(2026, 10, 24, 12, tzinfo=UTC), datetime(2026, 10, 26, 12, tzinfo=UTC)
    )
    assert autumn == [
        datetime(2026, 10, 25, 0, 30, tzinfo=UTC),
        datetime(2026, 10, 26, 1, 30, tzinfo=UTC),
    ]
