"""Steps that reach outside the store, on every store: retries, timeouts, the step context,
durable attempts, backoffs slept durably, reconcile probes and the workflow's deadline.

Each test opens a store of its own through ``durable.open``: the in-memory store, an SQLite
file, a Postgres schema and a Redis key prefix (the shared servers; a server that does not
answer is skipped with the reason). The crash tests kill a real subprocess with SIGKILL, on
every store but the in-memory one, which dies with its process.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import durable
import pytest
from durable.clock import ManualClock
from durable.interfaces import Contended, Durable
from durable.parsers import exactly
from durable.run import (
    ATTEMPT_LOST,
    RETRY_PREFIX,
    STEP_PREFIX,
    DeadlineExceeded,
    Finished,
    Run,
    Sleeping,
    StepContext,
    StepFailed,
    idempotency_key,
    resume,
    step_entry,
)
from durable.worker import work
from durable.workflows import LifecycleDurable, WorkflowFailed

HERE = Path(__file__).resolve().parent
PATIENCE = 60.0
FAST = durable.RetryPolicy(
    max_attempts=5, initial=timedelta(milliseconds=1), maximum=timedelta(milliseconds=4)
)


@pytest.fixture
async def store(url: str) -> AsyncIterator[Durable[Any]]:
    async with durable.open(url) as opened:
        yield opened


def attempts_of(records: dict[str, object], key: str) -> list[str]:
    """The step's attempt records, in load order, as ``durable show`` says them."""
    said = [step_entry(k, v) for k, v in records.items() if k.startswith(f"{STEP_PREFIX}{key}:")]
    return [s for s in said if s is not None]


# --- retries, timeouts and the context ------------------------------------------------------


async def test_a_failing_attempt_is_retried_and_each_attempt_lands_before_the_next(
    store: Durable[Any],
) -> None:
    seen: list[StepContext] = []

    async def charge(context: StepContext) -> str:
        seen.append(context)
        if context.attempt < 3:
            raise ConnectionError(f"gateway down ({context.attempt})")
        return "ch_1"

    async def body(run: Run[Any]) -> str:
        return await run.step("charge", charge, exactly(str), retry=FAST, context=True)

    assert await resume(store, "wf-retry", body) == Finished("ch_1")
    assert [c.attempt for c in seen] == [1, 2, 3]
    assert {c.idempotency_key for c in seen} == {idempotency_key("wf-retry", "charge")}
    history = await store.checkpointer.history("wf-retry")
    said = [step_entry(e.key, e.value) or e.key for e in history]
    token = seen[0].fencing_token
    assert said == [
        f"charge: attempt 1 of 5 began (pass {token})",
        "charge: attempt 1 of 5 failed: ConnectionError: gateway down (1)",
        f"charge: attempt 2 of 5 began (pass {token})",
        "charge: attempt 2 of 5 failed: ConnectionError: gateway down (2)",
        f"charge: attempt 3 of 5 began (pass {token})",
        "charge",
    ]
    stamps = [e.at for e in history]
    assert stamps == sorted(stamps), "store-clock times go backwards along the attempts"
    # A later pass replays the value and runs nothing.
    assert await resume(store, "wf-retry", body) == Finished("ch_1")
    assert len(seen) == 3


async def test_an_attempt_that_overruns_its_timeout_is_cancelled_and_counts_as_failed(
    store: Durable[Any],
) -> None:
    cancelled: list[int] = []

    async def slow() -> str:
        try:
            await asyncio.sleep(PATIENCE)
        except asyncio.CancelledError:
            cancelled.append(1)
            raise
        return "never"

    async def body(run: Run[Any]) -> str:
        policy = durable.RetryPolicy(max_attempts=2, initial=timedelta(milliseconds=1))
        try:
            return await run.step("charge", slow, exactly(str), retry=policy, timeout=0.05)
        except StepFailed as failed:
            return f"{failed.attempts} {failed.failure.type}"

    assert await resume(store, "wf-timeout", body) == Finished("2 TimeoutError")
    assert cancelled == [1, 1]
    records = await store.checkpointer.load("wf-timeout")
    assert attempts_of(records, "charge")[-1] == (
        "charge: attempt 2 of 2 failed (gave up): TimeoutError"
    )
    # The spent step fails the same way on every later pass, without running again.
    assert await resume(store, "wf-timeout", body) == Finished("2 TimeoutError")
    assert cancelled == [1, 1]


