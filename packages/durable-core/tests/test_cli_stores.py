"""The ``durable`` command end to end, as an operator runs it, against every real store.

Each command runs in a subprocess of this interpreter (``python -m durable.cli``), against a
store of its own: an SQLite file in a temporary directory, a Postgres schema of its own
(``?schema=``) and a Redis key prefix of its own (``?prefix=``), each removed afterwards.
A server that does not answer is skipped with the reason; nothing here is mocked.

The worker runs bodies from ``cli_bodies.py`` beside this file, which it imports by name
through ``PYTHONPATH``, as it would an application's module.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import durable
import pytest
from durable.store_fixtures import postgres_url, redis_url

HERE = Path(__file__).resolve().parent
PATIENCE = 60.0
"""Seconds a test waits for a subprocess before it fails rather than hangs (never asserted)."""


@dataclass(frozen=True)
class Store:
    """One store a test may use: its plugin's name and a URL only this test writes under."""

    name: str
    url: str


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "sqlite":
        yield Store("sqlite", f"sqlite:///{tmp_path / 'store.db'}")
    elif request.param == "postgres":
        with postgres_url("cli") as url:
            yield Store("postgres", url)
    else:
        with redis_url("cli", single_node=True) as url:
            yield Store("redis", url)


class Cli:
    """The ``durable`` command as a user types it, each call a new process.

    Subprocesses keep compiled bytecode under a cache of this session's own, so each one
    does not recompile its imports from source (the test environment writes no ``.pyc``
    beside the sources); installed packages have theirs, so this is how users run it.
    """

    def __init__(self, bytecode: Path) -> None:
        self.environment = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        self.environment["PYTHONPYCACHEPREFIX"] = str(bytecode)
        self.environment["PYTHONPATH"] = os.pathsep.join(
            [str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])]
        )

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Exit code and output; stdin is empty and not a terminal."""
        return subprocess.run(
            [sys.executable, "-m", "durable.cli", *args],
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            env=self.environment,
            timeout=PATIENCE,
            check=False,
        )

    def ok(self, *args: str) -> str:
        done = self.run(*args)
        assert done.returncode == 0, (
            f"durable {' '.join(args)} exited {done.returncode}: {done.stderr}"
        )
        return done.stdout

    def show(self, store: Store, workflow: str) -> dict[str, Any]:
        shown: dict[str, Any] = json.loads(self.ok("show", store.url, workflow, "--json"))
        return shown

    def worker(self, store: Store | str, body: str, *options: str) -> Worker:
        url = store if isinstance(store, str) else store.url
        return Worker(
            [sys.executable, "-m", "durable.cli", "worker", url, body, *options],
            self.environment,
        )


class Worker:
    """``durable worker`` in a subprocess, with its log read as it is written."""

    def __init__(self, command: list[str], environment: dict[str, str]) -> None:
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
        )
        self.log: list[str] = []
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._lines.put(line)
        self._lines.put(None)

    def wait_for(self, text: str) -> str:
        """The first log line containing ``text``; fails if the worker ends first."""
        seen = next((line for line in self.log if text in line), None)
        deadline = time.monotonic() + PATIENCE
        while seen is None and (left := deadline - time.monotonic()) > 0:
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                break
            self.log.append(line)
            if text in line:
                seen = line
        if seen is not None:
            return seen
        raise AssertionError(f"the worker never logged {text!r}; its log:\n{''.join(self.log)}")

    def stop(self) -> int:
        """SIGTERM, as a process supervisor stops a service; the exit code."""
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=PATIENCE)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            self._drain()
            raise AssertionError(
                f"the worker did not stop within {PATIENCE:g}s of SIGTERM; its log:\n"
                + "".join(self.log)
            ) from None
        self.wait_for("worker: stopped")
        return code

    def _drain(self) -> None:
        """Whatever the ended worker logged that was not read yet."""
        while (line := self._lines.get(timeout=PATIENCE)) is not None:
            self.log.append(line)


@pytest.fixture(scope="session")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Cli:
    return Cli(tmp_path_factory.mktemp("bytecode"))


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    """Workers a test started; any still running at the end are killed."""
    started: list[Worker] = []
    yield started
    for worker in started:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait()


def offers_lifecycle(store: Store) -> bool:
    return "lifecycle" in durable.plugins.store(store.name).capabilities


@pytest.fixture
def lifecycle_store(store: Store) -> Store:
    """``store``, where it declares the ``lifecycle`` capability; skipped with the reason
    elsewhere (a store gains these tests the moment it declares it)."""
    if not offers_lifecycle(store):
        pytest.skip(f"the {store.name} store does not declare the lifecycle capability")
    return store


def at(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    assert moment.tzinfo is not None, f"store time {text!r} carries no timezone"
    return moment


# --- supplying values and messages -----------------------------------------------------


def test_send_prints_the_inbox_key_and_arrive_prints_what_the_key_holds(
    cli: Cli, store: Store
) -> None:
    key = cli.ok("send", store.url, "wf-1", '{"name": "ana"}', "--create").strip()
    first = cli.ok("arrive", store.url, "wf-1", "approval", '{"by": "ana"}')
    again = cli.ok("arrive", store.url, "wf-1", "approval", '{"by": "ana"}')
    second = cli.run("arrive", store.url, "wf-1", "approval", '{"by": "bo"}')

    assert key.startswith(durable.INBOX_PREFIX)
    assert json.loads(first) == json.loads(again) == {"by": "ana"}
    assert second.returncode == 6, "an arrive that lost to another value says so"
    assert json.loads(second.stdout) == {"by": "ana"}, "the first writer wins"
    assert second.stderr == (
        'durable: wf-1: \'approval\' already holds {"by": "ana"}, written earlier; '
        '{"by": "bo"} was not written (first writer wins)\n'
    )


def test_send_with_an_id_twice_prints_one_key_and_without_prints_two(
    cli: Cli, store: Store
) -> None:
    once = [
        cli.ok("send", store.url, "wf-1", '"pay"', "--id", "order-7", "--create") for _ in range(2)
    ]
    twice = [cli.ok("send", store.url, "wf-2", '"pay"', "--create") for _ in range(2)]

    assert once[0] == once[1], "a repeated send with --id appended again"
    assert once[0].strip().startswith(durable.INBOX_PREFIX)
    assert [r["key"] for r in cli.show(store, "wf-1")["records"]] == [once[0].strip()]
    assert twice[0] != twice[1], "a send without --id is not deduplicated"
    assert [r["value"] for r in cli.show(store, "wf-2")["records"]] == ["pay", "pay"]


def test_send_with_an_empty_id_is_a_usage_error_naming_the_workflow(cli: Cli, store: Store) -> None:
    done = cli.run("send", store.url, "wf-1", '"pay"', "--id", "", "--create")
    assert done.returncode == 2, done.stderr
    assert "workflow 'wf-1': a message id must be a non-empty string" in done.stderr


# --- show: the timeline, the claim and the schedule -------------------------------------


async def test_show_is_the_timeline_in_write_order_with_store_times(cli: Cli, store: Store) -> None:
    async with durable.open(store.url) as opened:
        first = await opened.send("wf-1", "first")
        await opened.arrive("wf-1", "approval", True)
        second = await opened.send("wf-1", {"n": 2})

    shown = cli.show(store, "wf-1")
    lines = cli.ok("show", store.url, "wf-1").splitlines()

    assert shown["workflow"] == "wf-1"
    assert [(r["key"], r["value"]) for r in shown["records"]] == [
        (first, "first"),
        ("approval", True),
        (second, {"n": 2}),
    ]
    times = [at(r["at"]) for r in shown["records"]]
    assert times == sorted(times)
    # The status comes first (a send made this workflow, so no status is recorded yet, or
    # the store keeps none), then the timeline.
    assert lines[0] in (
        "status: none recorded (never started, and no pass has begun)",
        "status: this store does not offer lifecycle",
    )
    assert lines[1] == "workflow wf-1"
    assert [line.split(maxsplit=2)[1:] for line in lines[2:5]] == [
        [first, '"first"'],
        ["approval", "true"],
        [second, '{"n": 2}'],
    ]
    for line in lines[2:5]:
        at(line.split()[0])
    if "claim" in shown["unreported"]:
        assert lines[5] == "claim: this store cannot report claims"
    else:
        assert shown["claim"] is None
        assert lines[5] == "claim: free"
    assert lines[6].startswith("scheduled: ")


async def test_show_reports_a_workflow_made_ready_as_scheduled(cli: Cli, store: Store) -> None:
    async with durable.open(store.url) as opened:
        await opened.send("wf-1", "go")

    shown = cli.show(store, "wf-1")
    text = cli.ok("show", store.url, "wf-1")

    if "scheduled" in shown["unreported"]:
        assert "scheduled: this store cannot report its schedule" in text
        pytest.xfail(f"the {store.name} scheduler has no scheduled() (Observable)")
    assert shown["scheduled"] is not None, "a workflow just sent to is runnable"
    assert f"scheduled: {at(shown['scheduled']).isoformat(timespec='seconds')}" in text


async def test_show_reports_a_live_claim_with_its_token_and_deadlines(
    cli: Cli, store: Store
) -> None:
    async with durable.open(store.url) as opened:
        await opened.arrive("wf-1", "approval", True)
        holder = await opened.checkpointer.claim(
            "wf-1", liveness=timedelta(minutes=5), budget=timedelta(minutes=10)
        )
        assert holder is not None
        try:
            shown = cli.show(store, "wf-1")
            text = cli.ok("show", store.url, "wf-1")
        finally:
            await opened.checkpointer.release(holder)

    if "claim" in shown["unreported"]:
        assert "claim: this store cannot report claims" in text
        pytest.xfail(f"the {store.name} checkpointer has no claimed() (Inspectable)")
    assert shown["claim"]["token"] == holder.token
    assert at(shown["claim"]["live_until"]) <= at(shown["claim"]["budget_until"])
    assert f"claim: held by pass {holder.token}, liveness until " in text
    assert ", budget until " in text


# --- listing and discarding ------------------------------------------------------------


async def test_list_names_each_workflow_once_in_order_and_honours_the_limit(
    cli: Cli, store: Store
) -> None:
    if offers_lifecycle(store):
        pytest.skip(f"{store.name} keeps statuses: see the lifecycle listing tests below")
    async with durable.open(store.url) as opened:
        for workflow in ("wf-b", "wf-a", "wf-c"):
            await opened.send(workflow, "hi")
        await opened.arrive("wf-a", "approval", True)

    assert cli.ok("list", store.url).split() == ["wf-a", "wf-b", "wf-c"]
    assert cli.ok("list", store.url, "--limit", "2").split() == ["wf-a", "wf-b"]
    refused = cli.run("list", store.url, "--status", "failed")
    assert refused.returncode == 4, refused.stderr
    assert "does not offer lifecycle" in refused.stderr


async def test_discard_asks_for_yes_then_forgets_the_workflow_and_cancels_its_runs(
    cli: Cli,
    store: Store,
) -> None:
    async with durable.open(store.url) as opened:
        await opened.send("wf-1", "hi")
        await opened.send("wf-2", "hi")

    refused = cli.run("discard", store.url, "wf-1")
    discarded = cli.run("discard", store.url, "wf-1", "--yes")
    gone = cli.run("show", store.url, "wf-1")

    assert refused.returncode == 5, refused.stderr
    assert "--yes" in refused.stderr
    assert discarded.returncode == 0, discarded.stderr
    assert discarded.stdout == "discarded wf-1\n"
    assert gone.returncode == 3, gone.stderr
    async with durable.open(store.url) as opened:
        assert await opened.checkpointer.load("wf-1") == {}
        assert list(await opened.checkpointer.load("wf-2")) != []


# --- the worker ------------------------------------------------------------------------


def test_a_worker_finishes_a_workflow_and_exits_0_on_sigterm(
    cli: Cli, store: Store, workers: list[Worker]
) -> None:
    inbox = cli.ok("send", store.url, "wf-1", '"ana"', "--create").strip()
    worker = cli.worker(store, "cli_bodies:greet")
    workers.append(worker)

    worker.wait_for("workflow 'wf-1': finished")
    code = worker.stop()

    assert code == 0, "".join(worker.log)
    shown = cli.show(store, "wf-1")
    assert [(r["key"], r["value"]) for r in shown["records"]] == [
        (inbox, "ana"),
        ("name", {"durable.receive": inbox}),
        ("greeting", "hello, ana"),
    ]
    if "claim" not in shown["unreported"]:
        assert shown["claim"] is None, "a finished pass releases its claim"
    if "scheduled" not in shown["unreported"]:
        assert shown["scheduled"] is None, "a finished workflow is not scheduled"


def test_a_sleeping_workflow_is_scheduled_for_its_recorded_deadline(
    cli: Cli, store: Store, workers: list[Worker]
) -> None:
    cli.ok("arrive", store.url, "wf-1", "start", "true", "--create")
    worker = cli.worker(store, "cli_bodies:nap")
    workers.append(worker)

    worker.wait_for("workflow 'wf-1': sleeping until")
    assert worker.stop() == 0, "".join(worker.log)

    shown = cli.show(store, "wf-1")
    deadline = at(next(r["value"] for r in shown["records"] if r["key"] == "nap"))
    if "scheduled" in shown["unreported"]:
        pytest.xfail(f"the {store.name} scheduler has no scheduled() (Observable)")
    # Stores keep times at millisecond (Redis) or microsecond precision.
    assert abs(at(shown["scheduled"]) - deadline) <= timedelta(milliseconds=1)


# --- errors ------------------------------------------------------------------------------


def test_show_of_an_unknown_workflow_exits_3_naming_it(cli: Cli, store: Store) -> None:
    cli.ok("send", store.url, "another", '"hi"', "--create")
    done = cli.run("show", store.url, "never-started")

    assert done.returncode == 3
    assert done.stderr.strip() == f"durable: no workflow 'never-started' in {store.url}"


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://postgres@127.0.0.1:1/test",
        "redis://127.0.0.1:1/0",
    ],
    ids=["postgres", "redis"],
)
@pytest.mark.parametrize(
    "command",
    [
        ("show", "{url}", "wf-1"),
        ("send", "{url}", "wf-1", '"hi"', "--create"),
    ],
    ids=["show", "send"],
)
def test_an_unreachable_server_exits_1_with_one_line_naming_it(
    cli: Cli, url: str, command: tuple[str, ...]
) -> None:
    done = cli.run(*(part.format(url=url) for part in command))

    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("durable: ")
    assert "127.0.0.1" in lines[0]
    assert ":1" in lines[0] or "port 1" in lines[0]


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://postgres:sekret@127.0.0.1:1/test",
        "redis://default:sekret@127.0.0.1:1/0",
    ],
    ids=["postgres", "redis"],
)
def test_a_worker_retries_an_unreachable_store_with_backoff_until_its_connect_timeout(
    cli: Cli, url: str
) -> None:
    began = time.monotonic()
    done = cli.run("worker", url, "cli_bodies:greet", "--connect-timeout", "5")
    took = time.monotonic() - began

    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    tries = [line for line in lines if "worker: cannot open " in line]
    assert len(tries) >= 2, done.stderr
    delays = [float(line.rsplit("trying again in ", 1)[1].rstrip("s")) for line in tries]
    assert delays[:2] == [0.5, 1.0], "each try waits twice as long as the one before"
    assert all("127.0.0.1" in line and "sekret" not in line for line in lines), done.stderr
    assert lines[-1].startswith("durable: gave up opening ")
    assert "after 5s (--connect-timeout)" in lines[-1]
    assert "Traceback" not in done.stderr
    assert 5 <= took < PATIENCE


def test_ctrl_c_while_a_worker_waits_for_its_store_stops_it_quietly(
    cli: Cli, workers: list[Worker]
) -> None:
    pytest.importorskip("durable_redis")
    worker = cli.worker("redis://127.0.0.1:1/0", "cli_bodies:greet")
    workers.append(worker)
    worker.wait_for("worker: cannot open ")

    worker.process.send_signal(signal.SIGINT)
    code = worker.process.wait(timeout=PATIENCE)

    assert code == 0
    worker.wait_for("worker: stopped before the store could be opened")
    assert not any("Traceback" in line for line in worker.log)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_a_worker_started_before_its_redis_server_waits_for_it_then_works(
    cli: Cli, workers: list[Worker], tmp_path: Path
) -> None:
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not installed")
    pytest.importorskip("durable_redis")
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0?prefix=durable-late"
    worker = cli.worker(url, "cli_bodies:greet", "--poll", "0.2")
    workers.append(worker)
    first = worker.wait_for("worker: cannot open ")
    time.sleep(2)
    redis = subprocess.Popen(
        [server, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        worker.wait_for("worker: cli_bodies:greet on ")
        cli.ok("send", url, "wf-1", '"ana"', "--create")
        worker.wait_for("workflow 'wf-1': finished")
        assert worker.stop() == 0, "".join(worker.log)
    finally:
        redis.terminate()
        redis.wait(timeout=PATIENCE)

    assert f"127.0.0.1:{port}" in first
    assert "trying again in" in first
    assert not any("Traceback" in line for line in worker.log)


def test_a_killed_workers_workflow_is_taken_over_within_the_delivery_lease_and_liveness(
    cli: Cli, store: Store, workers: list[Worker]
) -> None:
    """The bound docs/cli.md states: a dead worker's workflow runs again no later than
    max(delivery lease, liveness + retry) after it died, plus a poll and a tick."""
    delivery_lease, liveness, retry, poll, tick = 1.0, 1.0, 0.5, 0.2, 0.2
    url = f"{store.url}{'&' if '?' in store.url else '?'}delivery_lease={delivery_lease:g}"
    options = (
        *("--liveness", f"{liveness:g}", "--retry", f"{retry:g}"),
        *("--poll", f"{poll:g}", "--tick", f"{tick:g}"),
    )
    first = cli.worker(url, "cli_bodies:outlive_first_taker", *options)
    workers.append(first)
    cli.ok("send", url, "wf-1", '"go"', "--create")
    first.wait_for("holding wf-1")
    second = cli.worker(url, "cli_bodies:outlive_first_taker", *options)
    workers.append(second)
    second.wait_for("worker: cli_bodies:outlive_first_taker on ")

    first.process.send_signal(signal.SIGKILL)
    died = time.monotonic()
    second.wait_for("workflow 'wf-1': finished")
    waited = time.monotonic() - died
    assert second.stop() == 0, "".join(second.log)

    bound = max(delivery_lease, liveness + retry) + poll + tick
    assert waited < bound + 2.0, f"taken over after {waited:.1f}s; the bound is {bound:.1f}s"
    shown = cli.show(store, "wf-1")
    assert [r["key"] for r in shown["records"]][-1] == "first-taker"


def test_a_short_liveness_alone_does_not_shorten_the_wait_for_a_killed_workers_workflow(
    cli: Cli, workers: list[Worker], tmp_path: Path
) -> None:
    """The confusion the two names exist to prevent: --liveness 1 on a store whose delivery
    lease is the default 30 s still leaves a dead worker's workflow waiting for that lease."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    options = ("--liveness", "1", "--retry", "0.5", "--poll", "0.2", "--tick", "0.2")
    first = cli.worker(url, "cli_bodies:outlive_first_taker", *options)
    workers.append(first)
    cli.ok("send", url, "wf-1", '"go"', "--create")
    first.wait_for("holding wf-1")
    second = cli.worker(url, "cli_bodies:outlive_first_taker", *options)
    workers.append(second)
    second.wait_for("delivery lease 30s")

    first.process.send_signal(signal.SIGKILL)
    first.process.wait(timeout=PATIENCE)
    time.sleep(5)
    assert second.stop() == 0, "".join(second.log)

    assert not any("workflow 'wf-1': finished" in line for line in second.log)
    shown = cli.show(Store("sqlite", url), "wf-1")
    assert shown["claim"] is None, "the dead worker's claim lapsed after its liveness"
    assert shown["scheduled"] is not None, "but its delivery is still leased"


