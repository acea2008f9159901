"""The other process: opens a store by URL and performs the steps it is sent.

Run as ``python -c "from durable_conformance._child import main; main()"`` with a JSON
request on standard input: ``{"url": ..., "steps": [{"op": ..., ...}, ...]}``. It prints
one JSON value per step. A pass claimed here is named by the step's ``as`` so that later
steps can write with it (``begin`` keeps its pass the same way, and never settles it); a
``record`` step may instead carry a ``workflow`` and ``token``,
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
from durable.interfaces import Durable, Fenced, Lifecycle, Pass


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
    if op == "admit":
        admitted = await _lifecycle(cp).admit(step["workflow"], step["kind"], step.get("input"))
        return {"created": admitted.created, "queue": admitted.queue}
    if op == "begin":
        # The pass is kept (under "as") and never settled: a child that begins and exits is
        # a pass that never ended, which is what a crash looks like to the store.
        began = await _lifecycle(cp).begin(
            step["workflow"],
            liveness=timedelta(seconds=step["liveness"]),
            budget=timedelta(seconds=step["budget"]),
            owner=step["owner"],
        )
        if began is None:
            return None
        if began.holder is not None:
            passes[step["as"]] = began.holder
        return began.attempts
    if op == "status":
        found = await _lifecycle(cp).status(step["workflow"])
        if found is None:
            return None
        return {"status": str(found.status), "kind": found.kind, "attempts": found.attempts}
    if op == "make_ready":
        await store.scheduler.make_ready(step["workflow"])
        return None
    raise ValueError(f"unknown step {op!r}")


def _lifecycle(checkpointer: object) -> Lifecycle:
    if not isinstance(checkpointer, Lifecycle):
        raise TypeError(f"{checkpointer!r} does not offer lifecycle")
    return checkpointer


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
