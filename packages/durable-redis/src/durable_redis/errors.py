"""The errors this store raises, each a type a caller can catch by name."""

from __future__ import annotations

from collections.abc import Sequence

from durable.interfaces import StoreError, StoreUnavailable

__all__ = [
    "CrossSlotError",
    "LuaEffectFailed",
    "RedisUnavailable",
    "ReplicationUnconfirmed",
    "SchemaTooNew",
    "UntaggedKey",
]


class UntaggedKey(ValueError):
    """A ``LuaEffect`` named a key that does not carry its workflow's hash tag.

    Raised before anything is sent. On a cluster such a key may live on another node,
    where a script cannot reach it; on one node it would work, which is exactly why it
    is refused everywhere rather than discovered in production.
    """

    def __init__(self, workflow: str, key: str, needed: str, example: str, why: str) -> None:
        self.workflow = workflow
        self.key = key
        self.needed = needed
        super().__init__(
            f"workflow {workflow!r}: the LuaEffect key {key!r} {why}; every key an effect "
            f"touches must carry the hash tag {needed} so that it hashes to the workflow's "
            f"slot: build it from checkpointer.hash_key({workflow!r}), as in {example!r}"
        )


class CrossSlotError(StoreError):
    """The server refused a script for reaching keys outside one slot.

    Redis Cluster answers ``CROSSSLOT`` when the declared keys hash to different slots,
    and ``Script attempted to access a non local key`` (or ``keys that do not hash to
    the same slot``) when a script reaches a key it never declared. A cross-node write is
    not expensive on a cluster, it is unavailable, so this is a design error to fix in
    the effect, never a condition to retry.
    """

    def __init__(self, keys: Sequence[str], detail: str, doing: str) -> None:
        self.keys = tuple(keys)
        self.detail = detail
        shown = ", ".join(repr(k) for k in self.keys) or "(none)"
        super().__init__(
            f"{doing}: Redis refused the script because it reaches keys outside one hash "
            f"slot ({detail}); the declared keys were {shown}. Declare every key the "
            "script touches and give each the workflow's hash tag (hash_key(workflow)); "
            "nothing was written"
        )


class LuaEffectFailed(StoreError):
    """A ``LuaEffect`` raised, did not compile, or returned something that is not an
    encoding. Its writes were undone and nothing was recorded."""

    def __init__(self, workflow: str, key: str, detail: str) -> None:
        self.workflow = workflow
        self.key = key
        self.detail = detail
        super().__init__(
            f"workflow {workflow!r}, key {key!r}: the LuaEffect failed: {detail}; its writes "
            "to its declared keys were undone and nothing was recorded"
        )


class RedisUnavailable(StoreUnavailable):
    """The server could not be reached, refused the credentials, or could not serve the call
    for now (a connection dropped, the server still loading its data, a cluster that is down
    or moving a slot, a primary demoted to a replica by a failover).

    Every driver error of that kind is turned into this one in ``scripts.translate``, the
    single place where the store's calls meet redis-py, so a caller (the worker above all)
    can tell an outage from a refusal without importing redis-py. A
    :class:`~durable.interfaces.StoreUnavailable`: a worker waits it out with backoff.
    """


class SchemaTooNew(StoreError):
    """The keys under this prefix were written by a newer durable-redis than this one.

    ``<prefix>:schema`` holds the layout's version; this release reads version 2 and
    upgrades version 1 (no ``schema`` key) in place, but cannot know what a later layout
    changed, so it refuses rather than writing over it.
    """

    def __init__(self, prefix: str, found: str, supported: int) -> None:
        self.prefix, self.found, self.supported = prefix, found, supported
        super().__init__(
            f"the Redis keys under prefix {prefix!r} are at schema version {found}, newer "
            f"than the {supported} this durable-redis reads; upgrade durable-redis"
        )


class ReplicationUnconfirmed(RedisUnavailable):
    """A write reached the primary but not the number of replicas ``wait_replicas=`` asks
    for within ``wait_timeout=``.

    The write is on the primary and may be on some replicas, but if the primary failed now
    a promoted replica might not hold it, so it is never reported as done: the pass stops
    here, and the next pass finds the write (it survived) or does it again (it did not).
    A :class:`RedisUnavailable`, so a worker waits it out as an outage, which is what a
    replica that stopped answering is.
    """

    def __init__(self, where: str, command: str, confirmed: int, wanted: int, timeout_ms: int):
        self.confirmed, self.wanted = confirmed, wanted
        super().__init__(
            f"{where} took a write ({command}) but only {confirmed} of the {wanted} replicas "
            f"wait_replicas= asks for confirmed it within {timeout_ms} ms (wait_timeout=); it "
            "could be lost in a failover, so it is not reported as done. Check the replicas "
            "(INFO replication) or raise wait_timeout="
        )