# --- the lifecycle: start, show's status line, list, cancel, retry, result --------------

FAST = ("--poll", "0.1", "--tick", "0.1", "--retry", "0.2")


def test_start_is_idempotent_and_another_input_is_refused_with_exit_6(
    cli: Cli, lifecycle_store: Store
) -> None:
    url = lifecycle_store.url
    first = cli.ok("start", url, "payout", "o-1", '{"amount": 5}')
    again = cli.ok("start", url, "payout", "o-1", '{"amount": 5}')
    other = cli.run("start", url, "payout", "o-1", '{"amount": 6}')
    shown = cli.show(lifecycle_store, "o-1")

    assert first == "started o-1 (payout): ready\n"
    assert again.startswith("already started o-1 (payout): ready since ")
    assert other.returncode == 6, other.stderr
    assert "{'amount': 5}" in other.stderr
    assert "{'amount': 6}" in other.stderr
    assert shown["status"]["input"] == {"amount": 5}
    assert shown["status"]["kind"] == "payout"
    assert shown["status"]["status"] == "ready"
    assert shown["scheduled"] is not None, "a start makes the workflow ready"


def test_start_with_the_registry_refuses_an_input_its_parser_refuses_writing_nothing(
    cli: Cli, lifecycle_store: Store
) -> None:
    url = lifecycle_store.url
    refused = cli.run(
        "start", url, "payout", "o-1", '{"amount": -1}', "--workflows", "cli_bodies:workflows"
    )
    unknown = cli.run("start", url, "nope", "o-1", "--workflows", "cli_bodies:workflows")
    shown = cli.run("show", url, "o-1")

    assert refused.returncode == 2, refused.stderr
    assert "positive int" in refused.stderr
    assert "nothing was written" in refused.stderr
    assert unknown.returncode == 2, unknown.stderr
    assert "'payout'" in unknown.stderr
    assert shown.returncode == 3, shown.stdout


