"""A worker process serving the tests' agent kind: ``python agent_worker.py URL``.

Liveness is one second, so that once the test SIGKILLs this process another worker takes
the workflow over within a second or two (the URL carries ``delivery_lease=1``).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from datetime import timedelta

import durable
from agent_app import workflows
from durable.worker import work


async def main(url: str) -> None:
    async with durable.open(url) as store:
        await work(
            store,
            workflows,
            liveness=timedelta(seconds=1),
            poll=timedelta(milliseconds=100),
            tick=timedelta(milliseconds=200),
            # A workflow still claimed by the killed worker is tried again this soon.
            retry=timedelta(milliseconds=200),
        )


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    asyncio.run(main(sys.argv[1]))
