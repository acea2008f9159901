"""operations: each record keeps the kind of operation that wrote it, and a key is refused to
any other kind (``durable.interfaces.Operational``, the ``operations`` capability).

A key is an operation's identity across deployments. A replay hands whatever now uses the
key the value the old operation left there, so a step key that a new release turned into
an ``awaiting`` reads a charge's receipt as an approval, and a ``transact`` turned into a
``step`` is judged done by a record its effect never wrote. Only the store can keep the
operation where every pass and every deployment reads it, beside the value, decided by the
same first writer.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
from durable.interfaces import KeyReused, Operational

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._support import claimed, fenced, raised, superseded


def operational(store: StoreUnderTest) -> Any:
    cp = store.checkpointer
    assert isinstance(cp, Operational), f"{store.name} declares 'operations' but is not Operational"
    return cp


def operational_on(handle: Any) -> Any:
    cp = handle.checkpointer
    assert isinstance(cp, Operational), f"{cp!r} is not Operational"
    return cp


@requirement("operations.kept-with-the-record", capability="operations")
async def test_operations_history_names_the_operation_that_wrote_each_record(
    store: StoreUnderTest,
) -> None:
    """history reports each record's operation: record_as's, "transact" for a transact's
    record (where the store transacts), and None for record, supply and append; a losing
    write, of the same operation or none, changes nothing."""
    cp = operational(store)
    wf = store.workflow()
    holder = await claimed(cp, wf)
    await cp.record_as(holder, "charged", {"receipt": "r-1"}, "step")
    await cp.record_as(holder, "nap", "2026-03-01T12:00:00+00:00", "sleep")
    await cp.record(holder, "plain", 1)
    await cp.supply(wf, "approved", True)
    inbox = await cp.append(wf, "hello")
    # Losing writes: the first writer's value and operation stay.
    again = await cp.record_as(holder, "charged", {"receipt": "r-2"}, "step")
    assert (again.value, again.first) == ({"receipt": "r-1"}, False)
    await cp.supply(wf, "charged", "from outside")
    expected: dict[str, str | None] = {
        "charged": "step",
        "nap": "sleep",
        "plain": None,
        "approved": None,
        inbox: None,
    }
    if "transact" in store.capabilities:
        await cp.transact(holder, "reserved", store.probe.bump(wf, "stock"))
        expected["reserved"] = "transact"
    entries = await cp.history(wf)
    assert {e.key: e.operation for e in entries} == expected
    assert [e.key for e in entries] == list(await cp.load(wf))


@requirement("operations.reuse-refused", capability="operations")
async def test_operations_a_key_recorded_by_one_operation_is_refused_to_another(
    store: StoreUnderTest,
) -> None:
    """record_as under a key recorded by another operation raises KeyReused naming the
    workflow, the key and both operations, and writes nothing; so does transact under a
    key recorded by anything but a transact, without performing its effect. A key with no
    operation (supplied, or written before the store kept operations) is refused to no one,
    and the same operation again is an ordinary losing write."""
    cp = operational(store)
    wf = store.workflow()
    holder = await claimed(cp, wf)
    await cp.record_as(holder, "charged", "r-1", "step")
    with pytest.raises(KeyReused) as refused:
        await cp.record_as(holder, "charged", "approved", "awaiting")
    error = refused.value
    assert (error.workflow, error.key, error.recorded, error.asked) == (
        wf,
        "charged",
        "step",
        "awaiting",
    )
    for named in (wf, "'charged'", "step", "awaiting"):
        assert named in str(error), f"{named} is not named in: {error}"
    await cp.supply(wf, "approved", True)
    assert (await cp.record_as(holder, "approved", False, "awaiting")).value is True
    await cp.record(holder, "old", "written before operations")
    assert (await cp.record_as(holder, "old", "x", "sleep")).first is False
    if "transact" in store.capabilities:
        probe = store.probe
        with pytest.raises(KeyReused):
            await cp.transact(holder, "charged", probe.bump(wf, "stock"))
        assert await probe.count(wf, "stock") == 0, "the refused transact performed its effect"
        await cp.transact(holder, "reserved", probe.bump(wf, "stock"))
        with pytest.raises(KeyReused, match="transact"):
            await cp.record_as(holder, "reserved", 5, "step")
        assert await probe.count(wf, "stock") == 1
    entries = {e.key: (e.value, e.operation) for e in await cp.history(wf)}
    assert entries["charged"] == ("r-1", "step"), "a refused write changed the record"
    assert entries["approved"] == (True, None)
    assert entries["old"] == ("written before operations", None)


@requirement("operations.fenced-like-record", capability="operations")
async def test_operations_record_as_by_a_stale_pass_is_fenced_and_writes_nothing(
    store: StoreUnderTest,
) -> None:
    """record_as is fenced exactly as record is: a pass superseded by a newer claim (on this
    handle or another), released, or whose workflow was discarded, is refused with Fenced
    and writes nothing; the newer pass's record_as lands."""
    cp = operational(store)
    wf = store.workflow()
    async with store.handles(2) as handles:
        other = operational_on(handles[-1])
        stale, newer = await superseded(cp, wf)
        await fenced(cp.record_as(stale, "charged", "r-stale", "step"), f"record_as by {stale}")
        await fenced(
            other.record_as(stale, "charged", "r-stale", "step"),
            f"record_as by {stale} on another handle",
        )
        assert "charged" not in await cp.load(wf), "a fenced record_as left its value behind"
        written = await other.record_as(newer, "charged", "r-newer", "step")
        assert (written.value, written.first) == ("r-newer", True)
        # A tie, and a key the newer pass has not written, are refused all the same.
        await fenced(cp.record_as(stale, "charged", "r-newer", "step"), f"a tie by {stale}")
        await fenced(cp.record_as(stale, "nap", "later", "sleep"), f"record_as by {stale}")
    await cp.release(newer)
    await fenced(cp.record_as(newer, "approved", True, "awaiting"), f"record_as by {newer}")
    loaded = await cp.load(wf)
    assert loaded == {"charged": "r-newer"}, f"a fenced record_as wrote: {loaded}"
    last = await claimed(cp, wf)
    await cp.discard(wf)
    await fenced(cp.record_as(last, "charged", "r-last", "step"), f"record_as by {last}")
    assert await cp.load(wf) == {}, "a record_as fenced by discard wrote"


