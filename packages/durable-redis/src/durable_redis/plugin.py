"""Opening the ``redis`` store: what ``durable.open("redis://...")`` runs.

URLs are redis-py's, with a cluster scheme and three options of the store's own in the
query string (every other query option goes to redis-py):

* ``redis://[user:password@]host:port/db``, ``rediss://`` for TLS;
* ``redis+cluster://host:port`` (``rediss+cluster://``): a Redis Cluster, found from any
  one node;
* ``redis+sentinel://host:port,host:port/SERVICE[/db]`` (``rediss+sentinel://``): the
  primary that the Sentinels at those addresses name for ``SERVICE``, asked again after
  every dropped connection, so a worker follows a promotion without a restart (the
  user and password are the primary's; ``?sentinel_password=`` is the Sentinels');
* ``?prefix=NAME`` starts every key (default ``durable``), ``?ttl=SECONDS`` forgets a
  workflow nobody has written for that long, ``?delivery_lease=SECONDS`` is the scheduler's
  lease (``RedisStreamScheduler.lease``: how long a taken delivery stays with its worker
  before another may take it; default 30);
* ``?wait_replicas=N`` makes every write wait until ``N`` replicas hold it, and
  ``?wait_timeout=SECONDS`` (default 1) bounds that wait; a write not confirmed in time is
  a :class:`~durable_redis.errors.ReplicationUnconfirmed` to the caller, never a success
  (see :mod:`durable_redis.replication`, and the docs' "Failover" page for what it buys).

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
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import Connection
from redis.asyncio.connection import parse_url as parse_connection_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import (
    Sentinel,
    SentinelManagedConnection,
    SentinelManagedSSLConnection,
)
from redis.backoff import ExponentialWithJitterBackoff

from durable_redis.durable import RedisDurable
from durable_redis.entry import SCHEMES
from durable_redis.replication import ReplicaWait, confirming
from durable_redis.scripts import Client

__all__ = ["RedisURL", "WaitingCluster", "connect", "open_redis", "parse_url", "replica_wait"]

_STORE_OPTIONS = ("prefix", "ttl", "lease", "consumer", "group_commit")
_CLIENT_OPTIONS = ("wait_replicas", "wait_timeout", "sentinel_password")
"""Options the store reads to build its client, not redis-py's."""
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
    sentinel: bool = False


def parse_url(url: str) -> RedisURL:
    """Split ``url`` into redis-py's URL, whether it names a cluster, and the store's options."""
    parts = urlsplit(url)
    if parts.scheme not in SCHEMES:
        raise ValueError(
            f"{url!r} is not a Redis store URL; use one of " + ", ".join(f"{s}://" for s in SCHEMES)
        )
    cluster = parts.scheme.endswith("+cluster")
    sentinel = parts.scheme.endswith("+sentinel")
    scheme = parts.scheme.removesuffix("+cluster").removesuffix("+sentinel")
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
    ours = {*_STORE_OPTIONS, *_URL_NAMES, *_CLIENT_OPTIONS}
    options = {_URL_NAMES.get(k, k): v for k, v in query if k in ours}
    rest = [(k, v) for k, v in query if k not in ours]
    client_url = urlunsplit((scheme, parts.netloc, parts.path, urlencode(rest), parts.fragment))
    return RedisURL(client_url, cluster, options, sentinel)


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


def replica_wait(parsed: RedisURL, options: dict[str, Any]) -> ReplicaWait | None:
    """The ``wait_replicas=`` and ``wait_timeout=`` of the keywords (popped) or the URL."""
    replicas: Any = options.pop("wait_replicas", parsed.options.get("wait_replicas"))
    timeout: Any = options.pop("wait_timeout", parsed.options.get("wait_timeout"))
    if replicas is None:
        if timeout is not None:
            raise ValueError("wait_timeout= needs wait_replicas= (how many replicas to wait for)")
        return None
    try:
        count = int(replicas)
    except ValueError:
        raise ValueError(f"wait_replicas= takes a whole number, got {replicas!r}") from None
    if timeout is None:
        span = timedelta(seconds=1)
    elif isinstance(timeout, timedelta):
        span = timeout
    else:
        span = _seconds("wait_timeout", str(timeout))
    return ReplicaWait(count, span)


def connect(parsed: RedisURL, *, wait: ReplicaWait | None = None, **client_options: Any) -> Client:
    """A client for the URL, decoding responses (every value this store holds is text).

    Either kind waits briefly for a free connection when all of its 100 are busy, instead
    of failing: a single-node client through a blocking pool, instead of redis-py's "Too
    many connections", and a cluster client through :class:`WaitingCluster`, instead of
    ``MaxConnectionsError``. Both retry a command whose connection dropped, as redis-py's
    clients do by default.
    """
    client_options.setdefault("decode_responses", True)
    if parsed.cluster:
        cluster = WaitingCluster.from_url(parsed.client_url, **client_options)
        if wait is not None:
            _confirm_cluster(cluster, wait)
        return cluster
    client_options.setdefault("retry", _retry())
    if parsed.sentinel:
        return _sentinel_primary(parsed, wait, client_options)
    client_options.setdefault("max_connections", 100)
    if wait is not None:
        base: Any = parse_connection_url(parsed.client_url).get("connection_class", Connection)
        client_options["connection_class"] = confirming(base, wait)
    return Redis.from_pool(BlockingConnectionPool.from_url(parsed.client_url, **client_options))


