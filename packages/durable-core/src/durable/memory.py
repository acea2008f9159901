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
import collections
import contextlib
import copy
import heapq
import itertools
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from durable.boundary import (
    check_duration,
    check_ended,
    check_key,
    check_kind,
    check_message_id,
    check_moment,
    check_operation,
    check_queues,
    check_settlement,
    check_workflow,
)
from durable.clock import Clock, SystemClock
from durable.codec import CheckpointCodec, JsonCodec, encode_value
from durable.interfaces import (
    Admitted,
    Began,
    Claimed,
    Delivery,
    Entry,
    Failure,
    Fenced,
    KeyReused,
    NotRetryable,
    Page,
    Pass,
    QueueLimit,
    Recorded,
    Settlement,
    StartConflict,
    Status,
    UnknownWorkflow,
    WorkflowStatus,
    inbox_key,
)
from durable.plugins import Gap, StorePlugin, Testbed, at_gap, hookimpl
from durable.workflows import Lifecycled

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
    operation: str | None = None


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


@dataclass(slots=True)
class _Life:
    """One workflow's lifecycle row: the truth ``status`` and ``statuses`` are read from."""

    status: Status
    kind: str | None
    input: Any  # the codec's encoding
    updated_at: datetime
    seq: int  # the order of the last transition, newest highest: the listing order
    queue: str = "default"
    attempts: int = 0
    started_at: datetime | None = None
    owner: str | None = None
    since: datetime | None = None
    step: str | None = None
    beat_at: datetime | None = None
    until: datetime | None = None
    keys: tuple[str, ...] = ()
    value: Any = None  # the codec's encoding, when finished
    failure: Failure | None = None


_NO_INPUT = object()
"""The stored input of a row begun without ``admit``: decoded as ``None``."""


