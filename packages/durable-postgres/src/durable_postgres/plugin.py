"""Opening the ``postgres`` store: what ``durable.open("postgresql://...")`` runs.

A URL is a libpq connection URI plus durable's own options in its query string, which are
taken out before the rest reaches libpq::

    postgresql://app@db.internal:5432/orders?schema=orders_durable&max_size=20&delivery_lease=60

``schema`` (where the tables live; default ``durable``), ``min_size`` and ``max_size`` (the
pool; default 2 and 10), ``timeout`` (seconds to wait for a pooled connection; default 30),
``delivery_lease`` and ``poll`` (the scheduler's, in seconds; default 30 and 0.05) and
``prepare`` (``false`` for a pooler that cannot keep prepared statements), ``group_commit``
(``true``, the default: concurrent records and renewals share one transaction and commit;
``false``: a commit each). Every other query
parameter is libpq's (``sslmode``, ``connect_timeout``, ``application_name``, ...). The same
names may be passed as keyword options to ``open``, which win over the URL; ``codec`` is
keyword-only.

``delivery_lease`` is ``PostgresScheduler.lease``: how long a taken delivery stays with its
worker before another may take it. The URL names it in full because a worker has a second
window, its claims' liveness (``durable worker --liveness``). The URL's old ``lease=`` is
still read, with a warning; as a keyword, ``lease=`` is the Python name and stays.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import psycopg
from durable.codec import CheckpointCodec
from durable.plugins import Gap
from psycopg import AsyncConnection, IsolationLevel
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import AsyncConnectionPool

from durable_postgres.durable import PostgresDurable
from durable_postgres.entry import SCHEMES
from durable_postgres.errors import PostgresUnavailable
from durable_postgres.migration import migrate
from durable_postgres.statements import DEFAULT_SCHEMA, check_schema_name

__all__ = [
    "PostgresOptions",
    "connect_pool",
    "open_postgres",
    "query_pairs",
    "redact",
    "with_option",
]

log = logging.getLogger("durable_postgres.plugin")

_CONNECT_TIMEOUT = 10  # seconds, unless the URL names its own connect_timeout


@dataclass(frozen=True, slots=True)
class PostgresOptions:
    """durable's own options, read from a URL's query string and keyword options."""

    schema: str = DEFAULT_SCHEMA
    min_size: int = 2
    max_size: int = 10
    timeout: float = 30.0
    lease: timedelta = timedelta(seconds=30)
    poll: timedelta = timedelta(milliseconds=50)
    prepare: bool = True
    group_commit: bool = True

    @classmethod
    def read(cls, url: str, options: dict[str, Any]) -> tuple[str, PostgresOptions]:
        """Split ``url`` into what libpq is given and durable's options (``options`` win).

        Every option is checked here, so a misspelt value fails before any connection is made
        and names the option to fix.
        """
        parts = urlsplit(url)
        if parts.scheme not in SCHEMES:
            raise ValueError(
                f"{redact(url)} is not a Postgres URL; use postgresql://user@host:port/database"
            )
        ours: dict[str, Any] = {}
        libpq: list[str] = []
        # libpq's own parameters are passed on exactly as written: libpq percent-decodes a
        # URI but does not read "+" as a space, so decoding and re-encoding them here could
        # change what they say.
        for pair in query_pairs(parts.query):
            name, _, value = pair.partition("=")
            if unquote(name) in _READERS or unquote(name) == "lease":
                ours[unquote(name)] = unquote(value)
            else:
                libpq.append(pair)
        if "lease" in ours:
            if "delivery_lease" in ours:
                raise ValueError(
                    f"{redact(url)} gives both delivery_lease= and lease=, its old name; keep "
                    "delivery_lease="
                )
            log.warning(
                "the postgres URL option lease= is deprecated: write delivery_lease= (how "
                "long a taken delivery stays with its worker), not to be confused with a "
                "worker's --liveness"
            )
            ours["delivery_lease"] = ours.pop("lease")
        options = dict(options)
        if "lease" in options:
            if "delivery_lease" in options:
                raise TypeError(
                    "give the postgres option delivery_lease or lease (its Python name), not both"
                )
            options["delivery_lease"] = options.pop("lease")
        unknown = set(options) - set(_READERS)
        if unknown:
            raise TypeError(
                f"unknown option(s) for the postgres store: {', '.join(sorted(unknown))}; "
                f"known: {', '.join(sorted(_READERS))} and codec"
            )
        ours.update(options)
        read = {
            _FIELDS.get(name, name): _READERS[name](name, value) for name, value in ours.items()
        }
        chosen = cls(**read)
        if chosen.min_size > chosen.max_size:
            raise ValueError(
                f"min_size ({chosen.min_size}) is larger than max_size ({chosen.max_size}); "
                "the pool cannot hold fewer connections than it keeps open"
            )
        conninfo = urlunsplit(parts._replace(query="&".join(libpq)))
        try:
            conninfo_to_dict(conninfo)
        except psycopg.ProgrammingError as error:
            raise ValueError(
                f"{redact(url)} is not a connection URL libpq accepts: {str(error).strip()} "
                f"(durable's own options are {', '.join(sorted(_READERS))}; every other query "
                "parameter must be one of libpq's)"
            ) from error
        return conninfo, chosen


def _schema(name: str, value: object) -> str:
    return check_schema_name(value)


def _count(name: str, value: object) -> int:
    least = 0 if name == "min_size" else 1
    number: int | None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        try:
            number = int(str(value))
        except ValueError:
            number = None
    if number is None or number < least:
        raise ValueError(f"{name} must be a whole number of at least {least}, got {value!r}")
    return number


def _seconds(name: str, value: object) -> float:
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    else:
        try:
            seconds = float(str(value))
        except ValueError:
            seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return seconds


def _duration(name: str, value: object) -> timedelta:
    return timedelta(seconds=_seconds(name, value))


def _flag(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{name} must be true or false, got {value!r}")


_READERS: dict[str, Callable[[str, Any], Any]] = {
    "schema": _schema,
    "min_size": _count,
    "max_size": _count,
    "timeout": _seconds,
    "delivery_lease": _duration,
    "poll": _duration,
    "prepare": _flag,
    "group_commit": _flag,
}
_FIELDS = {"delivery_lease": "lease"}
"""The :class:`PostgresOptions` field an option sets, where its name is not the field's."""


