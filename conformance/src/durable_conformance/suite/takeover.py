"""takeover: a stale pass's write racing the claim that supersedes it never lands after it.

Every write that carries a pass checks the pass's token and applies what it guards, and the
seed's third note is that the two are correct only as one step. A store that checks in one
round trip and writes in the next passes every test that asks in turn: the stale pass is
refused whenever the newer claim is already there when it asks. It is wrong only when the
takeover lands in the gap, between the check that said "still yours" and the write that
trusted it, so these tests put the takeover there.

Each trial makes a pass with a short liveness and lets it run out, then starts the stale
pass's write on one handle and, while that write is in flight, takes the workflow over on
another (``claim``, or ``begin`` for the lifecycle's writes) and reads the store at once.
Where the store's testing hook offers a gap (:data:`durable.plugins.Gap`) the suite holds
the stale write there, between what the store read to decide and what it commits, while the
takeover runs, which makes the race certain rather than lucky: a store that holds a lock
across its gap makes the takeover wait, and one that left the check and the write apart
lets the takeover return first. Without a gap, more trials race by timing alone, from
several handles at once.

After each trial the invariant is checked from outside: a write carrying a token below one
the store had already issued to a returned claim never lands. Either it raised ``Fenced``
and changed nothing, or it landed before the takeover, which what the takeover found
shows. A write that succeeded after the takeover had returned while it was held is the
split, caught in the act.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, cast

from durable.interfaces import Began, Durable, Fenced, Operational, Pass, Settlement, Status
from durable.plugins import Testbed

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._gaps import Gaps, gapped, handles_of, probe_of, race
from durable_conformance.suite._lifecycle import begun, lifecycle
from durable_conformance.suite._support import LONG, PATIENCE, SHORT, TICK, claimed

HELD_TRIALS = 3
"""Trials whose stale write is held at the store's gap while the takeover runs."""

TIMED_TRIALS = 10
"""Trials raced by timing alone, all at once, beside the held ones."""

UNGAPPED_TRIALS = 30
"""Trials raced by timing alone when the store offers no gap for the move."""

HANDLES = 4
"""Handles the trials are spread over: a stale write and its takeover are never on one."""

MARGIN = 0.05
"""Seconds of slack allowed between the suite's clock and the store's, in the one judgement
that reads times (a renewal that landed first holds the workflow for a whole window)."""

LEADS = (0.0, 0.0005, -0.0005, 0.001, -0.001, 0.002, -0.002, 0.004)
"""How far, in seconds, a timed trial's stale write starts ahead of its takeover (behind
it when negative), in turn: each store's round trip is a different length, so the trials
spread over it rather than guess it."""

TAKER = "suite-worker:takeover"
"""The owner the takeovers of lifecycle passes are begun as."""


@dataclass
class Trial:
    """One stale write raced against one takeover, and what each saw."""

    name: str
    """How the trial ran, for the failure message."""
    stale: Pass
    stale_on: Durable[Any] = field(repr=False)
    rival_on: Durable[Any] = field(repr=False)
    testbed: Testbed[Any] = field(repr=False)
    """The testbed the handles are on (its probe moves counters in the same store)."""
    wrote: object | BaseException = None
    """The stale write's result, or what it raised."""
    newer: Pass | None = None
    """The pass the takeover returned (``None``: the takeover found nothing to take)."""
    found: object = None
    """What the takeover returned, and what the store showed right after it returned."""
    held: bool = False
    """The stale write was held at the store's gap."""
    rival_first: bool = False
    """The takeover returned while the stale write was still held at the gap."""
    write_started: float = 0.0
    took_over_at: float = 0.0

    @property
    def landed(self) -> bool:
        return not isinstance(self.wrote, BaseException)

    def failure(self, what: str) -> str:
        return (
            f"{self.name}: {what}. A write carrying {self.stale} must be refused with Fenced "
            "once a newer claim has returned, or have landed before it: the token check and "
            "the write it guards are one step, never two round trips with a gap between"
        )

    def fenced_or_landed(self) -> None:
        """The stale write either raised ``Fenced`` or succeeded; anything else is a bug."""
        if isinstance(self.wrote, BaseException) and not isinstance(self.wrote, Fenced):
            raise self.wrote

    def not_after_the_takeover(self, move: str) -> None:
        """A write held at the gap while the takeover returned a newer pass, or sent only
        after it had, cannot have landed before it."""
        if not self.landed or self.newer is None:
            return
        assert not self.rival_first, self.failure(
            f"{move} was held at the store's gap while a takeover on another handle returned "
            f"{self.newer}, and was then let go and returned {self.wrote!r}: it landed after "
            "the newer claim"
        )
        assert self.write_started <= self.took_over_at, self.failure(
            f"{move} was sent after a takeover on another handle had returned {self.newer}, "
            f"and returned {self.wrote!r}: it landed after the newer claim"
        )


