"""The Lua scripts, as loaded from ``scripts/*.lua`` and called on a client.

Each script file is one body; a shared prelude (``prelude.lua`` for the checkpoint,
``queue_prelude.lua`` for the queue) is prepended with a ``#!lua`` line, and the result
is registered once per client as a redis-py ``Script``. A call goes by ``EVALSHA``; on
``NOSCRIPT`` (a ``SCRIPT FLUSH``, a restarted server, a failover to a replica that
never saw the script) the ``Script`` loads it and calls again, which on a cluster
loads it into every primary. :func:`preload` loads every script up front so that the
first call of a fresh process does not pay the fallback.

Server errors are turned here, in one place, into the store's own error types.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from functools import cache
from importlib import resources

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import (
    AuthenticationError,
    ClusterCrossSlotError,
    ClusterDownError,
    ReadOnlyError,
    RedisClusterException,
    RedisError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import (
    ConnectionError as RedisConnectionError,
)
from redis.exceptions import (
    TimeoutError as RedisTimeoutError,
)

from durable_redis.errors import CrossSlotError, RedisUnavailable

__all__ = [
    "DRIVER_ERRORS",
    "EPOCH",
    "INDEX_SCRIPTS",
    "Client",
    "ScriptBook",
    "as_text",
    "describe",
    "index_source",
    "lua",
    "milliseconds",
    "translate",
]

Client = Redis | RedisCluster
"""A single-node client or a cluster client; every part of this store takes either."""

DRIVER_ERRORS = (RedisError, RedisClusterException, OSError)
"""What redis-py raises (its cluster errors do not derive from ``RedisError``)."""

CHECKPOINT_SCRIPTS = (
    "claim",
    "renew",
    "release",
    "record",
    "supply",
    "append",
    "discard",
    # the lifecycle: each moves the life hash in the workflow's slot (see keys.py)
    "admit",
    "begin",
    "beat",
    "settle",
    "withdraw",
    "readmit",
    "adopt",
    "status",
    "backdate",
    "discard_ended",
)
INDEX_SCRIPTS = ("index_add", "index_drop", "index_score")
"""The status index's scripts: their keys are the index's zsets, in a slot of their own."""
QUEUE_SCRIPTS = (
    "make_ready",
    "take",
    "answer",
    "wake_due",
    "cancel",
    "route",
    "hold",
    "held",
    "prioritize",
)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = timedelta(milliseconds=1)


def milliseconds(duration: timedelta) -> int:
    """A positive duration in whole milliseconds, rounded up (a 0.4 ms lease is 1 ms, never
    0, which a script would read as already expired)."""
    return max(1, -(-duration // _MS))


def as_text(value: str | bytes) -> str:
    """A reply as text, whether or not the client decodes responses."""
    return value if isinstance(value, str) else value.decode("utf-8")


@cache
def lua(name: str) -> str:
    """The text of ``scripts/<name>.lua``."""
    return (resources.files("durable_redis") / "scripts" / f"{name}.lua").read_text("utf-8")


def _compose(prelude: str, *parts: str) -> str:
    return "\n".join(("#!lua", lua(prelude), *parts))


def checkpoint_source(name: str) -> str:
    """A checkpoint script with the prelude, or as written when it carries its own ``#!lua``
    line (a read-only script declaring ``flags=no-writes`` needs no helpers)."""
    text = lua(name)
    return text if text.startswith("#!lua") else _compose("prelude", text)


def index_source(name: str) -> str:
    """An index script: a body of its own, touching only the zsets it declares."""
    return "\n".join(("#!lua", lua(name)))


def queue_source(name: str) -> str:
    return _compose("queue_prelude", lua(name))


def effect_source(effect: str) -> str:
    """The transact script with ``effect`` composed in as a function of its own KEYS and
    ARGV (shadowing the script's, so the effect sees only what it declared)."""
    return _compose(
        "prelude",
        "local function effect(KEYS, ARGV)",
        effect,
        "end",
        lua("transact"),
    )


class ScriptBook:
    """The scripts registered on one client, plus the composed transact scripts, cached by
    their effect's source (bounded, oldest first out, for callers that generate sources)."""

    EFFECT_CACHE = 256

    def __init__(self, client: Client, names: Sequence[str], source: Callable[[str], str]) -> None:
        self._client = client
        self._scripts: dict[str, AsyncScript] = {
            name: client.register_script(source(name)) for name in names
        }
        self._effects: dict[str, AsyncScript] = {}

    def __getitem__(self, name: str) -> AsyncScript:
        return self._scripts[name]

    def effect(self, source: str) -> AsyncScript:
        script = self._effects.get(source)
        if script is None:
            if len(self._effects) >= self.EFFECT_CACHE:
                del self._effects[next(iter(self._effects))]
            script = self._client.register_script(effect_source(source))
            self._effects[source] = script
        return script

    async def preload(self) -> None:
        """Load every script now (into every primary, on a cluster)."""
        for script in self._scripts.values():
            script.sha = await self._client.script_load(script.script)


def describe(client: Client) -> str:
    """Where ``client`` points, for messages (never its credentials)."""
    if isinstance(client, RedisCluster):
        first = next(iter(client.nodes_manager.startup_nodes), None)
        return f"the Redis Cluster at {first}" if first else "the Redis Cluster"
    service = getattr(client.connection_pool, "service_name", None)
    if service is not None:
        return f"the Redis primary of Sentinel service {service!r}"
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"Redis at unix:{kwargs['path']}"
    host, port, db = kwargs.get("host", "localhost"), kwargs.get("port", 6379), kwargs.get("db", 0)
    return f"Redis at {host}:{port}/{db}"


def translate(
    error: Exception, *, where: str, doing: str, keys: Sequence[str] = ()
) -> Exception | None:
    """The store's error for a driver ``error``, or ``None`` to let it propagate as is.

    Every outage (see :class:`~durable.interfaces.StoreUnavailable`) becomes a
    :class:`RedisUnavailable` here: a refused or dropped connection, a timeout, a server
    still loading its data, and the cluster client's ways of saying the same (the cluster
    is down, a slot has no node, a slot is moving, a primary was demoted by a failover).
    """
    if isinstance(error, AuthenticationError):
        return RedisUnavailable(
            f"{where} refused the credentials while trying {doing} ({error}); check the "
            "username and password in the URL"
        )
    if isinstance(error, RedisConnectionError | RedisTimeoutError | OSError):
        return RedisUnavailable(
            f"could not reach {where} for {doing}: {_sentence(error)}. Every write here is one "
            "script, so it either landed whole or not at all; retrying is safe, except "
            "for an append (send) without a message id, which appends again"
        )
    if isinstance(error, RedisClusterException) and "cannot be connected" in str(error):
        return RedisUnavailable(f"could not reach {where} for {doing}: {_sentence(error)}")
    if isinstance(error, ClusterDownError | SlotNotCoveredError | TryAgainError):
        return RedisUnavailable(
            f"{where} could not serve {doing} for now ({type(error).__name__}: "
            f"{_sentence(error)}); nothing was written"
        )
    if isinstance(error, ReadOnlyError):
        return RedisUnavailable(
            f"{where} is a read-only replica now (a failover demoted it?) and refused "
            f"{doing}: {_sentence(error)}; nothing was written"
        )
    if isinstance(error, ClusterCrossSlotError):
        return CrossSlotError(keys, f"CROSSSLOT {error}", doing)
    if isinstance(error, RedisClusterException) and "same key slot" in str(error):
        return CrossSlotError(keys, str(error), doing)
    if isinstance(error, ResponseError):
        text = str(error)
        if "non local key" in text or "do not hash to the same slot" in text:
            return CrossSlotError(keys, text, doing)
    return None


def _sentence(error: BaseException) -> str:
    """The driver's message without its closing full stop, for the middle of a sentence."""
    return str(error).strip().rstrip(".") or type(error).__name__
