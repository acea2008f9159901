"""Parsers for durable reads that check rather than convert.

Every durable read takes a parser because a store hands back what it holds, not the object
an effect produced. A converting parser such as ``bool`` or ``str`` defeats the point:
``bool("no")`` is ``True``. These check the shape and refuse anything else, so a value of
the wrong type is a ``ParseFailed`` naming the workflow and key instead of a silent yes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

__all__ = ["as_is", "exactly"]

T = TypeVar("T")


def exactly(kind: type[T]) -> Callable[[object], T]:
    """A parser accepting only instances of ``kind`` (and, for ``int``, not ``bool``)::

    approved = await run.awaiting("approval", exactly(bool))
    """

    def parse(value: object) -> T:
        if isinstance(value, kind) and not (kind is int and isinstance(value, bool)):
            return value
        raise TypeError(f"expected {kind.__name__}, got {type(value).__name__} {value!r}")

    parse.__name__ = parse.__qualname__ = f"exactly({kind.__name__})"
    return parse


def as_is(value: object) -> object:
    """The parser that accepts anything and hands it back unchanged.

    For an input or a result whose shape the caller checks itself, or does not care about:
    it states that choice where a reader sees it, rather than leaving a parser out.
    """
    return value