class MemoryCheckpointer:
    """A :class:`~durable.interfaces.Checkpointer` over process memory, and the reference
    :class:`~durable.interfaces.Lifecycle`.

    ``data`` is the application data that ``transact`` effects may touch: the in-memory
    analogue of the tables in a database, and the only place an effect can co-commit with
    its record.

    The lifecycle keeps its truth (``_lives``, one row per workflow) apart from an index
    (``_index``, the workflows in each status, oldest transition first) that only
    ``_move`` changes, and ``statuses`` reads the index and then filters by the truth, as a
    store whose index lives apart from its rows must. Keeping the two apart here is what
    lets the conformance suite's broken stores break either one alone.
    """

    def __init__(
        self,
        *,
        codec: CheckpointCodec[Any] | None = None,
        clock: Clock | None = None,
        gap: Gap | None = None,
    ) -> None:
        self.codec: CheckpointCodec[Any] = codec if codec is not None else JsonCodec()
        self.gap = gap
        """Where a test holds or fails a move (``durable.plugins.Gap``); ``None`` outside one."""
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.data: dict[str, object] = {}
        self._records: dict[str, dict[str, _Stored]] = {}
        self._sent: dict[str, dict[str, str]] = {}
        self._claims: dict[str, _Claim] = {}
        self._lives: dict[str, _Life] = {}
        self._index: dict[Status, dict[str, None]] = {status: {} for status in Status}
        self._seq = itertools.count(1)

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
        return [
            Entry(key, self.codec.decode(s.encoded), s.at, s.operation)
            for key, s in records.items()
        ]

    async def workflows(self, limit: int | None = None) -> list[str]:
        """Workflow ids holding at least one record, sorted, at most ``limit``."""
        await asyncio.sleep(0)
        found = sorted(wf for wf, records in self._records.items() if records)
        return found if limit is None else found[:limit]

    async def claimed(self, workflow: str) -> Claimed | None:
        """The live claim on ``workflow``, or ``None``."""
        check_workflow(workflow)
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
        await at_gap(self.gap, "Checkpointer.claim", workflow)
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
        return await self._renew(holder, "Checkpointer.renew")

    async def _renew(self, holder: Pass, move: str) -> Pass:
        await at_gap(self.gap, move, holder.workflow)
        now = self.clock.now()
        claim = self._fence(holder, "renew")
        if claim.budget_until is None or claim.live_until is None:
            raise Fenced(f"{holder} was released; stop this pass")
        if now >= claim.budget_until:
            raise Fenced(f"{holder} has spent its budget; stop this pass")
        claim.live_until = min(now + claim.window, claim.budget_until)
        return holder

    async def release(self, holder: Pass) -> None:
        await at_gap(self.gap, "Checkpointer.release", holder.workflow)
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
        await at_gap(self.gap, "Checkpointer.record", holder.workflow)
        self._fence(holder, f"record of {key!r}")
        return self._write(holder.workflow, key, encoded)

    async def record_as(self, holder: Pass, key: str, value: object, operation: str) -> Recorded:
        check_key(holder.workflow, key)
        check_operation(holder.workflow, key, operation)
        encoded = encode_value(self.codec, value, workflow=holder.workflow, key=key)
        await at_gap(self.gap, "Checkpointer.record", holder.workflow)
        self._fence(holder, f"record of {key!r}")
        self._refuse_reuse(holder.workflow, key, operation)
        return self._write(holder.workflow, key, encoded, operation)

    def _refuse_reuse(self, workflow: str, key: str, operation: str) -> None:
        """KeyReused when ``key`` holds a record of another operation: checked in the same
        step as the write, with nothing between them (no yield)."""
        existing = self._records.get(workflow, {}).get(key)
        if existing is not None and existing.operation not in (None, operation):
            raise KeyReused(workflow, key, existing.operation, operation)

    async def transact(self, holder: Pass, key: str, effect: MemoryEffect) -> Recorded:
        check_key(holder.workflow, key)
        if not callable(effect):
            raise TypeError(
                f"workflow {holder.workflow!r}, key {key!r}: MemoryCheckpointer.transact "
                f"takes a function over its data dict, got {effect!r}"
            )
        await at_gap(self.gap, "Checkpointer.transact", holder.workflow)
        self._fence(holder, f"transact of {key!r}")
        self._refuse_reuse(holder.workflow, key, "transact")
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
        return self._write(holder.workflow, key, encoded, "transact")

    async def supply(self, workflow: str, key: str, value: object) -> object:
        check_workflow(workflow)
        check_key(workflow, key)
        encoded = encode_value(self.codec, value, workflow=workflow, key=key)
        await at_gap(self.gap, "Checkpointer.supply", workflow)
        return self._write(workflow, key, encoded).value

    def _supply_now(self, workflow: str, key: str, encoded: object) -> object:
        return self._write(workflow, key, encoded).value

    async def append(self, workflow: str, value: object, *, message_id: str | None = None) -> str:
        check_workflow(workflow)
        check_message_id(workflow, message_id)
        encoded = encode_value(self.codec, value, workflow=workflow, key="<inbox>")
        await at_gap(self.gap, "Checkpointer.append", workflow)
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

    # -- writes with a given time (Dated, for durable import) ---------------------

    def _stamp(self, workflow: str, key: str, known: bool, at: datetime) -> None:
        """Restamp a record this very write created (``known``: the key held one before)."""
        if not known:
            self._records[workflow][key].at = at

    async def supply_at(self, workflow: str, key: str, value: object, at: datetime) -> object:
        check_workflow(workflow)
        check_key(workflow, key)
        check_moment("at", at, workflow=workflow)
        encoded = encode_value(self.codec, value, workflow=workflow, key=key)
        await asyncio.sleep(0)
        known = key in self._records.get(workflow, {})
        stored = self._write(workflow, key, encoded).value
        self._stamp(workflow, key, known, at)
        return stored

    async def append_at(
        self, workflow: str, value: object, at: datetime, *, message_id: str | None = None
    ) -> str:
        check_workflow(workflow)
        check_message_id(workflow, message_id)
        check_moment("at", at, workflow=workflow)
        encoded = encode_value(self.codec, value, workflow=workflow, key="<inbox>")
        await asyncio.sleep(0)
        known = message_id is not None and message_id in self._sent.get(workflow, {})
        key = self._append_now(workflow, encoded, message_id)
        self._stamp(workflow, key, known, at)
        return key

    async def backdate(
        self, workflow: str, *, started_at: datetime | None, updated_at: datetime
    ) -> None:
        check_workflow(workflow)
        check_moment("updated_at", updated_at, workflow=workflow)
        if started_at is not None:
            check_moment("started_at", started_at, workflow=workflow)
        await asyncio.sleep(0)
        life = self._lives.get(workflow)
        if life is None:
            raise UnknownWorkflow(f"no workflow {workflow!r} has a status: nothing to backdate")
        life.updated_at = updated_at
        if started_at is not None:
            life.started_at = started_at

    async def discard_ended(
        self, workflow: str, *, statuses: frozenset[Status], before: datetime
    ) -> bool:
        check_workflow(workflow)
        check_ended(workflow, statuses, before)
        await asyncio.sleep(0)
        # The check and the discard without yielding between them: one step, as a script
        # or a transaction holding the row is on a server.
        life = self._lives.get(workflow)
        if life is None or life.status not in statuses or life.updated_at >= before:
            return False
        self._discard_now(workflow)
        return True

    async def discard(self, workflow: str) -> None:
        check_workflow(workflow)
        await at_gap(self.gap, "Checkpointer.discard", workflow)
        self._discard_now(workflow)

    def _discard_now(self, workflow: str) -> None:
        self._records.pop(workflow, None)
        self._sent.pop(workflow, None)
        self._raise_fence(workflow)
        life = self._lives.pop(workflow, None)
        if life is not None:
            self._move(workflow, life.status, None)

    def _raise_fence(self, workflow: str) -> None:
        claim = self._claims.get(workflow)
        self._claims[workflow] = _Claim(claim.token + 1 if claim is not None else 1)

    # -- the lifecycle -------------------------------------------------------------

    def _move(self, workflow: str, old: Status | None, new: Status | None) -> None:
        """Move ``workflow`` in the index from ``old`` to ``new`` (either may be None), to
        the newest end of ``new`` even when the status is unchanged."""
        if old is not None:
            self._index[old].pop(workflow, None)
        if new is not None:
            self._index[new].pop(workflow, None)
            self._index[new][workflow] = None

    def _transition(
        self, workflow: str, life: _Life, old: Status | None, now: datetime | None = None
    ) -> None:
        """Stamp ``life`` as the newest transition, store it and move its index entry."""
        life.updated_at = self.clock.now() if now is None else now
        life.seq = next(self._seq)
        self._lives[workflow] = life
        self._move(workflow, old, life.status)

    def _shown(self, workflow: str, life: _Life) -> WorkflowStatus:
        token: int | None = None
        until = life.until
        if life.status is Status.RUNNING:
            claim = self._claims.get(workflow)
            if claim is not None and claim.live_until is not None:
                token, until = claim.token, claim.live_until
        return WorkflowStatus(
            workflow=workflow,
            status=life.status,
            kind=life.kind,
            attempts=life.attempts,
            updated_at=life.updated_at,
            started_at=life.started_at,
            input=self._decoded_input(life),
            queue=life.queue,
            token=token,
            owner=life.owner if life.status is Status.RUNNING else None,
            since=life.since if life.status is Status.RUNNING else None,
            step=life.step if life.status is Status.RUNNING else None,
            until=until if life.status in (Status.RUNNING, Status.SLEEPING) else None,
            keys=life.keys,
            value=None if life.value is None else self.codec.decode(life.value),
            failure=life.failure,
        )

    def _decoded_input(self, life: _Life) -> object:
        return None if life.input is _NO_INPUT else self.codec.decode(life.input)

    async def admit(
        self, workflow: str, kind: str, input: object, *, queue: str = "default"
    ) -> Admitted:
        check_workflow(workflow)
        check_kind(kind)
        _check_queue(workflow, queue)
        encoded = encode_value(self.codec, input, workflow=workflow, key="<input>")
        await at_gap(self.gap, "Lifecycle.admit", workflow)
        return self._admit_now(workflow, kind, encoded, queue)

    def _queue_of(self, workflow: str) -> str:
        life = self._lives.get(workflow)
        return "default" if life is None else life.queue

    def _admit_now(self, workflow: str, kind: str, encoded: object, queue: str) -> Admitted:
        life = self._lives.get(workflow)
        if life is not None and life.kind is not None:
            if life.kind == kind and life.input == encoded:
                shown = self._shown(workflow, life)
                return Admitted(shown, created=False, queue=life.status is Status.READY)
            raise StartConflict(
                workflow, kind, self.codec.decode(encoded), life.kind, self._decoded_input(life)
            )
        now = self.clock.now()
        old = life.status if life is not None else None
        # A row begun without admit (kind None) is adopted whole: it becomes exactly what a
        # fresh start would have made, keeping only its records.
        fresh = _Life(Status.READY, kind, encoded, now, 0, queue=queue, started_at=now)
        self._transition(workflow, fresh, old, now)
        return Admitted(self._shown(workflow, fresh), created=True, queue=True)

    async def begin(
        self, workflow: str, *, liveness: timedelta, budget: timedelta, owner: str
    ) -> Began | None:
        check_workflow(workflow)
        check_duration("liveness", liveness, workflow=workflow)
        check_duration("budget", budget, workflow=workflow)
        _check_owner(workflow, owner)
        await at_gap(self.gap, "Lifecycle.begin", workflow)
        return self._begin_now(workflow, liveness, budget, owner)

    def _begin_now(
        self, workflow: str, liveness: timedelta, budget: timedelta, owner: str
    ) -> Began | None:
        now = self.clock.now()
        life = self._lives.get(workflow)
        if life is not None and life.status.terminal:
            return Began(
                None, life.status, life.kind, self._decoded_input(life), life.attempts, None
            )
        claim = self._claims.get(workflow)
        if claim is not None and claim.held(now):
            return None
        token = claim.token + 1 if claim is not None else 1
        budget_until = now + budget
        self._claims[workflow] = _Claim(
            token, min(now + liveness, budget_until), budget_until, liveness
        )
        if life is None:
            before, old = Status.READY, None
            life = _Life(Status.RUNNING, None, _NO_INPUT, now, 0)
        else:
            before = old = life.status
        lost = life.owner if before is Status.RUNNING else None
        life.status = Status.RUNNING
        life.attempts += self._counted()
        life.owner, life.since = owner, now
        life.step = life.beat_at = life.until = None
        life.keys = ()
        self._transition(workflow, life, old, now)
        return Began(
            Pass(workflow, token),
            before,
            life.kind,
            self._decoded_input(life),
            life.attempts,
            lost,
        )

    def _counted(self) -> int:
        """What ``begin`` adds to the attempts: one, in the claim's own write."""
        return 1

    async def beat(self, holder: Pass, step: str | None) -> Pass:
        if step is not None and not isinstance(step, str):
            raise TypeError(f"{holder}: the step in flight is a key or None, got {step!r}")
        renewed = await self._renew(holder, "Lifecycle.beat")
        life = self._lives.get(holder.workflow)
        if life is not None and life.status is Status.RUNNING:
            life.step, life.beat_at = step, self.clock.now()
        return renewed

    async def settle(self, holder: Pass, settlement: Settlement) -> None:
        check_settlement(holder, settlement)
        value = (
            encode_value(self.codec, settlement.value, workflow=holder.workflow, key="<value>")
            if settlement.status is Status.FINISHED
            else None
        )
        await at_gap(self.gap, "Lifecycle.settle", holder.workflow)
        self._settle_now(holder, settlement, value)

    def _settle_now(self, holder: Pass, settlement: Settlement, value: object) -> None:
        claim = self._fence(holder, f"settle as {settlement.status}")
        workflow = holder.workflow
        life = self._lives.get(workflow)
        old = life.status if life is not None else None
        if life is None:
            life = _Life(settlement.status, None, _NO_INPUT, self.clock.now(), 0)
        life.status = settlement.status
        life.attempts = settlement.attempts
        life.value = value
        life.failure = settlement.failure
        life.until = settlement.until if settlement.status is Status.SLEEPING else None
        life.keys = settlement.keys
        life.owner = life.since = life.step = life.beat_at = None
        self._transition(workflow, life, old)
        self._claims[workflow] = _Claim(claim.token + 1)

    async def withdraw(self, workflow: str) -> WorkflowStatus:
        check_workflow(workflow)
        await at_gap(self.gap, "Lifecycle.withdraw", workflow)
        return self._withdraw_now(workflow)[0]

    def _withdraw_now(self, workflow: str) -> tuple[WorkflowStatus, bool]:
        """Cancel ``workflow``; also whether this call changed anything."""
        life = self._lives.get(workflow)
        if life is None:
            if not self._records.get(workflow):
                raise UnknownWorkflow(f"no workflow {workflow!r}: nothing to cancel")
            life = _Life(Status.BLOCKED, None, _NO_INPUT, self.clock.now(), 0)
            old = None
        elif life.status.terminal:
            return self._shown(workflow, life), False
        else:
            old = life.status
        self._raise_fence(workflow)
        life.status = Status.CANCELLED
        life.owner = life.since = life.step = life.beat_at = life.until = None
        self._transition(workflow, life, old)
        return self._shown(workflow, life), True

    async def readmit(self, workflow: str) -> WorkflowStatus:
        check_workflow(workflow)
        await at_gap(self.gap, "Lifecycle.readmit", workflow)
        return self._readmit_now(workflow)

    def _readmit_now(self, workflow: str) -> WorkflowStatus:
        life = self._lives.get(workflow)
        if life is None:
            if not self._records.get(workflow):
                raise UnknownWorkflow(f"no workflow {workflow!r}: nothing to retry")
            # Records but no row: made by supply or append and never run, so waiting.
            raise NotRetryable(workflow, Status.BLOCKED)
        if life.status not in (Status.FAILED, Status.CANCELLED):
            raise NotRetryable(workflow, life.status)
        old = life.status
        life.status = Status.READY
        life.attempts = 0
        life.failure = None
        life.value = None
        life.until = None
        life.keys = ()
        self._transition(workflow, life, old)
        return self._shown(workflow, life)

    async def status(self, workflow: str) -> WorkflowStatus | None:
        check_workflow(workflow)
        await asyncio.sleep(0)
        life = self._lives.get(workflow)
        return None if life is None else self._shown(workflow, life)

    async def statuses(
        self,
        *,
        status: Status | None = None,
        kind: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page:
        wanted = _check_listing(status, kind, limit)
        below = _memory_cursor(cursor)
        await asyncio.sleep(0)
        found: list[tuple[int, str, _Life]] = []
        for current in tuple(Status) if wanted is None else (wanted,):
            for workflow in self._index[current]:
                life = self._lives.get(workflow)
                # The index is a hint and the row the truth: an entry left behind by a
                # transition the index missed is dropped here, never shown.
                if life is None or life.status is not current:
                    continue
                if kind is not None and life.kind != kind:
                    continue
                if below is not None and life.seq >= below:
                    continue
                found.append((life.seq, workflow, life))
        found.sort(key=lambda item: item[0], reverse=True)
        page = found[:limit]
        more = len(found) > limit
        return Page(
            tuple(self._shown(workflow, life) for _, workflow, life in page),
            str(page[-1][0]) if more and page else None,
        )

    def _write(
        self, workflow: str, key: str, encoded: object, operation: str | None = None
    ) -> Recorded:
        records = self._records.setdefault(workflow, {})
        existing = records.get(key)
        if existing is None:
            records[key] = _Stored(encoded, self.clock.now(), operation)
            return Recorded(self.codec.decode(encoded), True)
        return Recorded(self.codec.decode(existing.encoded), existing.encoded == encoded)


_RATE_WINDOW = timedelta(seconds=1)


@dataclass(frozen=True, slots=True)
class _Slot:
    queue: str
    receipt: str
    live_until: datetime


class _Timetable(dict[str, tuple[datetime, str | None]]):
    """Each scheduled workflow's ``(visible_at, receipt)``, and a heap of ``(visible_at,
    workflow)`` kept as entries are written, so that the next visible workflow is found in a
    few steps however many are scheduled. Writing an entry pushes its new time; the old heap
    item stays behind and is dropped when it surfaces (its time no longer matches the
    entry), and the heap is rebuilt when such leftovers outnumber the live entries."""

    def __init__(self) -> None:
        super().__init__()
        self.order: list[tuple[datetime, str]] = []

    def __setitem__(self, workflow: str, entry: tuple[datetime, str | None]) -> None:
        super().__setitem__(workflow, entry)
        heapq.heappush(self.order, (entry[0], workflow))
        if len(self.order) > 2 * len(self) + 64:
            self.order = [(at, wf) for wf, (at, _) in self.items()]
            heapq.heapify(self.order)


class MemoryScheduler:
    """A :class:`~durable.interfaces.Scheduler` as one visibility-scored entry per workflow.

    An entry is runnable once its visibility time has passed. Taking it hides it for the
    lease under a fresh receipt; a taker that dies simply lets it become visible again,
    which is why ``reclaim`` and ``wake_due`` have nothing to do here (the score is the
    timer). ``make_ready`` clears the receipt, so an answer for an older delivery matches
    nothing and cannot undo it; ``cancel`` removes the entry, so an answer for a cancelled
    delivery has nothing to reinstate.
    """

    def __init__(
        self,
        *,
        lease: timedelta = timedelta(seconds=30),
        clock: Clock | None = None,
        gap: Gap | None = None,
    ):
        self._lease = check_duration("lease", lease)
        self.gap = gap
        """Where a test holds or fails a move (``durable.plugins.Gap``); ``None`` outside one."""
        self.clock: Clock = clock if clock is not None else SystemClock()
        self._entries = _Timetable()
        self._receipts = itertools.count(1)
        self._changed = asyncio.Event()
        self.queue_of: Callable[[str], str] = lambda workflow: "default"
        """Each workflow's queue: ``MemoryDurable`` points it at its checkpointer's
        lifecycle rows; a scheduler on its own has every workflow in ``"default"``."""
        # Queue limits (durable.interfaces.Limited). Every handle on this store shares this
        # object, so these are the store's counts, not a handle's.
        self._limits: dict[str, QueueLimit] = {}
        self._slots: dict[str, _Slot] = {}  # by workflow: one slot a workflow at most
        self._handed: dict[str, collections.deque[datetime]] = {}  # rate-limited queues
        self._priorities: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"MemoryScheduler(lease={self._lease!r}, clock={self.clock!r})"

    @property
    def lease(self) -> timedelta:
        return self._lease

    async def prepare(self) -> None:
        await asyncio.sleep(0)

    async def make_ready(self, workflow: str) -> None:
        check_workflow(workflow)
        await at_gap(self.gap, "Scheduler.make_ready", workflow)
        self._make_ready_now(workflow)

    def _make_ready_now(self, workflow: str) -> None:
        self._entries[workflow] = (self.clock.now(), None)
        self._changed.set()

    def _take(self) -> Delivery | None:
        return self._take_from(None)

    def _take_from(self, queues: frozenset[str] | None) -> Delivery | None:
        # The earliest visible entry, (visible_at, workflow) least first as before, read off
        # the heap rather than by scanning every entry: a store holding a million scheduled
        # workflows takes its next one in a few steps, not a million.
        now = self.clock.now()
        if self._limits or self._priorities:
            return self._take_limited(queues, now)
        order = self._entries.order
        passed_over: list[tuple[datetime, str]] = []
        found = None
        while order:
            at, workflow = order[0]
            entry = self._entries.get(workflow)
            if entry is None or entry[0] != at:
                heapq.heappop(order)  # superseded by a later write of the entry, or removed
                continue
            if at > now:
                break
            if queues is not None and self.queue_of(workflow) not in queues:
                passed_over.append(heapq.heappop(order))
                continue
            heapq.heappop(order)
            found = workflow
            break
        for item in passed_over:
            heapq.heappush(order, item)
        if found is None:
            return None
        receipt = str(next(self._receipts))
        self._entries[found] = (now + self._lease, receipt)
        return Delivery(found, receipt)

    def _take_limited(self, queues: frozenset[str] | None, now: datetime) -> Delivery | None:
        """The take under limits: choose, count and take in one turn of the event loop
        (nothing awaits in between), which is this store's one atomic step."""
        open_: dict[str, bool] = {}

        def admits(queue: str) -> bool:
            if queue not in open_:
                limit = self._limits.get(queue)
                open_[queue] = limit is None or (
                    (limit.concurrent is None or self._live(queue, now) < limit.concurrent)
                    and (limit.rate is None or self._recent(queue, now) < limit.rate)
                )
            return open_[queue]

        due = [
            (-self._priorities.get(wf, 0), at, wf)
            for wf, (at, _) in self._entries.items()
            if at <= now
            and (queues is None or self.queue_of(wf) in queues)
            and admits(self.queue_of(wf))
            # A workflow whose slot is live has a pass running, which holds it.
            and not (wf in self._slots and self._slots[wf].live_until > now)
        ]
        if not due:
            return None
        _, _, workflow = min(due)
        queue = self.queue_of(workflow)
        receipt = str(next(self._receipts))
        self._entries[workflow] = (now + self._lease, receipt)
        limit = self._limits.get(queue)
        slot = limit is not None and limit.concurrent is not None
        if slot:
            self._slots[workflow] = _Slot(queue, receipt, now + self._lease)
        if limit is not None and limit.rate is not None:
            self._handed.setdefault(queue, collections.deque()).append(now)
        return Delivery(workflow, receipt, slot)

    def _live(self, queue: str, now: datetime) -> int:
        return sum(1 for s in self._slots.values() if s.queue == queue and s.live_until > now)

    def _recent(self, queue: str, now: datetime) -> int:
        handed = self._handed.get(queue)
        if handed is None:
            return 0
        while handed and handed[0] <= now - _RATE_WINDOW:
            handed.popleft()
        return len(handed)

    def _return_slot(self, delivery: Delivery) -> None:
        slot = self._slots.get(delivery.workflow)
        if slot is not None and slot.receipt == delivery.receipt:
            del self._slots[delivery.workflow]
            self._changed.set()

    async def set_limit(self, queue: str, limit: QueueLimit | None) -> None:
        """Keep ``limit`` for ``queue`` (``None`` or an unlimited one removes it)."""
        (queue,) = check_queues([queue])
        if limit is not None and not isinstance(limit, QueueLimit):
            raise TypeError(f"queue {queue!r}: a limit is a QueueLimit or None, got {limit!r}")
        await asyncio.sleep(0)
        if limit is None or limit.unlimited:
            self._limits.pop(queue, None)
        else:
            self._limits[queue] = limit
        self._changed.set()

    async def limits(self) -> dict[str, QueueLimit]:
        await asyncio.sleep(0)
        return dict(sorted(self._limits.items()))

    async def held(self, queue: str) -> int:
        (queue,) = check_queues([queue])
        await asyncio.sleep(0)
        return self._live(queue, self.clock.now())

    async def hold(self, delivery: Delivery, liveness: timedelta) -> bool:
        check_duration("liveness", liveness, workflow=delivery.workflow)
        await asyncio.sleep(0)
        now = self.clock.now()
        slot = self._slots.get(delivery.workflow)
        if slot is None or slot.receipt != delivery.receipt or slot.live_until <= now:
            return False
        self._slots[delivery.workflow] = _Slot(slot.queue, slot.receipt, now + liveness)
        return True

    async def prioritize(self, workflow: str, priority: int) -> None:
        check_workflow(workflow)
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise TypeError(f"workflow {workflow!r}: a priority is an int, got {priority!r}")
        await asyncio.sleep(0)
        if priority == 0:
            self._priorities.pop(workflow, None)
        else:
            self._priorities[workflow] = priority

    async def next_ready(self, within: timedelta) -> Delivery | None:
        return await self._next_ready(None, within)

    async def next_ready_in(self, queues: frozenset[str], within: timedelta) -> Delivery | None:
        return await self._next_ready(check_queues(queues), within)

    async def _next_ready(
        self, queues: frozenset[str] | None, within: timedelta
    ) -> Delivery | None:
        check_duration("within", within)
        loop = asyncio.get_running_loop()
        give_up = loop.time() + within.total_seconds()
        await at_gap(self.gap, "Scheduler.next_ready", "")
        while True:
            delivery = self._take() if queues is None else self._take_from(queues)
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
        await at_gap(self.gap, "Scheduler.reclaim", "")
        return None

    async def wake_at(self, delivery: Delivery, when: datetime) -> None:
        _check_moment(delivery.workflow, when)
        await at_gap(self.gap, "Scheduler.wake_at", delivery.workflow)
        self._return_slot(delivery)
        entry = self._entries.get(delivery.workflow)
        if entry is None or entry[1] != delivery.receipt:
            return
        self._entries[delivery.workflow] = (when, None)
        self._changed.set()

    async def wake_due(self, now: datetime) -> tuple[str, ...]:
        await asyncio.sleep(0)
        return ()

    async def done(self, delivery: Delivery) -> None:
        await at_gap(self.gap, "Scheduler.done", delivery.workflow)
        self._return_slot(delivery)
        entry = self._entries.get(delivery.workflow)
        if entry is not None and entry[1] == delivery.receipt:
            del self._entries[delivery.workflow]

    async def cancel(self, workflow: str) -> None:
        check_workflow(workflow)
        await at_gap(self.gap, "Scheduler.cancel", workflow)
        self._cancel_now(workflow)

    def _cancel_now(self, workflow: str) -> None:
        self._entries.pop(workflow, None)
        if self._slots.pop(workflow, None) is not None:
            self._changed.set()

    async def scheduled(self, workflow: str) -> datetime | None:
        """When ``workflow`` is next runnable, or ``None`` if it is not scheduled."""
        check_workflow(workflow)
        await asyncio.sleep(0)
        entry = self._entries.get(workflow)
        return entry[0] if entry is not None else None


def _check_queue(workflow: str, queue: object) -> str:
    try:
        return check_kind(queue)
    except ValueError:
        raise ValueError(
            f"workflow {workflow!r}: queue {queue!r} is not allowed: a queue is named as a "
            "kind is (1 to 100 of letters, digits, '_', '.' and '-')"
        ) from None


def _check_owner(workflow: str, owner: object) -> str:
    if not isinstance(owner, str) or not owner:
        raise ValueError(f"workflow {workflow!r}: a pass's owner is a non-empty str, got {owner!r}")
    return owner


def _check_listing(status: object, kind: object, limit: object) -> Status | None:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"a listing's limit is an int of at least 1, got {limit!r}")
    if kind is not None:
        check_kind(kind)
    if status is None:
        return None
    try:
        return Status(str(status))
    except ValueError:
        known = ", ".join(s.value for s in Status)
        raise ValueError(f"no status {status!r}; a workflow is one of {known}") from None


