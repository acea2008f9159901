"""The protocols a store implements and the values they exchange.

A reader deciding what a store owes reads this one file. Every requirement below is
stated once here, proved by a conformance test of the same name, and argued for in
``docs/guarantees.md``.

Two protocols, because a workflow's durable state is two things that can live in two
stores: what it has done (:class:`Checkpointer`) and when it may run next
(:class:`Scheduler`). A third, :class:`Durable`, bundles a pair of them and names the
moves that have to cross both, so that a caller can never hold half of one.

Optional protocols a store may also offer, each a capability it declares: listing its
workflows (:class:`Enumerable`), saying who holds one (:class:`Inspectable`) and when it
runs next (:class:`Observable`), and keeping each workflow's kind, input, status, attempts
and outcome (:class:`Lifecycle`). Lifecycle is a protocol of its own rather than more
``Checkpointer`` methods so that a store written before it stays a ``Checkpointer``, reported
as not offering it. Its writes ride on the writes a pass already makes (``begin`` is the
claim, ``beat`` the renewal, ``settle`` the release), so a pass costs no more writes than
before and ``Run.step`` none at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Never, Protocol, runtime_checkable

from typing_extensions import TypeVar

__all__ = [
    "INBOX_PREFIX",
    "SENT_PREFIX",
    "Admitted",
    "Began",
    "Checkpointer",
    "Claimed",
    "Contended",
    "Delivery",
    "Durable",
    "Effect",
    "Entry",
    "Enumerable",
    "Failure",
    "Fenced",
    "Inspectable",
    "Interruption",
    "Lifecycle",
    "LifecycleNotOffered",
    "NotRetryable",
    "Observable",
    "Page",
    "Pass",
    "Recorded",
    "Scheduler",
    "Settlement",
    "StartConflict",
    "Status",
    "StoreError",
    "StoreUnavailable",
    "Suspended",
    "Swallowed",
    "UnknownWorkflow",
    "WorkflowStatus",
    "inbox_key",
]

Effect = TypeVar("Effect", contravariant=True, default=Never)
"""What a store can commit alongside a record.

Contravariant and defaulting to ``Never``: a bare ``Checkpointer`` accepts every store,
and ``transact`` on it takes an argument of type ``Never``, so it is uncallable rather
than absent on a store that offers nothing to co-commit.
"""

INBOX_PREFIX = "durable.inbox:"
"""Every key that :meth:`Checkpointer.append` picks starts with this, and nothing else may.

``Run.receive`` tells inbox entries from a workflow's own records by this prefix, so the
stores share it rather than each choosing a shape of their own.
"""

SENT_PREFIX = "durable.sent:"
"""The reserved key prefix under which a store remembers the message ids it has appended.