def test_a_worker_serving_a_registry_records_the_outcome_that_result_and_show_print(
    cli: Cli, lifecycle_store: Store, workers: list[Worker]
) -> None:
    url = lifecycle_store.url
    worker = cli.worker(url, "cli_bodies:workflows", "--name", "cli-worker-1", *FAST)
    workers.append(worker)
    cli.ok("start", url, "payout", "o-1", '{"amount": 5}')
    value = cli.ok("result", url, "o-1", "--timeout", "30")
    text = cli.ok("show", url, "o-1").splitlines()
    listed = cli.ok("list", url, "--status", "finished").splitlines()
    assert worker.stop() == 0, "".join(worker.log)

    assert json.loads(value) == {"paid": 5}
    assert text[:4] == [
        'finished: {"paid": 5}',
        "kind: payout",
        "attempts: 1",
        'input: {"amount": 5}',
    ]
    assert listed[0].split() == ["WORKFLOW", "KIND", "STATUS", "UPDATED"]
    assert listed[1].split()[:3] == ["o-1", "payout", "finished"]
    assert any("as cli-worker-1" in line for line in worker.log)


def test_a_kind_that_always_raises_fails_after_its_attempts_and_retry_runs_it_again(
    cli: Cli, lifecycle_store: Store, workers: list[Worker]
) -> None:
    url = lifecycle_store.url
    worker = cli.worker(url, "cli_bodies:workflows", *FAST)
    workers.append(worker)
    cli.ok("start", url, "declined", "d-1")
    failed = cli.run("result", url, "d-1", "--timeout", "30")
    assert worker.stop() == 0, "".join(worker.log)
    shown = cli.show(lifecycle_store, "d-1")
    first_line = cli.ok("show", url, "d-1").splitlines()[0]
    listed = json.loads(cli.ok("list", url, "--status", "failed", "--json"))
    retried = cli.ok("retry", url, "d-1")
    again = cli.run("retry", url, "d-1")

    line = "failed after 2 attempts: cli_bodies.Declined: card declined"
    assert failed.returncode == 7, failed.stderr
    assert failed.stderr == f"durable: {line}\n"
    assert failed.stdout == ""
    assert first_line == line
    assert shown["status"]["failure"]["type"] == "cli_bodies.Declined"
    assert shown["status"]["attempts"] == 2
    assert [w["workflow"] for w in listed["workflows"]] == ["d-1"]
    assert listed["cursor"] is None
    assert retried.startswith("ready since ")
    assert again.returncode == 6, again.stderr
    assert "only a failed or cancelled workflow can be retried" in again.stderr


