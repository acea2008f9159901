"""Export, import and prune (durable.transfer) on every store, in one process.

The round trip moves workflows in every status from the in-memory store through SQLite,
PostgreSQL and Redis and back, comparing each store's history (keys, values, order) and
status with the first's at every hop; then a worker on the last store finishes the ones that
were mid-flight. Postgres and Redis are the shared test servers, each test under a schema or
prefix of its own; a test skips the store that does not answer.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import random
import sys
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, ExitStack, asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import durable
import pytest
from durable import ManualClock, RetryPolicy, Workflows
from durable.cli import main
from durable.cli_transfer import _Progress
from durable.interfaces import INBOX_PREFIX, Durable, Status, WorkflowStatus
from durable.parsers import as_is, exactly
from durable.run import RECEIVE_FIELD, Run
from durable.store_fixtures import postgres_url, redis_url, store_url
from durable.transfer import (
    FORMAT,
    DumpError,
    export_lines,
    import_lines,
    parse_age,
    prune,
    workflow_ids,
)
from durable.worker import work
from durable.workflows import LifecycleDurable

PATIENCE = 30.0  # seconds before a test fails rather than hangs (never asserted)
STORES = ["memory", "sqlite", "postgres", "redis"]


# --- the workflows ---------------------------------------------------------------------------

workflows = Workflows()


@workflows.kind("pay", input=as_is)
async def pay(run: Run[Any], order: Any) -> dict[str, object]:
    paid = await run.step("charge", lambda: order["amount"], exactly(int))
    return {"paid": paid}


@workflows.kind(
    "flaky", input=as_is, policy=RetryPolicy(max_attempts=2, initial=timedelta(milliseconds=10))
)
async def flaky(run: Run[Any], _: object) -> None:
    await run.step("before", lambda: 1, exactly(int))
    raise ValueError("the service answered 503")


@workflows.kind("nap", input=as_is)
async def nap(run: Run[Any], seconds: Any) -> str:
    await run.step("before", lambda: "awake", exactly(str))
    await run.sleep("nap", timedelta(seconds=seconds))
    return "rested"


@workflows.kind("approve", input=as_is)
async def approve(run: Run[Any], _: object) -> object:
    first = await run.receive("first", as_is)
    answer = await run.awaiting("approval", as_is)
    second = await run.receive("second", as_is)
    return [first, answer, second]


async def _serve_until(store: Durable[Any], wanted: dict[str, Status]) -> None:
    assert isinstance(store, LifecycleDurable)
    stop = asyncio.Event()
    worker = asyncio.create_task(
        work(
            store,
            workflows,
            poll=timedelta(milliseconds=20),
            tick=timedelta(milliseconds=50),
            retry=timedelta(milliseconds=50),
            stop=stop,
        )
    )
    try:
        async with asyncio.timeout(PATIENCE):
            while True:
                found = {w: await store.status(w) for w in wanted}
                if all(st is not None and st.status is wanted[w] for w, st in found.items()):
                    return
                await asyncio.sleep(0.02)
    finally:
        stop.set()
        async with asyncio.timeout(PATIENCE):  # a worker that will not stop fails the test
            await worker


async def _populate(store: Durable[Any]) -> None:
    """Workflows in every status: finished, failed, sleeping, blocked (with inbox messages,
    one taken), cancelled, ready, and one made by send alone."""
    assert isinstance(store, LifecycleDurable)
    await store.start(pay, "w-finished", {"amount": 120})
    await store.start(flaky, "w-failed")
    await store.start(nap, "w-sleeping", 3)
    await store.start(approve, "w-blocked")
    await store.send("w-blocked", {"note": "first"}, message_id="m-1")
    await _serve_until(
        store,
        {
            "w-finished": Status.FINISHED,
            "w-failed": Status.FAILED,
            "w-sleeping": Status.SLEEPING,
            "w-blocked": Status.BLOCKED,
        },
    )
    await store.send("w-blocked", {"note": "second"})
    await store.start(pay, "w-cancelled", {"amount": 5})
    await store.cancel("w-cancelled")
    await store.start(pay, "w-ready", {"amount": 7})
    await store.checkpointer.supply("w-ready", "note", "supplied before any pass")
    await store.send("w-sent", "no status, only an inbox")


def _normal_history(entries: list[Any]) -> list[tuple[str, object]]:
    """Keys and values in order, with inbox keys (which each store numbers its own way)
    replaced by their position among the inbox entries, and receive references likewise."""
    number: dict[str, str] = {}
    out: list[tuple[str, object]] = []
    for entry in entries:
        key, value = entry.key, entry.value
        if key.startswith(INBOX_PREFIX):
            number[key] = key = f"inbox#{len(number)}"
        elif isinstance(value, dict) and value.get(RECEIVE_FIELD) in number:
            value = {RECEIVE_FIELD: number[value[RECEIVE_FIELD]]}
        out.append((key, value))
    return out


def _ms(moment: datetime | None) -> datetime | None:
    return None if moment is None else moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def _normal_status(st: WorkflowStatus | None) -> object:
    if st is None:
        return None
    return (
        # a pass in flight on the old store is a ready workflow on the new one
        Status.READY if st.status is Status.RUNNING else st.status,
        st.kind,
        st.input,
        st.queue,
        st.attempts,
        # to the millisecond, the resolution Redis keeps times at
        _ms(st.until) if st.status is Status.SLEEPING else None,
        st.keys,
        st.value,
        st.failure,
    )


async def _snapshot(store: Durable[Any], ids: list[str]) -> dict[str, object]:
    assert isinstance(store, LifecycleDurable)
    return {
        w: (
            _normal_history(await store.checkpointer.history(w)),
            _normal_status(await store.status(w)),
        )
        for w in ids
    }


async def _times(store: Durable[Any], ids: list[str]) -> dict[str, object]:
    """Each workflow's record times, in order, and its status's started_at and updated_at
    (to the millisecond, the resolution Redis keeps a status's times at)."""
    assert isinstance(store, LifecycleDurable)
    found: dict[str, object] = {}
    for w in ids:
        st = await store.status(w)
        found[w] = (
            [e.at for e in await store.checkpointer.history(w)],
            None if st is None else (_ms(st.started_at), _ms(st.updated_at)),
        )
    return found


async def _dump(store: Durable[Any], ids: list[str] | None = None) -> list[str]:
    chosen = ids if ids is not None else await workflow_ids(store)
    return [line async for line in export_lines(store, chosen)]


@asynccontextmanager
async def _opened(url: str) -> AsyncIterator[Durable[Any]]:
    async with durable.open(url) as store:
        yield store


async def _round_trip(urls: list[str], finish_on: int) -> None:
    """Populate the store at ``urls[0]``, move its workflows along ``urls``, comparing each
    store's history, status and times with the first's (and importing twice at every hop),
    then let a worker on ``urls[finish_on]`` run what was mid-flight to its end."""
    async with AsyncExitStack() as stack:
        first = await stack.enter_async_context(_opened(urls[0]))
        await _populate(first)
        ids = await workflow_ids(first)
        assert ids == sorted(
            [
                "w-blocked",
                "w-cancelled",
                "w-failed",
                "w-finished",
                "w-ready",
                "w-sent",
                "w-sleeping",
            ]
        )
        expected = await _snapshot(first, ids)
        when = await _times(first, ids)
        source = first
        opened = [first]
        for target_url in urls[1:]:
            target = await stack.enter_async_context(_opened(target_url))
            opened.append(target)
            imported = await import_lines(target, await _dump(source))
            assert (imported.written, imported.kept) == (len(ids), 0)
            assert await _snapshot(target, ids) == expected, target_url
            # Every store keeps the times the workflows had on the first (Dated).
            assert await _times(target, ids) == when, target_url
            # Importing the same dump again changes nothing.
            again = await import_lines(target, await _dump(source))
            assert (again.written, again.kept) == (1, len(ids) - 1)  # w-sent: no status
            assert await _snapshot(target, ids) == expected, target_url
            assert await _times(target, ids) == when, target_url
            source = target
        # One store runs what was mid-flight to its end.
        runner = opened[finish_on]
        assert isinstance(runner, LifecycleDurable)
        await runner.arrive("w-blocked", "approval", "yes")
        await _serve_until(
            runner,
            {
                "w-sleeping": Status.FINISHED,
                "w-blocked": Status.FINISHED,
                "w-ready": Status.FINISHED,
            },
        )
        assert await runner.handle("w-sleeping").result(timeout=1) == "rested"
        assert await runner.handle("w-blocked").result(timeout=1) == [
            {"note": "first"},
            "yes",
            {"note": "second"},
        ]
        assert await runner.handle("w-ready").result(timeout=1) == {"paid": 7}
        # The steps recorded before the move were replayed, not run again.
        history = await runner.checkpointer.history("w-sleeping")
        assert [e.key for e in history] == ["before", "nap"]


async def test_a_round_trip_through_every_store_keeps_history_and_status_and_finishes(
    tmp_path: Path,
) -> None:
    with ExitStack() as stack:
        urls = [stack.enter_context(store_url(name, "transfer", tmp_path)) for name in STORES]
        await _round_trip([*urls, "memory://"], finish_on=-1)


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A Redis Cluster of three primaries on free loopback ports, started for this module
    and stopped by PID afterwards (durable_redis.servers, as the Redis store's tests do)."""
    servers = pytest.importorskip("durable_redis.servers")
    if not servers.binaries_available():
        pytest.skip("a Redis Cluster needs redis-server and redis-cli on PATH")
    with servers.start_cluster() as started:
        yield str(started.url)


async def test_sqlite_to_postgres_to_a_redis_cluster_to_sqlite_and_finished_on_the_cluster(
    tmp_path: Path, cluster: str
) -> None:
    """The issue's own chain: every hop compared exactly (history, status, times), and the
    workflows moved mid-flight finished by a worker on the cluster."""
    with ExitStack() as stack:
        postgres = stack.enter_context(postgres_url("transfer"))
        on_cluster = f"{cluster}?prefix=transfer-{uuid.uuid4().hex[:10]}"
        urls = [
            f"sqlite:///{tmp_path / 'first.db'}",
            postgres,
            on_cluster,
            f"sqlite:///{tmp_path / 'last.db'}",
        ]
        await _round_trip(urls, finish_on=2)


PAIRS = list(itertools.permutations([*STORES, "redis-cluster"], 2))


@pytest.mark.parametrize(("source", "target"), PAIRS, ids=[f"{a}-to-{b}" for a, b in PAIRS])
async def test_every_pair_of_stores_moves_workflows_exactly(
    source: str, target: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """From each store to each other (a Redis Cluster among them): history, status and
    times on the target exactly as on the source, and a second import changes nothing."""

    def url_of(name: str, stack: ExitStack) -> str:
        if name == "redis-cluster":
            cluster: str = request.getfixturevalue("cluster")
            return f"{cluster}?prefix=pair-{uuid.uuid4().hex[:10]}"
        return stack.enter_context(store_url(name, "transfer", tmp_path / name))

    with ExitStack() as stack:
        for name in (source, target):
            (tmp_path / name).mkdir()
        urls = [url_of(source, stack), url_of(target, stack)]
        async with _opened(urls[0]) as first, _opened(urls[1]) as second:
            await _populate(first)
            ids = await workflow_ids(first)
            dump = await _dump(first)
            assert (await import_lines(second, dump)).written == len(ids)
            assert await _snapshot(second, ids) == await _snapshot(first, ids)
            assert await _times(second, ids) == await _times(first, ids)
            again = await import_lines(second, dump)
            assert (again.written, again.kept) == (1, len(ids) - 1)  # w-sent: no status
            assert await _times(second, ids) == await _times(first, ids)


def test_export_and_import_on_a_redis_cluster_from_the_command_line(
    tmp_path: Path, cluster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_cluster = f"{cluster}?prefix=transfer-cli-{uuid.uuid4().hex[:10]}"
    first = f"sqlite:///{tmp_path / 'a.db'}"
    cli("start", first, "pay", "o-1", '{"amount": 120}', monkeypatch=monkeypatch)
    cli("start", first, "pay", "o-2", '{"amount": 7}', monkeypatch=monkeypatch)
    cli("cancel", first, "o-2", monkeypatch=monkeypatch)
    cli("send", first, "o-1", '"hello"', "--id", "m-1", monkeypatch=monkeypatch)
    dump = cli("export", first, monkeypatch=monkeypatch)
    said = cli("import", on_cluster, stdin=dump, monkeypatch=monkeypatch)
    assert said == "imported 2 workflows; 0 already there were left as they are\n"
    said = cli("import", on_cluster, stdin=dump, monkeypatch=monkeypatch)
    assert said == "imported 0 workflows; 2 already there were left as they are\n"
    back = cli("export", on_cluster, monkeypatch=monkeypatch)
    # Line for line the same dump, but for the header's moment and the inbox key, which
    # each store numbers its own way.
    ours, theirs = dump.splitlines(), back.splitlines()
    assert len(ours) == len(theirs) == 4
    for mine, yours in zip(ours[1:], theirs[1:], strict=True):
        a, b = json.loads(mine), json.loads(yours)
        for line in (a, b):
            for record in line.get("records", []):
                record[0] = "inbox" if record[0].startswith(INBOX_PREFIX) else record[0]
        assert a == b
    listed = json.loads(cli("list", on_cluster, "--json", monkeypatch=monkeypatch))
    assert {w["workflow"]: w["status"] for w in listed["workflows"]} == {
        "o-1": "ready",
        "o-2": "cancelled",
    }


async def test_workflows_moved_mid_flight_finish_on_each_store(url: str) -> None:
    async with durable.open("memory://") as source, durable.open(url) as target:
        assert isinstance(source, LifecycleDurable)
        assert isinstance(target, LifecycleDurable)
        await source.start(nap, "asleep", 1)
        await source.start(approve, "waiting")
        await source.send("waiting", "first")
        await _serve_until(source, {"asleep": Status.SLEEPING, "waiting": Status.BLOCKED})
        await source.send("waiting", "second")
        deadline = (await source.status("asleep")).until  # type: ignore[union-attr]
        await import_lines(target, await _dump(source))
        await target.arrive("waiting", "approval", "yes")
        await _serve_until(target, {"asleep": Status.FINISHED, "waiting": Status.FINISHED})
        assert await target.handle("waiting").result(timeout=1) == ["first", "yes", "second"]
        assert await target.handle("asleep").result(timeout=1) == "rested"
        # It slept until the deadline it had on the old store, not one counted afresh.
        slept = await target.checkpointer.history("asleep")
        assert [e.key for e in slept] == ["before", "nap"]
        assert datetime.fromisoformat(str(slept[1].value)) == deadline


async def test_an_import_keeps_the_store_clock_times_the_workflows_had(url: str) -> None:
    """Moved from a store whose clock reads January, a workflow cancelled then is cancelled
    then on the new store too: its records, its inbox entry and its status keep their times,
    and a prune of what ended over 30 days ago takes it."""
    clock = ManualClock(datetime(2020, 1, 5, 9, 30, 0, 250000, tzinfo=UTC))
    async with durable.open("memory://", clock=clock) as source, durable.open(url) as target:
        assert isinstance(source, LifecycleDurable)
        assert isinstance(target, LifecycleDurable)
        await source.start(pay, "old", {"amount": 4})
        clock.advance(timedelta(minutes=1, microseconds=17))
        await source.checkpointer.supply("old", "note", "by hand")
        clock.advance(timedelta(minutes=1))
        await source.send("old", "a message never read")
        clock.advance(timedelta(minutes=1))
        await source.cancel("old")
        before = await _times(source, ["old"])
        history = await source.checkpointer.history("old")
        assert [e.at.minute for e in history] == [31, 32]
        done = await import_lines(target, await _dump(source))
        assert (done.written, done.kept) == (1, 0)
        assert await _times(target, ["old"]) == before
        moved = await target.status("old")
        assert moved is not None
        assert moved.status is Status.CANCELLED
        assert _ms(moved.updated_at) == datetime(2020, 1, 5, 9, 33, 0, 250000, tzinfo=UTC)
        assert await prune(target, datetime.now(UTC) - timedelta(days=30)) == 1
        assert await target.status("old") is None


async def test_imported_workflows_are_listed_in_the_order_they_last_moved(url: str) -> None:
    """Listing is newest updated first: after an import, by the times kept, not by the
    order the import wrote them in (on Redis the index member moves with backdate)."""
    if url == "memory://":
        pytest.skip("the memory store lists by the order of its own transitions")
    clock = ManualClock(datetime(2020, 1, 5, 9, 30, tzinfo=UTC))
    async with durable.open("memory://", clock=clock) as source, durable.open(url) as target:
        assert isinstance(source, LifecycleDurable)
        assert isinstance(target, LifecycleDurable)
        await source.start(pay, "a", {"amount": 1})
        await source.start(pay, "b", {"amount": 2})
        clock.advance(timedelta(minutes=1))
        await source.cancel("b")
        clock.advance(timedelta(minutes=1))
        await source.cancel("a")  # a moved last, and is imported first (ids sorted)
        await import_lines(target, await _dump(source))
        page = await target.list()
        assert [st.workflow for st in page.statuses] == ["a", "b"]
        page = await target.list(status=Status.CANCELLED)
        assert [st.workflow for st in page.statuses] == ["a", "b"]


async def test_export_and_import_stream_a_workflow_at_a_time(tmp_path: Path) -> None:
    """Memory stays flat: the dump of 400 workflows of 20 KB each (8 MB) is written to a
    file and read back into another store while the Python heap's peak, traced, stays
    under a tenth of it (the ids, one workflow's records, one line)."""
    big = "x" * 20_000
    source_url = f"sqlite:///{tmp_path / 'source.db'}"
    async with durable.open(source_url) as source:
        for n in range(400):
            await source.checkpointer.supply(f"big-{n:03}", "blob", big)
        ids = await workflow_ids(source)
        path = tmp_path / "dump.jsonl"
        tracemalloc.start()
        try:
            with path.open("w", encoding="utf-8") as out:
                async for line in export_lines(source, ids):
                    out.write(line)
            _, exported_peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    size = path.stat().st_size
    assert size > 8_000_000
    async with durable.open(f"sqlite:///{tmp_path / 'target.db'}") as target:
        tracemalloc.start()
        try:
            with path.open(encoding="utf-8") as source_file:
                done = await import_lines(target, source_file)
            _, imported_peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert done.written == 400
        assert (await target.checkpointer.load("big-399"))["blob"] == big
    assert exported_peak < size / 10, (exported_peak, size)
    assert imported_peak < size / 10, (imported_peak, size)


async def test_export_filters_by_status_and_by_id(url: str) -> None:
    async with durable.open(url) as store:
        assert isinstance(store, LifecycleDurable)
        await store.start(pay, "a", {"amount": 1})
        await store.start(pay, "b", {"amount": 2})
        await store.cancel("b")
        assert await workflow_ids(store, [Status.CANCELLED]) == ["b"]
        lines = await _dump(store, ["a", "nobody"])
        header, *body, end = (json.loads(line) for line in lines)
        assert header["format"] == FORMAT
        assert header["durable"] == "export"
        assert [line["workflow"] for line in body] == ["a"]
        assert body[0]["status"]["status"] == "ready"
        assert end == {"end": True, "workflows": 1}


async def test_import_refuses_a_newer_format_and_a_dump_cut_short(url: str) -> None:
    async with durable.open("memory://") as source, durable.open(url) as target:
        assert isinstance(source, LifecycleDurable)
        await source.start(pay, "a", {"amount": 1})
        await source.start(pay, "b", {"amount": 2})
        lines = await _dump(source)
        newer = json.dumps({**json.loads(lines[0]), "format": FORMAT + 1}) + "\n"
        with pytest.raises(DumpError, match="newer"):
            await import_lines(target, [newer, *lines[1:]])
        assert await workflow_ids(target) == []
        with pytest.raises(DumpError, match="cut short"):
            await import_lines(target, io.StringIO("".join(lines[:-2])))
        assert await workflow_ids(target) == ["a"]
        done = await import_lines(target, lines)
        assert (done.written, done.kept) == (1, 1)


# --- prune -----------------------------------------------------------------------------------


async def test_prune_removes_only_old_terminal_workflows_and_keeps_the_fence(url: str) -> None:
    async with durable.open(url) as store:
        assert isinstance(store, LifecycleDurable)
        for n in range(5):
            await store.start(pay, f"done-{n}", {"amount": n})
        await store.start(flaky, "failed")
        await store.start(pay, "cancelled", {"amount": 1})
        await store.cancel("cancelled")
        await store.start(nap, "asleep", 60)
        await _serve_until(
            store,
            {
                **{f"done-{n}": Status.FINISHED for n in range(5)},
                "failed": Status.FAILED,
                "asleep": Status.SLEEPING,
            },
        )
        await store.start(pay, "ready", {"amount": 1})
        # Nothing is older than an hour ago: nothing goes.
        assert await prune(store, datetime.now(UTC) - timedelta(hours=1)) == 0
        # Only the finished ones, in batches of two.
        cutoff = datetime.now(UTC) + timedelta(seconds=1)
        assert await prune(store, cutoff, [Status.FINISHED], batch=2) == 5
        assert await store.status("failed") is not None
        # Then every terminal one; the sleeping and the ready ones stay, untouched.
        assert await prune(store, cutoff) == 2
        for gone in ["done-0", "done-4", "failed", "cancelled"]:
            assert await store.status(gone) is None
            assert await store.checkpointer.history(gone) == []
        assert (await store.status("asleep")).status is Status.SLEEPING  # type: ignore[union-attr]
        assert (await store.status("ready")).status is Status.READY  # type: ignore[union-attr]
        assert [e.key for e in await store.checkpointer.history("asleep")] == ["before", "nap"]
        with pytest.raises(ValueError, match="not sleeping"):
            await prune(store, cutoff, [Status.SLEEPING])


ROUNDS, RACED = 6, 25
"""Prune-against-retry rounds, and ended workflows raced in each."""


async def test_a_prune_racing_retries_never_discards_a_workflow_a_retry_made_ready(
    url: str,
) -> None:
    """A prune of every cancelled workflow runs while, on another handle, a task retries
    the same workflows in a shuffled order: each retry either found its workflow pruned
    (UnknownWorkflow) or made it ready, and every workflow a retry made ready is still
    there, ready, with its records, after the prune has finished. Many rounds, real
    concurrency (two connections on the server stores)."""
    rng = random.Random(17)
    outcomes = {"pruned first": 0, "retried first": 0}
    async with durable.open(url) as store, AsyncExitStack() as stack:
        assert isinstance(store, LifecycleDurable)
        other: Durable[Any] = store
        if url != "memory://":  # a second memory:// is another store, not another handle
            other = await stack.enter_async_context(_opened(url))
        assert isinstance(other, LifecycleDurable)
        for round_ in range(ROUNDS):
            ids = [f"r{round_}-{n}" for n in range(RACED)]
            for wf in ids:
                await store.start(pay, wf, {"amount": 1})
                await store.checkpointer.supply(wf, "note", wf)
                await store.cancel(wf)
            retried: list[str] = []

            async def retry_all(ids: list[str] = ids, retried: list[str] = retried) -> None:
                for wf in rng.sample(ids, len(ids)):
                    try:
                        await other.retry(wf)
                    except durable.UnknownWorkflow:
                        continue
                    retried.append(wf)

            later = datetime.now(UTC) + timedelta(minutes=1)
            async with asyncio.timeout(PATIENCE):
                pruned, _ = await asyncio.gather(
                    prune(store, later, [Status.CANCELLED], batch=5), retry_all()
                )
            assert pruned + len(retried) == RACED, (pruned, retried)
            for wf in ids:
                st = await store.status(wf)
                if wf in retried:
                    assert st is not None, f"{wf} was retried, and the prune then discarded it"
                    assert st.status is Status.READY, st
                    assert (await store.checkpointer.load(wf))["note"] == wf
                    outcomes["retried first"] += 1
                else:
                    assert st is None, f"{wf} was neither retried nor pruned: {st}"
                    outcomes["pruned first"] += 1
            # What the retries made ready, a later prune of ended workflows leaves alone.
            assert await prune(store, later, [Status.CANCELLED]) == 0
    assert sum(outcomes.values()) == ROUNDS * RACED, outcomes


async def test_a_pruned_id_started_again_gets_tokens_above_any_it_had(url: str) -> None:
    async with durable.open(url) as store:
        assert isinstance(store, LifecycleDurable)
        checkpointer: Any = store.checkpointer
        window = timedelta(seconds=5)
        await store.start(pay, "w", {"amount": 1})
        highest = 0
        for _ in range(3):
            began = await checkpointer.begin("w", liveness=window, budget=window, owner="t")
            assert began is not None
            assert began.holder is not None
            highest = max(highest, began.holder.token)
            await checkpointer.release(began.holder)
        stale = began.holder
        await store.cancel("w")
        assert await prune(store, datetime.now(UTC) + timedelta(seconds=1)) == 1
        assert await store.status("w") is None
        await store.start(pay, "w", {"amount": 1})
        again = await checkpointer.begin("w", liveness=window, budget=window, owner="t")
        assert again is not None
        assert again.holder is not None
        assert again.holder.token > highest
        with pytest.raises(durable.Fenced):
            await checkpointer.record(stale, "late", 1)


def test_ages() -> None:
    assert parse_age("30d") == timedelta(days=30)
    assert parse_age("12h") == timedelta(hours=12)
    assert parse_age("90m") == timedelta(minutes=90)
    assert parse_age("45s") == timedelta(seconds=45)
    assert parse_age("2w") == timedelta(weeks=2)
    for bad in ["", "d", "30", "1.5d", "-3d", "3y"]:
        with pytest.raises(ValueError, match="not an age"):
            parse_age(bad)


# --- the commands (in-process, through durable.cli.main) --------------------------------------


def cli(*argv: str, stdin: str | None = None, monkeypatch: pytest.MonkeyPatch) -> str:
    out = io.StringIO()
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    assert main(list(argv), out=out) == 0
    return out.getvalue()


@pytest.fixture
def urls(tmp_path: Path) -> Iterator[list[str]]:
    with postgres_url("transfer") as postgres, redis_url("transfer") as redis:
        yield [f"sqlite:///{tmp_path / 'a.db'}", postgres, redis]


def test_export_then_import_moves_workflows_store_to_store(
    urls: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = urls[0]
    cli("start", first, "pay", "o-1", '{"amount": 120}', monkeypatch=monkeypatch)
    cli("start", first, "pay", "o-2", '{"amount": 7}', monkeypatch=monkeypatch)
    cli("cancel", first, "o-2", monkeypatch=monkeypatch)
    cli("send", first, "o-1", '"hello"', "--id", "m-1", monkeypatch=monkeypatch)
    dump = cli("export", first, monkeypatch=monkeypatch)
    header = json.loads(dump.splitlines()[0])
    assert (header["durable"], header["format"], header["workflows"]) == ("export", 1, 2)
    for target in [*urls[1:], f"sqlite:///{tmp_path / 'b.db'}"]:
        said = cli("import", target, stdin=dump, monkeypatch=monkeypatch)
        assert said == "imported 2 workflows; 0 already there were left as they are\n"
        said = cli("import", target, stdin=dump, monkeypatch=monkeypatch)
        assert said == "imported 0 workflows; 2 already there were left as they are\n"
        listed = cli("list", target, "--json", monkeypatch=monkeypatch)
        statuses = {w["workflow"]: w["status"] for w in json.loads(listed)["workflows"]}
        assert statuses == {"o-1": "ready", "o-2": "cancelled"}
        again = cli("export", target, monkeypatch=monkeypatch)
        lines = [json.loads(line) for line in again.splitlines()[1:-1]]
        assert [[r[1] for r in line["records"]] for line in lines] == [["hello"], []]
        dump = again
    cancelled = cli("export", urls[0], "--status", "cancelled", monkeypatch=monkeypatch)
    assert [json.loads(line).get("workflow") for line in cancelled.splitlines()[1:-1]] == ["o-2"]
    one = cli("export", urls[0], "o-1", monkeypatch=monkeypatch)
    assert [json.loads(line).get("workflow") for line in one.splitlines()[1:-1]] == ["o-1"]


def test_import_refuses_a_newer_format_with_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    newer = json.dumps({"durable": "export", "format": 99, "workflows": 0}) + "\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(newer))
    with pytest.raises(SystemExit) as exited:
        main(["import", f"sqlite:///{tmp_path / 'a.db'}"], out=io.StringIO())
    assert exited.value.code == 2
    assert "format 99, newer than this release reads (1)" in capsys.readouterr().err


def test_prune_from_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    cli("start", url, "pay", "o-1", '{"amount": 1}', monkeypatch=monkeypatch)
    cli("start", url, "pay", "o-2", '{"amount": 2}', monkeypatch=monkeypatch)
    cli("cancel", url, "o-2", monkeypatch=monkeypatch)
    said = cli("prune", url, "--finished-before", "30d", monkeypatch=monkeypatch)
    assert said.startswith("pruned 0 workflows (finished, failed, cancelled; last updated before ")
    said = cli("prune", url, "--finished-before", "2999-01-01T00:00:00Z", monkeypatch=monkeypatch)
    assert said.startswith("pruned 1 workflows")
    listed = json.loads(cli("list", url, "--json", monkeypatch=monkeypatch))
    assert [w["workflow"] for w in listed["workflows"]] == ["o-1"]
    with pytest.raises(SystemExit) as exited:
        main(["prune", url, "--finished-before", "1d", "--status", "ready"], out=io.StringIO())
    assert exited.value.code == 2
    with pytest.raises(SystemExit) as exited:
        main(["prune", url, "--finished-before", "yesterday"], out=io.StringIO())
    assert exited.value.code == 2


def test_progress_is_drawn_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for stream, drawn in [(io.StringIO(), ""), (Terminal(), "\rexporting 3/3 workflows\n")]:
        monkeypatch.setattr(sys, "stderr", stream)
        progress = _Progress("exporting")
        progress(3, 3)
        progress.close()
        assert stream.getvalue() == drawn