``append(workflow, value, message_id="m-1")`` on the SQLite, Postgres and Redis stores
leaves, beside its entry and in the same commit, a marker under ``SENT_PREFIX + "m-1"``
holding the entry's inbox key. The marker is the store's own bookkeeping, not a record:
``load`` and ``history`` leave it out, and no caller may write a key with this prefix
(``record``, ``supply`` and ``arrive`` refuse one). See :meth:`Checkpointer.append` for why
it lives among the records rather than in a structure of its own.
"""

_INBOX_DIGITS = 20  # enough for any non-negative 64-bit counter


def inbox_key(position: int) -> str:
    """The inbox key for ``position``, zero-padded so that keys sort as their numbers do.

    Stores call this with whatever number they drew for the entry (a per-workflow count,
    a shared sequence); the numbers need not be contiguous, only increasing in append
    order within one workflow.
    """
    if position < 0:
        raise ValueError(f"an inbox position cannot be negative, got {position}")
    return f"{INBOX_PREFIX}{position:0{_INBOX_DIGITS}d}"


@dataclass(frozen=True, slots=True)
class Pass:
    """The right to write to ``workflow``, as minted by the store's ``claim``.

    ``token`` is a number rather than a name because the store fences by comparison: it
    refuses any write carrying a token below the highest it has issued for the workflow.
    The store mints it, never the claimant, so no two passes can agree to share one.
    Tokens strictly increase per workflow forever: across release, expiry, discard and
    (on stores with TTLs) the expiry of the claim's own key.
    """

    workflow: str
    token: int

    def __str__(self) -> str:
        return f"pass {self.token} on {self.workflow!r}"


@dataclass(frozen=True, slots=True)
class Recorded:
    """What a write left in the store, and whether this write is the one that put it there.

    ``value`` is the stored value decoded. ``first`` is decided by the store comparing
    encodings, never by the caller comparing values: a value crosses the codec both ways,
    so a write that won outright can be handed back something unequal (a tuple returns
    as a list under ``JsonCodec``). A write whose encoding equals the stored one counts as
    first, since nothing distinguishes the two.
    """

    value: object
    first: bool


@dataclass(frozen=True, slots=True)
class Entry:
    """One record with the moment it landed.

    ``at`` is the store's clock (timezone-aware UTC) read at the winning write: the same
    clock every lease is measured by, and never restamped by a later losing write or a
    replayed step.
    """

    key: str
    value: object
    at: datetime


@dataclass(frozen=True, slots=True)
class Delivery:
    """One handing-out of ``workflow`` by a scheduler.

    ``receipt`` lets the scheduler tell this delivery from a wakeup that arrived after it
    was taken: answering for a stale receipt never undoes a newer ``make_ready``.
    """

    workflow: str
    receipt: str


class StoreError(Exception):
    """A store could not do what was asked, for a reason a person must act on."""


class StoreUnavailable(StoreError):
    """The store could not be reached, or the connection dropped during an operation.

    Whether a write that was in flight landed is unknown, unless the message says otherwise
    (a store whose writes are one commit each can say "whole or not at all"; none can say
    which). Nothing about the workflow is wrong: the same call may succeed once the server
    answers again, so this is an outage to wait out, never a failure of the work.

    What a store owes here is what every requirement in this module already implies: an
    operation that could not reach the store raises, and is never answered with a value.
    ``load`` returning ``{}``, ``claim`` returning ``None`` or ``next_ready`` returning
    ``None`` because the connection was gone would each be taken for the truth (a pass
    would repeat every step; a held workflow would look free of work).

    Raising *this* type (or a subclass: ``PostgresUnavailable``, ``ConnectionLost``,
    ``RedisUnavailable``) for an outage is a recommendation rather than a requirement, and
    the conformance suite does not test it, because it cannot cut a store's connection
    portably (SQLite and the in-memory store have none to cut). What it buys is how the
    worker reports and waits: ``durable.worker.work`` logs an outage as one line per retry
    with capped exponential backoff, with a single traceback for the first failure of a
    series and a line when the store answers again, and leaves the deliveries it could not
    answer for outstanding. A store that raises something else still works: the worker
    treats the error as it treats any other, a failed pass, a failed take or a failed tick,
    with a traceback each time.
    """


class Interruption(BaseException):
    """This pass may not continue; says nothing about whether the work is good.

    A ``BaseException`` for the reason ``asyncio.CancelledError`` is one: an
    ``except Exception`` written to handle a declined card must not absorb the news that
    another pass now owns the workflow. A saga's compensation is exactly such a handler.
    """


class Fenced(Interruption):
    """The store refused this pass: stop it; whoever holds the newer token carries on.

    A write (``record``, ``transact``, a settlement) is refused once the pass's token is
    stale: a newer pass was claimed, the pass released its claim, or the workflow was
    discarded. ``renew`` (and a lifecycle ``beat``) is refused for the same reasons, and
    also once the pass has spent its budget. A spent budget alone does not refuse a write:
    it frees the claim, so the pass learns of it at its next renew, or at its next write
    after another pass has claimed. A write landing between the two is the stale pass's
    last, and the next pass, which loads after it claims, reads it like any other record.
    """


class Contended(Interruption):
    """Another pass holds this workflow right now, so this one never started."""


class Suspended(Interruption):
    """The body reached a wait (a sleep, an awaited value, an empty inbox).

    Drivers never see it: ``resume`` catches it and answers ``Sleeping`` or ``Blocked``.
    It is a ``BaseException`` for its journey up through the author's own code, past
    whatever they wrapped their steps in.
    """


class Swallowed(Exception):
    """A workflow body returned after reaching a wait.

    ``asyncio.gather(return_exceptions=True)`` and ``asyncio.wait`` hand a ``Suspended``
    back as a value, so a body can capture one without writing an ``except``. Every wait
    writes itself onto its ``Run`` before raising, and ``resume`` refuses a body that
    returns having reached one rather than reporting a workflow that is not finished as
    finished. This is a bug in the body, hence an ordinary ``Exception``.
    """

    def __init__(self, workflow: str, keys: tuple[str, ...]) -> None:
        self.workflow = workflow
        self.keys = keys
        waits = ", ".join(repr(k) for k in keys)
        super().__init__(
            f"the body of workflow {workflow!r} returned after reaching the wait(s) {waits}; "
            "a Suspended was captured (gather(return_exceptions=True), asyncio.wait or an "
            "except BaseException) instead of being allowed to propagate"
        )


@runtime_checkable
class Checkpointer(Protocol[Effect]):
    """What a workflow has done, and who may add to it.

    Every value crosses the store's codec on the way in and on the way out, so a step's
    result is handed back as the store holds it on the pass that ran it exactly as on the
    pass that replays it. Values the codec cannot encode and non-positive durations are
    refused at the boundary with an error naming the workflow and key; nothing is written.

    Workflow ids and record keys are opaque non-empty strings (colons, braces, quotes,
    unicode, any length), except that neither may hold a control character (Unicode
    category Cc: newline, carriage return, tab, NUL, DEL, ...): every method refuses one
    at the boundary with a ``ValueError`` naming the id or key and the character's
    position, before anything is read or written (``durable.boundary.check_workflow`` and
    ``check_key``). Ids and keys are printed by ``show``, ``list`` and log lines, where a
    newline would forge a line.
    """

    async def load(self, workflow: str) -> dict[str, object]:
        """Every record of ``workflow``, decoded, in the order each key was first recorded.

        ``{}`` for an unknown workflow. The order is the guarantee and no number behind it
        is: the returned dict preserves insertion order, and a losing write (to a key that
        already holds a value) moves nothing.
        """
        ...

    async def history(self, workflow: str) -> list[Entry]:
        """The records ``load`` returns, in the same order, each stamped with the store's
        clock at its winning write.

        Times do not go backwards along that order, within the clock's resolution, however
        many writers raced: the stamp is read where the write lands, not by a caller before
        it sent the write, so a record placed after another was not stamped before it.
        """
        ...

    async def claim(self, workflow: str, *, liveness: timedelta, budget: timedelta) -> Pass | None:
        """Take the workflow for one pass, or ``None`` while another live pass holds it.

        Two deadlines, because one was answering two questions: ``liveness`` is how soon a
        dead holder is noticed (the holder renews it while it runs) and ``budget`` is how
        long the pass may take at all (renewal never lifts it). The claim is free once
        either has passed, or once it is released. Checking and taking are one step.
        """
        ...

    async def renew(self, holder: Pass) -> Pass:
        """Push ``holder``'s liveness forward, never past its budget.

        Raises ``Fenced`` when a newer token has been issued or the budget is spent.
        """
        ...

    async def release(self, holder: Pass) -> None:
        """Free the workflow now. A stale holder's release frees nothing, and a released
        pass's own later writes are refused."""
        ...

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        """Write ``value`` under ``key`` unless the key already holds one.

        Refuses a token below the highest issued for the workflow with ``Fenced``, writing
        nothing. A pass whose budget ran out but that no newer pass has replaced yet is not
        refused here: the budget is enforced by ``renew`` and by the claim it frees. Never
        overwrites. Durable before it returns.
        """
        ...

    async def transact(self, holder: Pass, key: str, effect: Effect) -> Recorded:
        """Perform ``effect`` in the store and record its result under ``key``, in one commit.

        At most once across all passes: if ``key`` is already recorded the effect is not
        performed and the stored value is returned with ``first=False``. Neither half
        without the other: an effect that raises leaves no record and none of its writes;
        a fenced holder's effect is not applied.
        """
        ...

    async def supply(self, workflow: str, key: str, value: object) -> object:
        """Write from outside a pass: first-writer-wins, no claim needed, never blocked or
        refused because a pass is running. Returns the value the key now holds."""
        ...

    async def append(self, workflow: str, value: object, *, message_id: str | None = None) -> str:
        """Add ``value`` to the workflow's inbox under a key the store picks, and return it.

        Concurrent appends get distinct keys and none is lost; the keys (each starting with
        ``INBOX_PREFIX``) sort into append order within the workflow; the entry is an
        ordinary record that ``load`` returns at its append position. The key's order and
        ``load``'s order are one order. Nothing is ever consumed.

        Without ``message_id`` every call appends, so a call repeated because its answer
        was lost (a dropped connection, a timeout) leaves a second copy. ``message_id`` is
        what makes an append safe to repeat:

        * an append whose ``message_id`` the workflow already holds writes nothing and
          returns the key the first append with that id got, whatever ``value`` it carries
          (the id names the message; a different value under the same id is the same
          message resent, not a new one);
        * concurrent appends with one id, from any number of tasks and connections, write
          exactly one entry, and every one of them returns its key;
        * ids are per workflow: one id under two workflows is two messages;
        * ``discard`` forgets the ids with the records, so after it the same id appends
          again.

        How a store remembers ids is its own affair; the stores here keep a marker under
        ``SENT_PREFIX + message_id`` holding the entry's key, written in the same commit
        (script, transaction) as the entry, and let the marker's first-writer-wins decide
        the race: the append that lands the marker is the one whose entry exists. Looking
        the id up and then appending, in two steps, is the mistake to avoid: two repeats
        both find it absent. The marker lives among the workflow's records, rather than in
        a table or key of its own, so that it is forgotten exactly when they are
        (``discard``, a TTL) and no schema changes for it. It is not a record, so ``load``
        and ``history`` leave it out, and nothing reading them (``Run.receive``,
        ``run_durably``, ``durable show``, an application) ever sees one. That is also why
        its value is the inbox key as plain text rather than a codec encoding: the key is
        only known inside the store's one step, where no codec runs (a Lua script cannot
        call a Python codec), and a record's value would have to be one. (The in-memory
        reference keeps the same mapping in a dict beside the records.)

        ``message_id`` must be a non-empty ``str`` without control characters; anything
        else is refused before anything is written, with an error naming the workflow and
        the id (``durable.boundary.check_message_id``).
        """
        ...

    async def discard(self, workflow: str) -> None:
        """Forget every record and raise the fence, keeping the claim's ordering.

        A pass in flight is refused at its next write, and the id is claimable at once,
        with a token higher than any issued before. The message ids ``append`` remembers
        are forgotten with the records.
        """
        ...