def test_cancel_prints_the_new_status_and_result_of_a_cancelled_workflow_exits_7(
    cli: Cli, lifecycle_store: Store
) -> None:
    url = lifecycle_store.url
    cli.ok("start", url, "payout", "o-1", '{"amount": 5}')
    cancelled = cli.ok("cancel", url, "o-1")
    result = cli.run("result", url, "o-1")
    unknown = cli.run("cancel", url, "nope")
    shown = cli.show(lifecycle_store, "o-1")

    assert cancelled.startswith("cancelled at ")
    assert result.returncode == 7, result.stderr
    assert result.stderr.startswith("durable: cancelled at ")
    assert unknown.returncode == 3, unknown.stderr
    assert "'nope'" in unknown.stderr
    assert shown["scheduled"] is None, "a cancelled workflow is no longer queued"


def test_result_gives_up_after_its_timeout_with_exit_8(cli: Cli, lifecycle_store: Store) -> None:
    url = lifecycle_store.url
    cli.ok("start", url, "payout", "o-1", '{"amount": 5}')
    started = time.monotonic()
    done = cli.run("result", url, "o-1", "--timeout", "0.5")
    assert done.returncode == 8, done.stderr
    assert "o-1 did not settle within 0.5s: ready since " in done.stderr
    assert time.monotonic() - started < PATIENCE / 2


