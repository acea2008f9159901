"""The ``sqlite`` store plugin: ``durable.open("sqlite:///orders.db")``.

URLs follow SQLAlchemy's spelling, which most Python users already know: three slashes
and a relative path (``sqlite:///orders.db``, under the working directory), four for an
absolute one (``sqlite:////var/lib/app/orders.db``). Options ride in the query string
(``?synchronous=normal&delivery_lease=60``) or as keyword arguments to ``open``, which win.

``delivery_lease`` is the scheduler's lease (``SqliteScheduler.lease``): how long a taken
delivery stays with its worker before another may take it. The URL names it in full because
a worker has a second window, the claim's liveness (``durable worker --liveness``), and one
word for both had users setting the one that did not move what they meant to. ``lease=`` is
still read, with a warning; as a keyword to ``open``, ``lease=`` is the Python name and
stays.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
import tempfile
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

from durable.clock import Clock
from durable.codec import CheckpointCodec
from durable.plugins import Gap, StorePlugin, Testbed, hookimpl

from durable_sqlite.checkpointer import SqliteEffect
from durable_sqlite.connection import (
    DEFAULT_BUSY_TIMEOUT,
    IN_MEMORY,
    DatabaseRefused,
    Synchronous,
    check_path,
    connect,
    group_commit,
)
from durable_sqlite.durable import SqliteDurable
from durable_sqlite.probe import SqliteProbe
from durable_sqlite.scheduler import DEFAULT_LEASE, DEFAULT_POLL

__all__ = [
    "SCHEME",
    "MalformedURL",
    "Options",
    "durable_store",
    "open_sqlite",
    "parse_url",
    "testing",
    "url_for",
]

SCHEME = "sqlite"

log = logging.getLogger("durable_sqlite.plugin")

RIGHT_FORM = (
    "write sqlite:///orders.db for a path under the working directory, or "
    "sqlite:////var/lib/app/orders.db for an absolute one"
)


class MalformedURL(DatabaseRefused, ValueError):
    """An ``sqlite:`` URL that names no file this store can use.

    A ``ValueError`` because the mistake is in the caller's input, which is how the
    ``durable`` command tells a usage error (exit 2) from a store that failed (exit 1);
    a :class:`DatabaseRefused` still, for code that already catches that.
    """


@dataclass(frozen=True)
class Options:
    """How a store is opened: what a URL's query string or ``open``'s keywords say."""

    synchronous: Synchronous = Synchronous.FULL
    busy_timeout: timedelta = DEFAULT_BUSY_TIMEOUT
    lease: timedelta = DEFAULT_LEASE
    poll: timedelta = DEFAULT_POLL
    codec: CheckpointCodec[Any] | None = None
    clock: Clock | None = None
    group_commit: bool = True

    def query(self) -> str:
        """The query string that reopens a store with these options (codec and clock are
        objects, which no URL can carry)."""
        pairs = {
            "synchronous": self.synchronous.value.lower(),
            "busy_timeout": _seconds(self.busy_timeout),
            "delivery_lease": _seconds(self.lease),
            "poll": _seconds(self.poll),
            "group_commit": "1" if self.group_commit else "0",
        }
        return urlencode(pairs)


_DURATIONS = {"busy_timeout": "busy_timeout", "delivery_lease": "lease", "poll": "poll"}
"""Each duration option, by the name a URL gives it, and the :class:`Options` field it sets."""
_KNOWN = (
    "synchronous",
    "busy_timeout",
    "delivery_lease",
    "poll",
    "group_commit",
    "codec",
    "clock",
)


def _flag(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("1", "true", "on", "yes"):
        return True
    if isinstance(value, str) and value.lower() in ("0", "false", "off", "no"):
        return False
    raise ValueError(f"sqlite option {name} must be 1 or 0 (on or off), got {value!r}")


def _seconds(duration: timedelta) -> str:
    return f"{duration.total_seconds():g}"


def _duration(name: str, value: object) -> timedelta:
    if isinstance(value, timedelta):
        duration = value
    elif isinstance(value, int | float | str) and not isinstance(value, bool):
        try:
            duration = timedelta(seconds=float(value))
        except (ValueError, OverflowError) as error:
            raise ValueError(
                f"sqlite option {name} must be a number of seconds, got {value!r}"
            ) from error
    else:
        raise TypeError(f"sqlite option {name} must be a timedelta or seconds, got {value!r}")
    if duration <= timedelta(0):
        raise ValueError(f"sqlite option {name} must be positive, got {value!r}")
    return duration


def _options(given: Mapping[str, object]) -> Options:
    unknown = sorted(set(given) - set(_KNOWN))
    if unknown:
        raise ValueError(
            f"unknown sqlite option(s) {', '.join(unknown)}; the options are {', '.join(_KNOWN)}"
        )
    chosen: dict[str, Any] = {}
    if "synchronous" in given:
        chosen["synchronous"] = Synchronous.parse(given["synchronous"])
    for name, field_name in _DURATIONS.items():
        if name in given:
            chosen[field_name] = _duration(name, given[name])
    if "group_commit" in given:
        chosen["group_commit"] = _flag("group_commit", given["group_commit"])
    for name in ("codec", "clock"):
        if name in given:
            chosen[name] = given[name]
    return Options(**chosen)


def parse_url(url: str, **options: object) -> tuple[Path | None, Options]:
    """The file an ``sqlite:`` URL names (``None`` when it names none) and its options.

    Keyword ``options`` join the URL's query string, and win where both name one: a URL
    is where a deployment says how a store is opened, and code opening it with a
    particular option has a reason the URL cannot know.
    """
    parts = urlsplit(url)
    if parts.scheme != SCHEME:
        raise ValueError(f"{url!r} is not an sqlite: URL (like sqlite:///orders.db)")
    if parts.netloc == ":memory:" or unquote(parts.path).lstrip("/") == ":memory:":
        raise MalformedURL(IN_MEMORY)
    if parts.netloc:
        raise MalformedURL(
            f"{url!r} names a host ({parts.netloc!r}), but an SQLite store is a file on this "
            f"machine: {RIGHT_FORM}"
        )
    query = dict(parse_qsl(parts.query, keep_blank_values=True))
    if "lease" in query:
        if "delivery_lease" in query:
            raise MalformedURL(
                f"{url!r} gives both delivery_lease= and lease=, its old name; keep delivery_lease="
            )
        log.warning(
            "the sqlite URL option lease= is deprecated: write delivery_lease= (how long a "
            "taken delivery stays with its worker), not to be confused with a worker's "
            "--liveness"
        )
        query["delivery_lease"] = query.pop("lease")
    if "lease" in options:
        if "delivery_lease" in options:
            raise TypeError(
                "give the sqlite option delivery_lease or lease (its Python name), not both"
            )
        options["delivery_lease"] = options.pop("lease")
    objects = sorted(set(query) & {"codec", "clock"})
    if objects:
        raise ValueError(
            f"sqlite option(s) {', '.join(objects)} are objects, which a URL cannot carry; "
            "pass them as keywords to open"
        )
    # One slash separates the scheme from the path, as in SQLAlchemy; what follows it is
    # the path, relative unless it too starts with a slash.
    path = unquote(parts.path)
    path = path[1:] if path.startswith("/") else path
    return (Path(path) if path else None), _options({**query, **options})


def url_for(path: Path, options: Options) -> str:
    """An ``sqlite:`` URL reaching ``path`` (made absolute) with ``options``."""
    return f"{SCHEME}:///{quote(str(path.resolve()))}?{options.query()}"


@asynccontextmanager
async def open_durable(
    path: Path, options: Options, gap: Gap | None = None
) -> AsyncIterator[SqliteDurable]:
    async with connect(
        path, synchronous=options.synchronous, busy_timeout=options.busy_timeout
    ) as connection:
        group_commit(connection, options.group_commit)
        yield SqliteDurable.over(
            connection,
            codec=options.codec,
            clock=options.clock,
            lease=options.lease,
            poll=options.poll,
            gap=gap,
        )


@asynccontextmanager
async def open_sqlite(url: str, **options: object) -> AsyncIterator[SqliteDurable]:
    """Open the store ``url`` names, creating the file and its tables if missing.

    Options (in the query string, durations in seconds, or as keywords): ``synchronous``
    (``full``, the default, or ``normal``), ``busy_timeout`` (5), ``delivery_lease`` (30;
    ``lease`` as a keyword), ``poll`` (0.025), ``group_commit`` (1, the default: concurrent
    writes share a commit; 0: a commit each), and as keywords only ``codec`` and ``clock``.
    A URL that names no usable file is :class:`MalformedURL`.
    """
    path, chosen = parse_url(url, **options)
    if path is None:
        raise MalformedURL(f"{url!r} names no file: {RIGHT_FORM}")
    async with open_durable(check_path(path), chosen) as durable:
        yield durable


@asynccontextmanager
async def testing(
    url: str | None,
    *,
    gap: Gap | None = None,  # noqa: PT028 (a testing hook, not a test)
    **options: object,
) -> AsyncIterator[Testbed[SqliteEffect]]:
    """A fresh file of its own for one test, in a new temporary directory.

    With ``url``, its query string sets the options (``sqlite://?synchronous=normal``) and
    its path, if any, names an existing directory to make the temporary one in; keyword
    ``options`` are as for :func:`open_sqlite`. ``reopen`` opens a second connection on
    the same file; ``url`` reaches it from another process. ``gap`` (a
    :data:`durable.plugins.Gap`) is awaited by every move of every handle, ``reopen``'s
    included, inside its transaction between its reads and its writes.
    """
    parent, chosen = parse_url(url or f"{SCHEME}://", **options)
    if parent is not None and not parent.is_dir():
        raise ValueError(
            f"the sqlite testing URL {url!r} must name a directory to make test files in "
            "(or none, for the system's temporary directory)"
        )
    directory = Path(tempfile.mkdtemp(prefix="durable-sqlite-", dir=parent))
    try:
        path = directory / "store.db"
        async with open_durable(path, chosen, gap) as durable:
            await SqliteProbe.install(durable.connection)

            @asynccontextmanager
            async def reopen() -> AsyncIterator[SqliteDurable]:
                async with open_durable(path, chosen, gap) as second:
                    yield second

            yield Testbed(
                durable=durable,
                reopen=reopen,
                url=url_for(path, chosen),
                probe=SqliteProbe(path),
                server=(
                    f"SQLite {sqlite3.sqlite_version}, a file per test "
                    f"(synchronous={chosen.synchronous.value})"
                ),
                extras={
                    "path": path,
                    "synchronous": chosen.synchronous.value,
                    "busy_timeout": chosen.busy_timeout,
                    "options": chosen,
                },
            )
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@hookimpl
def durable_store() -> StorePlugin:
    """The SQLite store: one file, no server, every move in one local commit."""
    return StorePlugin(
        name="sqlite",
        schemes=(SCHEME,),
        open=open_sqlite,
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
        testing=testing,
        distribution="durable-sqlite",
        description="an SQLite file (embedded; one machine)",
    )