@runtime_checkable
class Scheduler(Protocol):
    """When a workflow may run.

    A workflow made ready is eventually delivered, even if its taker dies mid-pass and even
    if the wakeup lands while a pass on it runs. Answering for a delivery (``wake_at`` or
    ``done``) never undoes a ``make_ready`` that landed after it was taken, and never
    reinstates a workflow cancelled since.

    ``make_ready``, ``cancel`` and anything else that takes a workflow id refuse one holding
    a control character, as the checkpointer does, with a ``ValueError`` and nothing
    scheduled or unscheduled.
    """

    @property
    def lease(self) -> timedelta:
        """How long a taken delivery stays hidden before it may be handed out again.

        Not less: until the lease has run out, ``next_ready`` on any handle hands the
        delivery to no one else (``reclaim`` may, once its taker has not answered for the
        ``idle`` asked). A store that hid it for less would run one pass twice at once.
        """
        ...

    async def prepare(self) -> None:
        """Create whatever the scheduler needs (a consumer group, a table). Idempotent."""
        ...

    async def make_ready(self, workflow: str) -> None:
        """Make ``workflow`` runnable now."""
        ...

    async def next_ready(self, within: timedelta) -> Delivery | None:
        """Take one runnable workflow, waiting up to ``within`` for one to appear.

        Taking is one step: concurrent takers, on any handles, are never handed the same
        delivery, so a workflow made ready once goes to exactly one of them.

        ``within`` must be a positive ``timedelta``: zero or a negative duration is refused
        with a ``ValueError`` (a value of another type with a ``TypeError``;
        ``durable.boundary.check_duration`` does both) and nothing is taken, as the
        checkpointer refuses a non-positive liveness or budget. A worker looping on a zero
        wait would spin on the store.
        """
        ...

    async def reclaim(self, idle: timedelta) -> Delivery | None:
        """Take over one delivery whose taker has not answered for ``idle``, if any.

        Never one taken (or answered for) less than ``idle`` ago: its taker is alive as far
        as anyone can tell, and taking it over would run one pass twice at once.

        ``idle`` must be a positive ``timedelta``, refused as ``within`` is otherwise and
        nothing taken over: a zero ``idle`` would take every delivery in flight, however
        live its taker.
        """
        ...

    async def wake_at(self, delivery: Delivery, when: datetime) -> None:
        """Schedule the workflow for ``when`` and answer for ``delivery``, in one call.

        If a ``make_ready`` has landed since ``delivery`` was taken, that wakeup wins. If
        the workflow was cancelled since, nothing is reinstated.
        """
        ...

    async def wake_due(self, now: datetime) -> tuple[str, ...]:
        """Move every workflow whose deadline is at or before ``now`` to runnable.

        One durable move per workflow, so concurrent timers move each at most once.
        Returns the ids moved by this call.
        """
        ...

    async def done(self, delivery: Delivery) -> None:
        """Answer for ``delivery`` with nothing further to schedule."""
        ...

    async def cancel(self, workflow: str) -> None:
        """Forget the workflow's pending and scheduled runs."""
        ...


