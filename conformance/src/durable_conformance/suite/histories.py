"""Histories: many tasks calling at once, checked against the contract's sequential model.

Each requirement elsewhere in the suite is one scenario, chosen because someone thought of
it. This test thinks of none: tasks on several handles issue a random mix of every
Checkpointer call over a few workflows, each call's start, end and result are written
down, and :mod:`durable_conformance.linearize` decides whether some order of the calls,
consistent with real time, explains every result under a small model of what the contract
says. A store that is right in each scenario and wrong when they interleave (a fence read
in one round trip and a write in the next, a counter read and then raced, a discard that
forgets the claim) fails here with the smallest history that shows it.

The calls a task makes are drawn from a seed, which the failure prints; set
``DURABLE_SEED`` to run the same calls again. The interleaving is the scheduler's and the
store's, so a seed reproduces what was asked, not always the order it landed in: run a
failing seed a few times. Where the store's testing hook takes ``gap=``, each move is held
for a random moment at its gap, which widens the windows a race needs.
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from durable.interfaces import Checkpointer, Fenced, Pass, Recorded
from durable.plugins import Probe

from durable_conformance import requirement
from durable_conformance.linearize import Call, check, describe, shrink
from durable_conformance.subject import StoreUnderTest, _accepts
from durable_conformance.suite._support import LONG

SEED_VARIABLE = "DURABLE_SEED"
"""The environment variable that fixes the seed, to run a failing history's calls again."""

WORKFLOWS = 3
HANDLES = 3
TASKS = 6
CALLS_PER_TASK = 30
ROUNDS = 3
"""Histories per test, each over fresh workflows: a race that one history misses, the
next may catch."""
KEYS = ("k1", "k2", "k3", "k4")
VALUES: tuple[object, ...] = ("a", "b", ("c", 1))
"""What record and supply write: a tuple among them, which comes back a list, so that a store
deciding ``first`` by comparing values rather than encodings is caught."""
MESSAGE_IDS = ("m1", "m2")

HOLDING = {
    "record": 4.0,
    "transact": 2.0,
    "renew": 1.0,
    "release": 1.5,
    "supply": 1.0,
    "append": 1.0,
    "load": 1.0,
    "history": 0.5,
    "discard": 0.8,
    "stale": 0.5,
}
"""How often a task holding a live pass on a workflow makes each call on it."""

WAITING = {
    "claim": 4.0,
    "supply": 2.0,
    "append": 2.0,
    "load": 1.5,
    "history": 0.5,
    "count": 0.5,
    "discard": 0.8,
    "stale": 1.0,
}
"""...and a task without one."""


def _seed() -> int:
    chosen = os.environ.get(SEED_VARIABLE)
    return int(chosen) if chosen else random.SystemRandom().randrange(1 << 32)


def normalised(result: object, workflow: str) -> object:
    """A call's result as the checker compares it: plain, hashable values."""
    if isinstance(result, Pass):
        if result.workflow != workflow:
            return ("pass for another workflow", result.workflow, result.token)
        return ("pass", result.token)
    if isinstance(result, Recorded):
        return ("recorded", _plain(result.value), result.first)
    if isinstance(result, dict):
        return tuple((k, _plain(v)) for k, v in result.items())
    return _plain(result)


def _plain(value: object) -> object:
    return tuple(_plain(v) for v in value) if isinstance(value, list) else value


