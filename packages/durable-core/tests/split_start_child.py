"""A ``start`` run in a process of its own, killed between its two writes.

``python split_start_child.py CHECKPOINTS QUEUE WORKFLOW MODE``: opens the store at
``CHECKPOINTS`` for its checkpointer (with its lifecycle) and the store at ``QUEUE`` for its
scheduler, puts them side by side in a ``SplitDurable``, and starts ``WORKFLOW`` as kind
``greet`` with input ``"ada"``, killing its own process (SIGKILL: no finally, no flush, no
polite close) by ``MODE``:

* ``before``: before ``start`` writes anything;
* ``between``: after the lifecycle row is written, as the queue is about to be;
* ``after``: once ``start`` has returned, both writes done.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import durable
from durable.durable import SplitDurable
from durable.interfaces import Scheduler


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class DyingQueue:
    """The scheduler, except that the process dies as ``make_ready`` is called."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._scheduler = scheduler

    def __getattr__(self, name: str) -> object:
        return getattr(self._scheduler, name)

    async def make_ready(self, workflow: str) -> None:
        die()


async def main(checkpoints: str, queue: str, workflow: str, mode: str) -> None:
    async with durable.open(checkpoints) as held, durable.open(queue) as queued:
        scheduler: Scheduler = queued.scheduler
        if mode == "between":
            scheduler = DyingQueue(scheduler)  # type: ignore[assignment]
        split = SplitDurable(held.checkpointer, scheduler)
        if mode == "before":
            die()
        await split.start("greet", workflow, "ada")
        if mode == "after":
            die()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