@runtime_checkable
class Durable(Protocol[Effect]):
    """A checkpointer and a scheduler, and the moves that cross the two.

    Recording the value a workflow waits on and making it runnable are durable only
    together, so they are one method here and a caller can never do half. Implementations
    differ in what they guarantee, not in what they offer: ``atomic`` says whether each move
    is one commit (a shared connection or pool) or two writes in the safe order.

    Each move refuses a workflow id or key holding a control character before either half
    is written, as the checkpointer and the scheduler do.
    """

    @property
    def checkpointer(self) -> Checkpointer[Effect]: ...

    @property
    def scheduler(self) -> Scheduler: ...

    @property
    def atomic(self) -> bool:
        """True when ``arrive``, ``send`` and ``discard`` are each one commit."""
        ...

    async def arrive(self, workflow: str, key: str, value: object) -> object:
        """Supply ``value`` under ``key`` (first-writer-wins) and make the workflow ready.

        Returns the value the key now holds.
        """
        ...

    async def send(self, workflow: str, value: object, *, message_id: str | None = None) -> str:
        """Append ``value`` to the workflow's inbox and make it ready. Returns the key.

        ``message_id`` means what it means to :meth:`Checkpointer.append`: a send whose id
        the workflow already holds appends nothing and returns the existing entry's key,
        so a send repeated after a lost answer is harmless; concurrent sends with one id
        append exactly one entry and all return its key; ids are per workflow, and
        ``discard`` forgets them. A repeated send still makes the workflow ready (the
        wakeup is harmless, and it repairs a split store whose first send recorded and then
        died before queueing). Without an id every send appends: a send repeated after a
        lost answer leaves a second copy in the inbox.
        """
        ...

    async def discard(self, workflow: str) -> None:
        """Discard the workflow's records (raising its fence) and cancel its runs."""
        ...