def test_list_is_a_table_newest_first_paged_by_a_cursor_on_stderr(
    cli: Cli, lifecycle_store: Store
) -> None:
    url = lifecycle_store.url
    for workflow in ("o-a", "o-b", "o-c"):
        cli.ok("start", url, "payout", workflow, '{"amount": 1}')
    cli.ok("cancel", url, "o-b")
    first = cli.run("list", url, "--limit", "2", "--kind", "payout")
    assert first.returncode == 0, first.stderr
    assert first.stderr.startswith("more: --cursor ")
    cursor = first.stderr.split("--cursor ", 1)[1].strip()
    second = cli.run("list", url, "--limit", "2", "--kind", "payout", "--cursor", cursor)
    ready = cli.ok("list", url, "--status", "ready").splitlines()
    bad = cli.run("list", url, "--status", "sleepy")

    rows = [line.split()[:3] for line in first.stdout.splitlines()[1:]]
    rows += [line.split()[:3] for line in second.stdout.splitlines()[1:]]
    assert rows == [
        ["o-b", "payout", "cancelled"],
        ["o-c", "payout", "ready"],
        ["o-a", "payout", "ready"],
    ]
    assert second.stderr == ""
    assert [line.split()[0] for line in ready[1:]] == ["o-c", "o-a"]
    assert bad.returncode == 2, bad.stderr


