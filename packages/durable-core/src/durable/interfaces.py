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
runs next (:class:`Observable`), handing out only the workflows of named queues
(:class:`Routed`), limiting how many passes of a queue run at once, how fast its
workflows are handed out and in which order (:class:`Limited`), keeping with each record the
kind of operation that wrote it and refusing its key to any other (:class:`Operational`),
and keeping each workflow's kind, input, status, attempts and outcome (:class:`Lifecycle`).
Lifecycle is a protocol of its own rather than more ``Checkpointer`` methods so that a store
written before it stays a ``Checkpointer``, reported as not offering it. Its writes ride on
the writes a pass already makes (``begin`` is the claim, ``beat`` the renewal, ``settle``
the release), so a pass costs no more writes than before and ``Run.step`` none at all.

A step that opts into a retry policy or a reconcile probe keeps its attempts as ordinary
records (``durable.run.STEP_PREFIX``: each attempt's start, the intent a probe answers to,
and its error), as a deadline is one (``durable.run.DEADLINE_KEY``). A store owes them
nothing beyond what it owes every record, and that is exactly what they rely on: ``record``
durable before it returns (an intent lands before its effect runs), never overwriting and
fenced by the claim's own token (the ``fencing_token`` a step hands outside is the number
this store refuses below), and ``history`` in load order with the store's clock (an
attempt's error before the next attempt's start, each with its time). Said as the three
requirements the suite proves of every store (area ``steps``):

- ``steps.intent-lands-before-its-result``: an attempt's intent is in ``history`` before the
  step's value, and a pass that dies after the effect and before its record leaves the
  intent and no value, so the next pass asks the probe instead of repeating the effect;
