"""Time, passed in rather than read from a global.

Stores measure leases and stamp history by a clock; tests inject a :class:`ManualClock`
instead of sleeping. Every moment here is timezone-aware UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol

__all__ = ["Clock", "ManualClock", "SystemClock"]


class Clock(Protocol):
    def now(self) -> datetime:
        """The current moment, timezone-aware UTC."""
        ...


class SystemClock:
    """The machine's wall clock."""

    __slots__ = ()

    def now(self) -> datetime:
        return datetime.now(UTC)

    def __repr__(self) -> str:
        return "SystemClock()"


class ManualClock:
    """A clock that moves only when told to, for tests."""

    __slots__ = ("_now",)

    def __init__(self, start: datetime | None = None) -> None:
        start = start or datetime(2026, 1, 1, tzinfo=UTC)
        if start.tzinfo is None:
            raise ValueError(f"ManualClock needs a timezone-aware start, got {start!r}")
        self._now = start.astimezone(UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, by: timedelta) -> datetime:
        """Move forward by ``by`` (which may not be negative) and return the new moment."""
        if by < timedelta(0):
            raise ValueError(f"a clock does not run backwards; got {by!r}")
        self._now += by
        return self._now

    def __repr__(self) -> str:
        return f"ManualClock({self._now.isoformat()})"
