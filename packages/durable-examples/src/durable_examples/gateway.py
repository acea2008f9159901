"""A payment gateway stand-in that honours idempotency keys, as real providers do.

The gateway is outside every store, so nothing can commit a capture together with the
step's record: a worker that dies after the gateway answered and before the record landed
calls it again on the next pass. What makes that harmless is the idempotency key. The
first call under a key decides the answer and the gateway keeps it; every later call
under that key gets the same answer back and moves no money. That is the whole contract
the workflow relies on, and it is the one Stripe, Adyen and the rest offer.

It also enforces fencing tokens, the other half of what a step hands an effect: a request
may carry ``fence=(resource, token)`` (the order, and the pass's ``StepContext.fencing_token``).
The gateway remembers the highest token it has seen per resource and refuses a request
carrying a lower one with :class:`StaleToken`, so a pass that stalled past its liveness (a
GC pause, a frozen VM, SIGSTOP) and woke after a newer pass took the workflow over cannot
act on what it knew before: the store refuses its record, and the gateway its request.
And it answers "look up by idempotency key" (:meth:`Gateway.look_up`), what a step's
reconcile probe asks after a crash between a charge and its record.

It keeps its books in a small SQLite file of its own (not the workflow store's), so that
it outlives the worker processes the demo kills and so that the demo can audit it
afterwards: ``operation`` holds one row per idempotency key (what was decided) and
``call`` one row per request (how often it was asked).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

__all__ = [
    "Fence",
    "Gateway",
    "GatewayError",
    "IdempotencyMismatch",
    "Operation",
    "Refusal",
    "StaleToken",
    "card_limit",
]

Fence = tuple[str, int]
"""What a fenced request carries: the resource it acts on, and the pass's fencing token."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS operation (
    idempotency_key TEXT PRIMARY KEY,
    kind            TEXT NOT NULL,   -- capture, refund or payout
    amount          INTEGER NOT NULL,
    status          TEXT NOT NULL,   -- captured, declined, refunded, nothing-to-refund, paid
    reference       TEXT NOT NULL,   -- what a capture was charged as; what a refund undoes
    at              TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS call (
    seq             INTEGER PRIMARY KEY,
    idempotency_key TEXT NOT NULL,
    kind            TEXT NOT NULL,
    pid             INTEGER NOT NULL,
    at              TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS fence (
    resource        TEXT PRIMARY KEY,
    token           INTEGER NOT NULL  -- the highest fencing token seen for the resource
);
CREATE TABLE IF NOT EXISTS refusal (
    seq             INTEGER PRIMARY KEY,
    resource        TEXT NOT NULL,
    token           INTEGER NOT NULL,  -- what the request carried
    highest         INTEGER NOT NULL,  -- what the gateway had already seen
    idempotency_key TEXT NOT NULL,
    pid             INTEGER NOT NULL,
    at              TEXT NOT NULL
);
"""


class GatewayError(Exception):
    """The gateway refused a request outright (not a decline: a malformed request)."""


class IdempotencyMismatch(GatewayError):
    """An idempotency key was reused for a different request, which real gateways refuse:
    it means two different effects were given one identity."""


class StaleToken(GatewayError):
    """The request carried a fencing token below the highest the gateway has seen for its
    resource: it comes from a pass that has lost the workflow to a newer one."""

    def __init__(self, resource: str, token: int, highest: int) -> None:
        self.resource, self.token, self.highest = resource, token, highest
        super().__init__(
            f"fencing token {token} for {resource!r} is stale: the gateway has seen {highest}"
        )


@dataclass(frozen=True, slots=True)
class Refusal:
    """A request the gateway refused for a stale fencing token."""

    resource: str
    token: int
    highest: int
    key: str
    pid: int


@dataclass(frozen=True, slots=True)
class Operation:
    """One idempotency key's decided outcome, and how many requests asked for it."""

    key: str
    kind: str
    amount: int
    status: str
    reference: str
    calls: int


@dataclass(frozen=True, slots=True)
class _Answer:
    """What the gateway decided for one key."""

    amount: int
    status: str
    reference: str


def card_limit(card: str) -> int | None:
    """The single-charge limit a test card carries in its name (``tok_limit_500``), if any.

    The demo's way to decline one line of an order and not the others, deterministically.
    """
    prefix = "tok_limit_"
    if card.startswith(prefix) and card[len(prefix) :].isdigit():
        return int(card[len(prefix) :])
    return None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


class Gateway:
    """The stand-in, over the SQLite file at ``path`` (created with its tables if missing).

    Every method is one ``BEGIN IMMEDIATE`` transaction on a connection of its own, run on
    a thread, so several worker processes can call it at once and each key is decided
    exactly once.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        with self._connection() as raw:
            raw.executescript(_SCHEMA)

    def __repr__(self) -> str:
        return f"Gateway({str(self.path)!r})"

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        raw = sqlite3.connect(self.path, timeout=10, isolation_level=None)
        try:
            raw.execute("PRAGMA journal_mode = WAL")
            yield raw
        finally:
            raw.close()

    def _decide(
        self,
        key: str,
        kind: str,
        amount: int,
        decide: Callable[[sqlite3.Connection], _Answer],
        fence: Fence | None = None,
    ) -> dict[str, object]:
        """Check the fence, log the request, then answer what ``key`` already holds, or
        ``decide`` it now.

        One ``BEGIN IMMEDIATE`` transaction, so two processes asking under one key at once
        take turns, and the second finds the first one's answer; and two passes fencing one
        resource take turns, so the lower token cannot slip in after the higher one.
        """
        refused: StaleToken | None = None
        with self._connection() as raw:
            raw.execute("BEGIN IMMEDIATE")
            try:
                if fence is not None:
                    refused = self._fence(raw, key, fence)
                if refused is not None:
                    raw.execute("COMMIT")  # the refusal is kept, for the books
                    raise refused
                raw.execute(
                    "INSERT INTO call (idempotency_key, kind, pid, at) VALUES (?, ?, ?, ?)",
                    (key, kind, os.getpid(), _now()),
                )
                row = raw.execute(
                    "SELECT kind, amount, status, reference FROM operation "
                    "WHERE idempotency_key = ?",
                    (key,),
                ).fetchone()
                if row is not None:
                    # A refund's amount is the gateway's to work out, so only its kind counts.
                    same = row[0] == kind and (kind == "refund" or row[1] == amount)
                    if not same:
                        raise IdempotencyMismatch(
                            f"idempotency key {key!r} was used for a {row[0]} of {row[1]}, "
                            f"and now for a {kind} of {amount}"
                        )
                    answer = _Answer(int(row[1]), str(row[2]), str(row[3]))
                else:
                    answer = decide(raw)
                    raw.execute(
                        "INSERT INTO operation VALUES (?, ?, ?, ?, ?, ?)",
                        (key, kind, answer.amount, answer.status, answer.reference, _now()),
                    )
                raw.execute("COMMIT")
            except BaseException:
                if raw.in_transaction:
                    raw.execute("ROLLBACK")
                raise
        return {"status": answer.status, "amount": answer.amount, "reference": answer.reference}

    def _fence(self, raw: sqlite3.Connection, key: str, fence: Fence) -> StaleToken | None:
        """Raise the resource's highest token to ``fence``'s, or log and return the refusal
        when ``fence`` carries a lower one (an equal token is the same pass asking again)."""
        resource, token = fence
        row = raw.execute("SELECT token FROM fence WHERE resource = ?", (resource,)).fetchone()
        if row is not None and token < int(row[0]):
            raw.execute(
                "INSERT INTO refusal (resource, token, highest, idempotency_key, pid, at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (resource, token, int(row[0]), key, os.getpid(), _now()),
            )
            return StaleToken(resource, token, int(row[0]))
        raw.execute(
            "INSERT INTO fence VALUES (?, ?) "
            "ON CONFLICT (resource) DO UPDATE SET token = max(token, excluded.token)",
            (resource, token),
        )
        return None

    def _capture(
        self, key: str, amount: int, card: str, fence: Fence | None = None
    ) -> dict[str, object]:
        def decide(raw: sqlite3.Connection) -> _Answer:
            limit = card_limit(card)
            if limit is not None and amount > limit:
                return _Answer(amount, "declined", f"over the card's limit of {limit}")
            return _Answer(amount, "captured", f"ch_{key}")

        return self._decide(key, "capture", amount, decide, fence)

    def _refund(self, key: str, capture_key: str) -> dict[str, object]:
        def decide(raw: sqlite3.Connection) -> _Answer:
            row = raw.execute(
                "SELECT amount, status FROM operation WHERE idempotency_key = ? "
                "AND kind = 'capture'",
                (capture_key,),
            ).fetchone()
            if row is None or row[1] != "captured":
                return _Answer(0, "nothing-to-refund", capture_key)
            return _Answer(int(row[0]), "refunded", capture_key)

        return self._decide(key, "refund", 0, decide)

    def _payout(self, key: str, amount: int) -> dict[str, object]:
        return self._decide(key, "payout", amount, lambda raw: _Answer(amount, "paid", f"po_{key}"))

    async def capture(
        self, key: str, amount: int, card: str, *, fence: Fence | None = None
    ) -> dict[str, object]:
        """Capture ``amount`` on ``card`` once per ``key``: ``captured`` or ``declined``.

        With ``fence=(resource, token)``: :class:`StaleToken` (and nothing captured) when
        the gateway has seen a higher token for ``resource``; else the token is remembered.
        The request is on its way (in a thread) as soon as this is called, as a real one
        would be on the wire: cancelling the caller does not recall it."""
        return await asyncio.to_thread(self._capture, key, amount, card, fence)

    def _look_up(self, key: str) -> dict[str, object] | None:
        with self._connection() as raw:
            row = raw.execute(
                "SELECT amount, status, reference FROM operation WHERE idempotency_key = ?",
                (key,),
            ).fetchone()
        if row is None:
            return None
        return {"status": str(row[1]), "amount": int(row[0]), "reference": str(row[2])}

    async def look_up(self, key: str) -> dict[str, object] | None:
        """What the gateway decided under ``key`` (the answer a request under it got), or
        ``None`` when no request under it was ever decided: a reconcile probe's question.
        A look-up is not a request: it is not counted in :meth:`calls`."""
        return await asyncio.to_thread(self._look_up, key)

    async def refund(self, key: str, capture_key: str) -> dict[str, object]:
        """Refund the capture made under ``capture_key``, once per ``key`` (a capture that
        was declined or never made has ``nothing-to-refund``)."""
        return await asyncio.to_thread(self._refund, key, capture_key)

    async def payout(self, key: str, amount: int) -> dict[str, object]:
        """Pay ``amount`` out to the merchant, once per ``key``."""
        return await asyncio.to_thread(self._payout, key, amount)

    def operations(self) -> list[Operation]:
        """Every decided key with its request count, in the order decided (for the ledger)."""
        with self._connection() as raw:
            rows = raw.execute(
                "SELECT o.idempotency_key, o.kind, o.amount, o.status, o.reference, "
                "(SELECT count(*) FROM call c WHERE c.idempotency_key = o.idempotency_key) "
                "FROM operation o ORDER BY o.rowid"
            ).fetchall()
        return [Operation(r[0], r[1], int(r[2]), r[3], r[4], int(r[5])) for r in rows]

    def calls(self) -> int:
        """How many requests the gateway has answered, all keys together."""
        with self._connection() as raw:
            return int(raw.execute("SELECT count(*) FROM call").fetchone()[0])

    def refusals(self) -> list[Refusal]:
        """Every request refused for a stale fencing token, oldest first."""
        with self._connection() as raw:
            rows = raw.execute(
                "SELECT resource, token, highest, idempotency_key, pid FROM refusal ORDER BY seq"
            ).fetchall()
        return [Refusal(r[0], int(r[1]), int(r[2]), r[3], int(r[4])) for r in rows]