- ``steps.attempts-in-history``: each attempt's start and error are in ``history``, in the
  order written (an error before the next attempt's start), the store's times never going
  back;
- ``steps.handed-out-token-is-the-fence``: the token ``claim`` hands out (a step's
  ``fencing_token``) is the very number the store fences with and ``claimed`` reports: a
  write carrying it is accepted, one carrying any other number refused, and a later pass
  is handed a greater one.
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
    "Dated",
    "Delivery",
    "Durable",
    "Effect",
    "Entry",
    "Enumerable",
    "Failure",
    "Fenced",
    "Inspectable",
    "Interruption",
    "KeyReused",
    "Lifecycle",
    "LifecycleNotOffered",
    "Limited",
    "LimitsNotOffered",
    "NotRetryable",
    "Observable",
    "Operational",
    "Page",
    "Pass",
    "Prunable",
    "QueueLimit",
    "QueuesNotOffered",
    "Recorded",
    "Routed",
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

    ``operation`` is the kind of operation that wrote it (``"step"``, ``"transact"``,
    ``"sleep"``, ...) on a store that keeps one (:class:`Operational`); ``None`` for a
    record written without one: by ``supply``, ``append`` or plain ``record``, or before
    the store kept operations at all.
    """

    key: str
    value: object
    at: datetime
    operation: str | None = None


@dataclass(frozen=True, slots=True)
class Delivery:
    """One handing-out of ``workflow`` by a scheduler.

    ``receipt`` lets the scheduler tell this delivery from a wakeup that arrived after it
    was taken: answering for a stale receipt never undoes a newer ``make_ready``.
    """

    workflow: str
    receipt: str
    slot: bool = False
    """This hand-out took a slot of its queue's concurrency limit (:class:`Limited`): the
    taker keeps it live with ``Limited.hold`` while its pass runs, and answering for the
    delivery (``wake_at`` or ``done``) gives it back."""


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

    An encoding is text or bytes (``CheckpointCodec[Encoded]`` allows either). A store
    holds every encoding it accepts exactly, NUL and bytes that are not UTF-8 included, and
    compares encodings byte for byte; a store that holds only text refuses a bytes encoding
    at the boundary (a ``TypeError`` naming the workflow and key, nothing written), never
    converting it (``str(b)``, or a decode that replaces what is not UTF-8) into text that
    decodes to something else or compares equal to another encoding. Text is what every
    store holds: a codec meant for any store encodes to ``str``.

    Workflow ids and record keys are opaque non-empty strings (colons, braces, quotes,
    unicode, any length), except that neither may hold a control character (Unicode
    category Cc: newline, carriage return, tab, NUL, DEL, ...): every method refuses one
    at the boundary with a ``ValueError`` naming the id or key and the character's
    position, before anything is read or written (``durable.boundary.check_workflow`` and
    ``check_key``). Ids and keys are printed by ``show``, ``list`` and log lines, where a
    newline would forge a line.

    Every method is one step as the others see it, however many tasks and connections call
    at once: the results are those of some order of the calls, one at a time, in which a
    call that returned before another began comes first, each answering as the sentences
    below say it must (linearizability). A guarantee each method keeps on its own can
    still be lost between them (a discard that forgets and then fences, a load that pages
    through records while they change, an order drawn before a commit and not at it);
    this is the sentence that rules that out.
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

        Raises ``Fenced`` when a newer token has been issued or the budget is spent. The
        check and the extension are one step, so a renew racing a newer claim either lands
        before that claim returns (which then waits out the renewed liveness) or is refused;
        it never extends a claim that is no longer the holder's.
        """
        ...

    async def release(self, holder: Pass) -> None:
        """Free the workflow now. A stale holder's release frees nothing, and a released
        pass's own later writes are refused.

        Checking the token and freeing are one step, so a release racing a newer claim
        either frees the holder's own claim before that claim is taken, or frees nothing:
        it never frees the newer pass's claim.
        """
        ...

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        """Write ``value`` under ``key`` unless the key already holds one.

        Refuses a token below the highest issued for the workflow with ``Fenced``, writing
        nothing. A pass whose budget ran out but that no newer pass has replaced yet is not
        refused here: the budget is enforced by ``renew`` and by the claim it frees. Never
        overwrites. Durable before it returns.

        Checking the token and writing are one step (a script, a statement, a transaction
        holding the claim's row), never two round trips: a record racing a newer claim
        either lands before that claim returns, so the newer pass's ``load`` shows it, or is
        refused. A token below one already issued to a returned claim never lands.
        """
        ...

    async def transact(self, holder: Pass, key: str, effect: Effect) -> Recorded:
        """Perform ``effect`` in the store and record its result under ``key``, in one commit.

        At most once across all passes: if ``key`` is already recorded the effect is not
        performed and the stored value is returned with ``first=False``. Neither half
        without the other: an effect that raises leaves no record and none of its writes;
        a fenced holder's effect is not applied.

        Checking the token, performing the effect and writing the record are one step, so a
        transact racing a newer claim either commits both halves before that claim returns
        or is refused with neither applied.
        """
        ...

    async def supply(self, workflow: str, key: str, value: object) -> object:
        """Write from outside a pass: first-writer-wins, no claim needed, never blocked or
        refused because a pass is running. Returns the value the key now holds.

        It shares one first writer with ``record``: a supply racing a record of the same
        key leaves exactly one value stored, supply returns it, and record returns it with
        ``first`` true only when it is the record's own. Looking the key up and then writing
        it, in two steps, is the mistake to avoid: a record landing in between is told it
        won and is then overwritten, or two values each think they are the one stored.
        """
        ...

    async def append(self, workflow: str, value: object, *, message_id: str | None = None) -> str:
        """Add ``value`` to the workflow's inbox under a key the store picks, and return it.

        Concurrent appends get distinct keys and none is lost; the keys (each starting with
        ``INBOX_PREFIX``) sort into append order within the workflow; the entry is an
        ordinary record that ``load`` returns at its append position. The key's order and
        ``load``'s order are one order. Nothing is ever consumed. This holds however two
        appends interleave, one held between deciding its key and writing it included: a
        store that reads a position in one step and writes under it in the next gives two
        appends one key, and the second vanishes into first-writer-wins.

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

        A claim racing a discard never yields a pass that outlives the discard's fence:
        once discard has returned, a pass claimed before it is refused at its next write,
        and one claimed after it outranks the fence and holds the workflow. Reading the
        token and then writing the fence one above it, in two steps, is the mistake to
        avoid: a claim landing in between is given the very token the fence is raised to.
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
        with a ``ValueError`` naming the argument and the value (a value of another type with
        a ``TypeError``; ``durable.boundary.check_duration`` does both) and nothing is taken,
        as the checkpointer refuses a non-positive liveness or budget. A worker looping on a zero
        wait would spin on the store.
        """
        ...

    async def reclaim(self, idle: timedelta) -> Delivery | None:
        """Take over one delivery whose taker has not answered for ``idle``, if any.

        Never one taken (or answered for) less than ``idle`` ago: its taker is alive as far
        as anyone can tell, and taking it over would run one pass twice at once.

        ``idle`` must be a positive ``timedelta``: zero or a negative duration is refused
        with a ``ValueError`` naming the argument and the value, as ``within`` is, and
        nothing taken over: a zero ``idle`` would take every delivery in flight, however
        live its taker.
        """
        ...

    async def wake_at(self, delivery: Delivery, when: datetime) -> None:
        """Schedule the workflow for ``when`` and answer for ``delivery``, in one call.

        If a ``make_ready`` has landed since ``delivery`` was taken, that wakeup wins. If
        the workflow was cancelled since, nothing is reinstated.

        Nor does it undo a newer hand-out it races: when the workflow is made ready and
        handed out anew while an answer for an older delivery is in flight, whichever lands
        first, the newer delivery's own answer decides when the workflow runs next. Checking
        the receipt and then writing the deadline, in two steps, lets the older answer
        overwrite the newer delivery, whose own answer then matches nothing.
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
        """Forget the workflow's pending and scheduled runs.

        A hand-out racing it either took the delivery before it (and answering for that
        delivery reinstates nothing) or finds nothing to take: once cancel has returned,
        the workflow is not delivered again until it is made ready anew. A ``next_ready``
        that picks a workflow and then hides it, in two steps, must not put back an entry
        cancelled in between.
        """
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
        """True when ``arrive``, ``send`` and ``discard`` are each one commit (and, where the
        store offers lifecycle, ``start``, ``cancel`` and ``retry`` too).

        One commit is what a reader and a crash can tell: a reader on any handle, looking
        while the move is under way, sees both halves or neither (never a value recorded
        for a workflow not yet queued, nor a workflow queued for a value not yet there, nor
        records discarded with the runs still queued), and a move that fails part way
        leaves neither half. A store declaring the ``atomic-arrive`` capability says
        ``True`` here, and the conformance suite holds each move half way, and breaks it
        there, to prove it (``durable.arrive-is-one-commit`` and its siblings).
        """
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


@runtime_checkable
class Operational(Protocol):
    """A checkpointer that keeps, with each record, the kind of operation that wrote it (the
    ``operations`` capability), and refuses a key's reuse by another kind.

    Optional, so that a store written before it stays a ``Checkpointer``; ``Run`` checks
    operations only on a store that offers it. Where the operation lives is the store's
    affair (a column, a field beside the value); what it owes is said as four requirements
    the suite proves (area ``operations``), and one more of the racing takeovers:

    - ``operations.kept-with-the-record``: ``history`` reports, on each record written by
      ``record_as``, the operation it was written with, and on each ``transact`` record
      ``"transact"``; records written by ``record``, ``supply`` or ``append`` report ``None``.
      Losing writes change nothing: the first writer's operation is the record's.
    - ``operations.reuse-refused``: ``record_as`` under a key already recorded by another
      operation, or ``transact`` under a key recorded by anything but a ``transact``, raises
      :class:`KeyReused` naming the workflow, the key and both operations, writes nothing and
      (``transact``) performs no effect. Checking the key's operation and writing are one
      step, as first-writer-wins is. A key whose record has no operation (``None``: supplied
      from outside, or written before the store kept operations) is refused to no one, so a
      store upgraded in place reads every old record as it did.
    - ``operations.fenced-like-record``: ``record_as`` is fenced exactly as ``record`` is
      (``Run.step`` and every other wait of a pass write through it on a store offering
      this): a pass superseded by a newer claim, released, or whose workflow was discarded,
      is refused with :class:`Fenced` and writes nothing.
    - ``operations.bad-names-refused``: an operation is a lowercase name
      (``durable.boundary.OPERATION_NAME``: a letter, then at most 31 of a-z, 0-9, ``_`` and
      ``-``); ``record_as`` refuses anything else with a ``ValueError`` naming workflow and
      key, nothing written.
    - ``takeover.stale-record-as-never-lands-after-a-newer-claim``: as for ``record``,
      checking the token and writing are one step, so a ``record_as`` racing a newer claim
      either lands before that claim returns or is refused; never after it.

    ``Run`` uses ``"step"``, ``"transact"``, ``"sleep"``, ``"awaiting"``, ``"receive"``,
    ``"child"`` and ``"node"``.
    """

    async def record_as(self, holder: Pass, key: str, value: object, operation: str) -> Recorded:
        """``record``, keeping ``operation`` with the value, and fenced as ``record`` is (a
        stale token is refused with :class:`Fenced`, nothing written); :class:`KeyReused`
        when the key holds a record of another operation."""
        ...


@runtime_checkable
class Routed(Protocol):
    """A scheduler that hands out only the workflows of the queues asked for (the ``queues``
    capability).

    A workflow's queue is the one ``Lifecycle.admit`` recorded for it; one with no recorded
    queue (made ready by hand, or written before lifecycle) is in ``"default"``. Optional, so
    that a scheduler written before it stays a ``Scheduler``; ``work(..., queues=...)``
    refuses to start on a store whose scheduler is not ``Routed`` rather than take another
    service's work.
    """

    async def next_ready_in(self, queues: frozenset[str], within: timedelta) -> Delivery | None:
        """As ``next_ready``, taking only a workflow whose queue is in ``queues``.

        Never hands out a workflow of a queue not asked for, however long it has been ready
        (``queues.routes-by-queue``), and leaves it ready for a taker that asks for its queue,
        which is handed it at once (``queues.leaves-others-ready``). Reading an entry's queue
        and then taking it, in two steps, is no excuse to take and put back: a put-back
        delivery is one handed out. ``queues`` is a non-empty set of non-empty ``str``; anything
        else is refused with a ``ValueError`` (``TypeError`` for another type) and nothing taken.
        """
        ...


@dataclass(frozen=True, slots=True)
class QueueLimit:
    """What a queue may do at once, as :class:`Limited` keeps it in the store.

    ``concurrent``: at most this many deliveries of the queue hold a slot at a time, across
    every worker and handle (a rate-limited API that takes five charges at once: 5). A slot
    is held from the hand-out to the answer for it, while the pass runs.
    ``rate``: at most this many hand-outs of the queue in any one second of the store's
    clock (a sliding window, not a bucket refilled on the second).
    ``None`` leaves that side unlimited; both ``None`` is no limit at all. Either, when set,
    is an ``int`` of at least 1: a limit of 0 would strand the queue, and pausing a queue
    is not what a limit is for.
    """

    concurrent: int | None = None
    rate: int | None = None

    def __post_init__(self) -> None:
        for name in ("concurrent", "rate"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"QueueLimit.{name} must be an int or None, got {value!r}")
            if value < 1:
                raise ValueError(
                    f"QueueLimit.{name} must be at least 1 (or None for no limit), got {value}"
                )

    @property
    def unlimited(self) -> bool:
        """Neither side is limited: the queue is as if no limit were set."""
        return self.concurrent is None and self.rate is None


@runtime_checkable
class Limited(Protocol):
    """A scheduler that limits each queue across every taker (the ``limits`` capability).

    The limit is kept and counted in the store, never in a handle or a process: twenty
    workers on a queue limited to five run five passes between them, however many handles
    they open. A limited scheduler is also :class:`Routed` (a queue is what it limits).

    Every take of the scheduler honours the limits (``next_ready``, ``next_ready_in`` and
    ``reclaim`` alike, so a worker of an older release cannot slip past them):

    - ``concurrent``: a workflow of a queue at its limit is not handed out; it stays ready
      and goes to the first take after a slot comes back. The take that hands one out
      takes the slot in the same atomic step as the hand-out (counting the live slots and
      then taking, in two steps, lets two takers both see N-1 free). The slot is the
      delivery's (``Delivery.slot`` is ``True``), one per workflow: handing the workflow out
      again replaces its slot rather than adding one. It is live until the delivery's
      ``lease`` from the hand-out, pushed on by ``hold``; it comes back at once when the
      delivery is answered (``wake_at`` or ``done``) or the workflow cancelled, and by
      itself when its liveness runs out (a killed worker's slot), with no sweeper.
    - ``rate``: a take that would make more than ``rate`` hand-outs of the queue within
      the last second (store clock) hands out nothing of that queue; every hand-out of a
      rate-limited queue is counted, whether or not a pass follows.
    - priority: of the workflows of one queue that are ready, one with a higher
      ``prioritize`` number is handed out before one with a lower (default 0), whatever
      their order of becoming ready; equal priorities go in ready order.

    A step never touches any of this: a workflow of an unlimited queue costs not one write
    more than on a store without limits, and a step of a limited one none either.

    Requirements (each a conformance test of its name):

    - ``limits.never-more-than-the-limit``: takers racing on several handles at a queue
      limited to N are handed at most N deliveries holding slots, and N of them;
    - ``limits.slot-returns-on-answer``: answering for a slot's delivery (``done`` or
      ``wake_at``) lets the next take of the queue hand one out at once;
    - ``limits.slot-returns-after-liveness``: a slot whose taker never answers nor holds
      (a killed worker) comes back once its liveness has run out, and not before;
    - ``limits.hold-keeps-the-slot``: a slot held within its liveness stays taken for as
      long as it is held, however long past the lease the pass runs;
    - ``limits.rate-bounds-hand-outs``: no one-second window of the store's clock holds
      more than ``rate`` hand-outs of a rate-limited queue;
    - ``limits.priority-first``: a higher priority is handed out first within a queue;
    - ``limits.kept-in-the-store``: a limit set through one handle is the one every other
      handle reads and enforces, and survives reopening the store;
    - ``limits.every-take-honours-the-limits``: ``next_ready`` and ``reclaim`` take slots
      and stop at the limit as ``next_ready_in`` does;
    - ``limits.slot-returns-on-cancel``: cancelling a slot's workflow gives the slot back
      at once;
    - ``limits.lowering-takes-nothing-back``: a limit lowered below the slots held leaves
      them held, and no slot is handed out until enough come back;
    - ``limits.hold-refused-once-lapsed-or-handed-anew``: ``hold`` is ``False``, writing
      nothing, for a slot that has lapsed or whose workflow was handed out anew;
    - ``limits.priority-kept-across-passes``: a priority orders a workflow's every
      hand-out, after a wake-up and on a later pass as on the first.
    """

    async def set_limit(self, queue: str, limit: QueueLimit | None) -> None:
        """Keep ``limit`` for ``queue`` (``None``, or an unlimited ``QueueLimit``, removes it).

        Takes effect at the next take on every handle. Lowering a limit below the slots
        held takes nothing back: no new slot is handed out until enough come back. ``queue``
        is checked as ``check_queues`` checks a queue name (``ValueError``, nothing kept)."""
        ...

    async def limits(self) -> dict[str, QueueLimit]:
        """Every queue's limit kept in the store, by queue name."""
        ...

    async def held(self, queue: str) -> int:
        """How many slots of ``queue`` are live now (by the store's clock): for operators,
        the bench and the tests; 0 for a queue without a concurrency limit."""
        ...

    async def hold(self, delivery: Delivery, liveness: timedelta) -> bool:
        """Keep ``delivery``'s slot live until ``liveness`` from now (store clock).

        A worker calls it at each heartbeat of the delivery's pass, so a slot lives as long
        as the pass does and lapses within ``liveness`` of the worker's death. ``False``,
        with nothing written, when the delivery holds no slot any more (answered, cancelled,
        handed out anew, or lapsed: a stalled taker does not get back a slot another may
        hold): the pass is then running outside the limit and should stop. ``liveness`` is a
        positive ``timedelta`` (``check_duration``)."""
        ...

    async def prioritize(self, workflow: str, priority: int) -> None:
        """Keep ``priority`` for ``workflow`` (higher is handed out first within its queue).

        Kept until the workflow is discarded, across every pass and wake-up, so it need be
        said once, before the workflow is first made ready (``Durable.start`` does it for a
        kind with a ``priority``). An ``int``; ``TypeError`` otherwise, nothing kept."""
        ...


class LimitsNotOffered(StoreError):
    """Queue limits were asked of a store whose scheduler is not :class:`Limited`."""


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
        """Workflow ids holding at least one record, sorted; with ``limit``, the first
        ``limit`` of that order (so an operator can page by the last id seen)."""
        ...


@runtime_checkable
class Inspectable(Protocol):
    """A checkpointer that can say whether a live pass holds a workflow (for operators).

    No capability name: a store whose checkpointer implements it is held to it.
    """

    async def claimed(self, workflow: str) -> Claimed | None:
        """The live claim on ``workflow``, or ``None`` when no pass holds it.

        Live by the store's clock, as ``claim`` decides it: a claim released, or past its
        liveness or budget, is ``None`` here, since an operator leaves a workflow shown as
        held alone."""
        ...


@runtime_checkable
class Observable(Protocol):
    """A scheduler that can say when a workflow is next runnable (for operators).

    No capability name: a store whose scheduler implements it is held to it.
    """

    async def scheduled(self, workflow: str) -> datetime | None:
        """When ``workflow`` is next runnable (possibly already), or ``None``.

        ``None`` for a workflow not queued (never made ready, answered with ``done``, or
        cancelled); a moment not after now for one made ready; the deadline ``wake_at``
        chose for one asleep. While a delivery is out, a store may show when its lease
        ends."""
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


class QueuesNotOffered(StoreError):
    """A worker was asked to serve named queues on a store whose scheduler is not
    :class:`Routed`."""


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


class KeyReused(ValueError):
    """A key recorded by one kind of operation, used by code as another. Nothing was written.

    A key is an operation's identity across every deployment: a replay hands the new
    operation the old one's value, so a step key that is now an ``awaiting`` would read a
    charge's receipt as an approval, and a ``transact`` that is now a ``step`` would have its
    exactly-once effect judged done by a record it never wrote. Raised by a store keeping
    operations (:class:`Operational`) at the write, and by ``Run`` at the replay.
    """

    def __init__(self, workflow: str, key: str, recorded: str, asked: str) -> None:
        self.workflow, self.key, self.recorded, self.asked = workflow, key, recorded, asked
        super().__init__(
            f"workflow {workflow!r}: key {key!r} was recorded by {_a(recorded)}, and this code "
            f"uses it as {_a(asked)} (nothing was written); a key names one operation in every "
            f"deployment: give the {asked} a key of its own, or keep the {recorded}"
        )


def _a(operation: str) -> str:
    return f"{'an' if operation[:1] in 'aeiou' else 'a'} {operation}"


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
        ready, attempts 0). One winner under concurrency. An unencodable input is refused first.

        "Nothing written" holds whatever the status, an ended one included: a finished, failed
        or cancelled workflow is never started afresh by an admit (only ``readmit`` does
        that). Two compositions rest on it. A schedule's tick is started by every worker that
        sees it due, and one that looks after the tick's workflow ended must not run it again
        (``schedules.one-start-per-tick``); a parent replayed after its child ended starts the
        child again, and must find it ended (``children.started-once-on-replay``)."""
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
        """renew, with renew's rules and refusals, also recording ``step`` as in flight.

        The check and the write are one step, as renew's are: a beat racing a newer
        ``begin`` (or ``claim``) either lands before it returns or is refused, so it never
        extends the newer pass's claim nor names a step on its row."""
        ...

    async def settle(self, holder: Pass, settlement: Settlement) -> None:
        """Fenced by the token exactly as record (Fenced, nothing written, when superseded or
        released). Otherwise one write: the settlement (value through the codec, failure
        verbatim, attempts as given), updated_at now, and the claim released (token raised).

        The check and that write are one step: a settle racing a newer ``begin`` (or
        ``claim``) either lands before it returns, so the begin finds the workflow settled,
        or is refused, leaving the newer pass running."""
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
        index: the cost is in proportion to the page, never to the store. (A cost is asked
        of a store but not proved by the conformance suite, which times nothing; what the
        index answers is proved.)

        ``Page.cursor``, handed back, continues after the page's last row (``None`` on the
        last page); each row matching throughout is listed exactly once. A cursor this store
        did not hand out, a ``limit`` below 1 or a kind name ``check_kind`` refuses is a
        ``ValueError``."""
        ...


@runtime_checkable
class Dated(Protocol):
    """A checkpointer that can write with a time it is given instead of its clock's reading.

    No capability name: a store whose checkpointer implements it is held to it (requirement
    ``dated.keeps-the-given-time``), and one that does not is reported not offered.

    Every other write stamps the store's own clock, and must (see ``history``). This is
    the one exception, and it exists for one reader: ``durable import``. A workflow moved
    from one store to another keeps the times it had there: when each record landed, when
    it was started and when it last moved. Stamped with the import's clock instead, a
    month-old finished workflow would look a minute old to ``durable prune
    --finished-before 30d`` and to anyone reading ``show``, and the timeline of a
    workflow's steps would collapse to the instant of the import. The times given are the
    source store's clock, read at its winning writes, so they keep the order they had
    there.

    Requirement ``dated.keeps-the-given-time``: ``history`` shows a record written by
    ``supply_at`` or ``append_at`` at the ``at`` given (to the store's resolution, at
    least a millisecond), and ``status`` shows the ``started_at`` and ``updated_at`` given
    to ``backdate``. First-writer-wins holds as for ``supply``: a write to a key that
    already holds a value changes neither the value nor its time.
    """

    async def supply_at(self, workflow: str, key: str, value: object, at: datetime) -> object:
        """``supply``, stamping the record it writes with ``at`` (timezone-aware) instead of
        the store's clock. A losing write writes nothing, its time included. Returns the
        value the key now holds."""
        ...

    async def append_at(
        self, workflow: str, value: object, at: datetime, *, message_id: str | None = None
    ) -> str:
        """``append``, stamping the entry it writes with ``at`` (timezone-aware). An append
        whose ``message_id`` the workflow already holds writes nothing, as ``append``."""
        ...

    async def backdate(
        self, workflow: str, *, started_at: datetime | None, updated_at: datetime
    ) -> None:
        """Set the lifecycle row's ``updated_at`` (and ``started_at``, unless ``None``) to
        the times given, changing nothing else: not the status, the attempts, the claim or
        the fence. ``UnknownWorkflow`` for a workflow with no lifecycle row, nothing
        written."""
        ...


@runtime_checkable
class Prunable(Protocol):
    """A checkpointer that discards a workflow only if it has ended, in one step.

    No capability name: a store whose checkpointer implements it is held to it (requirement
    ``prune.never-an-unfinished-workflow``), and one that does not is reported not offered.

    ``durable prune`` forgets workflows that ended long ago. Reading a workflow's status and
    then discarding it, in two steps, leaves a window in which an operator's ``retry``
    makes it ready again, and the discard then forgets a workflow that was about to run:
    the retry is lost, and nothing says so. Only the store can close that window, by
    checking and discarding in one step; ``durable.transfer.prune`` uses this method where
    the store offers it (every store in this project does).

    Requirement ``prune.never-an-unfinished-workflow``: ``discard_ended`` racing a
    ``readmit`` of the same workflow either discards first (the readmit then finds no
    workflow: ``UnknownWorkflow``) or finds it ready and discards nothing; never both a
    readmit that returned and a discard.
    """

    async def discard_ended(
        self, workflow: str, *, statuses: frozenset[Status], before: datetime
    ) -> bool:
        """``discard`` (records, status, the fence raised) only when the workflow's status
        is one of ``statuses`` and its ``updated_at`` is before ``before``; ``True`` when
        it discarded, ``False`` (nothing written) otherwise. ``statuses`` holds terminal
        statuses only (finished, failed, cancelled), else ``ValueError``; ``before`` is a
        timezone-aware ``datetime``. Runs queued for the workflow are the scheduler's and
        are left alone: an ended workflow has none."""
        ...
