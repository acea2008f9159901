"""Deliberately broken stores: the memory store with one requirement violated each.

The plugin's own tests install this module, inside a pytester directory, as a distribution
called ``durable-broken-stores`` whose ``durable`` entry points name the objects below, so
the suite finds them exactly as it finds a third party's store. Each violation is the
smallest change to the memory store that breaks one guarantee, written the way a naive
store would get it wrong, so that the suite must catch it by the requirement it breaks.

They reach into the memory store's internals (``_write``, ``_records``, ``_claims``,
``_entries``): that is the point, and why they live with the suite's tests rather than
anywhere a user could reach them.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import random
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

from durable.boundary import (
    check_duration,
    check_key,
    check_operation,
    check_queues,
    check_workflow,
)
from durable.clock import SystemClock
from durable.codec import JsonCodec, encode_value
from durable.durable import SplitDurable
from durable.interfaces import (
    INBOX_PREFIX,
    SENT_PREFIX,
    Admitted,
    Began,
    Claimed,
    Delivery,
    Entry,
    Fenced,
    Page,
    Pass,
    QueueLimit,
    Recorded,
    Settlement,
    Status,
    WorkflowStatus,
    inbox_key,
)
from durable.memory import (
    MemoryCheckpointer,
    MemoryDurable,
    MemoryEffect,
    MemoryProbe,
    MemoryScheduler,
    _Claim,
    _Life,
    _Stored,
)
from durable.plugins import StorePlugin, Testbed, at_gap, hookimpl
from durable.run import STEP_PREFIX

DISTRIBUTION = "durable-broken-stores"
MEMORY_CAPABILITIES = frozenset({"transact", "atomic-arrive", "enumerate", "lifecycle"})


# -- checkpointers that break one rule each ------------------------------------------------


class Overwrites(MemoryCheckpointer):
    """A later write replaces the value a key holds (an upsert with DO UPDATE SET)."""

    def _write(
        self, workflow: str, key: str, encoded: object, operation: str | None = None
    ) -> Recorded:
        existing = self._records.get(workflow, {}).get(key)
        if existing is not None:
            existing.encoded = encoded
            return Recorded(self.codec.decode(encoded), True)
        return super()._write(workflow, key, encoded, operation)


class NoFence(MemoryCheckpointer):
    """record writes whatever token the pass carries."""

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        check_key(holder.workflow, key)
        encoded = encode_value(self.codec, value, workflow=holder.workflow, key=key)
        await asyncio.sleep(0)
        return self._write(holder.workflow, key, encoded)


class FirstByEquality(MemoryCheckpointer):
    """first is worked out by comparing the decoded stored value with what went in."""

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        written = await super().record(holder, key, value)
        return Recorded(written.value, written.value == value)


class LosesOrderOnConflict(MemoryCheckpointer):
    """A losing write rewrites the row, which moves it to the end (a heap-order store)."""

    def _write(
        self, workflow: str, key: str, encoded: object, operation: str | None = None
    ) -> Recorded:
        records = self._records.setdefault(workflow, {})
        existing = records.pop(key, None)
        if existing is not None:
            records[key] = existing
            return Recorded(self.codec.decode(existing.encoded), existing.encoded == encoded)
        return super()._write(workflow, key, encoded, operation)


class RacyMaxAppends(MemoryCheckpointer):
    """append reads the highest position, then writes the next one, in two round trips."""

    async def append(self, workflow: str, value: object, *, message_id: str | None = None) -> str:
        if message_id is not None:
            return await super().append(workflow, value, message_id=message_id)
        check_workflow(workflow)
        encoded = encode_value(self.codec, value, workflow=workflow, key="<inbox>")
        await asyncio.sleep(0)
        position = len(self._records.get(workflow, {}))
        await at_gap(self.gap, "Checkpointer.append", workflow)
        key = inbox_key(position)
        self._write(workflow, key, encoded)
        return key


class ChecksThenAppends(MemoryCheckpointer):
    """An append with a message id looks the id up, then appends, in two round trips."""

    async def append(self, workflow: str, value: object, *, message_id: str | None = None) -> str:
        check_workflow(workflow)
        encoded = encode_value(self.codec, value, workflow=workflow, key="<inbox>")
        await asyncio.sleep(0)
        if message_id is not None and message_id in self._sent.get(workflow, {}):
            return self._sent[workflow][message_id]
        await at_gap(self.gap, "Checkpointer.append", workflow)
        key = self._append_now(workflow, encoded)
        if message_id is not None:
            self._sent.setdefault(workflow, {})[message_id] = key
        return key


class IgnoresMessageId(MemoryCheckpointer):
    """append takes a message id and does nothing with it."""

    async def append(self, workflow: str, value: object, *, message_id: str | None = None) -> str:
        return await super().append(workflow, value)


class RestampsHistory(MemoryCheckpointer):
    """Every write stamps the record with the time, the losing ones too."""

    def _write(
        self, workflow: str, key: str, encoded: object, operation: str | None = None
    ) -> Recorded:
        existing = self._records.get(workflow, {}).get(key)
        if existing is not None:
            existing.at = self.clock.now()
        return super()._write(workflow, key, encoded, operation)


class StampsBeforeSending(MemoryCheckpointer):
    """supply and append stamp with the caller's clock, read before the round trip."""

    async def supply(self, workflow: str, key: str, value: object) -> object:
        check_workflow(workflow)
        stamp = self.clock.now()
        await asyncio.sleep(random.uniform(0, 0.05))
        encoded = encode_value(self.codec, value, workflow=workflow, key=key)
        first = key not in self._records.get(workflow, {})
        written = self._write(workflow, key, encoded)
        if first:
            self._records[workflow][key].at = stamp
        return written.value

    async def append(self, workflow: str, value: object, *, message_id: str | None = None) -> str:
        check_workflow(workflow)
        stamp = self.clock.now()
        await asyncio.sleep(random.uniform(0, 0.05))
        encoded = encode_value(self.codec, value, workflow=workflow, key="<inbox>")
        key = self._append_now(workflow, encoded, message_id)
        self._records[workflow][key].at = stamp
        return key


class DeletesClaimOnDiscard(MemoryCheckpointer):
    """discard deletes the claim row, so tokens start again from 1. The fence refuses only
    tokens below the highest issued, as a real store's comparison does, so a pass in flight
    now outranks the next claim."""

    def _discard_now(self, workflow: str) -> None:
        self._records.pop(workflow, None)
        self._claims.pop(workflow, None)

    def _fence(self, holder: Pass, doing: str) -> _Claim:
        claim = self._claims.get(holder.workflow)
        if claim is not None and holder.token < claim.token:
            raise Fenced(f"{holder} was superseded; {doing} refused")
        return claim if claim is not None else _Claim(holder.token)


class PassThrough:
    """A codec in name only: the value itself is what is stored."""

    def encode(self, value: object) -> object:
        return value

    def decode(self, encoded: object) -> object:
        return encoded


