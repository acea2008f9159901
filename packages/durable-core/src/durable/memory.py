"""The in-memory stores: the reference every real store is certified against.

A double that skipped the codec would lie: a step's result would come back by identity
in tests and through a round trip in production, and every property that depends on the
round trip would pass in one and fail in the other. So these keep encodings exactly as a
hash field or a TEXT column does, decide races by comparing encodings, stamp history with
their clock at the winning write, and fence by token. Each operation yields to the event
loop once before it acts, as a round trip would, and then acts without yielding again,
so tasks racing on one store interleave between operations the way they would against a
server and never inside one.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from durable.boundary import check_duration, check_key, check_message_id, check_workflow
from durable.clock import Clock, SystemClock
from durable.codec import CheckpointCodec, JsonCodec, encode_value
from durable.interfaces import Claimed, Delivery, Entry, Fenced, Pass, Recorded, inbox_key
from durable.plugins import StorePlugin, Testbed, hookimpl

__all__ = [
    "MemoryCheckpointer",
    "MemoryDurable",
    "MemoryEffect",
    "MemoryProbe",
    "MemoryScheduler",
]

MemoryEffect = Callable[[dict[str, object]], object]
"""What ``MemoryCheckpointer.transact`` commits: a function over the store's own
application data (``MemoryCheckpointer.data``), whose return value is recorded. If it
raises, the data is restored to what it was and nothing is recorded."""


@dataclass(slots=True)
class _Stored:
    encoded: Any
    at: datetime


@dataclass(slots=True)
class _Claim:
    token: int
    live_until: datetime | None = None
    budget_until: datetime | None = None
    window: timedelta = timedelta(0)

    def held(self, now: datetime) -> bool:
        if self.live_until is None or self.budget_until is None:
            return False
        return now < self.live_until and now < self.budget_until


class MemoryCheckpointer:
    """A :class:`~durable.interfaces.Checkpointer` over process memory.

    ``data`` is the application data that ``transact`` effects may touch: the in-memory
    analogue of the tables in a database, and the only place an effect can co-commit with
    its record.
    """

    def __init__(
        self, *, codec: CheckpointCodec[Any] | None = None, clock: Clock | None = None
    ) -> None:
        self.codec: CheckpointCodec[Any] = codec if codec is not None else JsonCodec()
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.data: dict[str, object] = {}
        self._records: dict[str, dict[str, _Stored]] = {}
        self._sent: dict[str, dict[str, str]] = {}
        self._claims: dict[str, _Claim] = {}

    def __repr__(self) -> str:
        return f"MemoryCheckpointer(codec={self.codec!r}, clock={self.clock!r})"

    # -- reads -----------------------------------------------------------------

    async def load(self, workflow: str) -> dict[str, object]:
        check_workflow(workflow)
        await asyncio.sleep(0)
        records = self._records.get(workflow, {})
        return {key: self.codec.decode(s.encoded) for key, s in records.items()}

    async def history(self, workflow: str) -> list[Entry]:
        check_workflow(workflow)
        await asyncio.sleep(0)
        records = self._records.get(workflow, {})
        return [Entry(key, self.codec.decode(s.encoded), s.at) for key, s in records.items()]

    async def workflows(self, limit: int | None = None) -> list[str]:
        """Workflow ids holding at least one record, sorted, at most ``limit``."""
        await asyncio.sleep(0)
        found = sorted(wf for wf, records in self._records.items() if records)
        return found if limit is None else found[:limit]

    async def claimed(self, workflow: str) -> Claimed | None:
        """The live claim on ``workflow``, or ``None``."""
        await asyncio.sleep(0)
        claim = self._claims.get(workflow)
        if claim is None or not claim.held(self.clock.now()):
            return None
        assert claim.live_until is not None
        assert claim.budget_until is not None
        return Claimed(claim.token, claim.live_until, claim.budget_until)

    # -- the claim ---------------------------------------------------------------

    async def claim(self, workflow: str, *, liveness: timedelta, budget: timedelta) -> Pass | None:
        check_workflow(workflow)
        check_duration("liveness", liveness, workflow=workflow)
        check_duration("budget", budget, workflow=workflow)
        await asyncio.sleep(0)
        now = self.clock.now()
        claim = self._claims.get(workflow)
        if claim is not None and claim.held(now):
            return None
        token = claim.token + 1 if claim is not None else 1
        budget_until = now + budget
        self._claims[workflow] = _Claim(
            token, min(now + liveness, budget_until), budget_until, liveness
        )
        return Pass(workflow, token)

    async def renew(self, holder: Pass) -> Pass:
        await asyncio.sleep(0)
        now = self.clock.now()
        claim = self._fence(holder, "renew")
        if claim.budget_until is None or claim.live_until is None:
            raise Fenced(f"{holder} was released; stop this pass")
        if now >= claim.budget_until:
            raise Fenced(f"{holder} has spent its budget; stop this pass")
        claim.live_until = min(now + claim.window, claim.budget_until)
        return holder

    async def release(self, holder: Pass) -> None:
        await asyncio.sleep(0)
        claim = self._claims.get(holder.workflow)
        if claim is None or claim.token != holder.token:
            return
        # Raising the fence on release means the released pass cannot write again, and
        # the next claim still outranks it.
        self._claims[holder.workflow] = _Claim(claim.token + 1)

    def _fence(self, holder: Pass, doing: str) -> _Claim:
        claim = self._claims.get(holder.workflow)
        if claim is None or holder.token != claim.token:
            current = "none" if claim is None else str(claim.token)
            raise Fenced(
                f"{holder} was superseded (the highest token issued is {current}); "
                f"{doing} refused, stop this pass"
            )
        return claim

    # -- writes ------------------------------------------------------------------

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        check_key(holder.workflow, key)
        encoded = encode_value(self.codec, value, workflow=holder.workflow, key=key)
        await asyncio.sleep(0)
        self._fence(holder, f"record of {key!r}")
        return self._write(holder.workflow, key, encoded)

    async def transact(self, holder: Pass, key: str, effect: MemoryEffect) -> Recorded:
        check_key(holder.workflow, key)
        if not callable(effect):
            raise TypeError(
                f"workflow {holder.workflow!r}, key {key!r}: MemoryCheckpointer.transact "
                f"takes a function over its data dict, got {effect!r}"
            )
        await asyncio.sleep(0)
        self._fence(holder, f"transact of {key!r}")
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

    async def supply(self, workflow: str, key: str, value: object) -> object:
        check_workflow(workflow)
        check_key(workflow, key)
        encoded = encode_value(self.codec, value, workflow=workflow, key=key)
        await asyncio.sleep(0)
        return self._write(workflow, key, encoded).value

    def _supply_now(self, workflow: str, key: str, encoded: object) -> object:
        return self._write(workflow, key, encoded).value

    async def append(self, workflow: str, value: object, *, message_id: str | None = None) -> str:
        check_workflow(workflow)
        check_message_id(workflow, message_id)
        encoded = encode_value(self.codec, value, workflow=workflow, key="<inbox>")
        await asyncio.sleep(0)
        return self._append_now(workflow, encoded, message_id)

    def _append_now(self, workflow: str, encoded: object, message_id: str | None = None) -> str:
        # Looking the id up and appending happen without yielding, as one script or one
        # transaction does on a server: that is what makes the first append with an id
        # the only one. The ids sit beside the records rather than among them, since this
        # store has no schema to spare and load need not filter them out; discard drops
        # both together.
        sent = self._sent.get(workflow, {})
        if message_id is not None and message_id in sent:
            return sent[message_id]
        # The count of the workflow's own records is its next position, so the key and
        # the load position are one number and cannot disagree.
        key = inbox_key(len(self._records.get(workflow, {})))
        self._write(workflow, key, encoded)
        if message_id is not None:
            self._sent.setdefault(workflow, {})[message_id] = key
        return key

    async def discard(self, workflow: str) -> None:
        check_workflow(workflow)
        await asyncio.sleep(0)
        self._discard_now(workflow)

    def _discard_now(self, workflow: str) -> None:
        self._records.pop(workflow, None)
        self._sent.pop(workflow, None)
        claim = self._claims.get(workflow)
        self._claims[workflow] = _Claim(claim.token + 1 if claim is not None else 1)

    def _write(self, workflow: str, key: str, encoded: object) -> Recorded:
        records = self._records.setdefault(workflow, {})
        existing = records.get(key)
        if existing is None:
            records[key] = _Stored(encoded, self.clock.now())
            return Recorded(self.codec.decode(encoded), True)
        return Recorded(self.codec.decode(existing.encoded), existing.encoded == encoded)


class MemoryScheduler:
    """A :class:`~durable.interfaces.Scheduler` as one visibility-scored entry per workflow.

    An entry is runnable once its visibility time has passed. Taking it hides it for the
    lease under a fresh receipt; a taker that dies simply lets it become visible again,
    which is why ``reclaim`` and ``wake_due`` have nothing to do here (the score is the
    timer). ``make_ready`` clears the receipt, so an answer for an older delivery matches
    nothing and cannot undo it; ``cancel`` removes the entry, so an answer for a cancelled
    delivery has nothing to reinstate.
    """

    def __init__(self, *, lease: timedelta = timedelta(seconds=30), clock: Clock | None = None):
        self._lease = check_duration("lease", lease)
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._entries: dict[str, tuple[datetime, str | None]] = {}
        self._receipts = itertools.count(1)
        self._changed = asyncio.Event()

    def __repr__(self) -> str:
        return f"MemoryScheduler(lease={self._lease!r}, clock={self.clock!r})"

    @property
    def lease(self) -> timedelta:
        return self._lease

    async def prepare(self) -> None:
        await asyncio.sleep(0)

    async def make_ready(self, workflow: str) -> None:
        check_workflow(workflow)
        await asyncio.sleep(0)
        self._make_ready_now(workflow)

    def _make_ready_now(self, workflow: str) -> None:
        self._entries[workflow] = (self.clock.now(), None)
        self._changed.set()

    def _take(self) -> Delivery | None:
        now = self.clock.now()
        due = [(at, wf) for wf, (at, _) in self._entries.items() if at <= now]
        if not due:
            return None
        _, workflow = min(due)
        receipt = str(next(self._receipts))
        self._entries[workflow] = (now + self._lease, receipt)
        return Delivery(workflow, receipt)

    async def next_ready(self, within: timedelta) -> Delivery | None:
        check_duration("within", within)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + within.total_seconds()
        await asyncio.sleep(0)
        while True:
            delivery = self._take()
            if delivery is not None:
                return delivery
            remaining = give_up - loop.time()
            if remaining <= 0:
                return None
            self._changed.clear()
            # Visibility also arrives by the clock passing, which sets no event, so wait in
            # short slices rather than only for a change.
            # asyncio.timeout rather than wait_for: on 3.11, wait_for swallows a cancellation
            # that arrives in the same turn as the event, and a cancelled worker kept going.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(remaining, 0.02)):
                    await self._changed.wait()

    async def reclaim(self, idle: timedelta) -> Delivery | None:
        check_duration("idle", idle)
        await asyncio.sleep(0)
        return None

    async def wake_at(self, delivery: Delivery, when: datetime) -> None:
        _check_moment(delivery.workflow, when)
        await asyncio.sleep(0)
        entry = self._entries.get(delivery.workflow)
        if entry is None or entry[1] != delivery.receipt:
            return
        self._entries[delivery.workflow] = (when, None)
        self._changed.set()

    async def wake_due(self, now: datetime) -> tuple[str, ...]:
        await asyncio.sleep(0)
        return ()

    async def done(self, delivery: Delivery) -> None:
        await asyncio.sleep(0)
        entry = self._entries.get(delivery.workflow)
        if entry is not None and entry[1] == delivery.receipt:
            del self._entries[delivery.workflow]

    async def cancel(self, workflow: str) -> None:
        await asyncio.sleep(0)
        self._cancel_now(workflow)

    def _cancel_now(self, workflow: str) -> None:
        self._entries.pop(workflow, None)

    async def scheduled(self, workflow: str) -> datetime | None:
        """When ``workflow`` is next runnable, or ``None`` if it is not scheduled."""
        await asyncio.sleep(0)
        entry = self._entries.get(workflow)
        return entry[0] if entry is not None else None


def _check_moment(workflow: str, when: object) -> datetime:
    if not isinstance(when, datetime) or when.tzinfo is None:
        raise TypeError(f"workflow {workflow!r}: wake_at needs an aware datetime, got {when!r}")
    return when


class MemoryDurable:
    """A memory checkpointer and scheduler whose cross-store moves are each one step.

    Atomic because each move is performed without yielding to the event loop, so no other
    task can observe the record without the wakeup.
    """

    atomic = True

    def __init__(
        self,
        checkpointer: MemoryCheckpointer | None = None,
        scheduler: MemoryScheduler | None = None,
        *,
        clock: Clock | None = None,
        codec: CheckpointCodec[Any] | None = None,
        lease: timedelta = timedelta(seconds=30),
    ) -> None:
        clock = clock if clock is not None else SystemClock()
        self._checkpointer = checkpointer or MemoryCheckpointer(codec=codec, clock=clock)
        self._scheduler = scheduler or MemoryScheduler(lease=lease, clock=clock)

    def __repr__(self) -> str:
        return f"MemoryDurable({self._checkpointer!r}, {self._scheduler!r})"

    @property
    def checkpointer(self) -> MemoryCheckpointer:
        return self._checkpointer

    @property
    def scheduler(self) -> MemoryScheduler:
        return self._scheduler

    async def arrive(self, workflow: str, key: str, value: object) -> object:
        check_workflow(workflow)
        check_key(workflow, key)
        cp = self._checkpointer
        encoded = encode_value(cp.codec, value, workflow=workflow, key=key)
        await asyncio.sleep(0)
        stored = cp._supply_now(workflow, key, encoded)
        self._scheduler._make_ready_now(workflow)
        return stored

    async def send(self, workflow: str, value: object, *, message_id: str | None = None) -> str:
        check_workflow(workflow)
        check_message_id(workflow, message_id)
        cp = self._checkpointer
        encoded = encode_value(cp.codec, value, workflow=workflow, key="<inbox>")
        await asyncio.sleep(0)
        key = cp._append_now(workflow, encoded, message_id)
        self._scheduler._make_ready_now(workflow)
        return key

    async def discard(self, workflow: str) -> None:
        check_workflow(workflow)
        await asyncio.sleep(0)
        self._checkpointer._discard_now(workflow)
        self._scheduler._cancel_now(workflow)


class MemoryProbe:
    """The conformance probe for the memory store: counters in ``MemoryCheckpointer.data``."""

    def __init__(self, checkpointer: MemoryCheckpointer) -> None:
        self._checkpointer = checkpointer

    def bump(self, workflow: str, counter: str) -> MemoryEffect:
        name = f"{workflow}/{counter}"

        def effect(data: dict[str, object]) -> object:
            before = data.get(name, 0)
            assert isinstance(before, int)
            moved = before + 1
            data[name] = moved
            return moved

        return effect

    def bump_then_fail(self, workflow: str, counter: str) -> MemoryEffect:
        bump = self.bump(workflow, counter)

        def effect(data: dict[str, object]) -> object:
            bump(data)
            raise RuntimeError(f"the probe fails after moving {counter!r}, by design")

        return effect

    async def count(self, workflow: str, counter: str) -> int:
        await asyncio.sleep(0)
        value = self._checkpointer.data.get(f"{workflow}/{counter}", 0)
        assert isinstance(value, int)
        return value


@asynccontextmanager
async def open_memory(url: str = "memory://", **options: Any) -> AsyncIterator[MemoryDurable]:
    """Open a fresh in-memory store. Options: ``codec``, ``clock``, ``lease``."""
    yield MemoryDurable(**options)


@asynccontextmanager
async def _testing(url: str | None, **options: Any) -> AsyncIterator[Testbed[MemoryEffect]]:
    """A fresh memory store per testbed; ``options`` (``codec``, ``clock``, ``lease``) are
    handed to :class:`MemoryDurable`, as a real store's testing hook hands them to its open."""
    durable = MemoryDurable(**options)

    @asynccontextmanager
    async def reopen() -> AsyncIterator[MemoryDurable]:
        # A second handle on a process-local store is a second view of the same state.
        yield MemoryDurable(durable.checkpointer, durable.scheduler)

    yield Testbed(
        durable=durable,
        reopen=reopen,
        url=None,
        probe=MemoryProbe(durable.checkpointer),
        server="process memory",
    )


@hookimpl
def durable_store() -> StorePlugin:
    """The memory store, so that the conformance suite can certify the reference."""
    return StorePlugin(
        name="memory",
        schemes=("memory",),
        open=open_memory,
        capabilities=frozenset({"transact", "atomic-arrive", "enumerate"}),
        testing=_testing,
        distribution="durable-core",
        description="in-process reference store (for tests; keeps nothing)",
    )
