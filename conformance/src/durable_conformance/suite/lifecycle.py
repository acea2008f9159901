"""lifecycle: each workflow's kind, input, status, attempts and outcome (the capability).

A caller who starts a workflow wants to ask afterwards what became of it, from any process,
without reading its records. So the store keeps one row a workflow, written only by the
writers that already exist: ``admit`` (start), ``begin`` (the claim, counting the attempt in
its own write), ``beat`` (renewal, naming the step in flight), ``settle`` (the release,
recording how the pass ended) and, from outside a pass, ``withdraw`` (cancel) and
``readmit`` (retry). ``settle`` and ``beat`` are fenced exactly as ``record`` is, so a
stale pass can never write an outcome over a newer one or undo a cancel.

Every test here is gated by the ``lifecycle`` capability: a store that does not declare it
reports each requirement "not offered", which is how the table says it has no lifecycle.
"""

from __future__ import annotations

import asyncio
import secrets
from datetime import timedelta
from typing import Any

from durable.interfaces import (
    Failure,
    NotRetryable,
    Settlement,
    StartConflict,
    Status,
    UnknownWorkflow,
)
from durable.parsers import exactly
from durable.policy import RetryPolicy
from durable.run import Run
from durable.worker import work
from durable.workflows import InputRefused, Kind, WorkflowFailed, Workflows

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._lifecycle import (
    OWNER,
    assert_recent,
    begun,
    begun_when_free,
    first_page,
    lifecycle,
    lifecycle_durable,
    listed,
    lost_pass,
)
from durable_conformance.suite._support import (
    LONG,
    SHORT,
    claimed,
    delivered_during,
    fenced,
    next_delivery,
    now,
    raised,
)

INPUT = {"order": "o-1", "amount": 120, "lines": ["book", "pen"], "note": "café ✓"}


def unique_kind(label: str = "kind") -> str:
    """A kind no other test uses, so a listing filtered by it holds only this test's rows."""
    return f"{label}-{secrets.token_hex(4)}"


def blocked(keys: tuple[str, ...] = ("approval",)) -> Settlement:
    return Settlement(Status.BLOCKED, 0, keys=keys)


def finished(value: object = "done", attempts: int = 1) -> Settlement:
    return Settlement(Status.FINISHED, attempts, value=value)


def failed(attempts: int = 1) -> Settlement:
    failure = Failure("builtins.ValueError", "card declined", "Traceback ...", attempts)
    return Settlement(Status.FAILED, attempts, failure=failure)


@requirement("lifecycle.admit-records-kind-and-input", capability="lifecycle")
async def test_lifecycle_admit_records_kind_and_input_for_every_handle(
    store: StoreUnderTest,
) -> None:
    """After admit, status() from any handle says ready, with the kind, the input (through
    the codec), attempts 0, and started and updated times from the store's clock."""
    lc = lifecycle(store)
    wf, kind = store.workflow(), unique_kind()
    admitted = await lc.admit(wf, kind, INPUT)
    assert admitted.created, "the first admit of a new workflow says it created nothing"
    assert admitted.queue, "the first admit of a new workflow does not ask to be queued"
    assert admitted.status.status == Status.READY
    async with store.handles(2) as handles:
        for handle in handles:
            st = await lifecycle(store, handle).status(wf)
            assert st is not None, f"status({wf!r}) is None after admit"
            assert (st.workflow, st.status, st.kind, st.attempts) == (wf, Status.READY, kind, 0)
            assert st.input == INPUT, f"the input came back as {st.input!r}"
            assert st.queue == "default"
            assert_recent(st.started_at, "started_at")
            assert_recent(st.updated_at, "updated_at")
            assert (st.token, st.owner, st.value, st.failure) == (None, None, None, None)


@requirement("lifecycle.admit-idempotent", capability="lifecycle")
async def test_lifecycle_admit_again_with_the_same_kind_and_input_writes_nothing(
    store: StoreUnderTest,
) -> None:
    """The same kind and input (by encoding) again writes nothing: created False, updated_at
    unchanged; queue is True only while the workflow is still ready."""
    lc = lifecycle(store)
    wf, kind = store.workflow(), unique_kind()
    first = await lc.admit(wf, kind, INPUT)
    again = await lc.admit(wf, kind, dict(INPUT))
    assert not again.created, "a repeated admit says it created the workflow"
    assert again.queue, "a repeat that finds the workflow still ready must queue it again"
    assert again.status.updated_at == first.status.updated_at, "a repeated admit wrote"
    holder, _ = await begun(lc, wf)
    running = await lc.admit(wf, kind, INPUT)
    assert (running.created, running.queue) == (False, False), running
    assert running.status.status == Status.RUNNING
    await lc.settle(holder, finished())
    done = await lc.admit(wf, kind, INPUT)
    assert (done.created, done.queue) == (False, False), done
    assert done.status.status == Status.FINISHED