class SkipsCodec(MemoryCheckpointer):
    """Values are kept as they came, never crossing the codec."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**{**options, "codec": options.get("codec") or PassThrough()})


class LiftsBudget(MemoryCheckpointer):
    """renew pushes the budget out along with the liveness."""

    async def renew(self, holder: Pass) -> Pass:
        claim = self._claims.get(holder.workflow)
        if claim is not None and claim.token == holder.token and claim.budget_until is not None:
            claim.budget_until = max(claim.budget_until, self.clock.now() + claim.window * 2)
        return await super().renew(holder)


class StaleReleaseFrees(MemoryCheckpointer):
    """release frees the workflow whoever asks."""

    async def release(self, holder: Pass) -> None:
        await asyncio.sleep(0)
        claim = self._claims.get(holder.workflow)
        if claim is not None:
            claim.live_until = None
            claim.budget_until = None


class HalfCommits(MemoryCheckpointer):
    """transact keeps what a failing effect did before it failed."""

    async def transact(self, holder: Pass, key: str, effect: MemoryEffect) -> Recorded:
        await asyncio.sleep(0)
        self._fence(holder, f"transact of {key!r}")
        existing = self._records.get(holder.workflow, {}).get(key)
        if existing is not None:
            return Recorded(self.codec.decode(existing.encoded), False)
        result = effect(self.data)
        encoded = encode_value(self.codec, result, workflow=holder.workflow, key=key)
        return self._write(holder.workflow, key, encoded)


class TwoWinners(MemoryCheckpointer):
    """claim checks whether the workflow is free, then takes it, in two round trips."""

    async def claim(self, workflow: str, *, liveness: timedelta, budget: timedelta) -> Pass | None:
        check_workflow(workflow)
        check_duration("liveness", liveness, workflow=workflow)
        check_duration("budget", budget, workflow=workflow)
        await asyncio.sleep(0)
        now = self.clock.now()
        claim = self._claims.get(workflow)
        if claim is not None and claim.held(now):
            return None
        await asyncio.sleep(0)  # the gap between checking and taking
        latest = self._claims.get(workflow)
        token = latest.token + 1 if latest is not None else 1
        self._claims[workflow] = _Claim(token, now + liveness, now + budget, liveness)
        return Pass(workflow, token)


class TransactUnimplemented(MemoryCheckpointer):
    """Declares transact and does not do it."""

    async def transact(self, holder: Pass, key: str, effect: MemoryEffect) -> Recorded:
        raise NotImplementedError("transact is coming in a later release")


class AcceptsControlCharacters(MemoryCheckpointer):
    """supply checks ids and keys by the older rule, non-empty strings only, so an id or a
    key holding a newline is stored and later forges a line of ``show``."""

    async def supply(self, workflow: str, key: str, value: object) -> object:
        if not workflow or not key or key.startswith((INBOX_PREFIX, SENT_PREFIX)):
            raise ValueError(f"workflow {workflow!r}: empty id or key, or a reserved key")
        encoded = encode_value(self.codec, value, workflow=workflow, key=key)
        await asyncio.sleep(0)
        return self._supply_now(workflow, key, encoded)


# -- lifecycles that break one rule each --------------------------------------------------


class StaleOutcome(MemoryCheckpointer):
    """settle writes whatever token the pass carries (a status UPDATE without the claim's
    token in its WHERE)."""

    def _fence(self, holder: Pass, doing: str) -> _Claim:
        if doing.startswith("settle"):
            claim = self._claims.get(holder.workflow)
            return claim if claim is not None else _Claim(holder.token)
        return super()._fence(holder, doing)


class IndexMissesRunning(MemoryCheckpointer):
    """The status index is not told when a workflow starts running: the row moves, the
    index entry stays where it was (a second write that a crash, or a bug, skipped)."""

    def _move(self, workflow: str, old: Status | None, new: Status | None) -> None:
        if new is Status.RUNNING:
            return
        super()._move(workflow, old, new)


class RacyStart(MemoryCheckpointer):
    """admit reads whether the workflow exists, then inserts it, in two round trips."""

    async def admit(
        self, workflow: str, kind: str, input: object, *, queue: str = "default"
    ) -> Admitted:
        check_workflow(workflow)
        encoded = encode_value(self.codec, input, workflow=workflow, key="<input>")
        await asyncio.sleep(0)
        if self._lives.get(workflow) is not None:
            return self._admit_now(workflow, kind, encoded, queue)
        await at_gap(self.gap, "Lifecycle.admit", workflow)  # between reading and inserting
        self._lives.pop(workflow, None)
        return self._admit_now(workflow, kind, encoded, queue)


class CountsAtSettle(MemoryCheckpointer):
    """begin reports the attempt it is (the stored count plus one) but does not write it;
    the count lands only when the pass settles, with the number the worker hands it. A pass
    whose process dies never settles, so it is never counted and a crash loop never ends."""

    def _begin_now(
        self, workflow: str, liveness: timedelta, budget: timedelta, owner: str
    ) -> Began | None:
        began = super()._begin_now(workflow, liveness, budget, owner)
        if began is not None and began.holder is not None:
            self._lives[workflow].attempts -= 1
        return began


class NoLifecycle:
    """A third party's checkpointer as it was before lifecycle: the Checkpointer methods
    and ``workflows``, delegated to a memory store, and nothing more."""

    def __init__(self, **options: Any) -> None:
        self.inner = MemoryCheckpointer(**options)

    async def load(self, workflow: str) -> dict[str, object]:
        return await self.inner.load(workflow)

    async def history(self, workflow: str) -> list[Entry]:
        return await self.inner.history(workflow)

    async def workflows(self, limit: int | None = None) -> list[str]:
        return await self.inner.workflows(limit)

    async def claim(self, workflow: str, *, liveness: timedelta, budget: timedelta) -> Pass | None:
        return await self.inner.claim(workflow, liveness=liveness, budget=budget)

    async def renew(self, holder: Pass) -> Pass:
        return await self.inner.renew(holder)

    async def release(self, holder: Pass) -> None:
        await self.inner.release(holder)

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        return await self.inner.record(holder, key, value)

    async def transact(self, holder: Pass, key: str, effect: MemoryEffect) -> Recorded:
        return await self.inner.transact(holder, key, effect)

    async def supply(self, workflow: str, key: str, value: object) -> object:
        return await self.inner.supply(workflow, key, value)

    async def append(self, workflow: str, value: object, *, message_id: str | None = None) -> str:
        return await self.inner.append(workflow, value, message_id=message_id)

    async def discard(self, workflow: str) -> None:
        await self.inner.discard(workflow)


# -- schedulers that break one rule each ---------------------------------------------------


class ForgetsWakeupDuringPass(MemoryScheduler):
    """A make_ready for a workflow whose delivery is out is folded into that delivery, so the
    delivery's done or wake_at undoes it."""

    def _make_ready_now(self, workflow: str) -> None:
        entry = self._entries.get(workflow)
        if entry is not None and entry[1] is not None:
            return
        super()._make_ready_now(workflow)


class ReinstatesCancelled(MemoryScheduler):
    """wake_at schedules the workflow whether or not it is still there."""

    async def wake_at(self, delivery: Delivery, when: datetime) -> None:
        await asyncio.sleep(0)
        entry = self._entries.get(delivery.workflow)
        if entry is not None and entry[1] != delivery.receipt:
            return
        self._entries[delivery.workflow] = (when, None)
        self._changed.set()


class ShortLease(MemoryScheduler):
    """A taken delivery is hidden for a tenth of the lease (milliseconds read as seconds)."""

    def _take(self) -> Delivery | None:
        delivery = super()._take()
        if delivery is not None:
            self._entries[delivery.workflow] = (
                self.clock.now() + self._lease / 10,
                delivery.receipt,
            )
        return delivery


class ReclaimsAnyTaken(MemoryScheduler):
    """reclaim takes over any delivery that is out, however recently it was taken."""

    async def reclaim(self, idle: timedelta) -> Delivery | None:
        check_duration("idle", idle)
        await asyncio.sleep(0)
        for workflow, (_, receipt) in self._entries.items():
            if receipt is not None:
                again = Delivery(workflow, str(next(self._receipts)))
                self._entries[workflow] = (self.clock.now() + self._lease, again.receipt)
                return again
        return None


class PicksThenHides(MemoryScheduler):
    """next_ready picks a runnable workflow, then hides it, in two round trips."""

    async def next_ready(self, within: timedelta) -> Delivery | None:
        check_duration("within", within)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + within.total_seconds()
        while True:
            now = self.clock.now()
            due = [(at, wf) for wf, (at, _) in self._entries.items() if at <= now]
            if due:
                _, workflow = min(due)
                await asyncio.sleep(0)
                receipt = str(next(self._receipts))
                self._entries[workflow] = (now + self._lease, receipt)
                return Delivery(workflow, receipt)
            if loop.time() >= give_up:
                return None
            await asyncio.sleep(0.02)


# -- rival moves (issue 14, racing takeovers: claim/discard, supply/record, the hand-out) --


class FencesFromARead(MemoryCheckpointer):
    """discard reads the claim's token, then writes the fence one above it, in two round
    trips: a claim landing in between is given the very token the fence is raised to."""

    async def discard(self, workflow: str) -> None:
        check_workflow(workflow)
        await asyncio.sleep(0)
        claim = self._claims.get(workflow)
        token = claim.token if claim is not None else 0
        await at_gap(self.gap, "Checkpointer.discard", workflow)
        self._claims[workflow] = _Claim(token)
        self._discard_now(workflow)


