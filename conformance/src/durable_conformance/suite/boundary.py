"""The boundary: what a store refuses before it goes anywhere near its backend.

A zero or negative duration is a bug in the caller that would otherwise surface as a
claim that is never held or a wait that never waits; a key in the inbox's namespace would
let a caller forge an inbox entry, and one in the namespace of append's message-id markers
would forge a message as already sent. A message id that is not a non-empty string, or
that holds a control character, is refused too. All are refused before anything is
written, with an error a person can act on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from functools import partial
from typing import Any

from durable.interfaces import INBOX_PREFIX, SENT_PREFIX, Enumerable

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._support import (
    LONG,
    claimed,
    delivered_during,
    next_delivery,
    raised,
)

NON_POSITIVE = [timedelta(0), timedelta(seconds=-1)]


@requirement("boundary.non-positive-durations-refused")
async def test_boundary_non_positive_durations_are_refused_and_claim_nothing(
    store: StoreUnderTest,
) -> None:
    """A zero or negative liveness or budget is refused with an error naming the workflow,
    and claims nothing."""
    cp = store.checkpointer
    wf = store.workflow()
    for bad in NON_POSITIVE:
        claims: dict[str, Callable[[], Awaitable[object]]] = {
            "liveness": partial(cp.claim, wf, liveness=bad, budget=LONG),
            "budget": partial(cp.claim, wf, liveness=LONG, budget=bad),
        }
        for name, call in claims.items():
            refused = await raised(call, f"claim with {name}={bad!r}")
            assert wf in str(refused), (
                f"claim with {name}={bad!r} was refused without naming {wf!r}"
            )
    holder = await claimed(cp, wf)
    assert (await cp.record(holder, "k", 1)).first


@requirement("boundary.non-positive-waits-refused")
async def test_boundary_non_positive_waits_are_refused_and_take_nothing(
    store: StoreUnderTest,
) -> None:
    """A zero or negative ``within`` (next_ready) or ``idle`` (reclaim) is refused with a
    ValueError naming the argument and the value, and takes nothing: a worker looping on a
    zero wait would spin on the store, and a zero idle would take over every live pass."""
    scheduler = store.scheduler
    ready = store.workflow("ready")
    await scheduler.make_ready(ready)
    out = await next_delivery(scheduler, workflow=ready)
    assert out is not None, f"{ready!r} was made ready and never delivered"
    waiting = store.workflow("waiting")
    await scheduler.make_ready(waiting)
    for bad in NON_POSITIVE:
        waits: dict[str, Callable[[], Awaitable[object]]] = {
            "within": partial(scheduler.next_ready, bad),
            "idle": partial(scheduler.reclaim, bad),
        }
        for name, call in waits.items():
            refused = await raised(call, f"{name}={bad!r}", ValueError)
            named = name in str(refused) and (repr(bad) in str(refused) or str(bad) in str(refused))
            assert named, (
                f"{name}={bad!r} was refused without naming {name} and its value: {refused}"
            )
    taken = await next_delivery(scheduler, workflow=waiting)
    assert taken is not None, f"a refused next_ready took {waiting!r}, and it was never delivered"


@requirement("boundary.inbox-keys-reserved")
async def test_boundary_only_append_may_write_under_the_inbox_prefix(
    store: StoreUnderTest,
) -> None:
    """record, supply and arrive of a key starting with the inbox prefix are refused, and
    write and schedule nothing: only append names inbox entries."""
    cp = store.checkpointer
    wf = store.workflow()
    holder = await claimed(cp, wf)
    forged = f"{INBOX_PREFIX}00000000000000000000"
    await raised(lambda: cp.record(holder, forged, "forged"), f"record of {forged!r}")
    await raised(lambda: cp.supply(wf, forged, "forged"), f"supply of {forged!r}")
    await raised(lambda: store.durable.arrive(wf, forged, "forged"), f"arrive of {forged!r}")
    assert await cp.load(wf) == {}
    assert await delivered_during(store.scheduler, 0.3) == []


@requirement("boundary.sent-keys-reserved")
async def test_boundary_no_caller_may_write_under_the_message_id_prefix(
    store: StoreUnderTest,
) -> None:
    """record, supply and arrive of a key starting with the prefix of append's message-id
    markers are refused and write nothing, so no caller can forge a message as sent."""
    cp = store.checkpointer
    wf = store.workflow()
    holder = await claimed(cp, wf)
    forged = f"{SENT_PREFIX}order-1"
    await raised(lambda: cp.record(holder, forged, "forged"), f"record of {forged!r}")
    await raised(lambda: cp.supply(wf, forged, "forged"), f"supply of {forged!r}")
    await raised(lambda: store.durable.arrive(wf, forged, "forged"), f"arrive of {forged!r}")
    assert await cp.load(wf) == {}
    key = await cp.append(wf, "real", message_id="order-1")
    assert await cp.load(wf) == {key: "real"}


@requirement("boundary.bad-message-ids-refused")
async def test_boundary_a_message_id_that_is_not_a_plain_string_is_refused(
    store: StoreUnderTest,
) -> None:
    """append and send refuse an empty, non-string or control-character message id with an
    error naming the workflow, and write and schedule nothing."""
    cp = store.checkpointer
    wf = store.workflow()
    bad_ids: list[Any] = ["", 7, b"order-1", "order\n1", "order\x001"]
    for bad in bad_ids:
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "append": partial(cp.append, wf, "m", message_id=bad),
            "send": partial(store.durable.send, wf, "m", message_id=bad),
        }
        for name, call in calls.items():
            refused = await raised(call, f"{name} with message_id={bad!r}")
            assert wf in str(refused), f"{name} refused {bad!r} without naming {wf!r}"
    assert await cp.load(wf) == {}
    assert await delivered_during(store.scheduler, 0.3) == []


CONTROL = ["\n", "\r", "\t", "\x00", "\x1b", "\x7f", "\x85"]
"""Control characters (Unicode category Cc): C0, DEL and C1, as an id or key may carry
them in from a form field or a log line."""


@requirement("boundary.control-characters-refused")
async def test_boundary_ids_and_keys_with_control_characters_are_refused_and_write_nothing(
    store: StoreUnderTest,
) -> None:
    """A workflow id or a record key holding a control character is refused by every
    method that takes one, with an error naming it and the character's position; nothing
    is recorded, appended, claimed or scheduled. ``show`` and logs print ids and keys one
    to a line, where a newline would forge a line."""
    cp = store.checkpointer
    scheduler = store.scheduler
    durable = store.durable
    clean = store.workflow("clean")
    holder = await claimed(cp, clean)
    for control in CONTROL:
        wf = f"{store.workflow('ctl')}{control}end"
        key = f"key{control}end"
        position = wf.index(control)
        calls: dict[str, Callable[[], Awaitable[object]]] = {
            "load": partial(cp.load, wf),
            "history": partial(cp.history, wf),
            "claim": partial(cp.claim, wf, liveness=LONG, budget=LONG),
            "supply": partial(cp.supply, wf, "k", "v"),
            "append": partial(cp.append, wf, "v"),
            "discard": partial(cp.discard, wf),
            "make_ready": partial(scheduler.make_ready, wf),
            "cancel": partial(scheduler.cancel, wf),
            "arrive": partial(durable.arrive, wf, "k", "v"),
            "send": partial(durable.send, wf, "v"),
            "Durable.discard": partial(durable.discard, wf),
        }
        for name, call in calls.items():
            refused = await raised(call, f"{name} of workflow {wf!r}", ValueError)
            message = str(refused)
            assert repr(wf) in message, f"{name} of {wf!r} did not name the id: {message}"
            assert f"position {position}" in message, (
                f"{name} of {wf!r} did not say where the character is: {message}"
            )
        keyed: dict[str, Callable[[], Awaitable[object]]] = {
            "record": partial(cp.record, holder, key, "v"),
            "supply": partial(cp.supply, clean, key, "v"),
            "arrive": partial(durable.arrive, clean, key, "v"),
        }
        for name, call in keyed.items():
            refused = await raised(call, f"{name} of key {key!r}", ValueError)
            assert repr(key) in str(refused), f"{name} of {key!r} did not name it: {refused}"
        if store.offers("transact"):
            effect = store.probe.bump(clean, "never")
            await raised(
                partial(cp.transact, holder, key, effect), f"transact of key {key!r}", ValueError
            )
    assert await cp.load(clean) == {}
    if isinstance(cp, Enumerable):
        leaked = [w for w in await cp.workflows() if any(c in w for c in CONTROL)]
        assert leaked == [], f"records were written under refused ids {leaked!r}"
    if store.offers("transact"):
        assert await store.probe.count(clean, "never") == 0
    assert await cp.claim(clean, liveness=LONG, budget=LONG) is None, "the clean pass was lost"
    assert await delivered_during(scheduler, 0.3) == []
    assert (await cp.record(holder, "k", 1)).first