@requirement("lifecycle.admit-one-winner-under-concurrency", capability="lifecycle")
async def test_lifecycle_concurrent_admits_have_exactly_one_winner(store: StoreUnderTest) -> None:
    """Sixteen concurrent admits on sixteen handles create the workflow exactly once; with
    two inputs, eight each, one input is stored and the other eight get StartConflict."""
    kind = unique_kind()
    async with store.handles(16) as handles:
        lcs = [lifecycle(store, handle) for handle in handles]
        wf = store.workflow("same")
        results = await asyncio.gather(
            *(lcs[i % len(lcs)].admit(wf, kind, INPUT) for i in range(16))
        )
        created = [r for r in results if r.created]
        assert len(created) == 1, f"{len(created)} of 16 concurrent admits created {wf!r}"

        contested = store.workflow("contested")
        inputs = [{"side": "a"} if i % 2 == 0 else {"side": "b"} for i in range(16)]
        outcomes = await asyncio.gather(
            *(lcs[i % len(lcs)].admit(contested, kind, inputs[i]) for i in range(16)),
            return_exceptions=True,
        )
    unexpected = [
        o for o in outcomes if isinstance(o, BaseException) and not isinstance(o, StartConflict)
    ]
    assert not unexpected, f"admits failed with {unexpected[:2]!r}"
    st = await lifecycle(store).status(contested)
    assert st is not None, st
    assert st.input in ({"side": "a"}, {"side": "b"}), st
    for given, outcome in zip(inputs, outcomes, strict=True):
        if given == st.input:
            assert not isinstance(outcome, BaseException), (
                f"an admit with the stored input {given} was refused: {outcome!r}"
            )
        else:
            assert isinstance(outcome, StartConflict), (
                f"an admit with {given} while {st.input} is stored was answered {outcome!r}"
            )
    assert sum(1 for o in outcomes if not isinstance(o, BaseException) and o.created) == 1


@requirement("lifecycle.admit-conflict-writes-nothing", capability="lifecycle")
async def test_lifecycle_admit_with_another_kind_or_input_is_a_conflict_that_writes_nothing(
    store: StoreUnderTest,
) -> None:
    """Another kind or another input under a started id is StartConflict naming both, and
    the workflow's status is exactly what it was."""
    lc = lifecycle(store)
    wf, kind, other = store.workflow(), unique_kind(), unique_kind("other")
    await lc.admit(wf, kind, INPUT)
    before = await lc.status(wf)
    error = await raised(lc.admit(wf, other, INPUT), "admit under another kind", StartConflict)
    assert isinstance(error, StartConflict)
    assert (error.workflow, error.kind, error.stored_kind) == (wf, other, kind)
    assert kind in str(error), str(error)
    assert other in str(error), str(error)
    error = await raised(
        lc.admit(wf, kind, {"order": "o-2"}), "admit with another input", StartConflict
    )
    assert isinstance(error, StartConflict)
    assert error.stored_input == INPUT, error.stored_input
    assert await lc.status(wf) == before, "a refused admit changed the workflow"


@requirement("lifecycle.admit-adopts-a-kindless-workflow", capability="lifecycle")
async def test_lifecycle_admit_adopts_a_workflow_begun_without_a_kind(
    store: StoreUnderTest,
) -> None:
    """A workflow begun without admit has kind None; admit then records kind and input and
    makes it ready with attempts 0, keeping its records."""
    lc, cp = lifecycle(store), store.checkpointer
    wf, kind = store.workflow(), unique_kind()
    holder, began = await begun(lc, wf)
    assert began.kind is None, began
    assert began.attempts == 1, began
    await cp.record(holder, "reserved", "r-1")
    await lc.settle(holder, blocked())
    st = await lc.status(wf)
    assert st is not None, st
    assert st.kind is None, st
    assert st.status == Status.BLOCKED, st
    admitted = await lc.admit(wf, kind, INPUT)
    assert admitted.created, admitted
    assert admitted.queue, admitted
    st = await lc.status(wf)
    assert st is not None
    assert (st.status, st.kind, st.input, st.attempts) == (Status.READY, kind, INPUT, 0), st
    assert await cp.load(wf) == {"reserved": "r-1"}, "adopting the workflow lost its records"