class SuppliesAfterALookup(MemoryCheckpointer):
    """supply looks the key up, then writes it (an upsert) in a second round trip: a record
    landing in between is overwritten, though it was told it won."""

    async def supply(self, workflow: str, key: str, value: object) -> object:
        check_workflow(workflow)
        check_key(workflow, key)
        encoded = encode_value(self.codec, value, workflow=workflow, key=key)
        await asyncio.sleep(0)
        existing = self._records.get(workflow, {}).get(key)
        if existing is not None:
            return self.codec.decode(existing.encoded)
        await at_gap(self.gap, "Checkpointer.supply", workflow)
        records = self._records.setdefault(workflow, {})
        records[key] = _Stored(encoded, self.clock.now())
        return self.codec.decode(encoded)


class HidesByUpsert(MemoryScheduler):
    """next_ready picks a runnable workflow, then hides it in a second round trip by an
    upsert guarded against other takers, which puts back an entry cancelled in between."""

    async def next_ready(self, within: timedelta) -> Delivery | None:
        check_duration("within", within)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + within.total_seconds()
        while True:
            now = self.clock.now()
            due = [(at, wf) for wf, (at, _) in self._entries.items() if at <= now]
            if due:
                _, workflow = min(due)
                await at_gap(self.gap, "Scheduler.next_ready", workflow)
                now = self.clock.now()
                entry = self._entries.get(workflow)
                if entry is None or entry[0] <= now:
                    receipt = str(next(self._receipts))
                    self._entries[workflow] = (now + self._lease, receipt)
                    return Delivery(workflow, receipt)
                continue
            if loop.time() >= give_up:
                return None
            await asyncio.sleep(0.02)


class AnswersFromARead(MemoryScheduler):
    """wake_at reads the entry and checks the receipt, then writes the deadline in a second
    round trip: a hand-out landing in between is overwritten by the older delivery's answer."""

    async def wake_at(self, delivery: Delivery, when: datetime) -> None:
        await asyncio.sleep(0)
        entry = self._entries.get(delivery.workflow)
        if entry is None or entry[1] != delivery.receipt:
            return
        await at_gap(self.gap, "Scheduler.wake_at", delivery.workflow)
        self._entries[delivery.workflow] = (when, None)
        self._changed.set()


# -- robustness for the outside author (issue 14) -----------------------------------------


class BusyNextReady(MemoryScheduler):
    """next_ready polls without ever awaiting: it looks, and looks again, until a workflow
    is ready or ``within`` has passed, and never gives the event loop back, so nothing else
    (the make_ready it waits for included) can run meanwhile."""

    async def next_ready(self, within: timedelta) -> Delivery | None:
        check_duration("within", within)
        give_up = time.monotonic() + within.total_seconds()
        while True:
            delivery = self._take()
            if delivery is not None:
                return delivery
            if time.monotonic() >= give_up:
                return None


class CreatesItsTableTwice(MemoryCheckpointer):
    """The testing hook builds a store that creates its table in one fixed place (a file
    the hook names, say): the first testbed, the probe's, gets it, and every later one fails
    creating it again. A bug in the hook, not a missing server."""

    made = 0

    def __init__(self, **options: Any) -> None:
        type(self).made += 1
        if type(self).made > 1:
            raise RuntimeError("table workflow_records already exists")
        super().__init__(**options)


class AcceptsZeroWaits(MemoryScheduler):
    """next_ready and reclaim check only that they were handed a timedelta: a zero or
    negative ``within`` looks once without waiting, and a zero or negative ``idle`` takes
    over whatever is out."""

    async def next_ready(self, within: timedelta) -> Delivery | None:
        if not isinstance(within, timedelta):
            raise TypeError(f"within must be a timedelta, got {within!r}")
        if within > timedelta(0):
            return await super().next_ready(within)
        await asyncio.sleep(0)
        return self._take()

    async def reclaim(self, idle: timedelta) -> Delivery | None:
        if not isinstance(idle, timedelta):
            raise TypeError(f"idle must be a timedelta, got {idle!r}")
        if idle > timedelta(0):
            return await super().reclaim(idle)
        await asyncio.sleep(0)
        for workflow, (_, receipt) in self._entries.items():
            if receipt is not None:
                again = Delivery(workflow, str(next(self._receipts)))
                self._entries[workflow] = (self.clock.now() + self._lease, again.receipt)
                return again
        return None


class BytesAsText:
    """What a text column does to a codec's bytes: decodes them as UTF-8, replacing what is
    not UTF-8, and hands the text back on the way out."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def encode(self, value: object) -> object:
        encoded = self.inner.encode(value)
        if isinstance(encoded, bytes):
            return encoded.decode("utf-8", errors="replace")
        return encoded

    def decode(self, encoded: object) -> object:
        return self.inner.decode(encoded)


class HoldsBytesAsText(MemoryCheckpointer):
    """Every encoding is held as text: a bytes encoding is decoded as UTF-8 with what is not
    UTF-8 replaced, so two encodings that differ there compare equal, and the codec is
    handed back text it never gave."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**{**options, "codec": BytesAsText(options.get("codec") or JsonCodec())})


# -- histories, checked against the reference (issue 14) ----------------------------------------


class DiscardsInTwoSteps(MemoryCheckpointer):
    """discard forgets the records in one round trip and raises the fence in the next, so
    a write by the pass in flight that lands between the two survives the discard, and a
    claim that lands there is overwritten by the fence (its pass refused, the workflow free
    again). Each scenario test that discards while nothing else moves passes."""

    async def discard(self, workflow: str) -> None:
        check_workflow(workflow)
        self._records.pop(workflow, None)
        self._sent.pop(workflow, None)
        await asyncio.sleep(0.001)
        self._raise_fence(workflow)


# -- racing takeovers (issue 14): each write checks its pass, then writes, with a gap ---------
#
# The naive split a store over a driver without scripts or transactions makes: read the
# claim and compare the token in one round trip, then send the write in the next. The
# testing hook's gap sits between the two, where the suite holds the write while a newer
# pass takes the workflow over; only a takeover landing there shows the split.


class SplitRecord(MemoryCheckpointer):
    """record checks the fence, then writes."""

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        check_key(holder.workflow, key)
        encoded = encode_value(self.codec, value, workflow=holder.workflow, key=key)
        await asyncio.sleep(0)
        self._fence(holder, f"record of {key!r}")
        await at_gap(self.gap, "Checkpointer.record", holder.workflow)
        return self._write(holder.workflow, key, encoded)


class SplitTransact(MemoryCheckpointer):
    """transact checks the fence, then performs the effect and writes its record."""

    async def transact(self, holder: Pass, key: str, effect: MemoryEffect) -> Recorded:
        check_key(holder.workflow, key)
        await asyncio.sleep(0)
        self._fence(holder, f"transact of {key!r}")
        await at_gap(self.gap, "Checkpointer.transact", holder.workflow)
        existing = self._records.get(holder.workflow, {}).get(key)
        if existing is not None:
            return Recorded(self.codec.decode(existing.encoded), False)
        before = copy.deepcopy(self.data)
        try:
            result = effect(self.data)
            encoded = encode_value(self.codec, result, workflow=holder.workflow, key=key)
        except BaseException:
            self.data.clear()
            self.data.update(before)
            raise
        return self._write(holder.workflow, key, encoded)


class SplitRenew(MemoryCheckpointer):
    """renew checks the fence and the budget, then pushes the workflow's liveness forward
    (an UPDATE by workflow, without the token in its WHERE)."""

    async def renew(self, holder: Pass) -> Pass:
        await asyncio.sleep(0)
        claim = self._fence(holder, "renew")
        if claim.budget_until is None or self.clock.now() >= claim.budget_until:
            raise Fenced(f"{holder} was released or has spent its budget; stop this pass")
        window = claim.window
        await at_gap(self.gap, "Checkpointer.renew", holder.workflow)
        latest = self._claims[holder.workflow]
        if latest.budget_until is not None:
            latest.live_until = min(self.clock.now() + window, latest.budget_until)
        return holder


