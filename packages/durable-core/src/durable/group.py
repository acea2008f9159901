"""Group commit: the writes of one store handle that arrive together, sent together.

A store records each step in one round trip and one commit. When many passes of one
process step at once, each of their writes paid its own trip and its own commit, one after
another. Group commit sends the writes that arrive while one is on its way together, once
it is back: one trip and one commit for all of them. Each write keeps its own verdict (its
fence and its first-writer-wins decision are its own statement's or script's), and each
caller is answered only once its write is durable.

This module holds what every store's group commit shares, so that it is written once: who
goes at once and alone, who waits, when a batch leaves, and how the waiting callers are
answered when a batch fails. What a batch *is* belongs to the store: one SQLite
transaction with a savepoint per write, one multi-row PostgreSQL statement, one Redis
pipeline per node. A store subclasses :class:`GroupCommit` and says how one write goes
alone (:meth:`GroupCommit.alone`) and how several go together
(:meth:`GroupCommit.together`). A store written outside this project may use it the same
way; nothing in the conformance suite depends on it.

The rules it keeps:

- **A lone write never waits for company.** A write that finds nothing on its way goes at
  once, by the store's ordinary path. Only when the last batch answered several callers
  does the next write first let the event loop turn once, so that the passes that batch
  woke, which write again in the same instant, join it instead of queueing a whole trip
  behind it.
- **At most one batch on its way per handle.** Writes that arrive meanwhile wait for it
  and leave together as the next batch, in the order they arrived.
- **Every caller is answered, whatever happens.** If a batch fails as a whole, each of its
  callers gets that error (or is cancelled, if the batch was); a caller cancelled while it
  waits leaves its write in the batch, whose fate it no longer hears.
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar, Generic, TypeVar

__all__ = ["GroupCommit", "Waiting"]


class Waiting:
    """One write waiting for a batch; its caller awaits :attr:`future`.

    A store's own kind of write subclasses it and adds what the write is (its statement,
    its script, its function), and :meth:`GroupCommit.together` answers the future.
    """

    __slots__ = ("future",)

    def __init__(self) -> None:
        self.future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def answer(self, value: object) -> None:
        """Hand the caller ``value``, unless it has stopped waiting."""
        if not self.future.done():
            self.future.set_result(value)

    def fail(self, error: BaseException) -> None:
        """Hand the caller ``error`` (a cancellation cancels it), unless it has stopped
        waiting."""
        if self.future.done():
            return
        if isinstance(error, asyncio.CancelledError):
            self.future.cancel()
        else:
            self.future.set_exception(error)


W = TypeVar("W", bound=Waiting)


class GroupCommit(Generic[W]):
    """The gate of one store handle's writes: one goes alone, the rest wait and go together.

    Subclasses implement :meth:`alone` and :meth:`together`. A write goes through
    :meth:`submit`; a store whose hot path cannot afford a coroutine of its own may instead
    ask :meth:`take`, send the write itself, and call :meth:`sent` once it is back.
    """

    __slots__ = ("busy", "crowd", "flushing", "pending")

    settle_after_crowd: ClassVar[bool] = True
    """Whether, after a batch of several callers, the next batch waits one turn of the
    event loop before it leaves, so that the writes of the passes it woke join the writes
    that already waited, rather than queue a whole trip behind them. Without it, passes
    stepping together settle into two groups taking turns (the one that went alone first,
    and the rest), each trip carrying a part of them."""

    def __init__(self) -> None:
        self.busy = False
        """Whether a write or a batch of this handle is on its way."""
        self.crowd = False
        """Whether the last trip answered more than one caller."""
        self.pending: list[W] = []
        """The writes waiting for the next batch, in the order they arrived."""
        self.flushing: set[asyncio.Task[None]] = set()  # held: the loop keeps only weak refs

    async def alone(self, write: W) -> Any:
        """Send ``write`` by itself, by the store's ordinary path, and return its outcome;
        its error is raised to its caller."""
        raise NotImplementedError

    async def together(self, batch: list[W]) -> None:
        """Send ``batch`` (two writes or more) and answer each write's future. A write the
        batch could not decide may be sent again by :meth:`answer_alone`. If this raises,
        every write not yet answered gets the error."""
        raise NotImplementedError

    async def submit(self, write: W) -> Any:
        """``write``'s outcome: sent at once and alone if nothing is on its way, else in the
        next batch."""
        if self.busy:
            self.pending.append(write)
            return await write.future
        self.busy = True
        if self.crowd:
            # The passes the last batch woke write again in this same instant: one turn of
            # the event loop lets them join this write instead of queueing a whole trip
            # behind it. After a lone write a lone writer pays nothing.
            try:
                await asyncio.sleep(0)
            except BaseException:
                self._next()
                raise
        if self.pending:
            self.pending.insert(0, write)
            self._next()
            return await write.future
        try:
            return await self.alone(write)
        finally:
            self.sent()

    def take(self) -> bool:
        """Whether a write may go at once and alone, sent by its caller: nothing on its way
        and no crowd just answered. If so the caller holds the handle's turn, sends its
        write by the ordinary path and calls :meth:`sent` once it is back, however it
        ended. :meth:`submit`'s lone path without a coroutine of its own, for the write
        every step makes; ``False`` sends the caller to :meth:`submit`."""
        if self.busy or self.crowd:
            return False
        self.busy = True
        return True

    def sent(self) -> None:
        """A lone write is back: whatever arrived meanwhile leaves as one batch."""
        self.crowd = bool(self.pending)
        self._next()

    async def answer_alone(self, write: W) -> None:
        """Send ``write`` by itself and hand its caller the outcome, whatever it is."""
        try:
            value = await self.alone(write)
        except BaseException as error:
            write.fail(error)
            if not isinstance(error, Exception):
                raise
        else:
            write.answer(value)

    def _next(self) -> None:
        if self.pending:
            batch, self.pending = self.pending, []
            task = asyncio.get_running_loop().create_task(self._flush(batch))
            self.flushing.add(task)
            task.add_done_callback(self.flushing.discard)
        else:
            self.busy = False

    async def _flush(self, batch: list[W]) -> None:
        self.crowd = len(batch) > 1
        try:
            if len(batch) == 1:
                await self.answer_alone(batch[0])
            else:
                await self.together(batch)
        except BaseException as error:
            for write in batch:
                write.fail(error)
            if isinstance(error, KeyboardInterrupt | SystemExit):
                raise
        finally:
            if self.settle_after_crowd and len(batch) > 1:
                asyncio.get_running_loop().call_soon(self._next)
            else:
                self._next()
