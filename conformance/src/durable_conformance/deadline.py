"""A test's deadline, kept even against code that never gives the event loop back.

asyncio cancels a task only at an ``await``. A store method that loops without awaiting
(a polling consumer that looks, and looks again, until something is ready) holds the
event loop: ``asyncio.timeout`` never gets to run, nothing else does either, and a run
that should have failed one test past ``--durable-timeout`` hangs with nothing said.

So past the deadline the suite also looks from outside, as pytest-timeout's signal method
does: a ``SIGALRM`` handler, which Python runs in the main thread between two bytecodes of
whatever the main thread is running, asks the loop to answer a ping
(``call_soon_threadsafe``, which wakes a loop that is merely waiting). A loop that has
not answered within :data:`STUCK` seconds is stuck in one step, and the handler raises
:class:`Overrun` right there, in the code that holds it, which unwinds the one test. A loop
that does answer is left to the cooperative timeout, unless the test still has not ended
:data:`CEILING` seconds past the deadline (a store swallowing its cancellation), when the
handler raises all the same.

Signals reach only the main thread, and Windows has no ``SIGALRM``: there, and when the
test does not run in the main thread, the cooperative timeout is all there is.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import threading
import time
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

__all__ = ["CEILING", "STUCK", "Deadline", "Overrun"]

STUCK = 1.0
"""Seconds past the deadline a loop may go without answering a ping before it is stuck."""

CEILING = 10.0
"""Seconds past the deadline after which a test whose loop still answers, but which has not
ended (its cancellation swallowed, its teardown hanging), is stopped from outside too."""

_CHECK = STUCK / 4
"""How often, past the deadline, the handler looks."""


class Overrun(BaseException):
    """Raised from outside into code that ran past its deadline without giving the event
    loop back. A ``BaseException``, like ``KeyboardInterrupt``, so that a store's ``except
    Exception`` does not swallow it and carry on looping."""

    def __init__(self, where: str, *, stuck: bool) -> None:
        super().__init__(where)
        self.where = where
        self.stuck = stuck


_SHOWN = 3
"""How many calls the message names: the innermost ones, and the outermost (the store's
method the suite called) when there are more."""

_NOT_THE_STORES = (
    str(Path(asyncio.__file__).parent),
    str(Path(__file__).parent),
    str(Path(contextlib.__file__)),
)
"""Where frames are the event loop's or the suite's own, not the code that held the loop."""


def _where(frame: FrameType | None) -> str:
    """The innermost calls of the code ``frame`` was stopped in, each called from the next,
    up to the event loop's own frames and leaving out the suite's."""
    calls: list[str] = []
    while frame is not None and not frame.f_code.co_filename.startswith(
        str(Path(asyncio.__file__).parent)
    ):
        code = frame.f_code
        if not code.co_filename.startswith(_NOT_THE_STORES):
            name = getattr(code, "co_qualname", code.co_name)
            calls.append(f"{name} ({code.co_filename}:{frame.f_lineno})")
        frame = frame.f_back
    if not calls:
        return "the event loop's own code"
    if len(calls) > _SHOWN:
        # The innermost calls say where the loop was held; the outermost, the store's method
        # the suite called, which is the one a store author looks for.
        calls = [*calls[: _SHOWN - 1], "...", calls[-1]]
    return ", called from ".join(calls)


def _quiet_about_overruns(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's exception handler, but silent about an :class:`Overrun` left in a task
    nobody awaited: the test's failure already says where it was raised."""
    if isinstance(context.get("exception"), Overrun):
        return
    loop.default_exception_handler(context)


class Deadline:
    """``with Deadline(seconds) as deadline:`` around a test's event loop, told the loop
    with :meth:`watch`; past ``seconds`` it stops a loop that will not stop itself.

    What it raised, if anything, is kept in :attr:`overrun` (a test whose stuck code ran
    in a task nobody awaited learns of it there).
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.overrun: Overrun | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._due = 0.0
        self._ping_sent: float | None = None
        self._pings = 0
        self._previous: Any = None
        self._previous_timer = (0.0, 0.0)
        self._armed_at = 0.0
        self._armed = False

    @property
    def enforced(self) -> bool:
        """Whether a loop that never yields can be stopped here (the main thread, a
        platform with ``SIGALRM``)."""
        return hasattr(signal, "setitimer") and threading.current_thread() is (
            threading.main_thread()
        )

    def watch(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        loop.set_exception_handler(_quiet_about_overruns)

    def __enter__(self) -> Deadline:
        if not self.enforced:
            return self
        self._armed_at = time.monotonic()
        self._due = self._armed_at + self.seconds
        self._previous = signal.signal(signal.SIGALRM, self._on_alarm)
        self._previous_timer = signal.setitimer(signal.ITIMER_REAL, self.seconds, _CHECK)
        self._armed = True
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._disarm()

    def _disarm(self) -> None:
        """Stop the timer and give ``SIGALRM`` back as it was found, with what was left
        of a timer someone else had set (pytest-timeout's, say). Safe to call twice."""
        if not self._armed:
            return
        self._armed = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        # None is a handler installed from C, which Python cannot put back; the default is
        # the nearest it can.
        previous = self._previous if self._previous is not None else signal.SIG_DFL
        signal.signal(signal.SIGALRM, previous)
        delay, interval = self._previous_timer
        if delay > 0:
            left = delay - (time.monotonic() - self._armed_at)
            signal.setitimer(signal.ITIMER_REAL, max(left, 0.001), interval)

    def _answered(self, ping: int) -> None:
        if ping == self._pings:
            self._ping_sent = None

    def _on_alarm(self, signum: int, frame: FrameType | None) -> None:
        loop = self._loop
        if not self._armed or loop is None or loop.is_closed():
            # The test is over and only the disarming was cut short (by this very signal,
            # say): finish it rather than raise into whatever runs next.
            self._disarm()
            return
        now = time.monotonic()
        if self._ping_sent is not None and now - self._ping_sent >= STUCK:
            stuck = True
        elif now - self._due >= CEILING:
            stuck = False
        else:
            if self._ping_sent is None:
                self._ping_sent = now
                self._pings += 1
                loop.call_soon_threadsafe(self._answered, self._pings)
            return
        # Look again after the unwinding has had its turn: a teardown that gets stuck in
        # its turn is stopped the same way.
        self._ping_sent = None
        self._pings += 1
        self._due = now
        self.overrun = Overrun(_where(frame), stuck=stuck)
        raise self.overrun
