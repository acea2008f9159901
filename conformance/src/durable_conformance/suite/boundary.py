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

from durable.interfaces import INBOX_PREFIX, SENT_PREFIX

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._support import LONG, claimed, delivered_during, raised

NON_POSITIVE = [timedelta(0), timedelta(seconds=-1)]


@requirement("boundary.non-positive-durations-refused")
async def test_boundary_non_positive_durations_are_refused_and_claim_nothing(
    store: StoreUnderTest,
) -> None:
    """A zero or negative liveness or budget is refused with an error naming the workflow,
    and claims nothing; so are a zero or negative ``within`` and ``idle``."""
    cp = store.checkpointer
    scheduler = store.scheduler
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
        waits: dict[str, Callable[[], Awaitable[object]]] = {
            f"next_ready(within={bad!r})": partial(scheduler.next_ready, bad),
            f"reclaim(idle={bad!r})": partial(scheduler.reclaim, bad),
        }
        for name, call in waits.items():
            await raised(call, name)
    holder = await claimed(cp, wf)
    assert (await cp.record(holder, "k", 1)).first


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
