"""A pass run in a process of its own, which the test in ``test_steps.py`` kills.

``python steps_child.py URL WORKFLOW MODE LEDGER``: one pass over ``WORKFLOW`` whose step
``charge`` (with a retry policy, so its attempts are recorded) appends the idempotency key
it was handed to the ``LEDGER`` file (the outside world, a gateway's book), then, by
``MODE``:

* ``hang``: waits for ever, so the test SIGKILLs it mid-attempt;
* ``die``: SIGKILLs its own process, between the effect and its record.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from datetime import timedelta
from typing import Any

import durable
from durable.parsers import as_is
from durable.run import Run, StepContext, resume


async def main(url: str, workflow: str, mode: str, ledger: str) -> None:
    async def charge(context: StepContext) -> str:
        with open(ledger, "a") as book:  # noqa: ASYNC230 (one line, then the process dies)
            book.write(context.idempotency_key + "\n")
        if mode == "hang":
            await asyncio.sleep(3600)
        os.kill(os.getpid(), signal.SIGKILL)
        return "unreachable"

    async def body(run: Run[Any]) -> object:
        return await run.step(
            "charge",
            charge,
            as_is,
            retry=durable.RetryPolicy(max_attempts=3, initial=timedelta(milliseconds=1)),
            context=True,
        )

    async with durable.open(url) as store:
        await resume(store, workflow, body, liveness=timedelta(seconds=1))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