@requirement("lifecycle.begin-claims-counts-and-marks-running", capability="lifecycle")
async def test_lifecycle_begin_claims_counts_the_attempt_and_marks_it_running(
    store: StoreUnderTest,
) -> None:
    """begin's Pass records like a claim's; the attempt is counted (1) and the workflow is
    running with the owner, the token and the time the pass began."""
    lc, cp = lifecycle(store), store.checkpointer
    wf, kind = store.workflow(), unique_kind()
    await lc.admit(wf, kind, INPUT)
    holder, began = await begun(lc, wf, owner="host-a:4242")
    assert (began.status, began.kind, began.input, began.attempts, began.lost) == (
        Status.READY,
        kind,
        INPUT,
        1,
        None,
    ), began
    assert (await cp.record(holder, "charged", 10)).first
    assert await cp.claim(wf, liveness=LONG, budget=LONG) is None, "begin's claim is not held"
    st = await lc.status(wf)
    assert st is not None
    assert (st.status, st.attempts, st.owner, st.token) == (
        Status.RUNNING,
        1,
        "host-a:4242",
        holder.token,
    ), st
    assert_recent(st.since, "since")
    assert st.until is not None, f"a live pass's until is {st.until}"
    assert st.until > now(), f"a live pass's until is {st.until}"


@requirement("lifecycle.begin-contended-changes-nothing", capability="lifecycle")
async def test_lifecycle_begin_while_a_pass_holds_it_returns_none_and_writes_nothing(
    store: StoreUnderTest,
) -> None:
    """A second begin while a live pass holds the workflow returns None, and neither the
    attempts nor updated_at move."""
    lc = lifecycle(store)
    wf = store.workflow()
    await lc.admit(wf, unique_kind(), INPUT)
    await begun(lc, wf)
    before = await lc.status(wf)
    async with store.second_handle() as second:
        assert (
            await lifecycle(store, second).begin(wf, liveness=LONG, budget=LONG, owner="b") is None
        )
    assert await lc.begin(wf, liveness=LONG, budget=LONG, owner="c") is None
    after = await lc.status(wf)
    assert before is not None
    assert after is not None
    assert (after.attempts, after.updated_at, after.owner) == (
        before.attempts,
        before.updated_at,
        before.owner,
    ), "a contended begin wrote"


@requirement("lifecycle.begin-refuses-terminal", capability="lifecycle")
async def test_lifecycle_begin_refuses_a_finished_failed_or_cancelled_workflow(
    store: StoreUnderTest,
) -> None:
    """begin on a finished, failed or cancelled workflow claims nothing (holder None) and
    writes nothing; a later claim's token is still above every one issued before."""
    lc, cp = lifecycle(store), store.checkpointer
    for end in ("finished", "failed", "cancelled"):
        wf = store.workflow(end)
        await lc.admit(wf, unique_kind(), INPUT)
        holder, _ = await begun(lc, wf)
        if end == "finished":
            await lc.settle(holder, finished())
        elif end == "failed":
            await lc.settle(holder, failed())
        else:
            await lc.withdraw(wf)
        before = await lc.status(wf)
        assert before is not None, before
        assert before.status == end, before
        began = await lc.begin(wf, liveness=LONG, budget=LONG, owner=OWNER)
        assert began is not None, f"begin on a {end} workflow answered None (contended)"
        assert began.holder is None, f"begin claimed a {end} workflow: {began.holder}"
        assert began.status == end, began
        assert await lc.status(wf) == before, f"begin on a {end} workflow wrote"
        later = await claimed(cp, wf)
        assert later.token > holder.token, (
            f"a claim after begin refused the {end} workflow got token {later.token}, "
            f"not above {holder.token}"
        )


@requirement("lifecycle.attempts-survive-a-lost-pass", capability="lifecycle")
async def test_lifecycle_a_pass_that_never_settles_stays_counted(store: StoreUnderTest) -> None:
    """A pass begun and never settled (in another process that exits, where the store has
    a url) stays counted: once its liveness lapses the next begin has attempts 2 and names
    the lost pass's owner."""
    lc = lifecycle(store)
    wf = store.workflow()
    await lc.admit(wf, unique_kind(), INPUT)
    first = await lost_pass(store, wf, "doomed-host:1")
    assert first == 1, f"the lost pass's begin reported attempts {first}"
    _, began = await begun_when_free(lc, wf)
    assert began.attempts == 2, (
        f"the pass after a lost one has attempts {began.attempts}: the lost pass was not "
        "counted in its claim's own write"
    )
    assert began.lost == "doomed-host:1", f"began.lost is {began.lost!r}"
    assert began.status == Status.RUNNING, f"began.status is {began.status}"


@requirement("lifecycle.settle-is-fenced", capability="lifecycle")
async def test_lifecycle_settle_by_a_superseded_or_released_pass_is_fenced(
    store: StoreUnderTest,
) -> None:
    """settle by a superseded pass, or by one already settled, is refused with Fenced and
    changes neither the status, the outcome nor the attempts."""
    lc = lifecycle(store)
    wf = store.workflow()
    await lc.admit(wf, unique_kind(), INPUT)
    stale, _ = await begun(lc, wf, liveness=SHORT)
    newer, began = await begun_when_free(lc, wf)
    assert newer.token > stale.token
    before = await lc.status(wf)
    await fenced(lc.settle(stale, finished("stale")), f"settle by the superseded {stale}")
    assert await lc.status(wf) == before, "a superseded pass's settle wrote"
    await lc.settle(newer, blocked())
    settled = await lc.status(wf)
    await fenced(lc.settle(newer, finished("again", began.attempts)), f"a second settle by {newer}")
    assert await lc.status(wf) == settled, "a settled pass's second settle wrote"
    assert settled is not None
    assert settled.status == Status.BLOCKED