BAD_OPERATIONS: tuple[object, ...] = (
    "",
    "Step",
    "1step",
    "_step",
    "step one",
    "step\n",
    "st\u00e9p",
    "s" + "x" * 32,
    7,
    None,
)
"""Names ``durable.boundary.OPERATION_NAME`` does not match: empty, uppercase, led by a
digit or ``_``, a space, a trailing newline (which ``$`` would let through), not ASCII, one
character too long, and no ``str`` at all."""


@requirement("operations.bad-names-refused", capability="operations")
async def test_operations_record_as_refuses_a_bad_operation_name_and_writes_nothing(
    store: StoreUnderTest,
) -> None:
    """record_as with an operation name that is not ``OPERATION_NAME`` (a letter, then at
    most 31 of a-z, 0-9, ``_`` and ``-``) is refused with ``ValueError`` naming the workflow
    and the key, for a fresh key and for one already recorded; nothing is written, and the
    longest good name is kept."""
    cp = operational(store)
    wf = store.workflow()
    holder = await claimed(cp, wf)
    await cp.record_as(holder, "kept", "first", "step")
    for bad in BAD_OPERATIONS:
        for key in ("fresh", "kept"):
            error = await raised(
                partial(cp.record_as, holder, key, "value", bad),
                f"record_as of {key!r} with operation {bad!r}",
                ValueError,
            )
            for named in (wf, key):
                assert named in str(error), f"{named!r} is not named in: {error}"
    longest = "s" + "x" * 31
    await cp.record_as(holder, "long", "ok", longest)
    entries = {e.key: (e.value, e.operation) for e in await cp.history(wf)}
    assert entries == {"kept": ("first", "step"), "long": ("ok", longest)}, (
        f"a refused record_as wrote: {entries}"
    )
