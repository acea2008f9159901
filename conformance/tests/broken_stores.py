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
import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

from durable.boundary import check_duration, check_key, check_workflow
from durable.clock import SystemClock
from durable.codec import encode_value
from durable.durable import SplitDurable
from durable.interfaces import (
    INBOX_PREFIX,
    SENT_PREFIX,
    Admitted,
    Began,
    Delivery,
    Entry,
    Fenced,
    Pass,
    Recorded,
    Status,
    inbox_key,
)
from durable.memory import (
    MemoryCheckpointer,
    MemoryDurable,
    MemoryEffect,
    MemoryProbe,
    MemoryScheduler,
    _Claim,
)
from durable.plugins import StorePlugin, Testbed, hookimpl

DISTRIBUTION = "durable-broken-stores"
MEMORY_CAPABILITIES = frozenset({"transact", "atomic-arrive", "enumerate", "lifecycle"})


# -- checkpointers that break one rule each ------------------------------------------------


class Overwrites(MemoryCheckpointer):
    """A later write replaces the value a key holds (an upsert with DO UPDATE SET)."""

    def _write(self, workflow: str, key: str, encoded: object) -> Recorded:
        existing = self._records.get(workflow, {}).get(key)
        if existing is not None:
            existing.encoded = encoded
            return Recorded(self.codec.decode(encoded), True)
        return super()._write(workflow, key, encoded)


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

    def _write(self, workflow: str, key: str, encoded: object) -> Recorded:
        records = self._records.setdefault(workflow, {})
        existing = records.pop(key, None)
        if existing is not None:
            records[key] = existing
            return Recorded(self.codec.decode(existing.encoded), existing.encoded == encoded)
        return super()._write(workflow, key, encoded)


class RacyMaxAppends(MemoryCheckpointer):
    """append reads the highest position, then writes the next one, in two round trips."""

    async def append(self, workflow: str, value: object, *, message_id: str | None = None) -> str:
        if message_id is not None:
            return await super().append(workflow, value, message_id=message_id)
        check_workflow(workflow)
        encoded = encode_value(self.codec, value, workflow=workflow, key="<inbox>")
        await asyncio.sleep(0)
        position = len(self._records.get(workflow, {}))
        await asyncio.sleep(0)
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
        await asyncio.sleep(0)
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

    def _write(self, workflow: str, key: str, encoded: object) -> Recorded:
        existing = self._records.get(workflow, {}).get(key)
        if existing is not None:
            existing.at = self.clock.now()
        return super()._write(workflow, key, encoded)


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
        await asyncio.sleep(0)  # the gap between reading and inserting
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


# -- the plugins -------------------------------------------------------------------------------


class Broken:
    """One broken store as a store plugin: an object whose ``durable_store`` hook answers."""

    def __init__(
        self,
        name: str,
        *,
        checkpointer: Callable[..., MemoryCheckpointer] = MemoryCheckpointer,
        scheduler: Callable[..., MemoryScheduler] = MemoryScheduler,
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
        self.capabilities = capabilities
        self.probe = probe
        self.has_testing = testing
        self.cannot_start = cannot_start
        self.hangs = hangs
        self.breaks = breaks

    def build(self, **options: Any) -> Any:
        clock = options.get("clock") or SystemClock()
        checkpointer = self.checkpointer(codec=options.get("codec"), clock=clock)
        scheduler = self.scheduler(lease=options.get("lease", timedelta(seconds=30)), clock=clock)
        if isinstance(checkpointer, NoLifecycle):
            return SplitDurable(checkpointer, scheduler)
        return MemoryDurable(checkpointer, scheduler)

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
            yield type(durable)(durable.checkpointer, durable.scheduler)

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
