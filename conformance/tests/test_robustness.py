"""A run survives the store it certifies: a store method that never gives the event loop
back costs one test, named as timed out, and a testing hook that raises is said once."""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import pytest
from durable_conformance import deadline
from durable_conformance.deadline import Deadline, Overrun

BUSY_WAIT = "test_scheduler_next_ready_waits_up_to_within_and_wakes_for_work"
ONE_TEST = "test_claim_exactly_one_of_many_concurrent_claims_wins"


def test_a_store_that_never_gives_the_loop_back_times_out_one_test_and_the_run_ends(
    project: Any,
) -> None:
    """busy-next-ready polls without awaiting, for as long as ``within`` (ten seconds in
    the selected test), so no asyncio timeout can fire: the test is stopped from outside
    a second past --durable-timeout, named as timed out where its loop was held, and the
    run goes on to the next test, the table and the verdict."""
    result, report = project.certify(
        "--durable-store=busy-next-ready", "--durable-timeout=1", "-k", f"{BUSY_WAIT} or {ONE_TEST}"
    )
    output = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, output[-3000:]
    result.assert_outcomes(failed=1, passed=1, deselected=result.parseoutcomes()["deselected"])
    found = project.outcomes(report, "busy-next-ready")
    assert found["scheduler.next-ready-waits-for-work"] == "failed"
    assert found["claim.one-winner"] == "passed"
    entry = report["stores"]["busy-next-ready"]
    assert entry["certified"] is False
    assert entry["timed_out"] == ["scheduler.next-ready-waits-for-work"]
    result.stdout.fnmatch_lines(
        [
            f"*{BUSY_WAIT}[[]busy-next-ready[]]*",
            "timed out: scheduler.next-ready-waits-for-work did not finish within 1 s "
            "(--durable-timeout), and its event loop was never given back: stopped from "
            "outside in *BusyNextReady.next_ready (*durable_broken_stores.py:*)*",
            "*= durable conformance =*",
            "scheduler.next-ready-waits-for-work * failed",
            "busy-next-ready 0.0.1: NOT CERTIFIED, *; timed out: "
            "scheduler.next-ready-waits-for-work; *",
        ]
    )
    assert "Traceback" not in output
    assert "Task exception was never retrieved" not in output + result.stderr.str()
    # Left alone, the busy loop would hold the loop for the whole ten seconds of its within.
    assert result.duration < 60


def test_a_testing_hook_that_raises_after_the_probe_is_said_once(project: Any) -> None:
    """A hook that gives the probe its testbed and then raises on every call (a table it
    creates twice) fails each test in one line; its traceback is shown once, and the
    verdict says the hook failed, with its error, instead of listing every requirement."""
    result, report = project.certify(
        "--durable-store=hook-fails-after-probe,memory", "-k", "test_claim or test_codec"
    )
    output = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, output[-3000:]
    # pytest's short summary repeats each failure's first line, cut to the terminal's width
    # except under CI=true, so what is counted is the report before it.
    report_part = output.split("short test summary info")[0]
    error = "RuntimeError: table workflow_records already exists"
    line = f"the testing hook failed: {error}"
    failed = result.parseoutcomes()["failed"]
    assert failed >= 9
    # One line per failed test, the verdict, and the heading of the one traceback.
    assert report_part.count(line) == failed + 2, output
    assert output.count("Traceback (most recent call last)") == 1, output
    assert len(report_part.splitlines()) < 2 * failed + 80, output
    entry = report["stores"]["hook-fails-after-probe"]
    assert entry["hook_failed"] == {line: failed}
    assert report["stores"]["memory"]["failed"] == []
    result.stdout.fnmatch_lines(
        [
            f"{line} (its traceback is shown once, at the end of the run)",
            "*= durable conformance =*",
            f"store 'hook-fails-after-probe': {line}, failing {failed} tests; the first time:",
            "Traceback (most recent call last):",
            "*",
            error,
            "*",
            f"hook-fails-after-probe 0.0.1: NOT CERTIFIED, 0 of * required, *; {line} "
            f"(in {failed} tests); partial run: *",
        ]
    )
    verdict = next(v for v in result.outlines if v.startswith("hook-fails-after-probe 0.0.1"))
    assert "failed: " not in verdict.replace(line, ""), verdict


# -- the deadline itself ---------------------------------------------------------------------


async def _never_yields() -> None:
    while True:
        pass


async def _sleeps(seconds: float) -> None:
    await asyncio.sleep(seconds)


def _in_deadline(seconds: float, body: Any) -> Deadline:
    guard = Deadline(seconds)
    with guard, asyncio.Runner() as runner:
        guard.watch(runner.get_loop())
        runner.run(body)
    return guard


def test_the_deadline_stops_code_that_never_awaits_and_puts_sigalrm_back() -> None:
    before = signal.getsignal(signal.SIGALRM)
    timer = signal.getitimer(signal.ITIMER_REAL)  # pytest-timeout's, when it runs one
    started = time.monotonic()
    with pytest.raises(Overrun) as stopped:
        _in_deadline(0.2, _never_yields())
    assert stopped.value.stuck
    assert "_never_yields" in stopped.value.where
    assert time.monotonic() - started < 30
    assert signal.getsignal(signal.SIGALRM) is before
    left, interval = signal.getitimer(signal.ITIMER_REAL)
    if timer == (0.0, 0.0):
        assert (left, interval) == (0.0, 0.0)
    else:  # the timer found running is running again, with what it had left
        assert 0.0 < left <= timer[0]
        assert interval == timer[1]


def test_the_deadline_leaves_a_loop_that_answers_to_the_cooperative_timeout() -> None:
    async def bounded() -> None:
        async with asyncio.timeout(0.2):
            await _sleeps(5)

    with pytest.raises(TimeoutError):
        _in_deadline(0.2, bounded())


def test_the_deadline_stops_a_test_that_swallows_its_cancellation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(deadline, "CEILING", 0.5)

    async def stubborn() -> None:
        while True:
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                continue

    with pytest.raises(Overrun) as stopped:
        _in_deadline(0.2, stubborn())
    assert not stopped.value.stuck


def test_the_deadline_gives_back_a_timer_someone_else_had_set() -> None:
    fired: list[int] = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30.0)
        _in_deadline(5.0, _sleeps(0.01))
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 20.0 < left <= 30.0
        assert fired == []
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