class _Jitter:
    """A gap that holds a move for a random moment, drawn from its own seeded stream."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    async def __call__(self, move: str, workflow: str) -> None:
        roll = self.rng.random()
        if roll < 0.5:
            await asyncio.sleep(0)
        elif roll < 0.8:
            await asyncio.sleep(self.rng.random() * 0.003)


@asynccontextmanager
async def _checkpointers(
    store: StoreUnderTest, rng: random.Random
) -> AsyncIterator[tuple[list[Checkpointer[Any]], Probe[Any] | None]]:
    """Handles on one fresh store, held at their gaps where the store offers them."""
    offers_transact = store.offers("transact")
    testing = store.plugin.testing
    gap = _Jitter(random.Random(rng.random()))
    async with AsyncExitStack() as stack:
        testbed = None
        if testing is not None and _accepts(testing, {"gap": gap}):
            try:
                testbed = await stack.enter_async_context(testing(store.url, gap=gap))
            except (TypeError, ValueError):  # a hook taking **options but no gap
                testbed = None
        if testbed is not None:
            handles = [testbed.durable]
            if testbed.reopen is not None:
                for _ in range(HANDLES - 1):
                    handles.append(await stack.enter_async_context(testbed.reopen()))
            probe = testbed.probe
        else:
            handles = await stack.enter_async_context(store.handles(HANDLES))
            probe = store.testbed.probe
        yield [h.checkpointer for h in handles], (probe if offers_transact else None)


async def _task(
    name: str,
    cp: Checkpointer[Any],
    probe: Probe[Any] | None,
    workflows: list[str],
    rng: random.Random,
    calls: list[Call],
) -> None:
    passes: dict[str, list[Pass]] = {wf: [] for wf in workflows}
    live: dict[str, Pass | None] = {wf: None for wf in workflows}
    for _ in range(CALLS_PER_TASK):
        wf = rng.choice(workflows)
        current, mine = live[wf], passes[wf]
        # A task holding a pass mostly writes with it; one without mostly tries to claim.
        # Either sometimes writes with an older pass, which the store must refuse.
        weights = dict(HOLDING if current is not None else WAITING)
        if probe is None:
            weights.pop("transact", None)
            weights.pop("count", None)
        if not mine:
            weights.pop("stale", None)
        move = rng.choices(list(weights), list(weights.values()))[0]
        holder = current
        if move == "stale":
            move, holder = rng.choice(("record", "renew", "release", "transact")), rng.choice(mine)
            if move == "transact" and probe is None:
                move = "record"
        key, value = rng.choice(KEYS), rng.choice(VALUES)
        args: tuple[object, ...] = ()
        if move == "claim":
            op: Any = cp.claim(wf, liveness=LONG, budget=LONG)
        elif move == "renew":
            assert holder is not None
            args, op = (holder.token,), cp.renew(holder)
        elif move == "release":
            assert holder is not None
            args, op = (holder.token,), cp.release(holder)
        elif move == "record":
            assert holder is not None
            args, op = (holder.token, key, value), cp.record(holder, key, value)
        elif move == "transact":
            assert holder is not None
            assert probe is not None
            effect = probe.bump(wf, "linearizable")
            args, op = (holder.token, key), cp.transact(holder, key, effect)
        elif move == "supply":
            args, op = (key, value), cp.supply(wf, key, value)
        elif move == "append":
            message_id = rng.choice(MESSAGE_IDS) if rng.random() < 0.3 else None
            value = f"{name}-{len(calls)}"
            args, op = (value, message_id), cp.append(wf, value, message_id=message_id)
        elif move == "discard":
            op = cp.discard(wf)
        elif move == "load":
            op = cp.load(wf)
        elif move == "history":
            op = cp.history(wf)
        else:
            assert probe is not None
            op = probe.count(wf, "linearizable")
        start = time.monotonic_ns()
        try:
            answer = await op
            if move == "history":  # its entries, as load's items, for the model to compare
                answer = tuple((entry.key, _plain(entry.value)) for entry in answer)
            result: object = normalised(answer, wf)
        except Fenced:
            result = ("raised", "Fenced")
        except Exception as error:  # any other answer is the store's, and the model's to judge
            result = ("raised", f"{type(error).__name__}: {error}")
        end = time.monotonic_ns()
        calls.append(Call(name, wf, move, args, start, end, result))
        if move == "claim" and isinstance(result, tuple) and result[0] == "pass":
            token = result[1]
            assert isinstance(token, int)
            taken = Pass(wf, token)
            live[wf] = taken
            mine.append(taken)
        elif (
            holder is not None
            and holder == live[wf]
            and (move == "release" or result == ("raised", "Fenced"))
        ):
            live[wf] = None
        if rng.random() < 0.3:
            await asyncio.sleep(0)


async def concurrent_calls(
    checkpointers: list[Checkpointer[Any]],
    probe: Probe[Any] | None,
    workflows: list[str],
    rng: random.Random,
    *,
    tasks: int = TASKS,
) -> list[Call]:
    """What ``tasks`` tasks did, spread over ``checkpointers``, each drawing its calls from
    ``rng``: the history the checker is given."""
    calls: list[Call] = []
    plans = [random.Random(rng.random()) for _ in range(tasks)]
    await asyncio.gather(
        *(
            _task(
                f"t{i}@h{i % len(checkpointers)}",
                checkpointers[i % len(checkpointers)],
                probe,
                workflows,
                plans[i],
                calls,
            )
            for i in range(tasks)
        )
    )
    return calls


@requirement("histories.linearizable")
async def test_histories_of_concurrent_calls_are_linearizable(store: StoreUnderTest) -> None:
    """Tasks on several handles call claim, renew, release, record, transact (where
    offered), supply, append, discard, load and history at random over a few workflows,
    and some order of the calls, consistent with real time, explains every result under
    the contract's sequential model."""
    seed = _seed()
    rng = random.Random(seed)
    async with _checkpointers(store, rng) as (cps, probe):
        for round in range(ROUNDS):
            workflows = [store.workflow(f"h{round}w{i}") for i in range(WORKFLOWS)]
            calls = await concurrent_calls(cps, probe, workflows, rng)
            if check(calls):
                small = shrink(calls)
                raise AssertionError(
                    f"no order of round {round + 1}'s {len(calls)} calls explains every "
                    f"result (seed {seed}; run again with {SEED_VARIABLE}={seed}). The "
                    "smallest failing history found:\n" + describe(small)
                )
