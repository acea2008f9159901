"""The other process: opens a store by URL and performs the steps it is sent.

Run as ``python -c "from durable_conformance._child import main; main()"`` with a JSON
request on standard input: ``{"url": ..., "steps": [{"op": ..., ...}, ...]}``. It prints
one JSON value per step. A pass claimed here is named by the step's ``as`` so that later
steps can write with it; a ``record`` step may instead carry a ``workflow`` and ``token``,
to write with a pass another process was issued. ``Fenced`` is an answer
(``{"fenced": message}``), not a crash: that a write from this process is refused is often
what the parent wants to see.
"""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import timedelta
from typing import Any

import durable
from durable.interfaces import Durable, Fenced, Pass


async def _perform(store: Durable[Any], step: dict[str, Any], passes: dict[str, Pass]) -> object:
    cp = store.checkpointer
    op = step["op"]
    if op == "load":
        return await cp.load(step["workflow"])
    if op == "history":
        return [[e.key, e.value, e.at.isoformat()] for e in await cp.history(step["workflow"])]
    if op == "supply":
        return await cp.supply(step["workflow"], step["key"], step["value"])
    if op == "append":
        return await cp.append(step["workflow"], step["value"])
    if op == "claim":
        holder = await cp.claim(
            step["workflow"],
            liveness=timedelta(seconds=step["liveness"]),
            budget=timedelta(seconds=step["budget"]),
        )
        if holder is None:
            return None
        passes[step["as"]] = holder
        return holder.token
    if op == "record":
        holder = passes[step["as"]] if "as" in step else Pass(step["workflow"], step["token"])
        written = await cp.record(holder, step["key"], step["value"])
        return {"value": written.value, "first": written.first}
    if op == "release":
        await cp.release(passes[step["as"]])
        return None
    if op == "make_ready":
        await store.scheduler.make_ready(step["workflow"])
        return None
    raise ValueError(f"unknown step {op!r}")


async def _run(request: dict[str, Any]) -> list[object]:
    results: list[object] = []
    passes: dict[str, Pass] = {}
    async with durable.open(request["url"]) as store:
        for step in request["steps"]:
            try:
                results.append(await _perform(store, step, passes))
            except Fenced as fenced:
                results.append({"fenced": str(fenced)})
    return results


def main() -> None:
    request = json.loads(sys.stdin.read())
    results = asyncio.run(_run(request))
    sys.stdout.write(json.dumps(results))
    sys.stdout.flush()
