"""Each move of an atomic Durable is one commit: no reader sees half, no failure leaves half.

A store declaring ``atomic-arrive`` says that ``arrive``, ``send`` and ``discard`` (and, with
``lifecycle``, ``start``, ``cancel`` and ``retry``) each write the checkpointer's half and
the scheduler's half in one commit. Two commits with an ``await`` between them pass every
test that only looks after the move returned, so these tests look *during* it and break it
*inside* it, through the store's :data:`durable.plugins.Gap`:

- held at its gap, the move is half way; a reader on another handle must see both halves or
  neither, never the value recorded with the workflow not queued, nor the reverse (on a
  store whose gap sits inside an open transaction, the reader sees neither, or waits);
- made to fail at its gap, the move must leave neither half behind.

A store whose testing hook offers no gap (or never calls it for these moves) cannot be held
half way, and is observed by timing alone: readers race the move over several trials, which
catches a split only when a read lands in the window between the two commits. That is weaker,
and the only proof such a store allows; the injected failure is then not tried at all.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from durable.interfaces import INBOX_PREFIX, Durable, Observable, Status
from durable.plugins import Testbed
from durable.workflows import LifecycleDurable, lifecycle_of

from durable_conformance import requirement
from durable_conformance.subject import DeclaredButUnimplemented, NotOffered, StoreUnderTest
from durable_conformance.suite._gaps import HOLD_AT_MOST, Gaps, InjectedFailure, gapped
from durable_conformance.suite._support import next_delivery, now

LOOK_FOR = 1.0
"""How long, in seconds, a reader is given to look while the move is held. A reader still
waiting then (for a lock the held move's transaction holds) has seen nothing, which is
also a correct answer."""

TRIALS = 12
"""Races by timing alone, for a store that cannot be held at a gap."""

INPUT = {"order": "o-1"}


@dataclass(frozen=True)
class Move:
    """One move across both halves, described by what it changes in each."""

    name: str
    prepare: Callable[[Durable[Any], str], Awaitable[object]]
    """Bring the workflow to where the move starts (a started workflow, for cancel)."""
    run: Callable[[Durable[Any], str], Awaitable[object]]
    recorded: Callable[[Durable[Any], str], Awaitable[bool]]
    """Whether the checkpointer's half of the move is visible from this handle."""
    queues: bool
    """True when the scheduler's half queues the workflow, False when it unqueues it."""
    what: str
    """The checkpointer's half, in words, for a failure message."""

    @property
    def gap(self) -> str:
        return f"Durable.{self.name}"


async def nothing(durable: Durable[Any], workflow: str) -> None:
    await asyncio.sleep(0)


async def queued(durable: Durable[Any], workflow: str) -> bool:
    """Whether the workflow is queued (runnable, scheduled or out), as this handle sees it.

    ``Observable.scheduled`` where the scheduler offers it, since looking changes nothing.
    Otherwise a take: a delivery found is handed back at once with ``wake_at(now)``.
    """
    scheduler = durable.scheduler
    if isinstance(scheduler, Observable):
        return await scheduler.scheduled(workflow) is not None
    delivery = await next_delivery(scheduler, workflow=workflow, within=0.3)
    if delivery is None:
        return False
    await scheduler.wake_at(delivery, now())
    return True


async def halves(move: Move, durable: Durable[Any], workflow: str) -> tuple[bool, bool]:
    """(checkpointer's half done, scheduler's half done), as ``durable`` sees them."""
    recorded = await move.recorded(durable, workflow)
    return recorded, await queued(durable, workflow) == move.queues


def lifecycled(durable: Durable[Any]) -> LifecycleDurable[Any]:
    if not isinstance(durable, LifecycleDurable):
        raise DeclaredButUnimplemented(
            f"the store declares 'lifecycle' but its Durable {type(durable).__name__} has no "
            "start, cancel and retry"
        )
    return durable


async def status_of(durable: Durable[Any], workflow: str) -> Status | None:
    found = await lifecycle_of(durable.checkpointer).status(workflow)
    return None if found is None else found.status


async def started(durable: Durable[Any], workflow: str) -> None:
    await lifecycled(durable).start("atomic-kind", workflow, INPUT)


async def cancelled(durable: Durable[Any], workflow: str) -> None:
    await started(durable, workflow)
    await lifecycled(durable).cancel(workflow)


async def arrive(durable: Durable[Any], workflow: str) -> object:
    return await durable.arrive(workflow, "approval", "yes")


async def arrived(durable: Durable[Any], workflow: str) -> bool:
    return "approval" in await durable.checkpointer.load(workflow)


async def send(durable: Durable[Any], workflow: str) -> object:
    return await durable.send(workflow, {"message": 1})


async def sent(durable: Durable[Any], workflow: str) -> bool:
    return any(k.startswith(INBOX_PREFIX) for k in await durable.checkpointer.load(workflow))


async def discard(durable: Durable[Any], workflow: str) -> None:
    await durable.discard(workflow)


async def discarded(durable: Durable[Any], workflow: str) -> bool:
    return await durable.checkpointer.load(workflow) == {}


async def start(durable: Durable[Any], workflow: str) -> object:
    return await lifecycled(durable).start("atomic-kind", workflow, INPUT)


async def admitted(durable: Durable[Any], workflow: str) -> bool:
    return await status_of(durable, workflow) is not None


async def cancel(durable: Durable[Any], workflow: str) -> object:
    return await lifecycled(durable).cancel(workflow)


async def withdrawn(durable: Durable[Any], workflow: str) -> bool:
    return await status_of(durable, workflow) is Status.CANCELLED


async def retry(durable: Durable[Any], workflow: str) -> object:
    return await lifecycled(durable).retry(workflow)


async def readmitted(durable: Durable[Any], workflow: str) -> bool:
    return await status_of(durable, workflow) is Status.READY


ARRIVE = Move("arrive", nothing, arrive, arrived, True, "the value recorded")
SEND = Move("send", nothing, send, sent, True, "the inbox entry appended")
DISCARD = Move("discard", arrive, discard, discarded, False, "the records forgotten")
START = Move("start", nothing, start, admitted, True, "the workflow admitted")
CANCEL = Move("cancel", started, cancel, withdrawn, False, "the workflow marked cancelled")
RETRY = Move("retry", cancelled, retry, readmitted, True, "the workflow made ready again")


@asynccontextmanager
async def testbed_with_gaps(
    store: StoreUnderTest,
) -> AsyncIterator[tuple[Testbed[Any], Gaps | None]]:
    """A fresh testbed built with a gap where the store's testing hook takes one; the test's
    own testbed, and no gap, where it does not (or refuses the option)."""
    async with AsyncExitStack() as stack:
        try:
            found = await stack.enter_async_context(gapped(store))
        except (TypeError, ValueError):  # a hook taking **options, but not gap=
            found = (store.testbed, None)
        yield found


def split(move: Move, seen: tuple[bool, bool], when: str) -> str:
    recorded, scheduled = seen
    queue = "queued" if move.queues else "unqueued"
    if recorded and not scheduled:
        half = f"{move.what} while the workflow was not yet {queue}"
    else:
        half = f"the workflow {queue} while {move.what} was not"
    return (
        f"{when}, another handle saw {half}: {move.name} is two commits, although the store "
        "declares atomic-arrive"
    )


async def one_commit(store: StoreUnderTest, move: Move) -> None:
    """Hold ``move`` at its gap and look from another handle; then make it fail there and
    look again. Without a gap, race readers against it by timing."""
    if not store.durable.atomic:
        raise DeclaredButUnimplemented(
            f"store {store.name!r} declares 'atomic-arrive' but its Durable says atomic=False"
        )
    async with testbed_with_gaps(store) as (testbed, gaps):
        reopen = testbed.reopen
        async with AsyncExitStack() as stack:
            other = (
                await stack.enter_async_context(reopen()) if reopen is not None else testbed.durable
            )
            held = await held_half_way(move, testbed.durable, other, gaps)
            if held:
                await failed_half_way(move, testbed.durable, other, gaps)
            else:
                await raced_by_timing(move, testbed.durable, other)


async def held_half_way(
    move: Move, durable: Durable[Any], other: Durable[Any], gaps: Gaps | None
) -> bool:
    """Hold the move at its gap and look from ``other``. False when it could not be held."""
    wf = f"atomic-{move.name}-{secrets.token_hex(4)}"
    await move.prepare(durable, wf)
    before = await halves(move, other, wf)
    assert before == (False, False), f"before {move.name}, {wf!r} already shows {before}"
    hold = gaps.arm(move.gap, wf) if gaps is not None else None
    task = asyncio.ensure_future(move.run(durable, wf))
    if hold is None:
        await task
        return False
    reached = asyncio.ensure_future(hold.reached.wait())
    await asyncio.wait({task, reached}, timeout=HOLD_AT_MOST, return_when="FIRST_COMPLETED")
    reached.cancel()
    if not hold.reached.is_set():
        gaps.disarm(hold)  # type: ignore[union-attr]
        await task
        return False
    look = asyncio.ensure_future(halves(move, other, wf))
    try:
        done, _ = await asyncio.wait({look}, timeout=LOOK_FOR)
        if done:
            seen = look.result()
            assert seen[0] == seen[1], split(move, seen, f"with {move.name} held half way")
    finally:
        hold.release()
        await asyncio.gather(task, look, return_exceptions=True)
    task.result()
    after = await halves(move, other, wf)
    assert after == (True, True), (
        f"after {move.name} returned, another handle saw (checkpointer's half, scheduler's "
        f"half) = {after}"
    )
    return True


async def failed_half_way(
    move: Move, durable: Durable[Any], other: Durable[Any], gaps: Gaps | None
) -> None:
    """Make the move fail at its gap: neither half may be left."""
    assert gaps is not None
    wf = f"atomic-{move.name}-{secrets.token_hex(4)}"
    await move.prepare(durable, wf)
    hold = gaps.arm(move.gap, wf, fail=InjectedFailure(f"the suite breaks {move.name} here"))
    try:
        outcome = await asyncio.wait_for(move.run(durable, wf), HOLD_AT_MOST)
    except InjectedFailure:
        pass
    else:
        raise AssertionError(
            f"{move.name} reached its gap, where the suite raised, and returned {outcome!r}"
        )
    assert hold.reached.is_set()
    seen = await halves(move, other, wf)
    assert seen == (False, False), (
        split(move, seen, f"after {move.name} failed half way")
        if seen[0] != seen[1]
        else f"{move.name} failed at its gap (before its commit), and both halves were left"
    )


async def raced_by_timing(move: Move, durable: Durable[Any], other: Durable[Any]) -> None:
    """Readers look (scheduler's half, checkpointer's half, scheduler's half again) while the
    move runs. Were it one commit, the first look finding the scheduler's half done means the
    checkpointer's is too, and the checkpointer's being done means the second look finds
    the scheduler's."""
    for _ in range(TRIALS):
        wf = f"atomic-{move.name}-{secrets.token_hex(4)}"
        await move.prepare(durable, wf)
        task = asyncio.ensure_future(move.run(durable, wf))
        while True:
            finished = task.done()
            scheduled = await queued(other, wf) == move.queues
            recorded = await move.recorded(other, wf)
            again = await queued(other, wf) == move.queues
            if scheduled and not recorded:
                raise AssertionError(split(move, (False, True), f"while {move.name} ran"))
            if recorded and not again:
                raise AssertionError(split(move, (True, False), f"while {move.name} ran"))
            if finished:
                break
        task.result()


@requirement("durable.arrive-is-one-commit", capability="atomic-arrive")
async def test_durable_arrive_is_one_commit(store: StoreUnderTest) -> None:
    """An atomic arrive is one commit: held half way, another handle sees the value recorded
    exactly when the workflow is queued; failing half way, it leaves neither.

    Held at the store's gap where it offers one; by timing alone where it does not."""
    await one_commit(store, ARRIVE)


@requirement("durable.send-is-one-commit", capability="atomic-arrive")
async def test_durable_send_is_one_commit(store: StoreUnderTest) -> None:
    """An atomic send is one commit: held half way, another handle sees the inbox entry
    exactly when the workflow is queued; failing half way, it leaves neither.

    Held at the store's gap where it offers one; by timing alone where it does not."""
    await one_commit(store, SEND)


@requirement("durable.discard-is-one-commit", capability="atomic-arrive")
async def test_durable_discard_is_one_commit(store: StoreUnderTest) -> None:
    """An atomic discard is one commit: held half way, another handle sees the records gone
    exactly when the runs are; failing half way, records and runs are both still there.

    Held at the store's gap where it offers one; by timing alone where it does not."""
    await one_commit(store, DISCARD)


def needs_lifecycle(store: StoreUnderTest) -> None:
    if not store.offers("lifecycle"):
        raise NotOffered(f"store {store.name!r} does not declare 'lifecycle'")


@requirement("durable.start-is-one-commit", capability="atomic-arrive")
async def test_durable_start_is_one_commit(store: StoreUnderTest) -> None:
    """An atomic store's start (with lifecycle) is one commit: held half way, another
    handle sees the workflow admitted exactly when it is queued; failing half way, neither.

    Held at the store's gap where it offers one; by timing alone where it does not."""
    needs_lifecycle(store)
    await one_commit(store, START)


@requirement("durable.cancel-is-one-commit", capability="atomic-arrive")
async def test_durable_cancel_is_one_commit(store: StoreUnderTest) -> None:
    """An atomic store's cancel (with lifecycle) is one commit: held half way, another
    handle sees the workflow cancelled exactly when it is unqueued; failing half way, it is
    still ready and queued.

    Held at the store's gap where it offers one; by timing alone where it does not."""
    needs_lifecycle(store)
    await one_commit(store, CANCEL)


@requirement("durable.retry-is-one-commit", capability="atomic-arrive")
async def test_durable_retry_is_one_commit(store: StoreUnderTest) -> None:
    """An atomic store's retry (with lifecycle) is one commit: held half way, another
    handle sees the workflow ready exactly when it is queued; failing half way, it is still
    cancelled and unqueued.

    Held at the store's gap where it offers one; by timing alone where it does not."""
    needs_lifecycle(store)
    await one_commit(store, RETRY)