# --- the crash loop: a body that kills its own process ends failed, not forever ---------


def test_a_body_that_kills_its_worker_fails_after_max_attempts_passes_each_run_once(
    cli: Cli, lifecycle_store: Store, workers: list[Worker], tmp_path: Path
) -> None:
    """The issue's crash loop, with a real SIGKILL: the kind allows 3 attempts, and each
    pass of its body appends a line to a file and then kills the worker running it. Each
    death leaves nothing behind to report the failure; the attempt was counted by the
    claim's own write. A worker is started again after each death (as a supervisor would),
    and the fourth delivery finds three attempts spent and fails the workflow with
    ``durable.PassLost`` without running the body."""
    lines = tmp_path / "passes.txt"
    store = lifecycle_store
    # Appended as text: urlunsplit would drop the empty host of sqlite:///path.
    url = f"{store.url}{'&' if '?' in store.url else '?'}delivery_lease=1"
    options = ("--liveness", "1", *FAST)
    cli.ok("start", url, "crash", "c-1", json.dumps({"file": str(lines)}))

    deaths = 0
    status: dict[str, Any] = {}
    deadline = time.monotonic() + 4 * PATIENCE
    while status.get("status") != "failed" and time.monotonic() < deadline:
        worker = cli.worker(url, "cli_bodies:workflows", *options)
        workers.append(worker)
        while (code := worker.process.poll()) is None and time.monotonic() < deadline:
            status = cli.show(store, "c-1")["status"] or {}
            if status.get("status") == "failed":
                break
            time.sleep(0.2)
        if code is None:
            assert worker.stop() == 0, "".join(worker.log)
        else:
            assert code == -signal.SIGKILL, "".join(worker.log)
            deaths += 1
            assert deaths <= 3, f"the body ran a fourth time: {lines.read_text()}"
    assert status.get("status") == "failed", status
    assert status["failure"]["type"] == "durable.PassLost"
    assert status["failure"]["attempts"] == 3
    assert status["attempts"] == 3
    assert deaths == 3
    assert len(lines.read_text().splitlines()) == 3, lines.read_text()