@requirement("lifecycle.settle-releases", capability="lifecycle")
async def test_lifecycle_settle_frees_the_workflow_and_fences_the_settled_pass(
    store: StoreUnderTest,
) -> None:
    """After settle the workflow is claimable at once, and the settled pass's own record
    is refused with Fenced."""
    lc, cp = lifecycle(store), store.checkpointer
    wf = store.workflow()
    await lc.admit(wf, unique_kind(), INPUT)
    holder, _ = await begun(lc, wf)
    await lc.settle(holder, Settlement(Status.SLEEPING, 0, until=now() + timedelta(hours=1)))
    await fenced(cp.record(holder, "late", 1), f"record by {holder} after its settle")
    following, began = await begun(lc, wf)
    assert following.token > holder.token
    assert began.status == Status.SLEEPING


@requirement("lifecycle.outcome-round-trips", capability="lifecycle")
async def test_lifecycle_the_outcome_and_the_failure_come_back_as_recorded(
    store: StoreUnderTest,
) -> None:
    """The finished value comes back through the codec as a record would (a tuple is a list
    under JsonCodec), and a failure's fields come back verbatim, a 4000-character
    traceback and non-ASCII text included, on a second handle too."""
    lc, cp = lifecycle(store), store.checkpointer
    done, broken, backing = store.workflow("done"), store.workflow("failed"), store.workflow()
    value = {"paid": (120, "EUR"), "by": "Zoë", "lines": [1.5, None, True]}
    for wf in (done, broken, backing):
        await lc.admit(wf, unique_kind(), INPUT)
    holder, _ = await begun(lc, done)
    as_recorded = (await cp.record(holder, "probe", value)).value
    await lc.settle(holder, finished(value))
    failure = Failure(
        "durable_examples.gateway.Declined",
        "carte refusée ✗ (insufficient funds)",
        "Traceback (most recent call last):\n" + "  frame → ünïcode\n" * 190 + "x" * 160,
        3,
    )
    assert len(failure.traceback) >= 3500
    holder, _ = await begun(lc, broken)
    await lc.settle(holder, Settlement(Status.FAILED, 3, failure=failure))
    until = now() + timedelta(minutes=5)
    holder, _ = await begun(lc, backing)
    await lc.settle(holder, Settlement(Status.SLEEPING, 2, failure=failure, until=until))
    async with store.handles(2) as handles:
        for handle in handles:
            other = lifecycle(store, handle)
            st = await other.status(done)
            assert st is not None, st
            assert st.status == Status.FINISHED, st
            assert st.value == as_recorded, f"the value came back as {st.value!r}"
            st = await other.status(broken)
            assert st is not None, st
            assert st.status == Status.FAILED, st
            assert st.failure == failure, f"the failure came back as {st.failure!r}"
            assert st.attempts == 3
            st = await other.status(backing)
            assert st is not None, st
            assert st.status == Status.SLEEPING, st
            assert st.failure == failure, st
            assert st.attempts == 2, st
            assert st.until is not None, f"sleeping until {st.until}, settled with {until}"
            assert abs(st.until - until) < timedelta(milliseconds=2), (
                f"sleeping until {st.until}, settled with {until}"
            )


async def _agrees(store: StoreUnderTest, wf: str, kind: str, expected: Status) -> None:
    lc = lifecycle(store)
    st = await lc.status(wf)
    assert st is not None, f"status() says {st} after moving to {expected}"
    assert st.status == expected, f"status() says {st} after moving to {expected}"
    for status in Status:
        rows = [row.workflow for row in await listed(lc, status=status, kind=kind)]
        if status == expected:
            assert rows.count(wf) == 1, (
                f"{wf!r} is {expected} but listed {rows.count(wf)} times under it: {rows}"
            )
        else:
            assert wf not in rows, f"{wf!r} is {expected} but also listed as {status}"
    assert wf in await first_page(lc, status=expected), (
        f"{wf!r} has just become {expected} but is not on the first page of that status"
    )
    by_kind = [row for row in await listed(lc, kind=kind) if row.workflow == wf]
    assert [row.status for row in by_kind] == [expected], f"by kind alone: {by_kind}"