@dataclass(frozen=True, slots=True)
class Claimed:
    """Who holds a workflow right now, as ``Inspectable.claimed`` reports it."""

    token: int
    live_until: datetime
    budget_until: datetime


@runtime_checkable
class Enumerable(Protocol):
    """A checkpointer that can list the workflows it holds (the ``enumerate`` capability).

    Optional: a store whose keys cannot be listed without scanning someone else's data
    need not offer it, and ``durable list`` says so instead of guessing.
    """

    async def workflows(self, limit: int | None = None) -> list[str]:
        """Workflow ids holding at least one record, at most ``limit`` of them, sorted."""
        ...


@runtime_checkable
class Inspectable(Protocol):
    """A checkpointer that can say whether a live pass holds a workflow (for operators)."""

    async def claimed(self, workflow: str) -> Claimed | None:
        """The live claim on ``workflow``, or ``None`` when no pass holds it."""
        ...


@runtime_checkable
class Observable(Protocol):
    """A scheduler that can say when a workflow is next runnable (for operators)."""

    async def scheduled(self, workflow: str) -> datetime | None:
        """When ``workflow`` is next runnable (possibly already), or ``None``."""
        ...


class Status(StrEnum):
    """Where a workflow is in its life; stored as these exact strings."""

    READY = "ready"
    RUNNING = "running"
    SLEEPING = "sleeping"
    BLOCKED = "blocked"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        """No worker ever runs a finished, failed or cancelled workflow again."""
        return self in (Status.FINISHED, Status.FAILED, Status.CANCELLED)


