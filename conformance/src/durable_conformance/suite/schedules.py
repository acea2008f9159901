"""Schedules: each tick of a schedule starts one workflow and runs it once, however many
workers look at it, whenever they look.

A tick's workflow id is the schedule's name and the tick's moment, and every ticker that
finds the tick due calls ``start`` with it; nothing else coordinates them. So the guarantee
rests entirely on the store's ``admit``: one winner at once, and nothing written over a
workflow that is already there, an ended one included (a worker whose look comes after the
tick's workflow finished must find it finished, not start it afresh).
"""

from __future__ import annotations

import asyncio
import secrets
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

from durable.clock import ManualClock
from durable.parsers import exactly
from durable.run import Run
from durable.schedules import Schedules, Ticker, tick_workflow
from durable.workflows import Workflows

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._lifecycle import lifecycle, lifecycle_durable
from durable_conformance.suite._support import PATIENCE
from durable_conformance.suite.lifecycle import unique_kind
from durable_conformance.suite.worker import working

MINUTE = timedelta(minutes=1)
T0 = datetime(2030, 1, 1, tzinfo=UTC)
TICKERS = 8
TICKS = 3


@requirement("schedules.one-start-per-tick", capability="lifecycle")
async def test_schedules_eight_racing_tickers_run_each_tick_once(store: StoreUnderTest) -> None:
    """Eight tickers on eight handles look at each of three ticks: four at once as it falls
    due, and the other four at once after a worker has run the tick's workflow to its end
    (they read the schedule before the tick, so it is due to them too). Each tick has one
    workflow, finished, whose body ran once."""
    durable = lifecycle_durable(store)
    runs: Counter[str] = Counter()
    registry = Workflows()

    async def body(run: Run[Any], number: int) -> int:
        runs[run.workflow] += 1
        return number

    kind = registry.kind(unique_kind("tick"), input=exactly(int))(body)
    clock = ManualClock(T0)
    name = f"every-minute-{secrets.token_hex(4)}"
    await Schedules(durable, clock=clock).create(name, kind, every=MINUTE, input=7)
    lc = lifecycle(store)
    ticks = [tick_workflow(name, T0 + MINUTE * n) for n in range(1, TICKS + 1)]
    async with store.handles(TICKERS) as handles:
        tickers = [Ticker(handle, registry, clock=clock) for handle in handles]
        assert await asyncio.gather(*(t.look() for t in tickers)) == [[]] * TICKERS
        early, late = tickers[: TICKERS // 2], tickers[TICKERS // 2 :]
        async with working(handles[0], registry, schedules=False):
            for tick in ticks:
                clock.advance(MINUTE)
                await asyncio.gather(*(t.look() for t in early))
                assert await durable.handle(tick).result(timeout=PATIENCE) == 7
                await asyncio.gather(*(t.look() for t in late))
                # A store that started the ended tick afresh has it ready again now: wait
                # for its end again, so the run it owes shows in the count.
                loop = asyncio.get_running_loop()
                give_up = loop.time() + PATIENCE
                while True:
                    status = await lc.status(tick)
                    assert status is not None, f"tick {tick} vanished"
                    if status.status.terminal:
                        break
                    assert loop.time() < give_up, f"tick {tick} never ended again: {status}"
                    await asyncio.sleep(0.02)
    assert {tick: runs[tick] for tick in ticks} == dict.fromkeys(ticks, 1), (
        f"a tick's body ran more than once: {dict(runs)}"
    )
    assert set(runs) == set(ticks), f"workflows run besides the ticks: {sorted(runs)}"