@requirement("lifecycle.status-follows-every-transition", capability="lifecycle")
async def test_lifecycle_status_and_every_listing_agree_after_each_transition(
    store: StoreUnderTest,
) -> None:
    """Through ready, running, sleeping, running, blocked, running, failed, ready (retry),
    running, finished, and for a cancelled one: after each move status() and
    statuses(status=S) agree, and the workflow is in no other status's list."""
    lc = lifecycle(store)
    wf, kind = store.workflow(), unique_kind()
    await lc.admit(wf, kind, INPUT)
    await _agrees(store, wf, kind, Status.READY)
    holder, _ = await begun(lc, wf)
    await _agrees(store, wf, kind, Status.RUNNING)
    await lc.settle(holder, Settlement(Status.SLEEPING, 0, until=now() + timedelta(hours=1)))
    await _agrees(store, wf, kind, Status.SLEEPING)
    holder, _ = await begun(lc, wf)
    await _agrees(store, wf, kind, Status.RUNNING)
    await lc.settle(holder, blocked())
    await _agrees(store, wf, kind, Status.BLOCKED)
    holder, _ = await begun(lc, wf)
    await _agrees(store, wf, kind, Status.RUNNING)
    await lc.settle(holder, failed())
    await _agrees(store, wf, kind, Status.FAILED)
    await lc.readmit(wf)
    await _agrees(store, wf, kind, Status.READY)
    holder, _ = await begun(lc, wf)
    await _agrees(store, wf, kind, Status.RUNNING)
    await lc.settle(holder, finished())
    await _agrees(store, wf, kind, Status.FINISHED)

    cancelled = store.workflow("cancelled")
    await lc.admit(cancelled, kind, INPUT)
    await begun(lc, cancelled)
    await lc.withdraw(cancelled)
    await _agrees(store, cancelled, kind, Status.CANCELLED)


@requirement("lifecycle.list-filters-by-kind", capability="lifecycle")
async def test_lifecycle_listing_by_kind_and_status_is_exact(store: StoreUnderTest) -> None:
    """Two kinds, each with workflows ready, blocked and finished: every (kind, status)
    filter and each kind alone list exactly their own."""
    lc = lifecycle(store)
    kinds = (unique_kind("left"), unique_kind("right"))
    made: dict[tuple[str, Status], set[str]] = {}
    for kind in kinds:
        for status in (Status.READY, Status.BLOCKED, Status.FINISHED):
            made[kind, status] = {store.workflow(f"{status}") for _ in range(2)}
            for wf in made[kind, status]:
                await lc.admit(wf, kind, INPUT)
                if status is Status.READY:
                    continue
                holder, _ = await begun(lc, wf)
                await lc.settle(holder, blocked() if status is Status.BLOCKED else finished())
    for kind in kinds:
        everything: set[str] = set()
        for status in Status:
            rows = await listed(lc, status=status, kind=kind, limit=3)
            ids = [row.workflow for row in rows]
            assert len(ids) == len(set(ids)), f"{kind}/{status} listed a workflow twice: {ids}"
            assert set(ids) == made.get((kind, status), set()), (
                f"statuses(status={status}, kind={kind!r}) listed {sorted(ids)}"
            )
            assert all(row.kind == kind and row.status == status for row in rows), rows
            everything |= set(ids)
        alone = [row.workflow for row in await listed(lc, kind=kind, limit=4)]
        assert len(alone) == len(set(alone)), f"statuses(kind={kind!r}) listed {sorted(alone)}"
        assert set(alone) == everything, f"statuses(kind={kind!r}) listed {sorted(alone)}"


@requirement("lifecycle.list-pages-with-a-cursor", capability="lifecycle")
async def test_lifecycle_listing_pages_with_a_cursor_newest_first(store: StoreUnderTest) -> None:
    """Twenty-five workflows in one status, ten to a page: each listed exactly once, newest
    updated first, and the last page's cursor is None."""
    lc = lifecycle(store)
    kind = unique_kind()
    ids = [store.workflow(f"page-{i:02d}") for i in range(25)]
    for wf in ids:
        await lc.admit(wf, kind, INPUT)
    pages = []
    cursor: str | None = None
    while True:
        page = await lc.statuses(status=Status.READY, kind=kind, limit=10, cursor=cursor)
        pages.append(page.statuses)
        if page.cursor is None:
            break
        assert len(pages) < 10, "the listing never reached its last page"
        cursor = page.cursor
    assert [len(p) for p in pages] == [10, 10, 5], f"pages of {[len(p) for p in pages]}"
    rows = [row for p in pages for row in p]
    listed_ids = [row.workflow for row in rows]
    assert sorted(listed_ids) == sorted(ids), "a workflow was missed or listed twice"
    times = [row.updated_at for row in rows]
    assert times == sorted(times, reverse=True), "the pages are not newest updated first"
    assert listed_ids[0] == ids[-1] or rows[0].updated_at == rows[1].updated_at, (
        f"the newest workflow {ids[-1]!r} is not first"
    )


