"""history: what load returns, each record stamped by the store's clock at its winning write.

The clock is the store's for the same reason the leases are measured by it: the writer is
another machine, and a moment stamped by whichever process recorded it is only as good as
the agreement between the two. And the stamp is the winning write's: a store stamping on
every write would report a replayed step as having run at the moment of the replay.
"""

from __future__ import annotations

import asyncio
import itertools
from datetime import UTC, timedelta

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._support import claimed, now

SKEW = timedelta(seconds=5)
"""How far the store's clock may sit from this machine's before a stamp is suspicious.

A store's clock is its own (a database server's, a Redis server's), so the suite only
bounds it; within the bound, the stamps must be the winning writes' and in order."""


@requirement("history.matches-load")
async def test_history_holds_what_load_holds_in_the_same_order(store: StoreUnderTest) -> None:
    """history's entries are load's records, keys and values alike, in the same order."""
    cp = store.checkpointer
    wf = store.workflow()
    holder = await claimed(cp, wf)
    await cp.record(holder, "z", (1, 2))
    await cp.append(wf, {"message": "hello"})
    await cp.supply(wf, "a", "supplied")
    await cp.record(holder, "m", None)
    loaded = await cp.load(wf)
    entries = await cp.history(wf)
    assert [(e.key, e.value) for e in entries] == list(loaded.items())


@requirement("history.stamped-at-the-winning-write")
async def test_history_stamps_each_record_when_its_winning_write_landed(
    store: StoreUnderTest,
) -> None:
    """Each entry's ``at`` is timezone-aware UTC, within the store's clock skew of the
    moment the write was made, and entries written in turn are stamped in turn."""
    cp = store.checkpointer
    wf = store.workflow()
    holder = await claimed(cp, wf)
    windows = []
    for key in ("first", "second", "third"):
        before = now()
        await cp.record(holder, key, key)
        windows.append((before, now()))
        await asyncio.sleep(0.02)
    entries = await cp.history(wf)
    assert [e.key for e in entries] == ["first", "second", "third"]
    for entry, (before, after) in zip(entries, windows, strict=True):
        assert entry.at.tzinfo is not None, f"{entry.key!r} is stamped with a naive datetime"
        assert entry.at.utcoffset() == timedelta(0), f"{entry.key!r} is not stamped in UTC"
        assert before - SKEW <= entry.at.astimezone(UTC) <= after + SKEW, (
            f"{entry.key!r} was written between {before} and {after} but stamped {entry.at}"
        )
    stamps = [e.at for e in entries]
    assert stamps == sorted(stamps), f"records written in turn were stamped out of turn: {stamps}"


@requirement("history.replay-does-not-restamp")
async def test_history_a_replayed_or_losing_write_does_not_restamp(store: StoreUnderTest) -> None:
    """A later write to a recorded key (a replay with the same value, a conflict, a supply,
    a new pass) leaves its stamp as the winning write made it."""
    cp = store.checkpointer
    wf = store.workflow()
    holder = await claimed(cp, wf)
    await cp.record(holder, "charged", 10)
    (stamped,) = await cp.history(wf)
    await asyncio.sleep(0.05)
    await cp.record(holder, "charged", 10)
    await cp.record(holder, "charged", 11)
    await cp.supply(wf, "charged", 12)
    await cp.release(holder)
    replay = await claimed(cp, wf)
    await cp.record(replay, "charged", 10)
    await cp.record(replay, "shipped", True)
    entries = await cp.history(wf)
    assert [e.key for e in entries] == ["charged", "shipped"]
    assert entries[0].at == stamped.at, (
        f"'charged' was stamped {stamped.at} when it was written and {entries[0].at} after "
        "later writes to it: a replay restamped it"
    )
    assert entries[1].at > entries[0].at, "a record written 50 ms later was not stamped later"


RESOLUTION = timedelta(milliseconds=5)
"""How far a later record's stamp may sit before an earlier one's: a clock's resolution
and the gap between a store placing a record and reading its clock, never a round trip."""


@requirement("history.times-follow-load-order")
async def test_history_times_do_not_go_backwards_along_load_order_under_concurrent_writers(
    store: StoreUnderTest,
) -> None:
    """Many writers on several handles supplying and appending to one workflow at once: along
    history's order (load's), no record is stamped before the one placed ahead of it, beyond
    the clock's resolution."""
    wf = store.workflow()
    async with store.handles(4) as handles:

        async def write(i: int) -> None:
            cp = handles[i % len(handles)].checkpointer
            for j in range(5):
                if j % 2:
                    await cp.append(wf, f"message {i}.{j}")
                else:
                    await cp.supply(wf, f"key-{i}-{j}", j)

        await asyncio.gather(*(write(i) for i in range(16)))
    entries = await store.checkpointer.history(wf)
    assert len(entries) == 16 * 5
    backwards = [
        (before.key, before.at, after.key, after.at)
        for before, after in itertools.pairwise(entries)
        if after.at < before.at - RESOLUTION
    ]
    assert backwards == [], (
        f"{len(backwards)} records are stamped before the record ahead of them in load "
        f"order, e.g. {backwards[0][2]!r} at {backwards[0][3]} after {backwards[0][0]!r} at "
        f"{backwards[0][1]}"
        if backwards
        else ""
    )
