"""The checks every store makes before it writes, shared so that each refuses alike.

A store that let a bad value through would fail somewhere deep inside a driver with an
error that names neither the workflow nor the key; these name both, and run before any
round trip so that nothing is written.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from durable.interfaces import INBOX_PREFIX, SENT_PREFIX, Failure, Pass, Settlement, Status

__all__ = [
    "check_duration",
    "check_ended",
    "check_key",
    "check_kind",
    "check_message_id",
    "check_moment",
    "check_operation",
    "check_queues",
    "check_settlement",
    "check_workflow",
    "shown",
]

KIND_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,99}")
"""A kind's name (``durable.workflows.KIND_NAME`` is this one): letters, digits, ``_``,
``.`` and ``-``, at most 100, not starting with ``.`` or ``-``. No ``:`` or braces, so a
Redis key holds a kind without escaping, and no space, so ``durable list`` stays a table."""

_SETTLED = (Status.FINISHED, Status.FAILED, Status.SLEEPING, Status.BLOCKED)


def check_workflow(workflow: object) -> str:
    """A workflow id is a non-empty string with no control character in it.

    Control characters (Unicode category Cc: ``\\n``, ``\\r``, ``\\t``, NUL, DEL, ...)
    are refused because an id is read by people as much as by stores: ``show``, ``list``
    and every log line print it, and an id holding a newline forges a line of that output
    or splits a log record in two, while a NUL is cut short or refused by some backends
    (C strings, Postgres ``text``). Refusing them in one place keeps every store alike,
    rather than each failing in its own way deep in a driver.
    """
    if not isinstance(workflow, str) or not workflow:
        raise ValueError(f"a workflow id must be a non-empty string, got {workflow!r}")
    where = _control_character(workflow)
    if where is not None:
        raise ValueError(
            f"workflow id {shown(workflow)} has a control character ({where}); ids are "
            "printed by show, list and every log line, so they may not contain one"
        )
    return workflow


def check_key(workflow: str, key: object, *, inbox: bool = False) -> str:
    """A record key is a non-empty string with no control character in it; the inbox prefix
    belongs to ``append`` alone unless ``inbox`` says the caller is the store naming an
    inbox entry, and the prefix of ``append``'s message-id markers belongs to the store
    alone.

    Keys get the workflow id's rule about control characters for the same reason: ``show``
    prints every key of a workflow one to a line, and a key holding a newline would forge
    a record in that listing.
    """
    if not isinstance(key, str) or not key:
        raise ValueError(
            f"workflow {workflow!r}: a record key must be a non-empty string, got {key!r}"
        )
    # A printable str has no control character (category Cc is never printable), and
    # isprintable is one C loop where the search is a regular expression: the common key
    # is settled without it.
    if not key.isprintable() and _CONTROL.search(key) is not None:
        raise ValueError(
            f"workflow {workflow!r}: record key {shown(key)} has a control character "
            f"({_control_character(key)}); keys are printed by show, one to a line, so they "
            "may not contain one"
        )
    if not key.startswith(_RESERVED_KEYS):
        return key  # the common case, settled by one call: every store write checks its key
    if not inbox and key.startswith(INBOX_PREFIX):
        raise ValueError(
            f"workflow {workflow!r}, key {key!r}: keys starting with {INBOX_PREFIX!r} are "
            "reserved for inbox entries, which only append may write"
        )
    if key.startswith(SENT_PREFIX):
        # A record here would be hidden from load (markers are), and would answer a later
        # append with this id as though the message had been sent.
        raise ValueError(
            f"workflow {workflow!r}, key {key!r}: keys starting with {SENT_PREFIX!r} are "
            "reserved for the message ids append remembers, which only the store writes"
        )
    return key


_RESERVED_KEYS = (INBOX_PREFIX, SENT_PREFIX)


def check_message_id(workflow: str, message_id: object) -> str | None:
    """A message id is ``None`` (no deduplication) or a non-empty string without control
    characters.

    Control characters are refused on every store alike, although only Postgres (NUL in
    ``text``) would fail on one: an id is typed on command lines and read back in logs,
    where a newline or an escape sequence would make two ids look like one.
    """
    if message_id is None:
        return None
    if not isinstance(message_id, str) or not message_id:
        raise ValueError(
            f"workflow {workflow!r}: a message id must be a non-empty string or None, "
            f"got {shown(message_id)}"
        )
    where = _control_character(message_id)
    if where is not None:
        raise ValueError(
            f"workflow {workflow!r}, message id {shown(message_id)}: a message id may not "
            f"contain a control character ({where})"
        )
    return message_id


def check_duration(name: str, value: object, *, workflow: str | None = None) -> timedelta:
    """A duration is a positive ``timedelta``."""
    where = f"workflow {workflow!r}: " if workflow is not None else ""
    if not isinstance(value, timedelta):
        raise TypeError(f"{where}{name} must be a datetime.timedelta, got {value!r}")
    if value <= timedelta(0):
        raise ValueError(f"{where}{name} must be positive, got {value!r}")
    return value


def check_moment(name: str, value: object, *, workflow: str) -> datetime:
    """A time given to a store (``Dated``'s writes) is a timezone-aware ``datetime``: a
    naive one would be read in whatever zone the store's server runs in."""
    if not isinstance(value, datetime) or value.tzinfo is None:
        raise TypeError(
            f"workflow {workflow!r}: {name} must be a timezone-aware datetime, got {value!r}"
        )
    return value


def check_ended(workflow: str, statuses: object, before: object) -> frozenset[Status]:
    """What ``Prunable.discard_ended`` may be asked: terminal statuses only (a prune never
    removes a workflow that may still run), and an aware moment."""
    if not isinstance(statuses, frozenset) or not statuses:
        raise TypeError(
            f"workflow {workflow!r}: statuses must be a non-empty frozenset, got {statuses!r}"
        )
    for status in statuses:
        if not isinstance(status, Status) or not status.terminal:
            raise ValueError(
                f"workflow {workflow!r}: only a finished, failed or cancelled workflow is "
                f"discarded as ended, not {status!r}"
            )
    check_moment("before", before, workflow=workflow)
    return statuses


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
"""Unicode category Cc, which is exactly C0, DEL and C1; a class rather than a call to
``unicodedata.category`` per character, since every store operation checks its id."""


def _control_character(text: str) -> str | None:
    """Where the first control character of ``text`` is, as ``'\\n' at position 3``, or
    ``None`` when there is none."""
    found = _CONTROL.search(text)
    return None if found is None else f"{found.group()!r} at position {found.start()}"


def shown(value: object, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters, for an error message that names a value
    without copying a megabyte of it into a log."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def check_kind(name: object) -> str:
    """A kind's name matches ``KIND_NAME``; refused with the rule spelled out otherwise."""
    if not isinstance(name, str) or KIND_NAME.fullmatch(name) is None:
        raise ValueError(
            f"kind name {shown(name)} is not allowed: a kind is 1 to 100 of letters, digits, "
            "'_', '.' and '-', not starting with '.' or '-'"
        )
    return name


OPERATION_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
"""An operation's name, as ``Operational.record_as`` keeps it: a lowercase letter, then at
most 31 of lowercase letters, digits, ``_`` and ``-``. So narrow that a store can keep it
beside a value with any separator outside that alphabet, no escaping."""


def check_operation(workflow: str, key: str, operation: object) -> str:
    """An operation's name matches ``OPERATION_NAME``; refused naming workflow and key."""
    if type(operation) is str and operation in _OPERATIONS_SEEN:
        return operation  # every step's write names "step": settled without the match
    if not isinstance(operation, str) or OPERATION_NAME.fullmatch(operation) is None:
        raise ValueError(
            f"workflow {workflow!r}, key {key!r}: operation {shown(operation)} is not allowed: "
            "an operation is a lowercase letter and at most 31 of a-z, 0-9, '_' and '-'"
        )
    if type(operation) is str and len(_OPERATIONS_SEEN) < _OPERATIONS_KEPT:
        _OPERATIONS_SEEN.add(operation)
    return operation


_OPERATIONS_SEEN: set[str] = set()
_OPERATIONS_KEPT = 64
"""Names ``check_operation`` has passed (exact ``str`` only, never a subclass whose
equality could lie), at most this many: durable's own few and an application's, bounded
so that a caller inventing names cannot grow it."""


def check_queues(queues: object) -> frozenset[str]:
    """The queues a taker serves: a non-empty collection of queue names (named as kinds are);
    ``TypeError`` for a ``str`` or another type, ``ValueError`` for an empty one or a bad name."""
    if isinstance(queues, str | bytes) or not isinstance(queues, set | frozenset | list | tuple):
        raise TypeError(f"queues is a set of queue names, got {shown(queues)}")
    if not queues:
        raise ValueError("queues is empty: a taker serves at least one queue")
    for queue in queues:
        if not isinstance(queue, str) or KIND_NAME.fullmatch(queue) is None:
            raise ValueError(
                f"queue {shown(queue)} is not allowed: a queue is named as a kind is, 1 to 100 "
                "of letters, digits, '_', '.' and '-', not starting with '.' or '-'"
            )
    return frozenset(queues)


def check_settlement(holder: Pass, settlement: Settlement) -> Settlement:
    """A settlement a store can record: one of the four ends of a pass, with what that end
    needs (an aware deadline to sleep until, a failure to fail with), and a count that is
    not negative. Checked before any round trip, so a bad one writes nothing."""
    where = f"workflow {holder.workflow!r}: settle"
    if not isinstance(settlement, Settlement):
        raise TypeError(f"{where} takes a Settlement, got {shown(settlement)}")
    if settlement.status not in _SETTLED:
        raise ValueError(
            f"{where}: a pass ends finished, failed, sleeping or blocked, not {settlement.status!r}"
        )
    attempts = settlement.attempts
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 0:
        raise ValueError(f"{where}: attempts must be an int of at least 0, got {attempts!r}")
    if settlement.status is Status.SLEEPING:
        until = settlement.until
        if not isinstance(until, datetime):
            raise TypeError(f"{where}: sleeping needs until, a datetime, got {until!r}")
        if until.tzinfo is None or until.utcoffset() is None:
            raise ValueError(f"{where}: until must be timezone-aware, got {until!r}")
    if settlement.status is Status.FAILED and not isinstance(settlement.failure, Failure):
        raise ValueError(f"{where}: failed needs a Failure, got {settlement.failure!r}")
    if settlement.failure is not None and not isinstance(settlement.failure, Failure):
        raise TypeError(f"{where}: failure must be a Failure, got {shown(settlement.failure)}")
    if not isinstance(settlement.keys, tuple) or not all(
        isinstance(key, str) for key in settlement.keys
    ):
        raise TypeError(f"{where}: keys must be a tuple of str, got {shown(settlement.keys)}")
    return settlement