@requirement("lifecycle.beat-renews-and-names-the-step", capability="lifecycle")
async def test_lifecycle_beat_renews_the_claim_and_names_the_step_in_flight(
    store: StoreUnderTest,
) -> None:
    """beat extends the liveness as renew does, never past the budget, and status() names
    the step it reported; a stale holder's beat is Fenced."""
    lc = lifecycle(store)
    wf = store.workflow()
    await lc.admit(wf, unique_kind(), INPUT)
    holder, _ = await begun(lc, wf, liveness=timedelta(seconds=2), budget=timedelta(seconds=30))
    st = await lc.status(wf)
    assert st is not None, st
    assert st.until is not None, st
    assert st.step is None, st
    first_until = st.until
    await asyncio.sleep(0.05)
    assert await lc.beat(holder, "charge") == holder
    st = await lc.status(wf)
    assert st is not None, f"status().step is {None if st is None else st.step!r}"
    assert st.step == "charge", f"status().step is {None if st is None else st.step!r}"
    assert st.until is not None, "beat did not extend the liveness"
    assert st.until > first_until, "beat did not extend the liveness"
    await lc.beat(holder, None)
    st = await lc.status(wf)
    assert st is not None, "a beat between steps left the old step named"
    assert st.step is None, "a beat between steps left the old step named"

    capped = store.workflow("capped")
    await lc.admit(capped, unique_kind(), INPUT)
    short, _ = await begun(lc, capped, liveness=timedelta(seconds=20), budget=timedelta(seconds=1))
    await lc.beat(short, "slow")
    st = await lc.status(capped)
    assert st is not None
    assert st.since is not None
    assert st.until is not None
    assert st.until <= st.since + timedelta(seconds=1, milliseconds=50), (
        f"beat moved the liveness to {st.until}, past the budget ending near "
        f"{st.since + timedelta(seconds=1)}"
    )
    await lc.settle(holder, blocked())
    await fenced(lc.beat(holder, "late"), f"beat by {holder} after its settle")


@requirement("lifecycle.withdraw-cancels-keeps-history-and-fences", capability="lifecycle")
async def test_lifecycle_withdraw_cancels_keeps_the_records_and_fences_the_pass(
    store: StoreUnderTest,
) -> None:
    """withdraw makes the workflow cancelled, keeps its records, and refuses the pass in
    flight at its next write; a finished workflow stays finished; an unknown id is
    UnknownWorkflow."""
    lc, cp = lifecycle(store), store.checkpointer
    wf = store.workflow()
    await lc.admit(wf, unique_kind(), INPUT)
    holder, _ = await begun(lc, wf)
    await cp.record(holder, "charged", 10)
    withdrawn = await lc.withdraw(wf)
    assert withdrawn.status == Status.CANCELLED, withdrawn
    assert await cp.load(wf) == {"charged": 10}, "cancelling lost the records"
    await fenced(cp.record(holder, "shipped", True), f"record by {holder} after cancel")
    await fenced(lc.settle(holder, finished()), f"settle by {holder} after cancel")
    st = await lc.status(wf)
    assert st is not None, f"the stale pass undid the cancel: {st}"
    assert st.status == Status.CANCELLED, f"the stale pass undid the cancel: {st}"

    done = store.workflow("done")
    await lc.admit(done, unique_kind(), INPUT)
    holder, _ = await begun(lc, done)
    await lc.settle(holder, finished())
    before = await lc.status(done)
    assert (await lc.withdraw(done)).status == Status.FINISHED
    assert await lc.status(done) == before, "withdrawing a finished workflow wrote"
    await raised(lc.withdraw(store.workflow("never")), "withdraw of an unknown id", UnknownWorkflow)


@requirement("lifecycle.readmit-gives-fresh-attempts", capability="lifecycle")
async def test_lifecycle_readmit_makes_a_failed_or_cancelled_workflow_ready_again(
    store: StoreUnderTest,
) -> None:
    """readmit makes a failed or cancelled workflow ready with attempts 0, its failure
    cleared and its records kept; any other status is NotRetryable and nothing is written."""
    lc, cp = lifecycle(store), store.checkpointer
    broken, stopped = store.workflow("failed"), store.workflow("cancelled")
    for wf in (broken, stopped):
        await lc.admit(wf, unique_kind(), INPUT)
        holder, _ = await begun(lc, wf)
        await cp.record(holder, "charged", 10)
        if wf == broken:
            await lc.settle(holder, failed(attempts=4))
        else:
            await lc.withdraw(wf)
        ready = await lc.readmit(wf)
        assert (ready.status, ready.attempts, ready.failure) == (Status.READY, 0, None), ready
        st = await lc.status(wf)
        assert st is not None
        assert (st.status, st.attempts, st.failure) == (Status.READY, 0, None)
        assert await cp.load(wf) == {"charged": 10}, "readmit lost the records"
        _, began = await begun(lc, wf)
        assert began.attempts == 1, f"the first pass after readmit has attempts {began.attempts}"

    for status in (Status.READY, Status.RUNNING, Status.BLOCKED, Status.FINISHED):
        wf = store.workflow(str(status))
        await lc.admit(wf, unique_kind(), INPUT)
        if status is not Status.READY:
            holder, _ = await begun(lc, wf)
            if status is Status.BLOCKED:
                await lc.settle(holder, blocked())
            elif status is Status.FINISHED:
                await lc.settle(holder, finished())
        before = await lc.status(wf)
        error = await raised(lc.readmit(wf), f"readmit of a {status} workflow", NotRetryable)
        assert isinstance(error, NotRetryable), error
        assert error.status == status, error
        assert await lc.status(wf) == before, f"a refused readmit of a {status} workflow wrote"
    await raised(lc.readmit(store.workflow("never")), "readmit of an unknown id", UnknownWorkflow)


