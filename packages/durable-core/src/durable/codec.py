"""How a value becomes what a store holds, and back.

What a step's result becomes in the store is a boundary decision that belongs to the
application (what an operator reads out of the store, what another language parses),
so the codec is an interface every store takes rather than a choice made here.

It is one object rather than a pair of functions because both requirements are about the
pair: ``decode(encode(x))`` MUST equal ``x``, or a resumed pass sees something the first
pass did not, one crash later; and ``encode`` MUST be deterministic, because ``record``
decides who won a race by comparing encodings.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from durable.boundary import shown

__all__ = ["CheckpointCodec", "JsonCodec", "UnencodableValue", "encode_value"]

Encoded = TypeVar("Encoded")


class CheckpointCodec(Protocol[Encoded]):
    """Turns values into what a store holds. Only the encoded side is a type parameter:
    a checkpoint is heterogeneous by construction, so the decoded side is ``object`` and
    any precision belongs inside the codec (a pydantic ``TypeAdapter``, say)."""

    def encode(self, value: object) -> Encoded:
        """Deterministic: equal values MUST encode to equal results, every time."""
        ...

    def decode(self, encoded: Encoded) -> object:
        """The inverse of ``encode``: ``decode(encode(x)) == x`` MUST hold."""
        ...


class UnencodableValue(TypeError):
    """A value the store's codec refuses. Raised before anything is written."""

    def __init__(self, workflow: str, key: str, value: object, reason: BaseException) -> None:
        self.workflow = workflow
        self.key = key
        self.value = value
        super().__init__(
            f"workflow {workflow!r}, key {key!r}: the store's codec cannot encode {shown(value)}: "
            f"{reason}; return a value the codec accepts (JsonCodec takes None, bool, int, "
            "finite float, str, list, tuple and dict with str keys) or configure another codec"
        )


# One encoder for every call: json.dumps with non-default options builds a new one each time,
# which is a measurable share of a recorded step on the fast stores.
_ENCODER = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
)
_DECODE = json.JSONDecoder().decode
# The decoder's own scanner (the C one where there is one); typeshed does not declare it.
_SCAN: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]
_SCALARS: dict[type, Callable[[Any], str]] = {
    str: json.encoder.encode_basestring,  # ensure_ascii=False, as _ENCODER
    int: int.__repr__,  # what the encoder writes for an int
    bool: lambda value: "true" if value else "false",
    type(None): lambda value: "null",
}
"""Exact types whose encoding is one call: what ``_ENCODER.encode`` writes for them."""


class JsonCodec:
    """The default codec: stdlib ``json``, text out.

    Keys are sorted and separators fixed so that equal values always encode alike, which
    is what lets a store compare encodings to decide a race. NaN and infinities are refused
    rather than written as the non-standard tokens ``json`` would emit, which other
    languages' parsers reject. A tuple encodes as an array and so decodes as a list: the
    round trip is not the identity for tuples, which is why every durable read takes a
    parser.
    """

    __slots__ = ()

    def encode(self, value: object) -> str:
        scalar = _SCALARS.get(type(value))
        if scalar is not None:
            # What json itself writes for these exact types, without walking the value for
            # a refusal none of them can have: a step's result is often one of them.
            try:
                return scalar(value)
            except ValueError as error:  # an int past sys.get_int_max_str_digits()
                raise TypeError(str(error)) from error
        refusal = _refusal(value, set())
        if refusal is not None:
            raise TypeError(refusal)
        try:
            return _ENCODER.encode(value)
        except ValueError as error:
            raise TypeError(str(error)) from error

    def decode(self, encoded: str) -> object:
        # The scanner alone reads an encoding this codec wrote (no surrounding blanks)
        # exactly as the full decode does, without its two whitespace matches; anything
        # else, malformed included, goes to the full decode and its own error.
        try:
            value, end = _SCAN(encoded, 0)
        except Exception:
            return _DECODE(encoded)
        if end != len(encoded):
            return _DECODE(encoded)
        return value

    def __repr__(self) -> str:
        return "JsonCodec()"


def _refusal(value: object, enclosing: set[int]) -> str | None:
    """Why ``json`` would not carry ``value`` faithfully, or ``None``.

    ``json`` refuses most of what it cannot carry by itself. What it gets wrong is a
    non-string key, which it silently turns into a string: ``{1: "a"}`` comes back as
    ``{"1": "a"}`` and encodes exactly like it, so a race between the two would be
    decided as a tie. NaN is refused here too, to say so by name. ``enclosing`` holds the
    containers on the path down to ``value``, so that a value containing itself is
    refused as circular instead of walked until the stack runs out, while one container
    appearing twice side by side is fine.
    """
    if isinstance(value, float):
        return None if math.isfinite(value) else "NaN and infinite floats have no JSON encoding"
    if not isinstance(value, dict | list | tuple):
        return None
    if id(value) in enclosing:
        return "the value contains itself (a circular reference)"
    enclosing.add(id(value))
    try:
        items: Iterable[object] = value
        if isinstance(value, dict):
            for key in value:
                if not isinstance(key, str):
                    return (
                        f"JSON object keys must be strings, got {key!r} "
                        f"({type(key).__name__}), which would come back as a different key"
                    )
            items = value.values()
        for item in items:
            refusal = _refusal(item, enclosing)
            if refusal is not None:
                return refusal
        return None
    finally:
        enclosing.discard(id(value))


def encode_value(
    codec: CheckpointCodec[Encoded], value: object, *, workflow: str, key: str
) -> Encoded:
    """Encode ``value`` for ``workflow``/``key``, turning any refusal into
    :class:`UnencodableValue` so the caller learns which workflow and key it was."""
    try:
        return codec.encode(value)
    except (TypeError, ValueError, OverflowError, RecursionError) as error:
        raise UnencodableValue(workflow, key, value, error) from error
