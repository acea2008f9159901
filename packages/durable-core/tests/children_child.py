"""A worker in a process of its own that dies between a child's two writes.

``python children_child.py URL PARENT``: starts ``PARENT`` (kind ``parent``), whose body
starts the child ``PARENT/c`` (kind ``child``, which returns what arrives under ``go``) and
awaits it, and runs a worker; once both are blocked, 42 arrives for the child. The worker
settles the child ``finished`` (the first write) and then, where it would arrive the
outcome in the parent (the second write, in another slot on a Redis Cluster), SIGKILLs its
own process.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from datetime import timedelta
from typing import Any

import durable
import durable.children
from durable.parsers import exactly
from durable.run import Run
from durable.worker import work

workflows = durable.Workflows()


@workflows.kind("child")
async def child(run: Run[Any], _: object) -> int:
    return await run.awaiting("go", exactly(int))


@workflows.kind("parent")
async def parent(run: Run[Any], _: object) -> object:
    return await run.child("child", "c")


async def die(*_: object) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


async def main(url: str, workflow: str) -> None:
    durable.children.deliver = die  # type: ignore[assignment]
    async with durable.open(url) as store:
        await store.start(parent, workflow)  # type: ignore[attr-defined]
        worker = asyncio.create_task(
            work(store, workflows, poll=timedelta(milliseconds=20), liveness=timedelta(seconds=1))
        )
        # The child ends only once its parent's pass is over (blocked, its delivery
        # answered), so that nothing but the child's own delivery can repair the parent.
        for name in (workflow, f"{workflow}/c"):
            for _ in range(3000):
                found = await store.status(name)  # type: ignore[attr-defined]
                if found is not None and found.status == "blocked":
                    break
                await asyncio.sleep(0.02)
        await asyncio.sleep(0.5)
        await store.arrive(f"{workflow}/c", "go", 42)
        await worker


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:3]))