@requirement("lifecycle.discard-forgets-the-status", capability="lifecycle")
async def test_lifecycle_discard_forgets_the_status_and_every_listing(
    store: StoreUnderTest,
) -> None:
    """After Durable.discard the workflow has no status and is in no list."""
    lc = lifecycle(store)
    wf, kind = store.workflow(), unique_kind()
    await lc.admit(wf, kind, INPUT)
    holder, _ = await begun(lc, wf)
    await lc.settle(holder, finished())
    await store.durable.discard(wf)
    assert await lc.status(wf) is None, "a discarded workflow still has a status"
    assert [row.workflow for row in await listed(lc, kind=kind)] == []
    assert wf not in await first_page(lc, status=Status.FINISHED)


# -- the Durable's moves ------------------------------------------------------------------


@requirement("durable.start-admits-and-readies", capability="lifecycle")
async def test_durable_start_records_the_workflow_and_makes_it_ready(store: StoreUnderTest) -> None:
    """start admits the workflow and makes it ready, so next_ready delivers it; starting a
    finished one again delivers nothing; an input the kind's parser refuses writes nothing."""
    durable = lifecycle_durable(store)
    lc = lifecycle(store)
    wf, kind = store.workflow(), unique_kind()
    handle = await durable.start(kind, wf, INPUT)
    assert handle.workflow == wf
    assert (await handle.status()).status == Status.READY
    delivery = await next_delivery(durable.scheduler, workflow=wf)
    assert delivery is not None, f"{wf!r} was started but never delivered"
    holder, _ = await begun(lc, wf)
    await lc.settle(holder, finished())
    await durable.scheduler.done(delivery)
    again = await durable.start(kind, wf, INPUT)
    assert (await again.status()).status == Status.FINISHED
    seen = [d.workflow for d in await delivered_during(durable.scheduler, 0.5)]
    assert wf not in seen, "starting a finished workflow again queued it"

    def positive(value: object) -> int:
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"an amount is a positive int, got {value!r}")
        return value

    async def body(run: Run[Any], amount: int) -> int:
        return amount

    refusing = Kind(unique_kind(), body, positive)
    refused = store.workflow("refused")
    await raised(durable.start(refusing, refused, -5), "start with a refused input", InputRefused)
    assert await lc.status(refused) is None, "a refused start wrote the workflow"


@requirement("durable.cancel-withdraws-and-cancels", capability="lifecycle")
async def test_durable_cancel_stops_delivery_even_against_the_running_delivery(
    store: StoreUnderTest,
) -> None:
    """A cancelled workflow is not delivered again, and the answer for the delivery that was
    running when it was cancelled (wake_at) does not reinstate it."""
    durable = lifecycle_durable(store)
    queued, running = store.workflow("queued"), store.workflow("running")
    kind = unique_kind()
    await durable.start(kind, running, INPUT)
    delivery = await next_delivery(durable.scheduler, workflow=running)
    assert delivery is not None
    await durable.start(kind, queued, INPUT)
    assert (await durable.cancel(queued)).status == Status.CANCELLED
    assert (await durable.cancel(running)).status == Status.CANCELLED
    await durable.scheduler.wake_at(delivery, now())
    seen = [d.workflow for d in await delivered_during(durable.scheduler, 0.5)]
    assert queued not in seen, f"cancelled workflows delivered: {seen}"
    assert running not in seen, f"cancelled workflows delivered: {seen}"