def query_pairs(query: str) -> list[str]:
    """The ``name=value`` pieces of a URL's query string, undecoded."""
    return [pair for pair in query.split("&") if pair]


def redact(url: str) -> str:
    """``url`` with any password replaced, fit for a log line or a report header."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        if ":" in userinfo:
            userinfo = userinfo.split(":", 1)[0] + ":***"
        netloc = f"{userinfo}@{host}"
    query = "&".join(
        "password=***" if unquote(pair.partition("=")[0]) == "password" else pair
        for pair in query_pairs(parts.query)
    )
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def with_option(url: str, name: str, value: str) -> str:
    """``url`` with its query parameter ``name`` set to ``value`` (replacing any)."""
    parts = urlsplit(url)
    kept = [p for p in query_pairs(parts.query) if unquote(p.partition("=")[0]) != name]
    return urlunsplit(parts._replace(query="&".join([*kept, f"{name}={quote(value)}"])))


_HINTS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("connection refused",), "is a Postgres server running there? check the URL's host and port"),
    (("failed to resolve host",), "check the host name in the URL"),
    (("could not translate host name",), "check the host name in the URL"),
    (("timeout expired",), "the server did not answer in time: check host, port and firewalls"),
    (("role", "does not exist"), "check the user name in the URL, or create the role"),
    (("database", "does not exist"), "check the database name in the URL, or create it"),
    (("password authentication failed",), "check the password (URL, PGPASSWORD or .pgpass)"),
    (("no password supplied",), "the server asks for a password: put it in the URL"),
)


def _unreachable(url: str, error: psycopg.Error) -> PostgresUnavailable:
    text = " ".join(str(error).split())
    reason = text.split("failed: ", 1)[-1]
    lowered = reason.lower()
    hints = (hint for clues, hint in _HINTS if all(clue in lowered for clue in clues))
    return PostgresUnavailable(
        f"could not connect to Postgres at {redact(url)}: {reason}; {next(hints, 'check the URL')}"
    )


async def _configure(conn: AsyncConnection[Any]) -> None:
    # The isolation every store transaction wants, set once per connection rather than on
    # every borrow. Client-side only: no round trip.
    await conn.set_isolation_level(IsolationLevel.READ_COMMITTED)


async def connect_pool(conninfo: str, options: PostgresOptions) -> AsyncConnectionPool[Any]:
    """An open pool on ``conninfo``, or :class:`PostgresUnavailable` saying why not.

    One plain connection is made first, because a pool that cannot connect retries in the
    background and reports only that it timed out; libpq's own refusal names what to fix.
    """
    given = conninfo_to_dict(conninfo)
    extra: dict[str, Any] = {}
    if "connect_timeout" not in given:
        extra["connect_timeout"] = _CONNECT_TIMEOUT
    if "application_name" not in given:
        extra["application_name"] = "durable"
    try:
        probe = await psycopg.AsyncConnection.connect(conninfo, autocommit=True, **extra)
    except psycopg.Error as error:
        raise _unreachable(conninfo, error) from error
    await probe.close()
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        conninfo,
        min_size=options.min_size,
        max_size=options.max_size,
        timeout=options.timeout,
        kwargs={"autocommit": True, **extra},
        configure=_configure,
        open=False,
        name="durable",
    )
    await pool.open(wait=True, timeout=options.timeout)
    return pool


@asynccontextmanager
async def open_postgres(
    url: str,
    *,
    codec: CheckpointCodec[str] | None = None,
    gap: Gap | None = None,
    **options: Any,
) -> AsyncIterator[PostgresDurable]:
    """Open a pool on ``url``, create the tables if they are missing, and yield the store.
    (``gap`` is the testing hook's, for racing tests; see :data:`durable.plugins.Gap`.)

    The pool is closed on exit. Fails before anything is created with
    :class:`~durable_postgres.errors.PostgresUnavailable` when the server cannot be reached or
    refuses the role, database or password, and with ``ValueError`` for a bad option.
    """
    conninfo, chosen = PostgresOptions.read(url, options)
    pool = await connect_pool(conninfo, chosen)
    try:
        await migrate(pool, schema=chosen.schema)
        yield PostgresDurable.on(
            pool,
            schema=chosen.schema,
            codec=codec,
            lease=chosen.lease,
            poll=chosen.poll,
            prepare=chosen.prepare,
            group_commit=chosen.group_commit,
            gap=gap,
        )
    finally:
        await pool.close()