Stale = Callable[[Durable[Any], str], Awaitable[Pass]]
Write = Callable[[Trial], Awaitable[object]]
TakeOver = Callable[[Trial], Awaitable[tuple[Pass | None, object]]]
Judge = Callable[[Trial], Awaitable[None]]


async def takeovers(
    store: StoreUnderTest,
    move: str,
    *,
    stale: Stale,
    write: Write,
    take_over: TakeOver,
    judge: Judge,
) -> None:
    """Race ``write`` by a stale pass against ``take_over`` on another handle, held at the
    store's gap for ``move`` where it offers one and by timing over more trials where not,
    and ``judge`` each trial from outside."""
    async with gapped(store) as (testbed, gaps), handles_of(testbed, HANDLES) as handles:

        async def stale_passes(count: int) -> list[Trial]:
            workflows = [store.workflow("takeover") for _ in range(count)]
            ons = [
                (handles[i % len(handles)], handles[(i + 1) % len(handles)]) for i in range(count)
            ]
            passes = await asyncio.gather(
                *(stale(on[0], wf) for on, wf in zip(ons, workflows, strict=True))
            )
            # One wait for every pass to run out, rather than one a trial.
            await asyncio.sleep(SHORT.total_seconds() + MARGIN)
            return [
                Trial("", holder, on[0], on[1], testbed)
                for holder, on in zip(passes, ons, strict=True)
            ]

        held = HELD_TRIALS if gaps is not None else 0
        timed = TIMED_TRIALS if gaps is not None else UNGAPPED_TRIALS
        trials = await stale_passes(held + timed)
        for i, trial in enumerate(trials[:held]):
            assert gaps is not None
            trial.name = f"trial {i + 1} of {held} held at the store's gap for {move}"
            await _held(gaps, move, trial, write, take_over)
            if not trial.held:
                trial.name = f"trial {i + 1}: the store never reached its gap for {move}"
            await judge(trial)
            if not trial.held:
                # The store offers no gap for this move: what is left races by timing.
                trials.extend(await stale_passes(UNGAPPED_TRIALS - timed))
                break
        timing = trials[held:]
        for i, trial in enumerate(timing):
            trial.name = f"trial {i + 1} of {len(timing)} raced by timing for {move}"
        await asyncio.gather(
            *(
                _timed(trial, write, take_over, LEADS[i % len(LEADS)])
                for i, trial in enumerate(timing)
            )
        )
        for trial in timing:
            await judge(trial)


async def _held(gaps: Gaps, move: str, trial: Trial, write: Write, take_over: TakeOver) -> None:
    loop = asyncio.get_running_loop()

    async def held() -> object:
        trial.write_started = loop.time()
        return await write(trial)

    async def rival() -> tuple[Pass | None, object]:
        found = await take_over(trial)
        trial.took_over_at = loop.time()
        return found

    raced = await race(gaps, move, trial.stale.workflow, held, rival)
    trial.held = raced.reached
    trial.rival_first = raced.rival_first
    trial.wrote = raced.held
    trial.newer, trial.found = cast(tuple[Pass | None, object], raced.rival)


async def _timed(trial: Trial, write: Write, take_over: TakeOver, lead: float) -> None:
    loop = asyncio.get_running_loop()

    async def held() -> object:
        await asyncio.sleep(max(-lead, 0.0))
        trial.write_started = loop.time()
        try:
            return await write(trial)
        except Fenced as error:
            return error

    async def rival() -> tuple[Pass | None, object]:
        await asyncio.sleep(max(lead, 0.0))
        found = await take_over(trial)
        trial.took_over_at = loop.time()
        return found

    trial.wrote, (trial.newer, trial.found) = await asyncio.gather(held(), rival())