@requirement("durable.retry-readmits-and-readies", capability="lifecycle")
async def test_durable_retry_runs_a_failed_workflow_again_replaying_its_steps(
    store: StoreUnderTest,
) -> None:
    """retry makes a failed workflow ready; it is delivered again, and a worker finishes it
    without running again the steps it had recorded."""
    durable = lifecycle_durable(store)
    wf = store.workflow()
    charges: list[str] = []
    broken = [True]
    registry = Workflows()

    @registry.kind(unique_kind(), policy=RetryPolicy(max_attempts=1))
    async def payout(run: Run[Any], order: object) -> str:
        def charge() -> str:
            charges.append(run.workflow)
            return "ch-1"

        charged = await run.step("charge", charge, exactly(str))
        if broken[0]:
            raise ValueError("the ledger is down")
        return charged

    stop = asyncio.Event()
    worker = asyncio.create_task(
        work(
            durable,
            registry,
            stop=stop,
            poll=timedelta(milliseconds=50),
            tick=timedelta(milliseconds=50),
        )
    )
    try:
        handle = await durable.start(payout, wf, INPUT)
        await raised(handle.result(timeout=10), "the result of a failing workflow", WorkflowFailed)
        broken[0] = False
        ready = await durable.retry(wf)
        assert ready.status == Status.READY, ready
        assert await handle.result(timeout=10) == "ch-1"
    finally:
        stop.set()
        await asyncio.wait_for(worker, 10)
    assert charges == [wf], f"the recorded step ran {len(charges)} times"


# -- sentences of the interface the audit found unproved (issue 14) --------------------------


@requirement("lifecycle.admit-refuses-an-unencodable-input", capability="lifecycle")
async def test_lifecycle_admit_refuses_an_input_the_codec_cannot_encode_and_writes_nothing(
    store: StoreUnderTest,
) -> None:
    """admit, and start, of an input the codec cannot encode raise an error naming the
    workflow, before anything is written: no status, nothing queued."""
    lc = lifecycle(store)
    durable = lifecycle_durable(store)
    wf, kind = store.workflow(), unique_kind()
    unencodable = {"at": object()}
    refused = await raised(lc.admit(wf, kind, unencodable), "admit of an unencodable input")
    assert wf in str(refused), f"admit refused the input without naming {wf!r}: {refused}"
    assert await lc.status(wf) is None, "admit of an unencodable input wrote the workflow"
    await raised(durable.start(kind, wf, unencodable), "start of an unencodable input")
    assert await lc.status(wf) is None, "start of an unencodable input wrote the workflow"
    seen = [d.workflow for d in await delivered_during(durable.scheduler, 0.3)]
    assert wf not in seen, "start of an unencodable input queued the workflow"


@requirement("lifecycle.admit-records-the-queue", capability="lifecycle")
async def test_lifecycle_admit_records_the_queue_it_is_given(store: StoreUnderTest) -> None:
    """admit records the queue it is given, which status() and every listing then show on
    every handle; without one the queue is "default"."""
    lc = lifecycle(store)
    named, plain, kind = store.workflow("named"), store.workflow("plain"), unique_kind()
    await lc.admit(named, kind, INPUT, queue="payments.eu-1")
    await lc.admit(plain, kind, INPUT)
    async with store.handles(2) as handles:
        for handle in handles:
            other = lifecycle(store, handle)
            shown = [await other.status(wf) for wf in (named, plain)]
            queues = [None if row is None else row.queue for row in shown]
            assert queues == ["payments.eu-1", "default"], shown
    rows = {row.workflow: row.queue for row in await listed(lc, kind=kind)}
    assert rows == {named: "payments.eu-1", plain: "default"}, rows


@requirement("lifecycle.updated-at-moves-with-each-transition", capability="lifecycle")
async def test_lifecycle_updated_at_is_the_stores_clock_at_the_last_transition(
    store: StoreUnderTest,
) -> None:
    """updated_at is the store's clock at the last transition: it moves forward with begin,
    settle, readmit and withdraw, and a contended begin moves nothing (started_at stays the
    admission's)."""
    lc = lifecycle(store)
    wf = store.workflow()
    admitted = (await lc.admit(wf, unique_kind(), INPUT)).status
    assert_recent(admitted.updated_at, "updated_at after admit")
    seen = [("admit", admitted.updated_at)]

    async def moved(what: str) -> None:
        st = await lc.status(wf)
        assert st is not None, f"no status after {what}"
        assert st.started_at == admitted.started_at, f"{what} moved started_at"
        previous, at = seen[-1]
        assert st.updated_at > at, (
            f"updated_at after {what} is {st.updated_at.isoformat()}, not after its value "
            f"after {previous} ({at.isoformat()}): the transition did not stamp it"
        )
        assert_recent(st.updated_at, f"updated_at after {what}")
        seen.append((what, st.updated_at))

    for what in ("begin", "settle failed", "readmit", "begin again", "withdraw"):
        await asyncio.sleep(0.05)
        if what.startswith("begin"):
            holder, _ = await begun(lc, wf)
        elif what == "settle failed":
            await lc.settle(holder, failed())
        elif what == "readmit":
            await lc.readmit(wf)
        else:
            await lc.withdraw(wf)
        await moved(what)
