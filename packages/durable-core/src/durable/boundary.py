"""The checks every store makes before it writes, shared so that each refuses alike.

A store that let a bad value through would fail somewhere deep inside a driver with an
error that names neither the workflow nor the key; these name both, and run before any
round trip so that nothing is written.
"""

from __future__ import annotations

from datetime import timedelta

from durable.interfaces import INBOX_PREFIX, SENT_PREFIX

__all__ = ["check_duration", "check_key", "check_message_id", "check_workflow", "shown"]


def check_workflow(workflow: object) -> str:
    """A workflow id is a non-empty string."""
    if not isinstance(workflow, str) or not workflow:
        raise ValueError(f"a workflow id must be a non-empty string, got {workflow!r}")
    return workflow


def check_key(workflow: str, key: object, *, inbox: bool = False) -> str:
    """A record key is a non-empty string; the inbox prefix belongs to ``append`` alone
    unless ``inbox`` says the caller is the store naming an inbox entry, and the prefix of
    ``append``'s message-id markers belongs to the store alone."""
    if not isinstance(key, str) or not key:
        raise ValueError(
            f"workflow {workflow!r}: a record key must be a non-empty string, got {key!r}"
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
    if any(ord(c) < 32 or ord(c) == 127 for c in message_id):
        raise ValueError(
            f"workflow {workflow!r}, message id {shown(message_id)}: a message id may not "
            "contain control characters (newline, tab, NUL, ...)"
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


def shown(value: object, limit: int = 200) -> str:
    """``repr(value)`` cut to ``limit`` characters, for an error message that names a value
    without copying a megabyte of it into a log."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
