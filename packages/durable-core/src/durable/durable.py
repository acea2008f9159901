"""Durable pairs: a checkpointer and a scheduler, and the moves that cross them."""

from __future__ import annotations

from typing import Generic

from typing_extensions import TypeVar

from durable.boundary import check_key, check_message_id, check_workflow
from durable.interfaces import Checkpointer, Scheduler
from durable.workflows import Lifecycled

__all__ = ["SplitDurable"]

E = TypeVar("E", contravariant=True, default=object)


class SplitDurable(Lifecycled, Generic[E]):
    """Any checkpointer beside any scheduler, each move as two writes in the safe order.

    Not atomic, and the order is the whole of what it can offer: it records first, so a
    crash between the two writes leaves a workflow holding its value and waiting for a
    wakeup that anything asking again supplies. The reverse order would queue a pass that
    wakes, finds nothing, answers for its delivery, and drops the value for good. The
    same reasoning orders ``discard``: forget the records (raising the fence) before the
    runs, so a crash between leaves at worst a wakeup that finds an empty workflow.

    ``start``, ``cancel`` and ``retry`` (from :class:`~durable.workflows.Lifecycled`, when
    the checkpointer offers lifecycle) follow the same order: the lifecycle row first, then
    the queue. A start whose queueing was lost is repaired by starting it again, which
    finds it still ready and queues it; no sweep looks for such starts.
    """

    atomic = False

    def __init__(self, checkpointer: Checkpointer[E], scheduler: Scheduler) -> None:
        self._checkpointer = checkpointer
        self._scheduler = scheduler

    def __repr__(self) -> str:
        return f"SplitDurable({self._checkpointer!r}, {self._scheduler!r})"

    @property
    def checkpointer(self) -> Checkpointer[E]:
        return self._checkpointer

    @property
    def scheduler(self) -> Scheduler:
        return self._scheduler

    async def arrive(self, workflow: str, key: str, value: object) -> object:
        check_workflow(workflow)
        check_key(workflow, key)
        stored = await self._checkpointer.supply(workflow, key, value)
        await self._scheduler.make_ready(workflow)
        return stored

    async def send(self, workflow: str, value: object, *, message_id: str | None = None) -> str:
        check_workflow(workflow)
        check_message_id(workflow, message_id)
        # With an id, a send repeated after a crash between the two writes finds its entry
        # and queues the wakeup the first one never did: the id makes the repair safe.
        # Without one, append is called as it always was, so a checkpointer written before
        # message ids still serves every send that does not use them.
        if message_id is None:
            key = await self._checkpointer.append(workflow, value)
        else:
            key = await self._checkpointer.append(workflow, value, message_id=message_id)
        await self._scheduler.make_ready(workflow)
        return key

    async def discard(self, workflow: str) -> None:
        check_workflow(workflow)
        await self._checkpointer.discard(workflow)
        await self._scheduler.cancel(workflow)