# -- takeovers -------------------------------------------------------------------------------


def _claim_then_load(*, patient: bool = True) -> TakeOver:
    """Claim the workflow on the rival's handle and load it at once: once it is free, or
    (not ``patient``) on the first try, finding it held by a renewal that landed first."""

    async def take_over(trial: Trial) -> tuple[Pass | None, object]:
        cp = trial.rival_on.checkpointer
        wf = trial.stale.workflow
        give_up = asyncio.get_running_loop().time() + PATIENCE
        while (newer := await cp.claim(wf, liveness=LONG, budget=LONG)) is None and patient:
            if asyncio.get_running_loop().time() > give_up:
                raise AssertionError(f"{wf!r} was never free to claim again")
            await asyncio.sleep(TICK)
        return newer, await cp.load(wf)

    return take_over


def _begin_then_read(store: StoreUnderTest, *, patient: bool = True) -> TakeOver:
    """Begin a pass on the rival's handle: once the workflow is free (or terminal), or (not
    ``patient``) on the first try, finding it held by a beat that landed first."""

    async def take_over(trial: Trial) -> tuple[Pass | None, object]:
        lc = lifecycle(store, trial.rival_on)
        give_up = asyncio.get_running_loop().time() + PATIENCE
        while True:
            began = await lc.begin(trial.stale.workflow, liveness=LONG, budget=LONG, owner=TAKER)
            if began is not None or not patient:
                return (began.holder if began is not None else None), began
            if asyncio.get_running_loop().time() > give_up:
                raise AssertionError(f"{trial.stale.workflow!r} was never free to begin again")
            await asyncio.sleep(TICK)

    return take_over


def _stale_begin(store: StoreUnderTest) -> Stale:
    """A pass begun with a short liveness, as a worker that then went silent began it."""

    async def stale(handle: Durable[Any], workflow: str) -> Pass:
        holder, _ = await begun(lifecycle(store, handle), workflow, liveness=SHORT)
        return holder

    return stale


async def _stale_claim(handle: Durable[Any], workflow: str) -> Pass:
    return await claimed(handle.checkpointer, workflow, liveness=SHORT)


async def _newer_still_writes(trial: Trial) -> None:
    """The newer pass is not disturbed by the stale write: its own write lands."""
    if trial.newer is None:
        return
    try:
        await trial.rival_on.checkpointer.record(trial.newer, "after-the-takeover", True)
    except Fenced as error:
        raise AssertionError(
            trial.failure(f"the newer pass {trial.newer} was fenced after the race ({error})")
        ) from None


# -- the checkpointer's writes ------------------------------------------------------------


async def _stale_record_races_a_claim(
    store: StoreUnderTest, move: str, write: Callable[[Trial, str], Awaitable[object]]
) -> None:
    """A stale pass's ``move`` (``record`` or ``record_as``) of one key, raced against a
    newer claim: fenced and nothing written, or landed before the claim returned."""
    key = "charged"

    async def send(trial: Trial) -> object:
        return await write(trial, key)

    async def judge(trial: Trial) -> None:
        trial.fenced_or_landed()
        trial.not_after_the_takeover(move)
        if trial.landed:
            assert isinstance(trial.found, dict)
            assert trial.found.get(key) == "by the stale pass", trial.failure(
                f"{move} returned {trial.wrote!r}, but the load taken as soon as the newer "
                f"claim {trial.newer} returned held {trial.found!r}: it landed after the claim"
            )
        else:
            loaded = await trial.rival_on.checkpointer.load(trial.stale.workflow)
            assert key not in loaded, trial.failure(
                f"{move} raised Fenced and still wrote {key!r}: {loaded!r}"
            )
        await _newer_still_writes(trial)

    await takeovers(
        store,
        "Checkpointer.record",
        stale=_stale_claim,
        write=send,
        take_over=_claim_then_load(),
        judge=judge,
    )


@requirement("takeover.stale-record-never-lands-after-a-newer-claim")
async def test_takeover_a_stale_record_racing_a_newer_claim_is_fenced_or_lands_first(
    store: StoreUnderTest,
) -> None:
    """A record by a pass past its liveness, racing a claim on another handle, either raises
    Fenced and writes nothing, or lands before the claim returns (the claim's load shows it).
    """

    async def write(trial: Trial, key: str) -> object:
        return await trial.stale_on.checkpointer.record(trial.stale, key, "by the stale pass")

    await _stale_record_races_a_claim(store, "record", write)