def _memory_cursor(cursor: object) -> int | None:
    if cursor is None:
        return None
    if isinstance(cursor, str) and cursor.isdigit():
        return int(cursor)
    raise ValueError(f"{cursor!r} is not a cursor this store handed out")


def _check_moment(workflow: str, when: object) -> datetime:
    if not isinstance(when, datetime) or when.tzinfo is None:
        raise TypeError(f"workflow {workflow!r}: wake_at needs an aware datetime, got {when!r}")
    return when


class MemoryDurable(Lifecycled):
    """A memory checkpointer and scheduler whose cross-store moves are each one step.

    Atomic because each move is performed without yielding to the event loop, so no other
    task can observe the record without the wakeup. ``start``, ``cancel`` and ``retry``
    are such moves too: the lifecycle row and the queue change in the same step.
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
        gap: Gap | None = None,
    ) -> None:
        clock = clock if clock is not None else SystemClock()
        self._checkpointer = checkpointer or MemoryCheckpointer(codec=codec, clock=clock, gap=gap)
        self._scheduler = scheduler or MemoryScheduler(lease=lease, clock=clock, gap=gap)
        self._scheduler.queue_of = self._checkpointer._queue_of

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
        await at_gap(self._checkpointer.gap, "Durable.arrive", workflow)
        stored = cp._supply_now(workflow, key, encoded)
        self._scheduler._make_ready_now(workflow)
        return stored

    async def send(self, workflow: str, value: object, *, message_id: str | None = None) -> str:
        check_workflow(workflow)
        check_message_id(workflow, message_id)
        cp = self._checkpointer
        encoded = encode_value(cp.codec, value, workflow=workflow, key="<inbox>")
        await at_gap(self._checkpointer.gap, "Durable.send", workflow)
        key = cp._append_now(workflow, encoded, message_id)
        self._scheduler._make_ready_now(workflow)
        return key

    async def discard(self, workflow: str) -> None:
        check_workflow(workflow)
        await at_gap(self._checkpointer.gap, "Durable.discard", workflow)
        self._checkpointer._discard_now(workflow)
        self._scheduler._cancel_now(workflow)

    async def _admit_and_queue(
        self, workflow: str, kind: str, input: object, queue: str
    ) -> Admitted:
        cp = self._checkpointer
        check_workflow(workflow)
        check_kind(kind)
        _check_queue(workflow, queue)
        encoded = encode_value(cp.codec, input, workflow=workflow, key="<input>")
        await at_gap(self._checkpointer.gap, "Durable.start", workflow)
        admitted = cp._admit_now(workflow, kind, encoded, queue)
        if admitted.queue:
            self._scheduler._make_ready_now(workflow)
        return admitted

    async def _withdraw_and_cancel(self, workflow: str) -> WorkflowStatus:
        check_workflow(workflow)
        await at_gap(self._checkpointer.gap, "Durable.cancel", workflow)
        shown, changed = self._checkpointer._withdraw_now(workflow)
        if changed:
            self._scheduler._cancel_now(workflow)
        return shown

    async def _readmit_and_queue(self, workflow: str) -> WorkflowStatus:
        check_workflow(workflow)
        await at_gap(self._checkpointer.gap, "Durable.retry", workflow)
        shown = self._checkpointer._readmit_now(workflow)
        self._scheduler._make_ready_now(workflow)
        return shown


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
    """Open a fresh in-memory store. Options: ``codec``, ``clock``, ``lease`` (and ``gap``,
    which only tests use)."""
    yield MemoryDurable(**options)


@asynccontextmanager
async def _testing(url: str | None, **options: Any) -> AsyncIterator[Testbed[MemoryEffect]]:
    """A fresh memory store per testbed; ``options`` (``codec``, ``clock``, ``lease``, ``gap``) are
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
        capabilities=frozenset(
            {
                "transact",
                "atomic-arrive",
                "enumerate",
                "lifecycle",
                "queues",
                "limits",
                "operations",
            }
        ),
        testing=_testing,
        distribution="durable-core",
        description="in-process reference store (for tests; keeps nothing)",
    )
