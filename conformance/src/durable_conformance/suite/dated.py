"""Writes that take a time: what ``durable import`` keeps a moved workflow's times with.

Every other write stamps the store's own clock, and the suite holds stores to that
(``history.*``). ``Dated`` is the one way round it, for a workflow that already has times
(read from the store it is moving from). A store that took the time and stamped its own
clock anyway would import a month-old finished workflow as a minute old, and ``durable
prune --finished-before 30d`` on the new store would keep it another month. No capability
name: a store whose checkpointer implements ``Dated`` is held to it, one that does not is
reported not offered.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from durable.interfaces import Dated, Lifecycle, Status, UnknownWorkflow

from durable_conformance import requirement
from durable_conformance.subject import NotOffered, StoreUnderTest
from durable_conformance.suite._support import raised

LONG_AGO = datetime(2020, 3, 1, 12, 0, 0, 123000, tzinfo=UTC)
"""Whole milliseconds, the coarsest resolution a store may keep a time at."""


@requirement("dated.keeps-the-given-time")
async def test_dated_writes_keep_the_time_they_are_given(store: StoreUnderTest) -> None:
    """A record written by supply_at or append_at is in history at the time given, not the
    store's clock; a losing write changes neither value nor time; backdate sets a status's
    started_at and updated_at and nothing else, and refuses a workflow with no status."""
    cp = store.checkpointer
    if not isinstance(cp, Dated):
        raise NotOffered(f"store {store.name!r}'s checkpointer does not implement Dated")
    wf = store.workflow()
    later = LONG_AGO + timedelta(minutes=5, milliseconds=7)
    assert await cp.supply_at(wf, "order", ("piano", 1), LONG_AGO) == ["piano", 1]
    key = await cp.append_at(wf, "gift wrap", later, message_id="m-1")
    # Losing writes: the key is taken, the message id is known.
    assert await cp.supply_at(wf, "order", "drums", later) == ["piano", 1]
    assert await cp.append_at(wf, "again", later + timedelta(hours=1), message_id="m-1") == key
    found = [(e.key, e.value, e.at) for e in await cp.history(wf)]
    assert found == [("order", ["piano", 1], LONG_AGO), (key, "gift wrap", later)], (
        f"supply_at at {LONG_AGO.isoformat()} and append_at at {later.isoformat()} are in "
        f"history as {found}"
    )
    if not isinstance(cp, Lifecycle):
        return
    started = store.workflow("started")
    await cp.admit(started, "pay", {"amount": 3})
    await cp.backdate(started, started_at=LONG_AGO, updated_at=later)
    shown = await cp.status(started)
    assert shown is not None, f"{started!r} lost its status to backdate"
    assert (shown.started_at, shown.updated_at) == (LONG_AGO, later), (
        f"backdate to started {LONG_AGO.isoformat()}, updated {later.isoformat()} shows "
        f"started {shown.started_at}, updated {shown.updated_at}"
    )
    assert (shown.status, shown.kind, shown.input, shown.attempts) == (
        Status.READY,
        "pay",
        {"amount": 3},
        0,
    ), f"backdate changed more than the times: {shown}"
    await cp.backdate(started, started_at=None, updated_at=LONG_AGO)
    again = await cp.status(started)
    assert again is not None
    assert (again.started_at, again.updated_at) == (LONG_AGO, LONG_AGO)
    nobody = store.workflow("nobody")
    await raised(
        lambda: cp.backdate(nobody, started_at=None, updated_at=LONG_AGO),
        f"backdate of {nobody!r}, which has no status",
        UnknownWorkflow,
    )
    assert await cp.status(nobody) is None, f"backdate of {nobody!r} gave it a status"