async def test_a_spent_policy_propagates_the_last_error_into_the_body(store: Durable[Any]) -> None:
    class Declined(Exception):
        pass

    calls: list[int] = []
    causes: list[BaseException | None] = []

    async def charge() -> str:
        calls.append(1)
        raise Declined("card declined")

    async def body(run: Run[Any]) -> str:
        policy = durable.RetryPolicy(max_attempts=5, non_retryable=(Declined,))
        try:
            return await run.step("charge", charge, exactly(str), retry=policy)
        except StepFailed as failed:
            causes.append(failed.__cause__)
            why = failed.failure.message
            return await run.step("refund", lambda: f"compensated {why}", exactly(str))

    assert await resume(store, "wf-declined", body) == Finished("compensated card declined")
    assert calls == [1], "a non-retryable error was retried"
    assert isinstance(causes[0], Declined)
    records = await store.checkpointer.load("wf-declined")
    assert records["refund"] == "compensated card declined"


async def test_the_idempotency_key_is_stable_across_passes_and_differs_between_steps(
    store: Durable[Any],
) -> None:
    seen: list[StepContext] = []

    async def flaky(context: StepContext) -> str:
        seen.append(context)
        if len(seen) == 1:
            raise ConnectionError("dropped")
        return context.idempotency_key

    async def body(run: Run[Any]) -> list[object]:
        first = await run.step("charge", flaky, exactly(str), context=True)
        second = await run.step("ship", lambda c: c.idempotency_key, exactly(str), context=True)
        return [first, second]

    with pytest.raises(ConnectionError):
        await resume(store, "wf-keys-1", body)
    outcome = await resume(store, "wf-keys-1", body)
    other = await resume(store, "wf-keys-2", body)
    assert isinstance(outcome, Finished)
    assert isinstance(other, Finished)
    assert seen[0].idempotency_key == seen[1].idempotency_key == outcome.value[0]
    assert outcome.value[0] != outcome.value[1], "two steps share an idempotency key"
    assert outcome.value[0] != other.value[0], "two workflows share an idempotency key"
    # The fencing token is the pass's own, and a later pass's is higher.
    assert seen[1].fencing_token > seen[0].fencing_token
    # No policy and no probe: nothing recorded but the results.
    assert await store.checkpointer.load("wf-keys-1") == {
        "charge": outcome.value[0],
        "ship": outcome.value[1],
    }


async def test_a_step_without_policy_writes_nothing_but_its_result(store: Durable[Any]) -> None:
    async def body(run: Run[Any]) -> str:
        return await run.step("plain", lambda: "x", exactly(str))

    assert await resume(store, "wf-plain", body) == Finished("x")
    assert list(await store.checkpointer.load("wf-plain")) == ["plain"]


async def test_keys_the_run_keeps_for_itself_are_refused(store: Durable[Any]) -> None:
    async def body(run: Run[Any]) -> str:
        return await run.step(f"{STEP_PREFIX}charge:attempt:1", lambda: "x", exactly(str))

    with pytest.raises(ValueError, match="kept by durable itself"):
        await resume(store, "wf-forged", body)
    assert await store.checkpointer.load("wf-forged") == {}

    async def retried(run: Run[Any]) -> str:
        return await run.step(f"{RETRY_PREFIX}1", lambda: "x", exactly(str))

    with pytest.raises(ValueError, match="kept by durable itself"):
        await resume(store, "wf-forged-retry", retried)
    assert await store.checkpointer.load("wf-forged-retry") == {}


# --- backoff slept durably -------------------------------------------------------------------


async def test_a_long_backoff_ends_the_pass_and_a_later_pass_makes_the_next_attempt(
    store: Durable[Any],
) -> None:
    clock = ManualClock(datetime.now(UTC))
    calls: list[int] = []

    async def charge() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("down")
        return "ch_2"

    policy = durable.RetryPolicy(
        max_attempts=3, initial=timedelta(minutes=10), maximum=timedelta(hours=1), jitter=0.0
    )

    async def body(run: Run[Any]) -> str:
        return await run.step("charge", charge, exactly(str), retry=policy)

    first = await resume(store, "wf-backoff", body, clock=clock)
    assert isinstance(first, Sleeping)
    assert first.until == clock.now() + timedelta(minutes=10)
    assert first.keys == (f"{STEP_PREFIX}charge:retry:2",)
    assert isinstance(await resume(store, "wf-backoff", body, clock=clock), Sleeping)
    assert calls == [1], "the next attempt ran before its backoff was over"
    clock.advance(timedelta(minutes=10))
    assert await resume(store, "wf-backoff", body, clock=clock) == Finished("ch_2")
    assert calls == [1, 1]


