"""A pass in a process of its own, which ``test_fencing.py`` stalls with SIGSTOP.

``python fencing_child.py URL GATEWAY WORKFLOW DIRECTORY``: one pass over ``WORKFLOW``
(liveness one second) whose step ``capture`` builds its request, says so in
``DIRECTORY/entered`` (with its fencing token), waits for ``DIRECTORY/go``, and then sends
the capture to the gateway, fenced by the order and its pass's token.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import durable
from durable.parsers import as_is
from durable.run import Run, StepContext, resume
from durable_examples.gateway import Gateway


async def main(url: str, ledger: str, workflow: str, directory: str) -> None:
    gateway = Gateway(ledger)
    folder = Path(directory)

    async def capture(context: StepContext) -> object:
        # Written aside and renamed, so the test never reads half of it.
        aside = folder / "entered.part"
        aside.write_text(json.dumps({"token": context.fencing_token}), encoding="utf-8")
        aside.replace(folder / "entered")
        while not (folder / "go").exists():  # noqa: ASYNC110 (news from another process)
            await asyncio.sleep(0.01)
        return await gateway.capture(
            context.idempotency_key, 100, "tok_visa", fence=(workflow, context.fencing_token)
        )

    async def body(run: Run[Any]) -> object:
        return await run.step("capture", capture, as_is, context=True)

    async with durable.open(url) as store:
        await resume(store, workflow, body, liveness=timedelta(seconds=1))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