def test_show_names_the_step_in_flight_the_worker_and_the_pass_of_a_running_workflow(
    cli: Cli, lifecycle_store: Store, workers: list[Worker]
) -> None:
    """The issue's "running step 'charge' on host:pid since 12:03:04": the step is the one
    the pass named at its last renewal (every third of --liveness), the worker is --name."""
    url = lifecycle_store.url
    options = ("--name", "box-7", "--liveness", "1.5", "--grace", "0.5", *FAST)
    worker = cli.worker(url, "cli_bodies:workflows", *options)
    workers.append(worker)
    cli.ok("start", url, "slow_charge", "o-1")
    worker.wait_for("charging o-1")
    time.sleep(1.2)  # at least one renewal, every 0.5 s, since the step began
    line = cli.ok("show", url, "o-1").splitlines()[0]
    status = cli.show(lifecycle_store, "o-1")["status"]
    assert worker.stop() == 0, "".join(worker.log)

    assert line.startswith("running step 'charge' on box-7 (pass "), line
    assert " since 20" in line
    assert "presumed dead" not in line
    assert status["status"] == "running"
    assert (status["owner"], status["step"], status["attempts"]) == ("box-7", "charge", 1)
    assert f"(pass {status['token']})" in line


# --- guard rails on writes from outside a pass (issue 17) -----------------------------------