class SplitRelease(MemoryCheckpointer):
    """release checks the token, then frees the workflow and raises its fence."""

    async def release(self, holder: Pass) -> None:
        await asyncio.sleep(0)
        claim = self._claims.get(holder.workflow)
        if claim is None or claim.token != holder.token:
            return
        await at_gap(self.gap, "Checkpointer.release", holder.workflow)
        self._raise_fence(holder.workflow)


class SplitBeat(MemoryCheckpointer):
    """beat checks the fence and the budget, then renews and names the step in flight."""

    async def beat(self, holder: Pass, step: str | None) -> Pass:
        await asyncio.sleep(0)
        claim = self._fence(holder, "beat")
        if claim.budget_until is None or self.clock.now() >= claim.budget_until:
            raise Fenced(f"{holder} was released or has spent its budget; stop this pass")
        window = claim.window
        await at_gap(self.gap, "Lifecycle.beat", holder.workflow)
        latest = self._claims[holder.workflow]
        now = self.clock.now()
        if latest.budget_until is not None:
            latest.live_until = min(now + window, latest.budget_until)
        life = self._lives.get(holder.workflow)
        if life is not None and life.status is Status.RUNNING:
            life.step, life.beat_at = step, now
        return holder


class SplitSettle(MemoryCheckpointer):
    """settle checks the fence, then writes the outcome and releases whatever claim is
    there by then."""

    async def settle(self, holder: Pass, settlement: Settlement) -> None:
        value = (
            encode_value(self.codec, settlement.value, workflow=holder.workflow, key="<value>")
            if settlement.status is Status.FINISHED
            else None
        )
        await asyncio.sleep(0)
        self._fence(holder, f"settle as {settlement.status}")
        await at_gap(self.gap, "Lifecycle.settle", holder.workflow)
        current = Pass(holder.workflow, self._claims[holder.workflow].token)
        self._settle_now(current, settlement, value)


# -- atomic moves (issue 14) ----------------------------------------------------------------


class TwoCommitArrive(MemoryDurable):
    """Declares atomic-arrive, but arrive records, then queues, as two steps with a round
    trip (the store's gap) between: a SplitDurable calling itself atomic."""

    async def arrive(self, workflow: str, key: str, value: object) -> object:
        check_workflow(workflow)
        check_key(workflow, key)
        cp = self._checkpointer
        encoded = encode_value(cp.codec, value, workflow=workflow, key=key)
        stored = cp._supply_now(workflow, key, encoded)
        await at_gap(cp.gap, "Durable.arrive", workflow)
        self._scheduler._make_ready_now(workflow)
        return stored


class TwoCommitSend(MemoryDurable):
    """send appends, then queues, as two steps, while declaring atomic-arrive."""

    async def send(self, workflow: str, value: object, *, message_id: str | None = None) -> str:
        check_workflow(workflow)
        cp = self._checkpointer
        encoded = encode_value(cp.codec, value, workflow=workflow, key="<inbox>")
        key = cp._append_now(workflow, encoded, message_id)
        await at_gap(cp.gap, "Durable.send", workflow)
        self._scheduler._make_ready_now(workflow)
        return key


class TwoCommitDiscard(MemoryDurable):
    """discard forgets the records, then cancels the runs, as two steps, while declaring
    atomic-arrive."""

    async def discard(self, workflow: str) -> None:
        check_workflow(workflow)
        self._checkpointer._discard_now(workflow)
        await at_gap(self._checkpointer.gap, "Durable.discard", workflow)
        self._scheduler._cancel_now(workflow)


class TwoCommitStart(MemoryDurable):
    """start admits, then queues, as two steps, while declaring atomic-arrive."""

    async def _admit_and_queue(
        self, workflow: str, kind: str, input: object, queue: str
    ) -> Admitted:
        cp = self._checkpointer
        encoded = encode_value(cp.codec, input, workflow=workflow, key="<input>")
        admitted = cp._admit_now(workflow, kind, encoded, queue)
        await at_gap(cp.gap, "Durable.start", workflow)
        if admitted.queue:
            self._scheduler._make_ready_now(workflow)
        return admitted


class TwoCommitCancel(MemoryDurable):
    """cancel withdraws, then unqueues, as two steps, while declaring atomic-arrive."""

    async def _withdraw_and_cancel(self, workflow: str) -> WorkflowStatus:
        shown, changed = self._checkpointer._withdraw_now(workflow)
        await at_gap(self._checkpointer.gap, "Durable.cancel", workflow)
        if changed:
            self._scheduler._cancel_now(workflow)
        return shown


class TwoCommitRetry(MemoryDurable):
    """retry readmits, then queues, as two steps, while declaring atomic-arrive."""

    async def _readmit_and_queue(self, workflow: str) -> WorkflowStatus:
        shown = self._checkpointer._readmit_now(workflow)
        await at_gap(self._checkpointer.gap, "Durable.retry", workflow)
        self._scheduler._make_ready_now(workflow)
        return shown


# -- sentences the docstring audit found unproved (issue 14) -----------------------------------


class ClaimedPastLiveness(MemoryCheckpointer):
    """claimed shows the claim row whatever its liveness (a SELECT without the store's clock
    in its WHERE), so a dead worker's workflow is shown as held."""

    async def claimed(self, workflow: str) -> Claimed | None:
        await asyncio.sleep(0)
        claim = self._claims.get(workflow)
        if claim is None or claim.live_until is None or claim.budget_until is None:
            return None
        return Claimed(claim.token, claim.live_until, claim.budget_until)


class ScheduledFromALog(MemoryScheduler):
    """scheduled reads when the workflow was last made ready, from a log of wakeups that
    neither wake_at nor cancel touches."""

    def _make_ready_now(self, workflow: str) -> None:
        super()._make_ready_now(workflow)
        self.__dict__.setdefault("_log", {})[workflow] = self.clock.now()

    async def scheduled(self, workflow: str) -> datetime | None:
        await asyncio.sleep(0)
        found: datetime | None = self.__dict__.get("_log", {}).get(workflow)
        return found


class UnsortedWorkflows(MemoryCheckpointer):
    """workflows lists ids in the order they were first written (a scan), not sorted."""

    async def workflows(self, limit: int | None = None) -> list[str]:
        await asyncio.sleep(0)
        found = [wf for wf, records in self._records.items() if records]
        return found if limit is None else found[:limit]


class AdmitsBeforeEncoding(MemoryCheckpointer):
    """admit inserts the row, then stores the input in a second statement, which fails for
    an input the codec cannot encode and leaves the row behind."""

    async def admit(
        self, workflow: str, kind: str, input: object, *, queue: str = "default"
    ) -> Admitted:
        try:
            encode_value(self.codec, input, workflow=workflow, key="<input>")
        except TypeError:
            self._admit_now(workflow, kind, self.codec.encode(None), queue)
            raise
        return await super().admit(workflow, kind, input, queue=queue)


class ForgetsTheQueue(MemoryCheckpointer):
    """admit takes a queue and stores every workflow under the default one (a column the
    INSERT left out)."""

    async def admit(
        self, workflow: str, kind: str, input: object, *, queue: str = "default"
    ) -> Admitted:
        return await super().admit(workflow, kind, input)


class StampsOnlyAdmission(MemoryCheckpointer):
    """Every transition keeps the updated_at the admission wrote (an UPDATE that sets the
    status and forgets the time); the listing's own order is kept right."""

    def _transition(
        self, workflow: str, life: Any, old: Status | None, now: datetime | None = None
    ) -> None:
        kept = life.updated_at
        super()._transition(workflow, life, old, now)
        if old is not None and kept is not None:
            life.updated_at = kept


