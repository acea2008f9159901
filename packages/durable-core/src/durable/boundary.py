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
    "check_key",
    "check_kind",
    "check_message_id",
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
    where = _control_character(key)
    if where is not None:
        raise ValueError(
            f"workflow {workflow!r}: record key {shown(key)} has a control character "
            f"({where}); keys are printed by show, one to a line, so they may not contain one"
        )
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
