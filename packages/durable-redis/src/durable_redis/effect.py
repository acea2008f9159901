"""``LuaEffect``: what ``RedisCheckpointer.transact`` commits alongside a record."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["LuaArg", "LuaEffect"]

LuaArg = str | int | float | bytes
"""What an effect's ``ARGV`` may carry: Redis passes every argument as a string."""


@dataclass(frozen=True, slots=True)
class LuaEffect:
    """A Lua script body that performs a write in this Redis and returns its result.

    ``source`` runs with ``KEYS`` set to ``keys`` and ``ARGV`` to ``args`` (its own, not
    the store's), inside the same script that records its result, so the write and the
    record commit together: run the workflow ten times and the effect happens once. It
    must return the result encoded in the store's codec, a string (``cjson.encode(...)``
    under the default JSON codec).

    Every key the source touches must be in ``keys``, and each must carry the workflow's
    hash tag (``checkpointer.hash_key(workflow)``): keys without it are refused before
    anything is sent. A Redis script is not rolled back when it fails part way, so the
    store saves each declared key before the effect runs and restores them if it raises;
    a key it never declared is beyond that (and refused by a cluster).

    Example, the ledger that moves once however often the workflow runs::

        LuaEffect(
            source="return cjson.encode("
            "redis.call('HINCRBY', KEYS[1], ARGV[1], tonumber(ARGV[2])))",
            keys=(f"{checkpointer.hash_key(workflow)}:ledger",),
            args=("piano", 1),
        )
    """

    source: str
    keys: tuple[str, ...] = ()
    args: tuple[LuaArg, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.source, str) or not self.source.strip():
            raise ValueError(f"a LuaEffect needs Lua source text, got {self.source!r}")
        keys: object = self.keys
        args: object = self.args
        if isinstance(keys, str | bytes) or not isinstance(keys, Sequence):
            raise TypeError(f"LuaEffect.keys must be a sequence of key names, got {keys!r}")
        if isinstance(args, str | bytes) or not isinstance(args, Sequence):
            raise TypeError(f"LuaEffect.args must be a sequence of arguments, got {args!r}")
        for key in keys:
            if not isinstance(key, str) or not key:
                raise TypeError(f"a LuaEffect key must be a non-empty string, got {key!r}")
        for arg in args:
            if isinstance(arg, bool) or not isinstance(arg, str | int | float | bytes):
                raise TypeError(
                    f"a LuaEffect argument must be str, int, float or bytes (Redis passes "
                    f"each as a string), got {arg!r}"
                )
        # Lists are accepted for convenience and kept as tuples, so an effect is hashable
        # and cannot change between being checked and being sent.
        object.__setattr__(self, "keys", tuple(keys))
        object.__setattr__(self, "args", tuple(args))