@requirement("takeover.stale-record-as-never-lands-after-a-newer-claim", capability="operations")
async def test_takeover_a_stale_record_as_racing_a_newer_claim_is_fenced_or_lands_first(
    store: StoreUnderTest,
) -> None:
    """A record_as by a pass past its liveness (every Run.step writes through it), racing a
    claim on another handle, either raises Fenced and writes nothing, or lands before the
    claim returns (the claim's load shows it)."""

    async def write(trial: Trial, key: str) -> object:
        cp: Any = trial.stale_on.checkpointer
        assert isinstance(cp, Operational), f"{store.name} declares 'operations' but is not"
        return await cp.record_as(trial.stale, key, "by the stale pass", "step")

    await _stale_record_races_a_claim(store, "record_as", write)


@requirement("takeover.stale-transact-never-lands-after-a-newer-claim", capability="transact")
async def test_takeover_a_stale_transact_racing_a_newer_claim_is_fenced_or_lands_first(
    store: StoreUnderTest,
) -> None:
    """A transact by a pass past its liveness, racing a claim on another handle, either
    raises Fenced with neither its effect nor its record applied, or commits both before the
    claim returns (the claim's load shows the record)."""
    key = "reserved"

    async def write(trial: Trial) -> object:
        wf = trial.stale.workflow
        effect = probe_of(store, trial.testbed).bump(wf, "stock")
        return await trial.stale_on.checkpointer.transact(trial.stale, key, effect)

    async def judge(trial: Trial) -> None:
        trial.fenced_or_landed()
        trial.not_after_the_takeover("transact")
        wf = trial.stale.workflow
        moved = await probe_of(store, trial.testbed).count(wf, "stock")
        if trial.landed:
            assert isinstance(trial.found, dict)
            assert key in trial.found, trial.failure(
                f"transact returned {trial.wrote!r}, but the load taken as soon as the newer "
                f"claim {trial.newer} returned held {trial.found!r}: it committed after the claim"
            )
            assert moved == 1, trial.failure(f"transact landed and moved the counter {moved} times")
        else:
            loaded = await trial.rival_on.checkpointer.load(wf)
            untouched = key not in loaded and moved == 0
            assert untouched, trial.failure(
                f"transact raised Fenced, and still left {loaded!r} recorded and the counter "
                f"moved {moved} times"
            )
        await _newer_still_writes(trial)

    await takeovers(
        store,
        "Checkpointer.transact",
        stale=_stale_claim,
        write=write,
        take_over=_claim_then_load(),
        judge=judge,
    )


def _renewed_after_the_claim(trial: Trial, move: str) -> None:
    """A renewal that succeeded must have landed before the newer claim: it then held the
    workflow for a whole liveness window, so the claim cannot have returned sooner."""
    if not trial.landed or trial.newer is None:
        return
    window = SHORT.total_seconds()
    after = trial.took_over_at - trial.write_started
    assert after >= window - MARGIN, trial.failure(
        f"{move} returned {trial.wrote!r}, and a claim on another handle returned "
        f"{trial.newer} {after:.3f} s after the {move} was sent: a {move} that landed first "
        f"would have held the workflow for {window:.1f} s, so this one landed after the claim"
    )


@requirement("takeover.stale-renew-never-extends-after-a-newer-claim")
async def test_takeover_a_stale_renew_racing_a_newer_claim_is_fenced_or_lands_first(
    store: StoreUnderTest,
) -> None:
    """A renew by a pass past its liveness, racing a claim on another handle, either raises
    Fenced, or lands before the claim, which then finds the workflow held again."""

    async def write(trial: Trial) -> object:
        return await trial.stale_on.checkpointer.renew(trial.stale)

    async def judge(trial: Trial) -> None:
        trial.fenced_or_landed()
        trial.not_after_the_takeover("renew")
        _renewed_after_the_claim(trial, "renew")
        await _newer_still_writes(trial)

    await takeovers(
        store,
        "Checkpointer.renew",
        stale=_stale_claim,
        write=write,
        take_over=_claim_then_load(patient=False),
        judge=judge,
    )


