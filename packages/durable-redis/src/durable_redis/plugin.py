"""Opening the ``redis`` store: what ``durable.open("redis://...")`` runs.

URLs are redis-py's, with a cluster scheme and three options of the store's own in the
query string (every other query option goes to redis-py):

* ``redis://[user:password@]host:port/db``, ``rediss://`` for TLS;
* ``redis+cluster://host:port`` (``rediss+cluster://``): a Redis Cluster, found from any
  one node;
* ``?prefix=NAME`` starts every key (default ``durable``), ``?ttl=SECONDS`` forgets a
  workflow nobody has written for that long, ``?delivery_lease=SECONDS`` is the scheduler's
  lease (``RedisStreamScheduler.lease``: how long a taken delivery stays with its worker
  before another may take it; default 30).

The URL names the delivery lease in full because a worker has a second window, its claims'
liveness (``durable worker --liveness``). The URL's old ``lease=`` is still read, with a
warning; as a keyword to ``open_redis``, ``lease=`` is the Python name and stays.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff

from durable_redis.durable import RedisDurable
from durable_redis.entry import SCHEMES
from durable_redis.scripts import Client

__all__ = ["RedisURL", "WaitingCluster", "open_redis", "parse_url"]

_STORE_OPTIONS = ("prefix", "ttl", "lease", "consumer")
"""The store's own options, by their Python names (``open_redis``'s keywords)."""
_URL_NAMES = {"delivery_lease": "lease"}
"""A URL option whose name is not the keyword's."""
_URL_OPTION = {keyword: name for name, keyword in _URL_NAMES.items()}

log = logging.getLogger("durable_redis.plugin")


@dataclass(frozen=True)
class RedisURL:
    """A store URL split into what redis-py reads and what the store reads."""

    client_url: str
    cluster: bool
    options: dict[str, str] = field(default_factory=dict)


def parse_url(url: str) -> RedisURL:
    """Split ``url`` into redis-py's URL, whether it names a cluster, and the store's options."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise ValueError(
            f"{url!r} is not a Redis store URL; use one of " + ", ".join(f"{s}://" for s in SCHEMES)
        )
    cluster = parts.scheme.endswith("+cluster")
    scheme = parts.scheme.removesuffix("+cluster")
    query = parse_qsl(parts.query, keep_blank_values=True)
    names = {k for k, _ in query}
    if "lease" in names:
        if "delivery_lease" in names:
            raise ValueError(
                f"{_redacted(url)} gives both delivery_lease= and lease=, its old name; keep "
                "delivery_lease="
            )
        log.warning(
            "the redis URL option lease= is deprecated: write delivery_lease= (how long a "
            "taken delivery stays with its worker), not to be confused with a worker's "
            "--liveness"
        )
    ours = {*_STORE_OPTIONS, *_URL_NAMES}
    options = {_URL_NAMES.get(k, k): v for k, v in query if k in ours}
    rest = [(k, v) for k, v in query if k not in ours]
    client_url = urlunsplit((scheme, parts.netloc, parts.path, urlencode(rest), parts.fragment))
    return RedisURL(client_url, cluster, options)


def _redacted(url: str) -> str:
    parts = urlsplit(url)
    user, at, host = parts.netloc.rpartition("@")
    if at and ":" in user:
        return urlunsplit(parts._replace(netloc=f"{user.split(':', 1)[0]}:***@{host}"))
    return url


def _seconds(name: str, text: str) -> timedelta:
    try:
        seconds = float(text)
    except ValueError:
        raise ValueError(f"the Redis URL option {name}= takes seconds, got {text!r}") from None
    return timedelta(seconds=seconds)


class WaitingCluster(RedisCluster):
    """A ``RedisCluster`` whose commands wait for a free connection instead of failing.

    redis-py's cluster client keeps at most ``max_connections`` connections to each node
    (100 by default) and raises ``MaxConnectionsError`` at once, without waiting, for a
    command that finds them all busy: a worker running a few hundred passes at once, or the
    conformance suite's 512 concurrent claims, meets it. Holding the whole client to
    ``max_connections`` commands in flight keeps every node under its cap, so a burst waits
    its turn, as the blocking pool of a single-node client makes it.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limit = self.get_connection_kwargs().get("max_connections")
        self._in_flight = asyncio.Semaphore(limit if isinstance(limit, int) and limit > 0 else 100)

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        async with self._in_flight:
            return await super().execute_command(*args, **kwargs)


def connect(parsed: RedisURL, **client_options: Any) -> Client:
    """A client for the URL, decoding responses (every value this store holds is text).

    Either kind waits briefly for a free connection when all of its 100 are busy, instead
    of failing: a single-node client through a blocking pool, instead of redis-py's "Too
    many connections", and a cluster client through :class:`WaitingCluster`, instead of
    ``MaxConnectionsError``. Both retry a command whose connection dropped, as redis-py's
    clients do by default.
    """
    client_options.setdefault("decode_responses", True)
    if parsed.cluster:
        return WaitingCluster.from_url(parsed.client_url, **client_options)
    client_options.setdefault("max_connections", 100)
    client_options.setdefault("retry", _retry())
    return Redis.from_pool(BlockingConnectionPool.from_url(parsed.client_url, **client_options))


def _retry() -> Retry:
    """Three retries with a short backoff (a pool built by hand would get none):
    a dropped connection, such as every pooled one after a server restart, is reopened
    and the command sent again, which every script here tolerates (``append`` by the
    message id every call carries; see ``RedisCheckpointer.append``)."""
    return Retry(ExponentialWithJitterBackoff(base=0.05, cap=0.5), 3)


@asynccontextmanager
async def open_redis(url: str, **options: Any) -> AsyncIterator[RedisDurable]:
    """Open the store ``url`` names, scripts loaded and consumer group created.

    Options (each overrides the URL's): ``client`` (use this client and leave it open),
    ``codec``, ``prefix``, ``ttl`` and ``lease`` (``timedelta``; the URL's
    ``delivery_lease=``), ``consumer``; any other keyword goes to the redis-py client.
    """
    parsed = parse_url(url)
    given: Client | None = options.pop("client", None)
    store: dict[str, Any] = {"codec": options.pop("codec", None)}
    for name in _STORE_OPTIONS:
        if name in options:
            store[name] = options.pop(name)
        elif name in parsed.options:
            text = parsed.options[name]
            store[name] = (
                _seconds(_URL_OPTION.get(name, name), text) if name in ("ttl", "lease") else text
            )
    client = given if given is not None else connect(parsed, **options)
    try:
        durable = RedisDurable.over(client, **store)
        await durable.prepare()
        yield durable
    finally:
        if given is None:
            await client.aclose()