def _confirm_cluster(cluster: RedisCluster, wait: ReplicaWait) -> None:
    """Give every node the cluster knows, and every node it learns of later (after a
    failover), connections that confirm writes; none has opened a connection yet."""
    manager = cluster.nodes_manager
    base = manager.connection_kwargs.get("connection_class", Connection)
    kind: Any = confirming(base, wait)
    manager.connection_kwargs["connection_class"] = kind
    for node in (*manager.startup_nodes.values(), *manager.nodes_cache.values()):
        node.connection_class = kind


def _sentinel_primary(
    parsed: RedisURL, wait: ReplicaWait | None, client_options: dict[str, Any]
) -> Redis:
    """The primary the Sentinels name, through redis-py's Sentinel pool: each new
    connection asks the Sentinels where the primary is, and a connection to a demoted
    one is refused (``READONLY``) and dropped, so a failover costs the calls in flight
    (an outage to the worker, waited out) and nothing more."""
    parts = urlsplit(parsed.client_url)
    path = [p for p in parts.path.split("/") if p]
    if not path:
        raise ValueError(
            f"{_redacted(parsed.client_url)} names no Sentinel service: write "
            "redis+sentinel://host:port,host:port/SERVICE"
        )
    addresses: list[tuple[str, int]] = []
    for item in parts.netloc.rpartition("@")[2].split(","):
        host, _, port = item.rpartition(":")
        addresses.append((host or item, int(port) if host and port else 26379))
    user, at, _ = parts.netloc.rpartition("@")
    if at:
        name, _, password = user.partition(":")
        client_options.setdefault("username", unquote(name) or None)
        client_options.setdefault("password", unquote(password) or None)
    if len(path) > 1:
        client_options.setdefault("db", int(path[1]))
    if parts.query:
        raise ValueError(
            f"{_redacted(parsed.client_url)}: a redis+sentinel:// URL takes only the store's "
            "own options; give redis-py's as keywords to open_redis"
        )
    sentinel_kwargs: dict[str, Any] = {"decode_responses": True}
    if "sentinel_password" in parsed.options:
        sentinel_kwargs["password"] = parsed.options["sentinel_password"]
    ssl = parts.scheme == "rediss"
    base: type[Any] = SentinelManagedSSLConnection if ssl else SentinelManagedConnection
    connection_class = confirming(base, wait) if wait is not None else base
    sentinel = Sentinel(addresses, sentinel_kwargs=sentinel_kwargs)  # type: ignore[no-untyped-call, unused-ignore]
    primary: Redis = sentinel.master_for(
        path[0], connection_class=connection_class, **client_options
    )
    return primary


def _retry() -> Retry:
    """Three retries with a short backoff (a pool built by hand would get none):
    a dropped connection, such as every pooled one after a server restart, is reopened
    and the command sent again, which every script here tolerates (``append`` by the
    message id every call carries; see ``RedisCheckpointer.append``)."""
    return Retry(ExponentialWithJitterBackoff(base=0.05, cap=0.5), 3)


def _on_off(name: str, text: str) -> bool:
    if text.lower() in ("1", "true", "on", "yes"):
        return True
    if text.lower() in ("0", "false", "off", "no"):
        return False
    raise ValueError(f"the redis URL option {name} must be 1 or 0 (on or off), got {text!r}")


@asynccontextmanager
async def open_redis(url: str, **options: Any) -> AsyncIterator[RedisDurable]:
    """Open the store ``url`` names, scripts loaded and consumer group created.

    Options (each overrides the URL's): ``client`` (use this client and leave it open),
    ``codec``, ``prefix``, ``ttl`` and ``lease`` (``timedelta``; the URL's
    ``delivery_lease=``), ``consumer``, ``group_commit`` (on by default: records and
    renewals that arrive together go in one pipeline; ``?group_commit=0`` turns it off),
    ``wait_replicas`` (``int``) and ``wait_timeout`` (``timedelta``); any other keyword
    goes to the redis-py client. With ``wait_replicas``, group commit is off: each write
    is confirmed by a ``WAIT`` sent beside it on its connection, which a pipeline of
    several writes would not keep in step.
    """
    parsed = parse_url(url)
    given: Client | None = options.pop("client", None)
    store: dict[str, Any] = {"codec": options.pop("codec", None), "gap": options.pop("gap", None)}
    for name in _STORE_OPTIONS:
        if name in options:
            store[name] = options.pop(name)
        elif name in parsed.options:
            text = parsed.options[name]
            store[name] = (
                _seconds(_URL_OPTION.get(name, name), text) if name in ("ttl", "lease") else text
            )
    if isinstance(store.get("group_commit"), str):
        store["group_commit"] = _on_off("group_commit", store["group_commit"])
    wait = replica_wait(parsed, options)
    if given is not None and wait is not None:
        raise ValueError(
            "wait_replicas= is built into the client's connections; with client= given, "
            "build that client with durable_redis.plugin.connect(..., wait=...)"
        )
    if wait is not None:
        if store.get("group_commit"):
            raise ValueError(
                "group_commit= and wait_replicas= do not go together: each write waits for "
                "its replicas alone; leave group_commit= out"
            )
        store["group_commit"] = False
    client = given if given is not None else connect(parsed, wait=wait, **options)
    try:
        durable = RedisDurable.over(client, **store)
        durable.replica_wait = wait
        await durable.prepare()
        yield durable
    finally:
        if given is None:
            await client.aclose()