@requirement("takeover.stale-release-never-frees-a-newer-claim")
async def test_takeover_a_stale_release_racing_a_newer_claim_frees_nothing_of_it(
    store: StoreUnderTest,
) -> None:
    """A release by a pass past its liveness, racing a claim on another handle, frees only
    its own claim, never the newer one: after the race the newer pass still holds the
    workflow and writes."""

    async def write(trial: Trial) -> object:
        await trial.stale_on.checkpointer.release(trial.stale)
        return None

    async def judge(trial: Trial) -> None:
        trial.fenced_or_landed()
        wf = trial.stale.workflow
        again = await trial.stale_on.checkpointer.claim(wf, liveness=LONG, budget=LONG)
        assert again is None, trial.failure(
            f"after the stale release raced the claim of {trial.newer}, the workflow was free: "
            f"a claim on another handle returned {again}, so the release freed the newer claim"
        )
        await _newer_still_writes(trial)

    await takeovers(
        store,
        "Checkpointer.release",
        stale=_stale_claim,
        write=write,
        take_over=_claim_then_load(),
        judge=judge,
    )


# -- the lifecycle's writes ------------------------------------------------------------------

STALE_STEP = "step-of-the-stale-pass"


@requirement("takeover.stale-beat-never-lands-after-a-newer-begin", capability="lifecycle")
async def test_takeover_a_stale_beat_racing_a_newer_begin_is_fenced_or_lands_first(
    store: StoreUnderTest,
) -> None:
    """A beat by a pass past its liveness, racing a begin on another handle, either raises
    Fenced and names no step, or lands before the begin, which then finds the workflow held
    again (or, its liveness spent, takes it and clears the step)."""

    async def write(trial: Trial) -> object:
        return await lifecycle(store, trial.stale_on).beat(trial.stale, STALE_STEP)

    async def judge(trial: Trial) -> None:
        trial.fenced_or_landed()
        trial.not_after_the_takeover("beat")
        _renewed_after_the_claim(trial, "beat")
        if trial.newer is not None:
            shown = await lifecycle(store, trial.rival_on).status(trial.stale.workflow)
            assert shown is None or shown.step != STALE_STEP, trial.failure(
                f"the newer pass {trial.newer} began, and its row still names the step "
                f"{STALE_STEP!r} the stale beat sent ({shown}): the beat landed after the begin"
            )
        await _newer_still_writes(trial)

    await takeovers(
        store,
        "Lifecycle.beat",
        stale=_stale_begin(store),
        write=write,
        take_over=_begin_then_read(store, patient=False),
        judge=judge,
    )


@requirement("takeover.stale-settle-never-lands-after-a-newer-begin", capability="lifecycle")
async def test_takeover_a_stale_settle_racing_a_newer_begin_is_fenced_or_lands_first(
    store: StoreUnderTest,
) -> None:
    """A settle by a pass past its liveness, racing a begin on another handle, either raises
    Fenced and leaves the newer pass running, or lands before the begin, which then finds
    the workflow finished and takes nothing."""
    value = "settled by the stale pass"

    async def write(trial: Trial) -> object:
        settlement = Settlement(Status.FINISHED, 1, value=value)
        await lifecycle(store, trial.stale_on).settle(trial.stale, settlement)
        return None

    async def judge(trial: Trial) -> None:
        trial.fenced_or_landed()
        trial.not_after_the_takeover("settle")
        began = trial.found
        assert isinstance(began, Began)
        if trial.landed:
            found_finished = trial.newer is None and began.status is Status.FINISHED
            assert found_finished, trial.failure(
                f"settle returned, and yet begin on another handle found the workflow "
                f"{began.status} and took it as {trial.newer}: the settlement landed after it"
            )
        else:
            shown = await lifecycle(store, trial.rival_on).status(trial.stale.workflow)
            running = shown is not None and shown.status is Status.RUNNING
            assert running, trial.failure(
                f"settle raised Fenced, and yet the newer pass {trial.newer}'s workflow is "
                f"{shown}: the settlement was written"
            )
        await _newer_still_writes(trial)

    await takeovers(
        store,
        "Lifecycle.settle",
        stale=_stale_begin(store),
        write=write,
        take_over=_begin_then_read(store),
        judge=judge,
    )
