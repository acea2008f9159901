"""How many times a kind's body is tried, and how long a worker waits between tries.

A failure that is retried without bound is a failure nobody hears about: the previous
release deferred every raising pass by a fixed five seconds, forever. A ``RetryPolicy``
bounds it (ten attempts by default, the wait doubling from one second to five minutes,
about eight and a half minutes in all) and then records the workflow ``failed`` with the
last error, where ``durable show`` and ``WorkflowHandle.result`` find it.
"""

from __future__ import annotations

import math
import random as _random
import traceback as _traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from durable.interfaces import Failure, Interruption, StoreUnavailable

__all__ = ["RetryPolicy", "counts", "failure_of"]

MESSAGE_LIMIT = 1000
"""A failure's message is cut to this many characters: a row, not a log file."""

TRACEBACK_LIMIT = 4000
"""A failure's traceback keeps its last this-many characters, where the raise is."""

TRACEBACK_FRAMES = 8
"""How many of the innermost frames a failure's traceback keeps."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """What happens when a kind's body, or one step (``Run.step(..., retry=...)``), raises.

    After failed attempt ``n`` (1-based) the workflow sleeps
    ``min(maximum, initial * multiplier ** (n - 1)) * (1 - jitter * random())`` and is
    tried again, until ``max_attempts`` attempts have failed or an error is one of
    ``non_retryable`` (or a subclass of one); then it is ``failed``. Jitter only ever
    shortens the wait, so ``maximum`` is a true cap, and many workflows that failed
    together (a gateway that went down) do not all come back in the same instant.

    ``suspend_after`` matters to a step only: a backoff up to it is waited out inside the
    pass, a longer one ends the pass and sleeps the workflow durably, so a step retrying
    every five minutes holds no worker slot and no claim meanwhile. (A body's backoff is
    always durable: the pass has already ended.)
    """

    max_attempts: int = 10
    initial: timedelta = timedelta(seconds=1)
    multiplier: float = 2.0
    maximum: timedelta = timedelta(minutes=5)
    jitter: float = 0.2
    non_retryable: tuple[type[Exception], ...] = ()
    suspend_after: timedelta = timedelta(seconds=5)

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise TypeError(f"RetryPolicy.max_attempts must be an int, got {self.max_attempts!r}")
        if self.max_attempts < 1:
            raise ValueError(
                f"RetryPolicy.max_attempts must be at least 1 (1 means never retry), "
                f"got {self.max_attempts}"
            )
        for name in ("initial", "maximum", "suspend_after"):
            value = getattr(self, name)
            if not isinstance(value, timedelta):
                raise TypeError(f"RetryPolicy.{name} must be a datetime.timedelta, got {value!r}")
            if value <= timedelta(0):
                raise ValueError(f"RetryPolicy.{name} must be positive, got {value!r}")
        if self.maximum < self.initial:
            raise ValueError(
                f"RetryPolicy.maximum ({self.maximum}) must be at least initial ({self.initial})"
            )
        if isinstance(self.multiplier, bool) or not isinstance(self.multiplier, int | float):
            raise TypeError(f"RetryPolicy.multiplier must be a number, got {self.multiplier!r}")
        if not math.isfinite(self.multiplier) or self.multiplier < 1.0:
            raise ValueError(
                f"RetryPolicy.multiplier must be at least 1.0 (a wait never shrinks), "
                f"got {self.multiplier}"
            )
        if isinstance(self.jitter, bool) or not isinstance(self.jitter, int | float):
            raise TypeError(f"RetryPolicy.jitter must be a number, got {self.jitter!r}")
        if not 0.0 <= self.jitter <= 1.0:
            raise ValueError(f"RetryPolicy.jitter must be in [0, 1], got {self.jitter}")
        if not isinstance(self.non_retryable, tuple) or not all(
            isinstance(kind, type) and issubclass(kind, Exception) for kind in self.non_retryable
        ):
            raise TypeError(
                "RetryPolicy.non_retryable must be a tuple of Exception subclasses, "
                f"got {self.non_retryable!r}"
            )

    def backoff(self, attempt: int, random: Callable[[], float] = _random.random) -> timedelta:
        """How long to wait after failed attempt ``attempt`` (1-based) before the next.

        The exponent is clamped where the wait reaches ``maximum``, so a workflow on its
        thousandth attempt computes no float overflow. ``random`` is injectable so a test
        passing ``lambda: 0.0`` gets exact times.
        """
        if attempt < 1:
            raise ValueError(f"attempts are counted from 1, got {attempt}")
        ratio = self.maximum / self.initial
        if self.multiplier == 1.0 or ratio <= 1.0:
            exponent = 0
        else:
            cap = math.ceil(math.log(ratio) / math.log(self.multiplier))
            exponent = min(attempt - 1, cap)
        base = min(self.maximum, self.initial * (self.multiplier**exponent))
        return base * (1.0 - self.jitter * random())

    def gives_up(self, error: BaseException, attempts: int) -> bool:
        """Whether ``error``, raised by attempt ``attempts``, fails the workflow for good."""
        return attempts >= self.max_attempts or isinstance(error, self.non_retryable)


def counts(error: BaseException) -> bool:
    """Whether ``error`` ending a pass spends one of its workflow's attempts.

    An ``Interruption`` (fenced, contended, suspended) and a ``StoreUnavailable`` (an
    outage) say nothing about the work: the pass was stopped, not wrong. Every other
    error is the body's, including a ``StoreError`` its own effect raised.
    """
    return not isinstance(error, Interruption | StoreUnavailable)


def _qualified(kind: type[BaseException]) -> str:
    module = kind.__module__
    if module in ("builtins", "__main__"):
        return kind.__qualname__
    return f"{module}.{kind.__qualname__}"


def failure_of(error: BaseException, attempts: int) -> Failure:
    """The bounded record of ``error``: qualified type, message and the innermost frames.

    Text, never the exception object: a failure is read back by another process, perhaps
    another version of the code, so only what prints survives.
    """
    message = str(error)
    if len(message) > MESSAGE_LIMIT:
        message = message[: MESSAGE_LIMIT - 1] + "…"
    lines = _traceback.format_exception(error, limit=-TRACEBACK_FRAMES)
    text = "".join(lines)
    if len(text) > TRACEBACK_LIMIT:
        text = "…" + text[-(TRACEBACK_LIMIT - 1) :]
    return Failure(type=_qualified(type(error)), message=message, traceback=text, attempts=attempts)
