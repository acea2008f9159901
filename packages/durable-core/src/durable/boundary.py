"""The checks every store makes before it writes, shared so that each refuses alike.

A store that let a bad value through would fail somewhere deep inside a driver with an
error that names neither the workflow nor the key; these name both, and run before any
round trip so that nothing is written.
"""

from __future__ import annotations

from datetime import timedelta

from durable.interfaces import INBOX_PREFIX

__all__ = ["check_duration", "check_key", "check_workflow", "shown"]


def check_workflow(workflow: object) -> str:
    """A workflow id is a non-empty string."""
    if not isinstance(workflow, str) or not workflow:
        raise ValueError(f"a workflow id must be a non-empty string, got {workflow!r}")
    return workflow


def check_key(workflow: str, key: object, *, inbox: bool = False) -> str:
    """A record key is a non-empty string; the inbox prefix belongs to ``append`` alone
    unless ``inbox`` says the caller is the store naming an inbox entry."""
    if not isinstance(key, str) or not key:
        raise ValueError(
            f"workflow {workflow!r}: a record key must be a non-empty string, got {key!r}"
        )
    if not inbox and key.startswith(INBOX_PREFIX):
        raise ValueError(
            f"workflow {workflow!r}, key {key!r}: keys starting with {INBOX_PREFIX!r} are "
            "reserved for inbox entries, which only append may write"
        )
    return key


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