class LifecycleNotOffered(StoreError):
    """The store's checkpointer does not implement Lifecycle."""


class UnknownWorkflow(LookupError):
    """No workflow of that id: no lifecycle row and no records."""


def _cut(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


class StartConflict(ValueError):
    """A start under an id already started with another kind or input. Nothing was written."""

    def __init__(
        self, workflow: str, kind: str, input: object, stored_kind: str | None, stored_input: object
    ) -> None:
        self.workflow, self.kind, self.input = workflow, kind, input
        self.stored_kind, self.stored_input = stored_kind, stored_input
        super().__init__(
            f"workflow {workflow!r} was started as kind {stored_kind!r} with input "
            f"{_cut(stored_input)}; refusing to start it as kind {kind!r} with input "
            f"{_cut(input)} (nothing was written): use another id, or the same kind and input"
        )


class NotRetryable(ValueError):
    """retry of a workflow that is neither failed nor cancelled. Nothing was written."""

    def __init__(self, workflow: str, status: Status) -> None:
        self.workflow, self.status = workflow, status
        super().__init__(
            f"workflow {workflow!r} is {status}; only a failed or cancelled workflow can be retried"
        )


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a workflow failed, or why its last attempt did: bounded text, never an object."""

    type: str  # qualified exception name
    message: str  # at most 1000 characters
    traceback: str  # a summary of at most 4000 characters
    attempts: int  # attempts made when it was recorded

    def __str__(self) -> str:
        return f"{self.type}: {self.message}"


@dataclass(frozen=True, slots=True)
class WorkflowStatus:
    """One workflow's life as the store records it, for anyone outside a pass."""

    workflow: str
    status: Status
    kind: str | None  # None: never started with a kind
    attempts: int  # passes begun since the last one that made progress
    updated_at: datetime  # the store's clock at the last transition
    started_at: datetime | None = None  # when admitted; None if never started
    input: object = None  # decoded
    queue: str = "default"
    token: int | None = None  # running: the pass holding it (from the claim)
    owner: str | None = None  # running: the worker identity that began it
    since: datetime | None = None  # running: when the pass began
    step: str | None = None  # running: the step in flight at the last beat
    until: datetime | None = None  # sleeping: the deadline; running: the claim's liveness
    keys: tuple[str, ...] = ()  # sleeping, blocked: the waits reached
    value: object = None  # finished: the returned value, decoded
    failure: Failure | None = None  # failed: why; sleeping after a failed attempt: the last error


@dataclass(frozen=True, slots=True)
class Admitted:
    """What ``Lifecycle.admit`` did."""

    status: WorkflowStatus  # after the call
    created: bool  # this call wrote kind and input (a new workflow, or a kind-less one adopted)
    queue: bool  # the move must make it ready: created, or a repeat that finds it still ready


@dataclass(frozen=True, slots=True)
class Began:
    """What ``Lifecycle.begin`` found and took."""

    holder: Pass | None  # None: the workflow is terminal and nothing was claimed
    status: Status  # the status before this call
    kind: str | None
    input: object  # decoded
    attempts: int  # including this pass (unchanged when holder is None)
    lost: str | None  # the previous pass's owner if it never settled (died or went silent)


@dataclass(frozen=True, slots=True)
class Settlement:
    """How a pass ended: status is FINISHED, FAILED, SLEEPING or BLOCKED."""

    status: Status
    attempts: int  # the count to record (the worker computes it, design §4)
    value: object = None  # FINISHED
    failure: Failure | None = None  # FAILED; SLEEPING when it is a backoff
    until: datetime | None = None  # SLEEPING, aware
    keys: tuple[str, ...] = ()  # SLEEPING, BLOCKED


@dataclass(frozen=True, slots=True)
class Page:
    """One page of ``Lifecycle.statuses``."""

    statuses: tuple[WorkflowStatus, ...]  # newest updated first
    cursor: str | None  # opaque; None on the last page


@runtime_checkable
class Lifecycle(Protocol):
    """A checkpointer that records each workflow's kind, input, status, attempts and outcome
    (the ``lifecycle`` capability). Each requirement is a conformance test of its name."""

    async def admit(
        self, workflow: str, kind: str, input: object, *, queue: str = "default"
    ) -> Admitted:
        """Record kind, input and queue: status ready, attempts 0, started_at now. The same kind
        and input encoding again: nothing written, created False. Another kind or input:
        StartConflict, nothing written. A row whose kind is None is adopted (kind, input, queue,
        ready, attempts 0). One winner under concurrency. An unencodable input is refused first."""
        ...

    async def begin(
        self, workflow: str, *, liveness: timedelta, budget: timedelta, owner: str
    ) -> Began | None:
        """claim, and in the same write: status running, attempts + 1, owner, since now, step
        cleared; the row is created (kind None) if absent. None while a live pass holds it, with
        nothing written. A terminal workflow: Began(holder=None), nothing written.

        ``Began.status`` is the status before this call (``ready`` for a row created here), and
        ``Began.lost`` the previous pass's owner when that status was ``running``: a pass that
        began and never settled, whose claim has since lapsed. Counting in the claim's own
        write is the point: a pass whose process is killed can never report itself, so only
        a count taken before the body runs sees it."""
        ...

    async def beat(self, holder: Pass, step: str | None) -> Pass:
        """renew, with renew's rules and refusals, also recording ``step`` as in flight."""
        ...

    async def settle(self, holder: Pass, settlement: Settlement) -> None:
        """Fenced by the token exactly as record (Fenced, nothing written, when superseded or
        released). Otherwise one write: the settlement (value through the codec, failure
        verbatim, attempts as given), updated_at now, and the claim released (token raised)."""
        ...

    async def withdraw(self, workflow: str) -> WorkflowStatus:
        """Cancel: status cancelled and the fence raised, so a pass in flight is refused at its
        next write; records kept. A terminal workflow is returned unchanged. UnknownWorkflow for
        an id with neither row nor records, nothing written."""
        ...

    async def readmit(self, workflow: str) -> WorkflowStatus:
        """Retry: failed or cancelled becomes ready with attempts 0 and failure cleared; records
        kept. NotRetryable for any other status, UnknownWorkflow for none; nothing written."""
        ...

    async def status(self, workflow: str) -> WorkflowStatus | None:
        """The row, with token and until from a live claim when running; None without a row."""
        ...

    async def statuses(
        self,
        *,
        status: Status | None = None,
        kind: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page:
        """Rows matching the filters, newest updated first, at most ``limit``, read from an
        index: the cost is in proportion to the page, never to the store.

        ``Page.cursor``, handed back, continues after the page's last row (``None`` on the
        last page); each row matching throughout is listed exactly once. A cursor this store
        did not hand out, a ``limit`` below 1 or a kind name ``check_kind`` refuses is a
        ``ValueError``."""
        ...