def test_arrive_send_and_discard_of_an_unknown_id_exit_3_writing_nothing_unless_create(
    cli: Cli, store: Store
) -> None:
    cli.ok("send", store.url, "wf-1", '"hi"', "--create")  # the store exists; wf-2 does not
    refused = [
        cli.run("arrive", store.url, "wf-2", "approval", "true"),
        cli.run("send", store.url, "wf-2", '"hi"'),
        cli.run("send", store.url, "wf-2", '"hi"', "--id", "m-1"),
        cli.run("discard", store.url, "wf-2", "--yes"),
        cli.run("discard", store.url, "wf-2"),  # before any prompt
    ]
    unseen = cli.run("show", store.url, "wf-2")
    sent = cli.ok("send", store.url, "wf-1", '"again"')  # a known id needs no --create
    made = cli.ok("arrive", store.url, "wf-2", "approval", "true", "--create")
    discarded = cli.ok("discard", store.url, "wf-2", "--yes")

    assert [done.returncode for done in refused] == [3, 3, 3, 3, 3], [r.stderr for r in refused]
    assert "no workflow 'wf-2'" in refused[0].stderr
    assert "--create" in refused[0].stderr
    assert "nothing was sent" in refused[1].stderr
    assert "nothing discarded" in refused[3].stderr
    assert unseen.returncode == 3, "a refused write left something behind"
    assert sent.strip().startswith(durable.INBOX_PREFIX)
    assert json.loads(made) is True
    assert discarded == "discarded wf-2\n"


def test_an_arrive_or_send_the_kinds_parser_refuses_exits_2_naming_it_and_writes_nothing(
    cli: Cli, lifecycle_store: Store
) -> None:
    url = lifecycle_store.url
    registry = ("--workflows", "cli_bodies:guarded")
    cli.ok("start", url, "approval", "wf-1")
    wrong = cli.run("arrive", url, "wf-1", "confirm", '"yes"', *registry)
    misspelt = cli.run("arrive", url, "wf-1", "confrim", "true", *registry)
    bad_note = cli.run("send", url, "wf-1", "5", *registry)
    before = cli.show(lifecycle_store, "wf-1")["records"]
    right = cli.ok("arrive", url, "wf-1", "confirm", "true", *registry)
    note = cli.ok("send", url, "wf-1", '"looks fine"', *registry)
    after = cli.show(lifecycle_store, "wf-1")["records"]

    assert wrong.returncode == 2, wrong.stderr
    assert wrong.stderr == (
        "durable: workflow 'wf-1' (kind 'approval') refuses 'yes' under 'confirm': its "
        "parser as_bool says expected true or false, got 'yes' (nothing was written)\n"
    )
    assert misspelt.returncode == 2, misspelt.stderr
    assert "awaits no such key (it awaits 'confirm')" in misspelt.stderr
    assert bad_note.returncode == 2, bad_note.stderr
    assert "message parser as_text says expected text, got 5" in bad_note.stderr
    assert before == [], "a refused value was written"
    assert json.loads(right) is True
    assert note.strip().startswith(durable.INBOX_PREFIX)
    assert [(r["key"], r["value"]) for r in after] == [
        ("confirm", True),
        (note.strip(), "looks fine"),
    ]


def test_show_lists_the_messages_a_cancelled_workflow_never_read_as_dead_letters(
    cli: Cli, lifecycle_store: Store
) -> None:
    url = lifecycle_store.url
    cli.ok("start", url, "approval", "wf-1")
    key = cli.ok("send", url, "wf-1", '"too late"').strip()
    alive = cli.show(lifecycle_store, "wf-1")
    cli.ok("cancel", url, "wf-1")
    text = cli.ok("show", url, "wf-1").splitlines()
    shown = cli.show(lifecycle_store, "wf-1")

    assert alive["dead_letters"] == [], "a workflow that may still read it has no dead letter"
    assert [(d["key"], d["value"]) for d in shown["dead_letters"]] == [(key, "too late")]
    start = text.index("dead letters: 1 inbox message the workflow cancelled without reading")
    assert text[start + 1].split(maxsplit=2)[1:] == [key, '"too late"']


def test_a_message_a_finished_workflow_never_received_is_a_dead_letter_and_a_read_one_is_not(
    cli: Cli, lifecycle_store: Store, workers: list[Worker]
) -> None:
    url = lifecycle_store.url
    read = cli.ok("send", url, "wf-1", '"ana"', "--create").strip()
    unread = cli.ok("send", url, "wf-1", '"bo"').strip()
    worker = cli.worker(url, "cli_bodies:greet", *FAST)
    workers.append(worker)
    worker.wait_for("workflow 'wf-1': finished")
    assert worker.stop() == 0, "".join(worker.log)

    shown = cli.show(lifecycle_store, "wf-1")

    assert shown["status"]["status"] == "finished"
    assert [d["key"] for d in shown["dead_letters"]] == [unread]
    assert read != unread
