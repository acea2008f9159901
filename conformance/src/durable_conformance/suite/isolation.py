"""Isolation: workflow ids and keys are opaque strings, whatever they contain.

A store builds its own names from them (a Redis key, a hash field, a SQL parameter), and
the characters that mean something to it are exactly the ones that leak: colons that
separate key segments, braces that pick a cluster slot, spaces, quotes, unicode, and
lengths past an index's comfort. Each id must stay its own workflow and each key its own
record. (Control characters are the one exception, refused at the boundary: see
``boundary.control-characters-refused``.)
"""

from __future__ import annotations

import asyncio

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._support import LONG, claimed, next_delivery

AWKWARD = [
    "a",
    "a:b",
    "a:b:c",
    "a:checkpoint",
    "a:claim",
    "{a}",
    "{a}:b",
    "a}{",
    "with space",
    " leading and trailing ",
    "no-break\u00a0space and zero\u200bwidth",
    "quote ' \" ; -- %s",
    "slash/and\\backslash",
    "ünïcødé ✓ 工作流 🙂",
    "*?[glob]",
    "x" * 1024,
    "é" * 1024,
]
"""Ids and keys that sit next to each other as a store's naming would confuse them."""


@requirement("isolation.awkward-ids-and-keys")
async def test_isolation_awkward_ids_and_keys_stay_apart(store: StoreUnderTest) -> None:
    """Workflows named with colons, braces, spaces, quotes, unicode and 1 KiB lengths each
    hold their own claim and their own records under awkward keys, and a discard of one
    touches no other."""
    cp = store.checkpointer
    tag = store.workflow("iso")
    workflows = [f"{tag}{wf}" for wf in AWKWARD]
    holders = await asyncio.gather(*(claimed(cp, wf) for wf in workflows))
    for holder in holders:
        for key in AWKWARD:
            written = await cp.record(holder, key, [holder.workflow, key])
            assert written.first, f"{key!r} of {holder.workflow!r} was already written"
        await cp.supply(holder.workflow, "supplied", holder.workflow)
        await cp.append(holder.workflow, holder.workflow)
    for wf in workflows:
        loaded = await cp.load(wf)
        assert list(loaded)[: len(AWKWARD)] == AWKWARD, f"{wf!r} holds {list(loaded)[:5]}..."
        assert all(loaded[key] == [wf, key] for key in AWKWARD), f"{wf!r} holds another's value"
        assert loaded["supplied"] == wf
        assert len(loaded) == len(AWKWARD) + 2
        assert await cp.claim(wf, liveness=LONG, budget=LONG) is None
    await cp.discard(workflows[1])
    assert await cp.load(workflows[1]) == {}
    for wf in workflows[:1] + workflows[2:]:
        assert len(await cp.load(wf)) == len(AWKWARD) + 2, f"discarding a neighbour emptied {wf!r}"


@requirement("isolation.awkward-ids-are-delivered-as-given")
async def test_isolation_a_scheduler_delivers_awkward_ids_exactly_as_given(
    store: StoreUnderTest,
) -> None:
    """Every awkward workflow id made ready is delivered once, spelled exactly as given."""
    scheduler = store.scheduler
    tag = store.workflow("iso")
    workflows = {f"{tag}{wf}" for wf in AWKWARD}
    for wf in workflows:
        await scheduler.make_ready(wf)
    seen: list[str] = []
    for _ in workflows:
        delivery = await next_delivery(scheduler)
        assert delivery is not None, f"only {len(seen)} of {len(workflows)} were delivered"
        seen.append(delivery.workflow)
        await scheduler.done(delivery)
    assert sorted(seen) == sorted(workflows)
