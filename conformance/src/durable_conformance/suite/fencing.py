"""Fencing: a superseded pass is refused at its next write, and writes nothing.

The store refuses any write carrying a token below the highest it has issued for the
workflow. Checking the token and applying the write it guards are one step; a store that
checks and then writes in two round trips lets a stalled pass through the gap, which is
why these tests race the stale pass against the newer one rather than only asking in turn.
"""

from __future__ import annotations

import asyncio

from durable.interfaces import Fenced

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._support import (
    SHORT,
    claim_when_free,
    claimed,
    fenced,
    superseded,
)


@requirement("fencing.stale-record")
async def test_fencing_a_superseded_pass_cannot_record(store: StoreUnderTest) -> None:
    """A pass whose claim ran out and was taken by a newer one is refused with Fenced at
    record, writes nothing, and cannot win a key the newer pass then writes."""
    cp = store.checkpointer
    wf = store.workflow()
    stale, newer = await superseded(cp, wf)
    await fenced(cp.record(stale, "charged", "by the stale pass"), f"record by {stale}")
    assert "charged" not in await cp.load(wf), "a fenced record left its value behind"
    written = await cp.record(newer, "charged", "by the newer pass")
    assert (written.value, written.first) == ("by the newer pass", True)
    await fenced(cp.record(stale, "charged", "by the newer pass"), f"a tie written by {stale}")
    assert await cp.load(wf) == {"charged": "by the newer pass"}


@requirement("fencing.stale-record")
async def test_fencing_every_write_of_a_stalled_pass_racing_the_newer_one_is_refused(
    store: StoreUnderTest,
) -> None:
    """A stalled pass that wakes and writes concurrently with its successor, from another
    handle, has every write refused; the successor's all land."""
    wf = store.workflow()
    async with store.handles(2) as handles:
        old_cp, new_cp = handles[0].checkpointer, handles[-1].checkpointer
        stale, newer = await superseded(old_cp, wf)

        async def stale_write(i: int) -> str:
            try:
                await old_cp.record(stale, f"stale-{i}", i)
            except Fenced:
                return "fenced"
            return "written"

        async def newer_write(i: int) -> str:
            await new_cp.record(newer, f"newer-{i}", i)
            return "written"

        outcomes = await asyncio.gather(
            *(f(i) for i in range(50) for f in (stale_write, newer_write))
        )
    assert outcomes.count("fenced") == 50, f"{50 - outcomes.count('fenced')} stale writes landed"
    loaded = await store.checkpointer.load(wf)
    assert sorted(loaded) == sorted(f"newer-{i}" for i in range(50))


@requirement("fencing.stale-renew")
async def test_fencing_a_superseded_pass_cannot_renew(store: StoreUnderTest) -> None:
    """A superseded pass's renew raises Fenced and does not disturb the newer pass."""
    cp = store.checkpointer
    wf = store.workflow()
    stale, newer = await superseded(cp, wf)
    await fenced(cp.renew(stale), f"renew by {stale}")
    await cp.renew(newer)
    assert (await cp.record(newer, "k", 1)).first


@requirement("fencing.stale-transact", capability="transact")
async def test_fencing_a_superseded_pass_cannot_transact(store: StoreUnderTest) -> None:
    """A superseded pass's transact raises Fenced, applies nothing and records nothing."""
    cp = store.checkpointer
    wf = store.workflow()
    probe = store.probe
    stale, _ = await superseded(cp, wf)
    await fenced(cp.transact(stale, "reserved", probe.bump(wf, "stock")), f"transact by {stale}")
    assert await probe.count(wf, "stock") == 0, "a fenced transact applied its effect"
    assert "reserved" not in await cp.load(wf), "a fenced transact left a record"


@requirement("fencing.across-handles")
async def test_fencing_a_claim_on_another_handle_fences_this_one(store: StoreUnderTest) -> None:
    """The fence lives in the store, not the handle: a pass superseded through a second
    handle is refused on the first."""
    wf = store.workflow()
    async with store.second_handle() as second:
        stale = await claimed(store.checkpointer, wf, liveness=SHORT)
        newer = await claim_when_free(second.checkpointer, wf)
        assert newer.token > stale.token
        assert (await second.checkpointer.record(newer, "k", "newer")).first
        await fenced(store.checkpointer.record(stale, "j", "stale"), f"record by {stale}")
        assert await second.checkpointer.load(wf) == {"k": "newer"}
