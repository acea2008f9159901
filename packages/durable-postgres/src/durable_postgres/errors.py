"""What can go wrong between the stores and a Postgres server, as types a caller can catch.

Each message names what to fix. A caller who catches :class:`durable.StoreError` catches
every one of these except the two that are the caller's own input (a schema name, a value),
which are ``ValueError`` and ``TypeError`` like the core's own boundary checks.
"""

from __future__ import annotations

from durable.boundary import shown
from durable.codec import UnencodableValue
from durable.interfaces import StoreUnavailable

__all__ = [
    "ConnectionLost",
    "InvalidSchemaName",
    "PostgresUnavailable",
    "SchemaMissing",
    "StoreClosed",
    "UnstorableName",
    "UnstorableValue",
    "text_fault",
]


class InvalidSchemaName(ValueError):
    """A schema name that is not a plain lowercase SQL identifier."""


class PostgresUnavailable(StoreUnavailable):
    """The server could not be reached or refused the connection (host, port, role, database,
    password). Raised when a store is opened, before anything is created or written, and by an
    operation that found no connection in the pool within its timeout (the server is down, or
    every connection is busy).

    A :class:`~durable.interfaces.StoreUnavailable`, so a worker waits it out with backoff
    rather than failing passes over it."""


class ConnectionLost(StoreUnavailable):
    """A connection dropped while an operation was on it.

    Postgres commits a transaction whole or not at all, so the write either landed or did
    not, never half. The pool has been checked by the time this is raised, so the next call
    gets a working connection once the server answers again. Operations that are safe to
    repeat (every one but ``transact``, and ``append`` and ``send`` without a message id)
    have already been retried once before this is raised.

    A :class:`~durable.interfaces.StoreUnavailable`: a worker logs it as an outage, never as
    the failure of the pass it interrupted.
    """


class StoreClosed(StoreUnavailable):
    """The store's pool has been closed: the store was used after the block that opened it.

    A :class:`~durable.interfaces.StoreUnavailable`: a pass cut short by its worker's store
    closing under it (a shutdown) did not fail, and is never counted as an attempt."""


class SchemaMissing(StoreUnavailable):
    """The durable tables are not in the schema the store was given.

    A :class:`~durable.interfaces.StoreUnavailable`: the store cannot serve, which is no
    workflow's fault, so a worker waits (logging it) rather than failing every workflow's
    attempts until the schema is back."""


def text_fault(text: str) -> str | None:
    """Why Postgres ``text`` cannot hold ``text``, or ``None`` if it can."""
    if "\x00" in text:
        return (
            f"it contains a NUL character (U+0000) at position {text.index(chr(0))}, "
            "which Postgres text cannot hold"
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return (
            f"it contains the lone surrogate {text[error.start]!r} at position {error.start}, "
            "which has no UTF-8 encoding"
        )
    return None


class UnstorableName(ValueError):
    """A workflow id or record key that Postgres ``text`` cannot hold."""


class UnstorableValue(UnencodableValue):
    """The codec encoded the value, but Postgres ``text`` cannot hold the encoding.

    A subclass of :class:`~durable.codec.UnencodableValue` because a caller's remedy is the
    same (a different value or a different codec), and code that already refuses values the
    codec cannot encode refuses these too. Raised before anything is written.
    """

    def __init__(self, workflow: str, key: str, value: object, reason: str) -> None:
        self.workflow = workflow
        self.key = key
        self.value = value
        TypeError.__init__(
            self,
            f"workflow {workflow!r}, key {key!r}: Postgres cannot store the encoding of "
            f"{shown(value)}: {reason}; nothing was written. Return a value without it, or use a "
            "codec whose output escapes it (JsonCodec escapes NUL, but passes lone surrogates "
            "through)",
        )
