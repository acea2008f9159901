"""The testing kit: fixtures, time travel and every crash point, on the kit's store.

The store is the one ``--durable-kit-store`` selects (memory by default); CI runs this file
once per store. Tests that need the store's own clock skip where it reads its server's.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from durable.policy import RetryPolicy
from durable.run import Blocked, Finished, Run, Sleeping, StepContext
from durable.testing import Kit, Scenario, crash_points, open_kit


def as_int(value: object) -> int:
    assert isinstance(value, int)
    return value


async def test_a_fresh_store_per_testbed_and_the_fixture(durable_testbed: Any) -> None:
    async with durable_testbed() as first, durable_testbed() as second:
        assert first.durable is not second.durable
        await first.durable.arrive("w", "k", 1)
        assert await second.durable.checkpointer.load("w") == {}
        assert "k" in await first.durable.checkpointer.load("w")


async def test_a_testbeds_store_is_removed_when_it_closes(durable_testbed: Any) -> None:
    async with durable_testbed() as kit:
        await kit.durable.arrive("w", "k", 1)
        url = kit.testbed.url
        name = kit.name
        if name != "memory":  # the look finds the store while it is open
            assert await _store_left_behind(name, url), f"nothing found of {url}"
    assert not await _store_left_behind(name, url), f"the {name} store at {url} was left behind"


async def _store_left_behind(name: str, url: str | None) -> bool:
    """Whether anything of the store at ``url`` is still there (by the store's own means)."""
    from urllib.parse import parse_qs, urlsplit

    if name == "memory" or url is None:
        return False  # one object, gone with its handle
    parts = urlsplit(url)
    if name == "sqlite":
        import os.path

        return os.path.exists(parts.path)  # noqa: ASYNC240 (a test's one look at a local file)
    option = parse_qs(parts.query)
    if name == "postgres":
        import psycopg

        server = url.split("?", 1)[0]
        schema = option["schema"][0]
        async with await psycopg.AsyncConnection.connect(server) as connection:
            cursor = await connection.execute(
                "SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s",
                (schema,),
            )
            row = await cursor.fetchone()
        return row is not None and row[0] > 0
    if name == "redis":
        import redis.asyncio

        client = redis.asyncio.Redis.from_url(url.split("?", 1)[0])
        try:
            prefix = option["prefix"][0]
            return any([key async for key in client.scan_iter(match=f"{prefix}*", count=1000)])
        finally:
            await client.aclose()
    pytest.skip(f"no way to look for what the {name} store leaves behind")


async def test_thirty_days_of_sleep_and_an_hour_of_backoff_in_no_real_time(
    durable_testbed: Any,
) -> None:
    failures = {"left": 2}

    async def flaky() -> int:
        if failures["left"]:
            failures["left"] -= 1
            raise ConnectionError("the service is down")
        return 7

    policy = RetryPolicy(
        max_attempts=5,
        initial=timedelta(hours=1),
        maximum=timedelta(hours=1),
        multiplier=1.0,
        jitter=0.0,
        suspend_after=timedelta(minutes=1),
    )

    async def body(run: Run[Any]) -> int:
        await run.sleep("month", timedelta(days=30))
        return await run.step("charge", flaky, as_int, retry=policy)

    async with durable_testbed() as kit:
        began = kit.clock.now()
        started = time.monotonic()
        sleeping = await kit.run_until("w", body, "sleeping")
        assert isinstance(sleeping, Sleeping)
        assert sleeping.until == began + timedelta(days=30)
        outcome = await kit.run_until("w", body)
        assert outcome == Finished(7)
        assert kit.clock.now() >= began + timedelta(days=30, hours=2)
        assert time.monotonic() - started < 20  # a generous bound: nothing sleeps for real


async def test_run_until_returns_a_blocked_workflow(durable_testbed: Any) -> None:
    async def body(run: Run[Any]) -> int:
        return await run.awaiting("approval", as_int)

    async with durable_testbed() as kit:
        assert await kit.run_until("w", body) == Blocked(("approval",))
        await kit.durable.arrive("w", "approval", 3)
        assert await kit.run_until("w", body) == Finished(3)


async def test_the_scheduler_follows_the_clock(durable_testbed: Any) -> None:
    async def body(run: Run[Any]) -> str:
        await run.sleep("year", timedelta(days=365))
        return "done"

    async with durable_testbed() as kit:
        kit.require_store_clock()
        await kit.durable.scheduler.make_ready("w")
        delivery = await kit.durable.scheduler.next_ready(timedelta(seconds=1))
        assert delivery is not None
        outcome = await kit.run("w", body)
        assert isinstance(outcome, Sleeping)
        await kit.durable.scheduler.wake_at(delivery, outcome.until)
        await kit.durable.scheduler.wake_due(kit.clock.now())
        assert await kit.durable.scheduler.next_ready(timedelta(milliseconds=50)) is None
        kit.advance_to(outcome.until)
        await kit.durable.scheduler.wake_due(kit.clock.now())
        again = await kit.durable.scheduler.next_ready(timedelta(seconds=1))
        assert again is not None
        assert again.workflow == "w"


def counter_scenario(*, broken: bool, reconciled: bool = False) -> Any:
    """A workflow that moves a counter once: in ``transact`` (exactly once), in a step with
    a reconcile probe (at most once), or in a plain ``step`` (the bug: a crash after the
    effect and before its record moves it twice)."""

    def setup(kit: Kit[Any]) -> Scenario:
        probe = kit.testbed.probe
        assert probe is not None
        counted = {"n": 0}

        async def bump_in_a_step() -> int:
            counted["n"] += 1
            return counted["n"]

        def probe_counter(context: StepContext) -> int | None:
            return counted["n"] or None

        async def body(run: Run[Any]) -> str:
            await run.step("prepare", lambda: "ready", str)
            if reconciled:
                await run.step("count", bump_in_a_step, as_int, reconcile=probe_counter)
            elif broken:
                await run.step("count", bump_in_a_step, as_int)
            else:
                await run.transact("count", probe.bump(run.workflow, "n"), as_int)
            await run.sleep("cool-off", timedelta(days=1))
            await run.step("notify", lambda: "sent", str)
            return "done"

        async def invariant() -> None:
            moved = counted["n"] if broken or reconciled else await probe.count("crash-test", "n")
            assert moved == 1, f"the counter moved {moved} times"

        return Scenario(body, invariant)

    return setup


def kit_factory(request: pytest.FixtureRequest) -> Any:
    from durable.fixtures import kit_store

    name, url = kit_store(request.config)

    def factory(**options: Any) -> Any:
        return open_kit(name, url, **options)

    return factory


async def test_every_crash_point_of_a_transact_keeps_the_count(
    request: pytest.FixtureRequest,
) -> None:
    report = await crash_points(counter_scenario(broken=False), store=kit_factory(request))
    positions = {(b.key, b.position) for b in report.boundaries}
    assert {
        ("prepare", "before the effect"),
        ("prepare", "after the effect, before its record"),
        ("prepare", "after the record"),
        ("count", "before transact"),
        ("count", "after transact"),
        ("cool-off", "before sleep"),
        ("cool-off", "after sleep"),
    } <= positions
    report.check()
    assert all(p.verdict == "held" for p in report.points), str(report)
    for point in report.points:
        # The dead pass's claim was abandoned, not released: the next pass found it held.
        killed = next(i for i, e in enumerate(point.history) if "killed" in e)
        assert "waiting for it to lapse" in point.history[killed + 1], point.history


async def test_a_counter_moved_in_a_step_is_caught_and_named(
    request: pytest.FixtureRequest,
) -> None:
    report = await crash_points(counter_scenario(broken=True), store=kit_factory(request))
    broken = report.broken
    assert broken is not None, str(report)
    assert broken.boundary.key == "count"
    assert broken.boundary.position == "after the effect, before its record"
    assert "moved 2 times" in str(broken.error)
    assert any("killed" in entry for entry in broken.history)
    with pytest.raises(AssertionError, match="first broken: step 'count'"):
        report.check()


async def test_most_caps_the_crash_points(request: pytest.FixtureRequest) -> None:
    report = await crash_points(counter_scenario(broken=False), store=kit_factory(request), most=3)
    assert len(report.points) == 3
    assert report.capped
    assert report.points[0].boundary == report.boundaries[0]
    assert report.points[-1].boundary == report.boundaries[-1]


async def test_a_step_with_a_reconcile_probe_moves_at_most_once(
    request: pytest.FixtureRequest,
) -> None:
    report = await crash_points(
        counter_scenario(broken=True, reconciled=True), store=kit_factory(request)
    )
    assert ("count", "after the effect, before its record") in {
        (b.key, b.position) for b in report.boundaries
    }
    report.check()
