"""A worker process for ``test_failover.py``: it serves workflows while the primary dies.

``python failover_worker.py URL NAME JOURNAL STEPS PAUSE``: runs :func:`durable.worker.work`
on ``URL`` (a multi-host URL with ``target_session_attrs=read-write``), two passes at a time, each
step followed by ``PAUSE`` seconds of other work, until SIGTERM, and writes to
``JOURNAL``, one JSON line each and flushed at once, everything the store acknowledged to it:

* ``{"pass": WORKFLOW, "token": N, "nonce": ...}`` when a pass begins (a claim the store
  answered with token ``N``);
* ``{"record": WORKFLOW, "key": KEY, "value": VALUE}`` when a step or a ``transact`` returned
  (the store said the record is durable).

The journal is this process's memory of what it was told, kept outside the store, so the
test can ask the promoted standby whether it remembers the same. Each step's value is new
on every attempt (the pass's token and a random tag), so a record lost and then written
again by a later pass shows up as a different value, not as the same one.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
import uuid
from datetime import timedelta
from typing import IO, Any

import durable
from durable.parsers import exactly
from durable.run import Run
from durable.worker import work
from psycopg import AsyncCursor, sql


def effects_table(schema: str) -> sql.Composed:
    """The application's table the ``transact`` step writes (the test creates it): one row
    per workflow and key, counting how often the effect was performed (it must end at 1)."""
    return sql.SQL("{}.failover_effects").format(sql.Identifier(schema))


class Journal:
    """What the store acknowledged to this process, one flushed JSON line each."""

    def __init__(self, file: IO[str]) -> None:
        self.file = file

    def write(self, **entry: object) -> None:
        self.file.write(json.dumps({**entry, "at": time.time()}) + "\n")
        self.file.flush()


def serve(schema: str, name: str, journal: Journal, steps: int, pause: float) -> durable.Workflows:
    """The registry: one kind, ``transfer``: ``steps`` steps, one effect, ``steps`` more."""
    registry = durable.Workflows()
    table = effects_table(schema)

    @registry.kind("transfer")
    async def transfer(run: Run[Any], _input: object) -> str:
        token = run.holder.token
        journal.write(**{"pass": run.workflow, "token": token, "nonce": uuid.uuid4().hex})

        async def step(key: str) -> str:
            def value() -> str:
                return f"{name}:{token}:{uuid.uuid4().hex[:8]}"

            stored = await run.step(key, value, exactly(str))
            journal.write(record=run.workflow, key=key, value=stored)
            await asyncio.sleep(pause)
            return stored

        for i in range(steps):
            await step(f"before-{i}")

        async def book(cursor: AsyncCursor[Any]) -> object:
            await cursor.execute(
                sql.SQL(
                    "INSERT INTO {} (workflow, key, performed) VALUES (%s, 'booked', 1) "
                    "ON CONFLICT (workflow, key) DO UPDATE SET performed = {}.performed + 1 "
                    "RETURNING performed"
                ).format(table, table),
                (run.workflow,),
            )
            row = await cursor.fetchone()
            assert row is not None
            return f"{row[0]}:{token}:{uuid.uuid4().hex[:8]}"

        booked = await run.transact("booked", book, exactly(str))
        journal.write(record=run.workflow, key="booked", value=booked)
        last = ""
        for i in range(steps):
            last = await step(f"after-{i}")
        return last

    return registry


async def main(url: str, name: str, path: str, steps: str, pause: str) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    schema = next(
        (p.partition("=")[2] for p in url.partition("?")[2].split("&") if p.startswith("schema=")),
        "durable",
    )
    with open(path, "a") as file:  # noqa: ASYNC230 (opened once, before the loop runs)
        registry = serve(schema, name, Journal(file), int(steps), float(pause))
        async with durable.open(url) as store:
            await work(
                store,
                registry,
                limit=2,
                liveness=timedelta(seconds=1),
                poll=timedelta(milliseconds=50),
                tick=timedelta(milliseconds=100),
                retry=timedelta(milliseconds=200),
                stop=stop,
                grace=timedelta(seconds=2),
                name=name,
                schedules=False,
            )


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:6]))