# --- reconcile -------------------------------------------------------------------------------


class Crash(BaseException):
    """The process dies here: nothing after it runs, nothing is recorded."""


async def test_an_intent_without_a_result_is_reconciled_not_run_again(store: Durable[Any]) -> None:
    gateway: dict[str, str] = {}

    async def charge(context: StepContext) -> str:
        gateway[context.idempotency_key] = f"ch_{len(gateway) + 1}"
        raise Crash  # between the effect and its record

    def look_up(context: StepContext) -> str | None:
        return gateway.get(context.idempotency_key)

    async def body(run: Run[Any]) -> str:
        return await run.step("charge", charge, exactly(str), reconcile=look_up, context=True)

    with pytest.raises(Crash):
        await resume(store, "wf-reconcile", body)
    assert await resume(store, "wf-reconcile", body) == Finished("ch_1")
    assert len(gateway) == 1, "the effect ran again"
    records = await store.checkpointer.load("wf-reconcile")
    assert attempts_of(records, "charge") == [
        "charge: attempt 1 began" + records_token(records),
        "charge: attempt 1 reconciled: the probe found the effect done",
    ]


def records_token(records: dict[str, object]) -> str:
    began = records[f"{STEP_PREFIX}charge:attempt:1"]
    assert isinstance(began, dict)
    return f" (pass {began['token']})"


async def test_a_probe_that_finds_nothing_lets_the_effect_run_again(store: Durable[Any]) -> None:
    calls: list[int] = []

    async def charge() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise Crash
        return "ch_1"

    async def body(run: Run[Any]) -> str:
        return await run.step("charge", charge, exactly(str), reconcile=lambda context: None)

    with pytest.raises(Crash):
        await resume(store, "wf-not-done", body)
    assert await resume(store, "wf-not-done", body) == Finished("ch_1")
    records = await store.checkpointer.load("wf-not-done")
    said = attempts_of(records, "charge")
    assert said[1].startswith(f"charge: attempt 1 failed: {ATTEMPT_LOST}")
    assert said[2].startswith("charge: attempt 2 began")


async def test_a_lost_last_attempt_spends_the_policy(store: Durable[Any]) -> None:
    calls: list[int] = []

    async def charge() -> str:
        calls.append(1)
        raise Crash

    async def body(run: Run[Any]) -> str:
        policy = durable.RetryPolicy(max_attempts=1)
        try:
            return await run.step("charge", charge, exactly(str), retry=policy)
        except StepFailed as failed:
            return failed.failure.type

    with pytest.raises(Crash):
        await resume(store, "wf-lost", body)
    assert await resume(store, "wf-lost", body) == Finished(ATTEMPT_LOST)
    assert await resume(store, "wf-lost", body) == Finished(ATTEMPT_LOST)
    assert calls == [1]
    records = await store.checkpointer.load("wf-lost")
    assert attempts_of(records, "charge")[-1].startswith(
        f"charge: attempt 1 of 1 failed (gave up): {ATTEMPT_LOST}"
    )


# --- the workflow's deadline -------------------------------------------------------------------


async def test_past_its_deadline_a_workflow_fails_mid_sleep_and_mid_backoff(
    store: Durable[Any],
) -> None:
    clock = ManualClock(datetime.now(UTC))
    policy = durable.RetryPolicy(
        max_attempts=3, initial=timedelta(hours=1), maximum=timedelta(hours=2), jitter=0.0
    )

    async def failing() -> str:
        raise ConnectionError("down")

    async def sleeper(run: Run[Any]) -> str:
        await run.sleep("nap", timedelta(hours=1))
        return "woke"

    async def retrier(run: Run[Any]) -> str:
        return await run.step("charge", failing, exactly(str), retry=policy)

    for wf, body in (("wf-deadline-sleep", sleeper), ("wf-deadline-backoff", retrier)):
        first = await resume(store, wf, body, clock=clock, deadline=timedelta(minutes=5))
        assert isinstance(first, Sleeping)
        assert first.until == clock.now() + timedelta(minutes=5), "it would sleep past it"
    clock.advance(timedelta(minutes=5))
    for wf, body in (("wf-deadline-sleep", sleeper), ("wf-deadline-backoff", retrier)):
        with pytest.raises(DeadlineExceeded, match="deadline exceeded"):
            await resume(store, wf, body, clock=clock)


