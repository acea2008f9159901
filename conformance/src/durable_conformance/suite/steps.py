"""Steps that reach outside the store: what a retried or reconciled step relies on.

A step with a retry policy or a reconcile probe keeps its attempts as ordinary records
(``durable.run.STEP_PREFIX``), so the store owes them nothing new; these tests are where
what it already owes is seen from a step: the intent lands before the effect's result (and
survives a pass that dies between them), each attempt's start and error are in history in
order with the store's clock, and the token a step hands outside is the very number the
store fences with.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from durable import RetryPolicy
from durable.interfaces import Inspectable, Pass
from durable.parsers import exactly
from durable.run import STEP_PREFIX, Finished, Run, StepContext, resume

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._support import fenced


class _Crash(BaseException):
    """The process dying between an effect and its record: nothing in the pass catches it."""


def _intent(key: str, attempt: int) -> str:
    return f"{STEP_PREFIX}{key}:attempt:{attempt}"


@requirement("steps.intent-lands-before-its-result")
async def test_steps_an_intent_is_recorded_before_the_effect_and_survives_a_crash(
    store: StoreUnderTest,
) -> None:
    """A reconciled step's intent is in history before its value; a pass that dies after
    the effect and before its record leaves the intent and no value, and the next pass
    asks the probe (with attempt 1) instead of running the effect again."""
    cp = store.checkpointer
    wf, crashed = store.workflow(), store.workflow("crashed")
    gateway: dict[str, str] = {}
    ran: list[int] = []
    probed: list[int] = []

    async def charge(context: StepContext) -> str:
        ran.append(context.attempt)
        charged = gateway.setdefault(context.idempotency_key, f"ch_{len(gateway) + 1}")
        if context.workflow == crashed and len(ran) == 1:
            raise _Crash
        return charged

    def look_up(context: StepContext) -> str | None:
        probed.append(context.attempt)
        return gateway.get(context.idempotency_key)

    async def body(run: Run[Any]) -> str:
        return await run.step("charge", charge, exactly(str), reconcile=look_up, context=True)

    assert await resume(store.durable, wf, body) == Finished("ch_1")
    keys = [entry.key for entry in await cp.history(wf)]
    assert _intent("charge", 1) in keys, keys
    assert "charge" in keys, keys
    assert keys.index(_intent("charge", 1)) < keys.index("charge"), (
        f"the step's value is in history before the intent of its attempt: {keys}"
    )

    ran.clear()
    try:
        await resume(store.durable, crashed, body)
    except _Crash:
        pass
    else:
        raise AssertionError("the pass that crashed in its effect returned")
    left = await cp.load(crashed)
    assert _intent("charge", 1) in left, (
        f"a pass that died after its effect left no intent behind: {sorted(left)}"
    )
    assert "charge" not in left, f"a crashed effect's value was recorded: {sorted(left)}"
    assert await resume(store.durable, crashed, body) == Finished("ch_2")
    assert probed == [1], f"the next pass asked the probe for attempts {probed}"
    assert ran == [1], f"the effect ran again after the crash: attempts {ran}"
    keys = [entry.key for entry in await cp.history(crashed)]
    assert keys.index(_intent("charge", 1)) < keys.index("charge"), keys


@requirement("steps.attempts-in-history")
async def test_steps_each_attempts_start_and_error_are_in_history_in_order(
    store: StoreUnderTest,
) -> None:
    """A step retried to its third attempt leaves, in history, attempt 1's start, its
    error, attempt 2's start, its error, attempt 3's start: each error before the next
    start, the store's times never going back, the errors holding the attempt and type."""
    cp = store.checkpointer
    wf = store.workflow()
    tries: list[int] = []

    async def charge(context: StepContext) -> str:
        tries.append(context.attempt)
        if len(tries) < 3:
            raise ConnectionError("the gateway did not answer")
        return "ch_1"

    async def body(run: Run[Any]) -> str:
        return await run.step(
            "charge",
            charge,
            exactly(str),
            retry=RetryPolicy(max_attempts=5, initial=timedelta(milliseconds=1), jitter=0),
            context=True,
        )

    assert await resume(store.durable, wf, body) == Finished("ch_1")
    assert tries == [1, 2, 3], tries
    entries = [e for e in await cp.history(wf) if e.key.startswith(f"{STEP_PREFIX}charge:")]
    prefix = f"{STEP_PREFIX}charge:"
    assert [e.key for e in entries] == [
        f"{prefix}attempt:1",
        f"{prefix}failed:1",
        f"{prefix}attempt:2",
        f"{prefix}failed:2",
        f"{prefix}attempt:3",
    ], [e.key for e in entries]
    times = [e.at for e in entries]
    assert times == sorted(times), f"the store's times go back in history: {times}"
    for number, failed in ((1, entries[1]), (2, entries[3])):
        assert isinstance(failed.value, dict), failed
        assert failed.value.get("attempt") == number, failed
        assert failed.value.get("type") == "ConnectionError", failed


@requirement("steps.handed-out-token-is-the-fence")
async def test_steps_the_token_a_step_hands_outside_is_the_one_the_store_fences_with(
    store: StoreUnderTest,
) -> None:
    """The fencing token an effect is handed is its pass's token and the claim's: a write
    carrying it is accepted, one carrying a token one below or one above is refused; a
    later pass hands out a greater one."""
    cp = store.checkpointer
    wf = store.workflow()
    seen: list[tuple[int, int, int | None]] = []

    async def reach_out(run: Run[Any], context: StepContext) -> str:
        claim = await cp.claimed(wf) if isinstance(cp, Inspectable) else None
        seen.append(
            (context.fencing_token, run.holder.token, None if claim is None else claim.token)
        )
        token = context.fencing_token
        for other in (token - 1, token + 1):
            await fenced(
                cp.record(Pass(wf, other), f"outside-{other}", "refused"),
                f"a write carrying token {other} while {token} was handed out",
            )
        written = await cp.record(Pass(wf, token), f"outside-{token}", "accepted")
        assert written.value == "accepted", written
        return "sent"

    async def body(run: Run[Any]) -> list[str]:
        first = await run.step("first", lambda c: reach_out(run, c), exactly(str), context=True)
        await run.awaiting("go", exactly(str))
        second = await run.step("second", lambda c: reach_out(run, c), exactly(str), context=True)
        return [first, second]

    await resume(store.durable, wf, body)
    await store.durable.arrive(wf, "go", "on")
    assert await resume(store.durable, wf, body) == Finished(["sent", "sent"])
    assert len(seen) == 2, seen
    for handed, holder, claimed in seen:
        assert handed == holder, f"the step handed out {handed}, its pass holds {holder}"
        if isinstance(cp, Inspectable):
            assert claimed == handed, (
                f"the step handed out token {handed}; the store's claim holds {claimed}"
            )
    assert seen[1][0] > seen[0][0], f"a later pass handed out no greater token: {seen}"
    loaded = await cp.load(wf)
    outside = sorted(k for k in loaded if k.startswith("outside-"))
    assert outside == sorted(f"outside-{t}" for t, _, _ in seen), outside