class ListsAnything(MemoryCheckpointer):
    """statuses answers whatever it is asked: a limit below 1 is an empty page, a cursor it
    cannot read starts from the top."""

    async def statuses(
        self,
        *,
        status: Status | None = None,
        kind: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page:
        if limit < 1:
            await asyncio.sleep(0)
            return Page((), None)
        if cursor is not None and not cursor.isdigit():
            cursor = None
        return await super().statuses(status=status, kind=kind, limit=limit, cursor=cursor)


# -- queues (issue 16): routing by queue --------------------------------------------------------


class IgnoresQueues(MemoryScheduler):
    """next_ready_in hands out the earliest ready workflow of any queue."""

    async def next_ready_in(self, queues: frozenset[str], within: timedelta) -> Delivery | None:
        check_queues(queues)
        return await self.next_ready(within)


class TakesThenDefers(MemoryScheduler):
    """next_ready_in takes the earliest ready workflow, reads its queue, and answers for one of
    another queue with wake_at a moment later: the filter a worker would write on top of
    next_ready. No taker is handed it, but it is hidden from the takers of its own queue."""

    async def next_ready_in(self, queues: frozenset[str], within: timedelta) -> Delivery | None:
        served = check_queues(queues)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + within.total_seconds()
        while True:
            delivery = self._take()
            if delivery is not None:
                if self.queue_of(delivery.workflow) in served:
                    return delivery
                # Deferred well past the test's patience: a deferral of a second had run
                # out under a loaded machine before the taker of its own queue asked, and
                # the suite then passed this store.
                await self.wake_at(delivery, self.clock.now() + timedelta(seconds=5))
                continue
            if loop.time() >= give_up:
                return None
            await asyncio.sleep(0.02)


class TakesAnyForNoQueues(MemoryScheduler):
    """next_ready_in takes an empty set of queues (or a bare str) for every queue."""

    async def next_ready_in(self, queues: frozenset[str], within: timedelta) -> Delivery | None:
        if not queues or isinstance(queues, str):  # type: ignore[unreachable]
            return await self.next_ready(within)
        return await self._next_ready(check_queues(queues), within)


# -- steps that reach outside the store (issue 15) ---------------------------------------------


class DurablesRecordsLast(MemoryCheckpointer):
    """history lists the workflow's own records first and durable's after them (two tables,
    read one after the other), so a step's value comes before its attempt's intent."""

    async def history(self, workflow: str) -> list[Entry]:
        found = await super().history(workflow)
        return sorted(found, key=lambda entry: entry.key.startswith("durable."))


class HidesFailedAttempts(MemoryCheckpointer):
    """history leaves out the records of failed attempts (a filter meant for a summary), so
    the attempts a step made are not all in it."""

    async def history(self, workflow: str) -> list[Entry]:
        found = await super().history(workflow)
        return [e for e in found if not (e.key.startswith(STEP_PREFIX) and ":failed:" in e.key)]


class HandsOutAnotherToken(MemoryCheckpointer):
    """claim hands out its token doubled and fences with the halved one, so the number a
    step hands outside is not the one the store keeps, and one it never issued passes."""

    async def claim(self, workflow: str, *, liveness: timedelta, budget: timedelta) -> Pass | None:
        found = await super().claim(workflow, liveness=liveness, budget=budget)
        return None if found is None else Pass(workflow, found.token * 2)

    def _begin_now(
        self, workflow: str, liveness: timedelta, budget: timedelta, owner: str
    ) -> Began | None:
        began = super()._begin_now(workflow, liveness, budget, owner)
        if began is None or began.holder is None:
            return began
        return dataclasses.replace(began, holder=Pass(workflow, began.holder.token * 2))

    def _fence(self, holder: Pass, doing: str) -> _Claim:
        return super()._fence(Pass(holder.workflow, holder.token // 2), doing)

    async def release(self, holder: Pass) -> None:
        await super().release(Pass(holder.workflow, holder.token // 2))


# -- schedules and children (issue 16): a start that writes over an ended workflow ------------


class _ReusesEndedIds(MemoryCheckpointer):
    """admit starts afresh over an ended workflow of the same kind and input whose status is
    in ``REUSED``, as an upsert would (``ON CONFLICT (id) DO UPDATE SET status = 'ready'``),
    or an engine whose ids may be reused once their workflow has closed."""

    REUSED: frozenset[Status] = frozenset()

    def _admit_now(self, workflow: str, kind: str, encoded: object, queue: str) -> Admitted:
        life = self._lives.get(workflow)
        if (
            life is not None
            and life.status in self.REUSED
            and (life.kind, life.input) == (kind, encoded)
        ):
            now = self.clock.now()
            fresh = _Life(Status.READY, kind, encoded, now, 0, queue=queue, started_at=now)
            self._transition(workflow, fresh, life.status, now)
            return Admitted(self._shown(workflow, fresh), created=True, queue=True)
        return super()._admit_now(workflow, kind, encoded, queue)


class DoubleFiresTicks(_ReusesEndedIds):
    """A finished workflow's id is started again: a schedule's tick that a late worker finds
    due runs a second time."""

    REUSED = frozenset({Status.FINISHED})


class RestartsEndedChildren(_ReusesEndedIds):
    """A failed or cancelled workflow's id may be started again (a "duplicate failed only"
    reuse policy): a parent replayed after its child failed runs the child again."""

    REUSED = frozenset({Status.FAILED, Status.CANCELLED})


# -- operations (issue 18): a key keeps the operation that wrote it -----------------------------


class IgnoresOperations(MemoryCheckpointer):
    """record_as and transact keep no operation and refuse no reuse: record under another
    name, so that a step key read back as an awaiting passes unremarked."""

    async def record_as(self, holder: Pass, key: str, value: object, operation: str) -> Recorded:
        return await self.record(holder, key, value)

    def _refuse_reuse(self, workflow: str, key: str, operation: str) -> None:
        return None

    def _write(
        self, workflow: str, key: str, encoded: object, operation: str | None = None
    ) -> Recorded:
        return super()._write(workflow, key, encoded)


# -- queue limits (issue 16): counted in the store, given back by liveness --------------------


class LeaksSlotOnKill(MemoryScheduler):
    """A slot comes back only when its delivery is answered: a taker that dies keeps it
    for good (the slot is counted without its liveness)."""

    def _live(self, queue: str, now: datetime) -> int:
        return sum(1 for s in self._slots.values() if s.queue == queue)


class CountsSlotsPerHandle(MemoryScheduler):
    """Each handle counts the slots it handed out itself: the limit holds in one process
    and one connection, and N handles hand out N times the limit."""

    def reopened(self) -> CountsSlotsPerHandle:
        view = copy.copy(self)
        view._slots = {}
        view._handed = {}
        return view


class LimitsOnlyRoutedTakes(MemoryScheduler):
    """Only ``next_ready_in`` counts slots: ``next_ready`` (a worker of an older release,
    naming no queue) takes as if no queue had a limit, past the limit and without a slot."""

    def _take(self) -> Delivery | None:
        limits, priorities = self._limits, self._priorities
        self._limits, self._priorities = {}, {}
        try:
            return self._take_from(None)
        finally:
            self._limits, self._priorities = limits, priorities


class KeepsSlotOnCancel(MemoryScheduler):
    """``cancel`` forgets the workflow's runs and leaves its slot taken: the queue stays a
    slot short until the slot's liveness runs out."""

    def _cancel_now(self, workflow: str) -> None:
        self._entries.pop(workflow, None)


class TakesBackOnLowering(MemoryScheduler):
    """A new limit starts the queue's count afresh: lowering it forgets the slots held, so
    takes hand out new slots beside passes still running."""

    async def set_limit(self, queue: str, limit: QueueLimit | None) -> None:
        await super().set_limit(queue, limit)
        for workflow in [w for w, s in self._slots.items() if s.queue == queue]:
            del self._slots[workflow]


class HoldsAnySlot(MemoryScheduler):
    """``hold`` pushes on the workflow's slot whichever delivery asks and however long ago
    it lapsed: only an answered slot (removed) is refused."""

    async def hold(self, delivery: Delivery, liveness: timedelta) -> bool:
        await asyncio.sleep(0)
        slot = self._slots.get(delivery.workflow)
        if slot is None:
            return False
        until = self.clock.now() + liveness
        self._slots[delivery.workflow] = dataclasses.replace(slot, live_until=until)
        return True


class ForgetsPriority(MemoryScheduler):
    """A priority is spent on the first hand-out: every later pass and wake-up of the
    workflow queues at the default priority."""

    def _take_limited(self, queues: frozenset[str] | None, now: datetime) -> Delivery | None:
        delivery = super()._take_limited(queues, now)
        if delivery is not None:
            self._priorities.pop(delivery.workflow, None)
        return delivery


class IgnoresPriority(MemoryScheduler):
    """``prioritize`` checks its arguments and keeps nothing: a limited queue hands out in
    the order its workflows became ready, whatever their priority."""

    async def prioritize(self, workflow: str, priority: int) -> None:
        check_workflow(workflow)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise TypeError(f"workflow {workflow!r}: a priority is an int, got {priority!r}")
        await asyncio.sleep(0)


class HoldsInName(MemoryScheduler):
    """``hold`` answers as it should (refused for a lapsed, answered or re-handed slot) and
    never pushes the slot's deadline: a pass longer than the lease loses its slot to the
    next take while it runs."""

    async def hold(self, delivery: Delivery, liveness: timedelta) -> bool:
        check_duration("liveness", liveness, workflow=delivery.workflow)
        await asyncio.sleep(0)
        slot = self._slots.get(delivery.workflow)
        now = self.clock.now()
        return slot is not None and slot.receipt == delivery.receipt and slot.live_until > now


# -- writes that take a time (issue 17: an import keeps a workflow's times) -------------------


class IgnoresTheTime(MemoryCheckpointer):
    """supply_at, append_at and backdate take a time and stamp the store's clock anyway (an
    import written over the ordinary writes), so a moved workflow looks newly made."""

    async def supply_at(self, workflow: str, key: str, value: object, at: datetime) -> object:
        return await self.supply(workflow, key, value)

    async def append_at(
        self, workflow: str, value: object, at: datetime, *, message_id: str | None = None
    ) -> str:
        return await self.append(workflow, value, message_id=message_id)

    async def backdate(
        self, workflow: str, *, started_at: datetime | None, updated_at: datetime
    ) -> None:
        await super().backdate(workflow, started_at=None, updated_at=self.clock.now())


class PrunesAfterARead(MemoryCheckpointer):
    """discard_ended reads the status, then discards in a second step, so a retry landing
    between the two is lost (a prune written over status and discard)."""

    async def discard_ended(
        self, workflow: str, *, statuses: frozenset[Status], before: datetime
    ) -> bool:
        life = self._lives.get(workflow)
        if life is None or life.status not in statuses or life.updated_at >= before:
            return False
        await asyncio.sleep(0.001)
        await self.discard(workflow)
        return True


# -- group commit (issue 20): each verdict its own ------------------------------------------


class FencesTheBatch(MemoryCheckpointer):
    """record gathers the writes that arrive together into one batch, as a group commit
    does, and fences the batch as one: one stale write in it refuses every write in it,
    the current passes' included (one transaction whose fence check aborts it whole)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self._batch: list[tuple[Pass, str, object, asyncio.Future[Recorded]]] | None = None

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        check_key(holder.workflow, key)
        encoded = encode_value(self.codec, value, workflow=holder.workflow, key=key)
        future: asyncio.Future[Recorded] = asyncio.get_running_loop().create_future()
        if self._batch is not None:
            self._batch.append((holder, key, encoded, future))
            return await future
        batch = self._batch = [(holder, key, encoded, future)]
        for _ in range(3):  # the round trip during which others join
            await asyncio.sleep(0)
        self._batch = None
        try:
            for member, member_key, _, _ in batch:
                self._fence(member, f"record of {member_key!r}")
        except Fenced as refused:
            for _, _, _, waiting in batch:
                waiting.set_exception(Fenced(str(refused)))
        else:
            for member, member_key, member_encoded, waiting in batch:
                waiting.set_result(self._write(member.workflow, member_key, member_encoded))
        return await future


# -- record_as is fenced like record (every Run.step on SQLite, Postgres and Redis) ----------


class UnfencedRecordAs(MemoryCheckpointer):
    """record_as keeps the operation and refuses a reused key, but never checks the pass's
    token: a stale pass's steps land (record, beside it, is fenced as it should be)."""

    async def record_as(self, holder: Pass, key: str, value: object, operation: str) -> Recorded:
        check_key(holder.workflow, key)
        check_operation(holder.workflow, key, operation)
        encoded = encode_value(self.codec, value, workflow=holder.workflow, key=key)
        await at_gap(self.gap, "Checkpointer.record", holder.workflow)
        self._refuse_reuse(holder.workflow, key, operation)
        return self._write(holder.workflow, key, encoded, operation)


class SplitRecordAs(MemoryCheckpointer):
    """record_as checks the fence, then writes: refused whenever asked in turn, it lands
    after a takeover that came in between (record, beside it, is one step)."""

    async def record_as(self, holder: Pass, key: str, value: object, operation: str) -> Recorded:
        check_key(holder.workflow, key)
        check_operation(holder.workflow, key, operation)
        encoded = encode_value(self.codec, value, workflow=holder.workflow, key=key)
        await asyncio.sleep(0)
        self._fence(holder, f"record of {key!r}")
        await at_gap(self.gap, "Checkpointer.record", holder.workflow)
        self._refuse_reuse(holder.workflow, key, operation)
        return self._write(holder.workflow, key, encoded, operation)


class TrustsOperationNames(MemoryCheckpointer):
    """record_as keeps whatever operation it is given: a name no store can index, or no
    ``str`` at all, lands beside the value."""

    async def record_as(self, holder: Pass, key: str, value: object, operation: str) -> Recorded:
        check_key(holder.workflow, key)
        encoded = encode_value(self.codec, value, workflow=holder.workflow, key=key)
        await at_gap(self.gap, "Checkpointer.record", holder.workflow)
        self._fence(holder, f"record of {key!r}")
        self._refuse_reuse(holder.workflow, key, operation)
        return self._write(holder.workflow, key, encoded, operation)


# -- the plugins -------------------------------------------------------------------------------


class Broken:
    """One broken store as a store plugin: an object whose ``durable_store`` hook answers."""

    def __init__(
        self,
        name: str,
        *,
        checkpointer: Callable[..., MemoryCheckpointer] = MemoryCheckpointer,
        scheduler: Callable[..., MemoryScheduler] = MemoryScheduler,
        durable: type[MemoryDurable] = MemoryDurable,
        capabilities: frozenset[str] = MEMORY_CAPABILITIES,
        probe: bool = True,
        testing: bool = True,
        cannot_start: BaseException | None = None,
        hangs: bool = False,
        breaks: str = "",
    ) -> None:
        self.name = name
        self.checkpointer = checkpointer
        self.scheduler = scheduler
        self.durable = durable
        self.capabilities = capabilities
        self.probe = probe
        self.has_testing = testing
        self.cannot_start = cannot_start
        self.hangs = hangs
        self.breaks = breaks

    def build(self, **options: Any) -> Any:
        clock = options.get("clock") or SystemClock()
        gap = options.get("gap")
        checkpointer = self.checkpointer(codec=options.get("codec"), clock=clock, gap=gap)
        scheduler = self.scheduler(
            lease=options.get("lease", timedelta(seconds=30)), clock=clock, gap=gap
        )
        if isinstance(checkpointer, NoLifecycle):
            return SplitDurable(checkpointer, scheduler)
        return self.durable(checkpointer, scheduler)

    @asynccontextmanager
    async def open(self, url: str, **options: Any) -> AsyncIterator[Any]:
        yield self.build(**options)

    @asynccontextmanager
    async def testing(self, url: str | None, **options: Any) -> AsyncIterator[Testbed[Any]]:
        if self.cannot_start is not None:
            raise self.cannot_start
        if self.hangs:
            await asyncio.Event().wait()
        durable = self.build(**options)

        @asynccontextmanager
        async def reopen() -> AsyncIterator[Any]:
            scheduler = durable.scheduler
            if isinstance(scheduler, CountsSlotsPerHandle):
                scheduler = scheduler.reopened()
            yield type(durable)(durable.checkpointer, scheduler)

        inner = durable.checkpointer
        inner = inner.inner if isinstance(inner, NoLifecycle) else inner
        yield Testbed(
            durable=durable,
            reopen=reopen,
            probe=MemoryProbe(inner) if self.probe else None,
            server=f"process memory, deliberately broken: {self.breaks}",
        )

    @hookimpl
    def durable_store(self) -> StorePlugin:
        return StorePlugin(
            name=self.name,
            schemes=(self.name,),
            open=self.open,
            capabilities=self.capabilities,
            testing=self.testing if self.has_testing else None,
            distribution=DISTRIBUTION,
            description=self.breaks,
        )


OVERWRITES = Broken("overwrites", checkpointer=Overwrites, breaks="overwrites a record")
NO_FENCE = Broken("no-fence", checkpointer=NoFence, breaks="no fence on record")
FIRST_BY_EQUALITY = Broken(
    "first-by-equality", checkpointer=FirstByEquality, breaks="reports first by equality"
)
LOSES_ORDER = Broken(
    "loses-order", checkpointer=LosesOrderOnConflict, breaks="loses order on conflict"
)
RACY_APPENDS = Broken(
    "racy-appends", checkpointer=RacyMaxAppends, breaks="numbers appends from a racy max"
)
CHECKS_THEN_APPENDS = Broken(
    "checks-then-appends",
    checkpointer=ChecksThenAppends,
    breaks="appends with a message id after a separate lookup",
)
IGNORES_MESSAGE_ID = Broken(
    "ignores-message-id", checkpointer=IgnoresMessageId, breaks="ignores the message id"
)
RESTAMPS = Broken("restamps", checkpointer=RestampsHistory, breaks="stamps history on every write")
DELETES_CLAIM = Broken(
    "deletes-claim", checkpointer=DeletesClaimOnDiscard, breaks="deletes the claim on discard"
)
SKIPS_CODEC = Broken("skips-codec", checkpointer=SkipsCodec, breaks="skips the codec round trip")
FORGETS_WAKEUP = Broken(
    "forgets-wakeup",
    scheduler=ForgetsWakeupDuringPass,
    breaks="forgets a make_ready during a pass",
)
REINSTATES = Broken(
    "reinstates", scheduler=ReinstatesCancelled, breaks="reinstates a cancelled workflow"
)
SHORT_LEASE = Broken(
    "short-lease", scheduler=ShortLease, breaks="hides a taken delivery for a tenth of its lease"
)
RECLAIMS_ANY = Broken(
    "reclaims-any", scheduler=ReclaimsAnyTaken, breaks="reclaim takes any taken delivery"
)
PICKS_THEN_HIDES = Broken(
    "picks-then-hides", scheduler=PicksThenHides, breaks="next_ready picks, then hides"
)
STAMPS_BEFORE_SENDING = Broken(
    "stamps-before-sending",
    checkpointer=StampsBeforeSending,
    breaks="stamps history with the caller's clock before an await",
)
LIFTS_BUDGET = Broken("lifts-budget", checkpointer=LiftsBudget, breaks="renew lifts the budget")
STALE_RELEASE = Broken(
    "stale-release", checkpointer=StaleReleaseFrees, breaks="a stale release frees the claim"
)
HALF_COMMITS = Broken(
    "half-commits", checkpointer=HalfCommits, breaks="a failing transact keeps its effect"
)
ACCEPTS_CONTROL = Broken(
    "accepts-control",
    checkpointer=AcceptsControlCharacters,
    breaks="supply accepts ids and keys holding control characters",
)
TWO_WINNERS = Broken("two-winners", checkpointer=TwoWinners, breaks="claim checks, then takes")

STALE_OUTCOME = Broken(
    "stale-outcome", checkpointer=StaleOutcome, breaks="settle skips the token check"
)
INDEX_MISSES_RUNNING = Broken(
    "index-misses-running",
    checkpointer=IndexMissesRunning,
    breaks="the status index misses every move into running",
)
RACY_START = Broken("racy-start", checkpointer=RacyStart, breaks="admit reads, then inserts")
COUNTS_AT_SETTLE = Broken(
    "counts-at-settle",
    checkpointer=CountsAtSettle,
    breaks="counts an attempt when a failure settles, not when a pass begins",
)

# Not broken in a guarantee, but in what they say about themselves.
NO_LIFECYCLE = Broken(
    "no-lifecycle",
    checkpointer=NoLifecycle,  # type: ignore[arg-type]
    capabilities=frozenset({"transact", "enumerate"}),
    breaks="nothing: a store from before lifecycle, not declaring it",
)
UNDECLARED_LIFECYCLE = Broken(
    "undeclared-lifecycle",
    capabilities=frozenset({"transact", "atomic-arrive", "enumerate"}),
    breaks="implements lifecycle without declaring it",
)
UNDECLARED_TRANSACT = Broken(
    "undeclared-transact",
    capabilities=frozenset({"atomic-arrive", "enumerate", "lifecycle"}),
    breaks="implements transact without declaring it",
)
NO_PROBE = Broken("no-probe", probe=False, breaks="declares transact, gives no probe")
UNIMPLEMENTED = Broken(
    "unimplemented-transact",
    checkpointer=TransactUnimplemented,
    breaks="declares transact, raises NotImplementedError",
)
NO_SERVER = Broken(
    "no-server",
    cannot_start=ConnectionRefusedError(111, "Connection refused (127.0.0.1:1)"),
    breaks="its server is not running",
)
HOOK_FAILS = Broken(
    "hook-fails",
    cannot_start=TypeError("testing() got a value it cannot use"),
    breaks="its testing hook raises (a bug, not a missing server)",
)
HANGS = Broken("hangs", hangs=True, breaks="its testing hook never answers (a black-holed server)")
NO_TESTING = Broken("no-testing", testing=False, breaks="has no testing hook")
NOTHING_MORE = Broken("nothing-more", breaks="nothing: the memory store under another name")
SAME_NAME = Broken("nothing-more", breaks="a second plugin calling itself nothing-more")

# Rival moves (issue 14, racing takeovers).
FENCES_FROM_A_READ = Broken(
    "fences-from-a-read",
    checkpointer=FencesFromARead,
    breaks="discard reads the token, then raises the fence from it",
)
SUPPLIES_AFTER_A_LOOKUP = Broken(
    "supplies-after-a-lookup",
    checkpointer=SuppliesAfterALookup,
    breaks="supply looks the key up, then upserts it",
)
HIDES_BY_UPSERT = Broken(
    "hides-by-upsert",
    scheduler=HidesByUpsert,
    breaks="next_ready picks, then hides by an upsert",
)
ANSWERS_FROM_A_READ = Broken(
    "answers-from-a-read",
    scheduler=AnswersFromARead,
    breaks="wake_at checks the receipt, then writes",
)
BUSY_NEXT_READY = Broken(
    "busy-next-ready",
    scheduler=BusyNextReady,
    breaks="next_ready busy-loops without ever awaiting",
)
HOOK_FAILS_AFTER_PROBE = Broken(
    "hook-fails-after-probe",
    checkpointer=CreatesItsTableTwice,
    breaks="its testing hook gives one testbed, then raises (a bug, not a missing server)",
)
ACCEPTS_ZERO_WAITS = Broken(
    "accepts-zero-waits",
    scheduler=AcceptsZeroWaits,
    breaks="next_ready and reclaim accept a zero or negative wait",
)
BYTES_AS_TEXT = Broken(
    "bytes-as-text",
    checkpointer=HoldsBytesAsText,
    breaks="holds a bytes encoding as text, replacing what is not UTF-8",
)
DISCARDS_IN_TWO_STEPS = Broken(
    "discards-in-two-steps",
    checkpointer=DiscardsInTwoSteps,
    breaks="discard forgets the records, then raises the fence",
)
# racing takeovers (issue 14)
SPLIT_RECORD = Broken(
    "split-record", checkpointer=SplitRecord, breaks="record checks the fence, then writes"
)
SPLIT_TRANSACT = Broken(
    "split-transact", checkpointer=SplitTransact, breaks="transact checks the fence, then commits"
)
SPLIT_RENEW = Broken(
    "split-renew", checkpointer=SplitRenew, breaks="renew checks the fence, then extends"
)
SPLIT_RELEASE = Broken(
    "split-release", checkpointer=SplitRelease, breaks="release checks the token, then frees"
)
SPLIT_BEAT = Broken(
    "split-beat", checkpointer=SplitBeat, breaks="beat checks the fence, then beats"
)
SPLIT_SETTLE = Broken(
    "split-settle", checkpointer=SplitSettle, breaks="settle checks the fence, then settles"
)
# Atomic moves (issue 14): each declares atomic-arrive and does one move as two commits.
TWO_COMMIT_ARRIVE = Broken(
    "two-commit-arrive", durable=TwoCommitArrive, breaks="arrive records, then queues"
)
TWO_COMMIT_SEND = Broken(
    "two-commit-send", durable=TwoCommitSend, breaks="send appends, then queues"
)
TWO_COMMIT_DISCARD = Broken(
    "two-commit-discard", durable=TwoCommitDiscard, breaks="discard forgets, then unqueues"
)
TWO_COMMIT_START = Broken(
    "two-commit-start", durable=TwoCommitStart, breaks="start admits, then queues"
)
TWO_COMMIT_CANCEL = Broken(
    "two-commit-cancel", durable=TwoCommitCancel, breaks="cancel withdraws, then unqueues"
)
TWO_COMMIT_RETRY = Broken(
    "two-commit-retry", durable=TwoCommitRetry, breaks="retry readmits, then queues"
)

# Sentences the docstring audit found unproved (issue 14).
CLAIMED_PAST_LIVENESS = Broken(
    "claimed-past-liveness",
    checkpointer=ClaimedPastLiveness,
    breaks="claimed shows a claim past its liveness",
)
SCHEDULED_FROM_A_LOG = Broken(
    "scheduled-from-a-log",
    scheduler=ScheduledFromALog,
    breaks="scheduled reads a log of wakeups, not the queue",
)
UNSORTED_WORKFLOWS = Broken(
    "unsorted-workflows", checkpointer=UnsortedWorkflows, breaks="workflows is not sorted"
)
ADMITS_BEFORE_ENCODING = Broken(
    "admits-before-encoding",
    checkpointer=AdmitsBeforeEncoding,
    breaks="admit writes the row before it encodes the input",
)
LISTS_ANYTHING = Broken(
    "lists-anything",
    checkpointer=ListsAnything,
    breaks="statuses answers a bad limit or cursor with a page",
)
FORGETS_THE_QUEUE = Broken(
    "forgets-the-queue", checkpointer=ForgetsTheQueue, breaks="admit ignores the queue"
)
STAMPS_ONLY_ADMISSION = Broken(
    "stamps-only-admission",
    checkpointer=StampsOnlyAdmission,
    breaks="no transition after admission moves updated_at",
)
IGNORES_QUEUES = Broken(
    "ignores-queues",
    scheduler=IgnoresQueues,
    capabilities=MEMORY_CAPABILITIES | {"queues"},
    breaks="hands out a workflow of a queue not asked for",
)
TAKES_THEN_DEFERS = Broken(
    "takes-then-defers",
    scheduler=TakesThenDefers,
    capabilities=MEMORY_CAPABILITIES | {"queues"},
    breaks="takes a workflow of another queue and defers it",
)
TAKES_ANY_FOR_NO_QUEUES = Broken(
    "takes-any-for-no-queues",
    scheduler=TakesAnyForNoQueues,
    capabilities=MEMORY_CAPABILITIES | {"queues"},
    breaks="takes an empty set of queues for every queue",
)
# steps that reach outside the store (issue 15)
DURABLES_RECORDS_LAST = Broken(
    "durables-records-last",
    checkpointer=DurablesRecordsLast,
    breaks="history lists a step's value before its attempt's intent",
)
HIDES_FAILED_ATTEMPTS = Broken(
    "hides-failed-attempts",
    checkpointer=HidesFailedAttempts,
    breaks="history leaves out the failed attempts",
)
IGNORES_OPERATIONS = Broken(
    "ignores-operations",
    checkpointer=IgnoresOperations,
    capabilities=MEMORY_CAPABILITIES | {"operations"},
    breaks="keeps no operation with a record and refuses no key reused as another",
)
HANDS_OUT_ANOTHER_TOKEN = Broken(
    "hands-out-another-token",
    checkpointer=HandsOutAnotherToken,
    breaks="claim hands out a token other than the one it fences with",
)
# schedules and children (issue 16)
DOUBLE_FIRES_TICKS = Broken(
    "double-fires-ticks",
    checkpointer=DoubleFiresTicks,
    breaks="start over a finished workflow starts it afresh",
)
RESTARTS_ENDED_CHILDREN = Broken(
    "restarts-ended-children",
    checkpointer=RestartsEndedChildren,
    breaks="start over a failed or cancelled workflow starts it afresh",
)
# queue limits (issue 16)
LEAKS_SLOT_ON_KILL = Broken(
    "leaks-slot-on-kill",
    scheduler=LeaksSlotOnKill,
    capabilities=MEMORY_CAPABILITIES | {"queues", "limits"},
    breaks="a dead taker's slot never comes back",
)
COUNTS_SLOTS_PER_HANDLE = Broken(
    "counts-slots-per-handle",
    scheduler=CountsSlotsPerHandle,
    capabilities=MEMORY_CAPABILITIES | {"queues", "limits"},
    breaks="counts a queue's slots per handle, not in the store",
)
TRUSTS_OPERATION_NAMES = Broken(
    "trusts-operation-names",
    checkpointer=TrustsOperationNames,
    capabilities=MEMORY_CAPABILITIES | {"operations"},
    breaks="record_as keeps any operation name",
)
# queue limits: the sentences of Limited beyond the first requirements
LIMITS_ONLY_ROUTED_TAKES = Broken(
    "limits-only-routed-takes",
    scheduler=LimitsOnlyRoutedTakes,
    capabilities=MEMORY_CAPABILITIES | {"queues", "limits"},
    breaks="next_ready takes past a queue's limit",
)
KEEPS_SLOT_ON_CANCEL = Broken(
    "keeps-slot-on-cancel",
    scheduler=KeepsSlotOnCancel,
    capabilities=MEMORY_CAPABILITIES | {"queues", "limits"},
    breaks="cancel leaves the workflow's slot taken",
)
TAKES_BACK_ON_LOWERING = Broken(
    "takes-back-on-lowering",
    scheduler=TakesBackOnLowering,
    capabilities=MEMORY_CAPABILITIES | {"queues", "limits"},
    breaks="a lowered limit forgets the slots held",
)
HOLDS_ANY_SLOT = Broken(
    "holds-any-slot",
    scheduler=HoldsAnySlot,
    capabilities=MEMORY_CAPABILITIES | {"queues", "limits"},
    breaks="hold revives a lapsed slot and keeps one handed out anew",
)
FORGETS_PRIORITY = Broken(
    "forgets-priority",
    scheduler=ForgetsPriority,
    capabilities=MEMORY_CAPABILITIES | {"queues", "limits"},
    breaks="a priority is spent on the first hand-out",
)
IGNORES_PRIORITY = Broken(
    "ignores-priority",
    scheduler=IgnoresPriority,
    capabilities=MEMORY_CAPABILITIES | {"queues", "limits"},
    breaks="prioritize keeps nothing",
)
HOLDS_IN_NAME = Broken(
    "holds-in-name",
    scheduler=HoldsInName,
    capabilities=MEMORY_CAPABILITIES | {"queues", "limits"},
    breaks="hold answers and never pushes the slot's deadline",
)
# writes that take a time (issue 17)
IGNORES_THE_TIME = Broken(
    "ignores-the-time",
    checkpointer=IgnoresTheTime,
    breaks="supply_at, append_at and backdate stamp the store's clock, not the time given",
)
PRUNES_AFTER_A_READ = Broken(
    "prunes-after-a-read",
    checkpointer=PrunesAfterARead,
    breaks="discard_ended reads the status, then discards",
)
# group commit (issue 20)
FENCES_THE_BATCH = Broken(
    "fences-the-batch",
    checkpointer=FencesTheBatch,
    breaks="one stale write in a batch refuses every write in it",
)
# record_as fenced like record
UNFENCED_RECORD_AS = Broken(
    "unfenced-record-as",
    checkpointer=UnfencedRecordAs,
    capabilities=MEMORY_CAPABILITIES | {"operations"},
    breaks="record_as never checks the pass's token",
)
SPLIT_RECORD_AS = Broken(
    "split-record-as",
    checkpointer=SplitRecordAs,
    capabilities=MEMORY_CAPABILITIES | {"operations"},
    breaks="record_as checks the fence, then writes",
)