async def test_past_its_deadline_a_running_effect_is_cancelled(store: Durable[Any]) -> None:
    cancelled: list[int] = []

    async def slow() -> str:
        try:
            await asyncio.sleep(PATIENCE)
        except asyncio.CancelledError:
            cancelled.append(1)
            raise
        return "never"

    async def body(run: Run[Any]) -> str:
        return await run.step("charge", slow, exactly(str))

    with pytest.raises(DeadlineExceeded):
        await resume(store, "wf-deadline-run", body, deadline=timedelta(milliseconds=100))
    assert cancelled == [1]
    assert "charge" not in await store.checkpointer.load("wf-deadline-run")


# --- crashes in a real process (every store two processes can share) -----------------------


def child(url: str, workflow: str, mode: str, ledger: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, str(HERE / "steps_child.py"), url, workflow, mode, str(ledger)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


async def resume_when_free(store: Durable[Any], workflow: str, body: Any) -> object:
    """Resume once the killed pass's claim has lapsed (its liveness is one second)."""
    give_up = time.monotonic() + PATIENCE
    while True:
        try:
            return await resume(store, workflow, body)
        except Contended:
            if time.monotonic() > give_up:
                raise
            await asyncio.sleep(0.1)


def ledger_lines(ledger: Path) -> list[str]:
    return ledger.read_text().split() if ledger.exists() else []


async def test_an_attempt_killed_mid_effect_still_counts(shared_url: str, tmp_path: Path) -> None:
    url, ledger = shared_url, tmp_path / "ledger"
    process = child(url, "wf-killed", "hang", ledger)
    give_up = time.monotonic() + PATIENCE
    while not ledger_lines(ledger):
        assert process.poll() is None, process.stderr.read() if process.stderr else ""
        assert time.monotonic() < give_up, "the child never began its attempt"
        await asyncio.sleep(0.05)
    process.kill()  # SIGKILL, mid-attempt
    process.wait()
    attempts: list[int] = []

    async def body(run: Run[Any]) -> int:
        def charge(context: StepContext) -> int:
            attempts.append(context.attempt)
            return context.attempt

        return await run.step("charge", charge, exactly(int), retry=FAST, context=True)

    async with durable.open(url) as store:
        assert await resume_when_free(store, "wf-killed", body) == Finished(2)
        records = await store.checkpointer.load("wf-killed")
    assert attempts == [2]
    said = attempts_of(records, "charge")
    assert said[0].startswith("charge: attempt 1 of 3 began")
    assert said[1].startswith(f"charge: attempt 1 of 5 failed: {ATTEMPT_LOST}")
    assert said[2].startswith("charge: attempt 2 of 5 began")


async def test_a_crash_between_effect_and_record_is_reconciled_with_the_effect_run_once(
    shared_url: str, tmp_path: Path
) -> None:
    url, ledger = shared_url, tmp_path / "ledger"
    process = child(url, "wf-crashed", "die", ledger)
    assert process.wait(timeout=PATIENCE) == -9, "the child did not die by SIGKILL"
    assert len(ledger_lines(ledger)) == 1
    ran: list[int] = []

    def look_up(context: StepContext) -> str | None:
        found = context.idempotency_key in ledger_lines(ledger)
        return f"charged under {context.idempotency_key}" if found else None

    async def body(run: Run[Any]) -> str:
        def charge() -> str:
            ran.append(1)
            return "charged again"

        return await run.step("charge", charge, exactly(str), retry=FAST, reconcile=look_up)

    async with durable.open(url) as store:
        outcome = await resume_when_free(store, "wf-crashed", body)
    assert outcome == Finished(f"charged under {idempotency_key('wf-crashed', 'charge')}")
    assert ran == [], "the effect ran again after the crash"
    assert len(ledger_lines(ledger)) == 1


# --- what an operator sees, and the worker ---------------------------------------------------


def test_show_says_each_attempt_as_a_sentence(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"

    async def slow() -> str:
        await asyncio.sleep(PATIENCE)
        return "never"

    async def body(run: Run[Any]) -> str:
        try:
            return await run.step("charge", slow, exactly(str), retry=FAST, timeout=0.01)
        except StepFailed:
            return "gave up"

    async def run_it() -> object:
        async with durable.open(url) as store:
            return await resume(store, "wf-show", body)

    assert asyncio.run(run_it()) == Finished("gave up")
    shown = subprocess.run(
        [sys.executable, "-m", "durable.cli", "show", url, "wf-show"],
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=True,
    ).stdout
    assert "charge: attempt 3 of 5 failed: TimeoutError\n" in shown
    assert "charge: attempt 5 of 5 failed (gave up): TimeoutError\n" in shown


async def test_a_kind_past_its_deadline_fails_while_blocked_or_asleep(
    store: Durable[Any],
) -> None:
    assert isinstance(store, LifecycleDurable)
    registry = durable.Workflows()

    @registry.kind("approval", deadline=timedelta(milliseconds=200))
    async def approval(run: Run[Any], _: object) -> str:
        return await run.awaiting("approved", exactly(str))

    @registry.kind("nap")
    async def nap(run: Run[Any], _: object) -> str:
        await run.sleep("nap", timedelta(hours=1))
        return "woke"

    quick = timedelta(milliseconds=20)
    worker = asyncio.ensure_future(work(store, registry, poll=quick, tick=quick))
    try:
        blocked = await store.start(approval, "wf-kind-deadline")
        asleep = await store.start(nap, "wf-start-deadline", deadline=timedelta(milliseconds=300))
        for handle in (blocked, asleep):
            with pytest.raises(WorkflowFailed, match="deadline exceeded") as failed:
                await handle.result(timeout=PATIENCE)
            assert failed.value.failure is not None
            assert failed.value.failure.type == "durable.run.DeadlineExceeded"
            assert failed.value.failure.attempts == 1, "a passed deadline was retried"
    finally:
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)


def test_a_running_workflow_past_an_attempt_says_which() -> None:
    from durable.cli import status_line
    from durable.interfaces import Entry, Status, WorkflowStatus

    now = datetime.now(UTC)
    running = WorkflowStatus("wf", Status.RUNNING, "payout", 1, now, owner="w1", since=now)
    began = Entry(f"{STEP_PREFIX}charge:attempt:2", {"attempt": 2, "of": 5, "token": 3}, now)
    assert status_line(running, [began], now=now).endswith(
        "after charge: attempt 2 of 5 began (pass 3)"
    )


# --- durable retry: fresh attempts ----------------------------------------------------------


async def test_retry_gives_a_spent_step_fresh_attempts(store: Durable[Any]) -> None:
    assert isinstance(store, LifecycleDurable)
    registry = durable.Workflows()
    tries: list[int] = []
    outage = [True]
    twice = durable.RetryPolicy(max_attempts=2, initial=timedelta(milliseconds=1))

    async def charge(context: StepContext) -> str:
        tries.append(context.attempt)
        if outage[0]:
            raise ConnectionError("the gateway did not answer")
        return f"charged on attempt {context.attempt}"

    @registry.kind("payout", policy=durable.RetryPolicy(max_attempts=1))
    async def payout(run: Run[Any], _: object) -> str:
        return await run.step("charge", charge, exactly(str), retry=twice, context=True)

    quick = timedelta(milliseconds=20)
    worker = asyncio.ensure_future(work(store, registry, poll=quick, tick=quick))
    try:
        handle = await store.start(payout, "wf-retried")
        with pytest.raises(WorkflowFailed, match="StepFailed"):
            await handle.result(timeout=PATIENCE)
        assert tries == [1, 2]
        # Retried while the gateway is still down: two fresh attempts, not an instant failure.
        await store.retry("wf-retried")
        with pytest.raises(WorkflowFailed, match="StepFailed"):
            await handle.result(timeout=PATIENCE)
        assert tries == [1, 2, 3, 4], "retry did not give the spent step fresh attempts"
        outage[0] = False
        await store.retry("wf-retried")
        assert await handle.result(timeout=PATIENCE) == "charged on attempt 5"
    finally:
        worker.cancel()
        await asyncio.gather(worker, return_exceptions=True)
    records = await store.checkpointer.load("wf-retried")
    said = [step_entry(k, v) for k, v in records.items()]
    assert "retried (2): every step gets fresh attempts" in said
    assert (
        "charge: attempt 4 of 4 failed (gave up): ConnectionError: the gateway did not answer"
        in said
    )
    assert any(line and line.startswith("charge: attempt 5 of 6 began") for line in said)
