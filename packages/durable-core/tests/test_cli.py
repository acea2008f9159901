"""The durable command, run as a user runs it: a subprocess of this interpreter.

Mostly against the memory store, which keeps nothing between invocations, and an SQLite
file where a test needs something kept; the stores' own packages and the examples run the
same commands against SQLite, Postgres and Redis (test_cli_stores.py has every store).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from durable.cli import status_line
from durable.interfaces import Entry, Failure, Status, WorkflowStatus

HERE = Path(__file__).resolve().parent
PATIENCE = 60.0
"""Seconds a test waits for a subprocess before it fails rather than hangs (never asserted)."""


def environment(**changes: str | None) -> dict[str, str]:
    """This process's environment without ``DURABLE_STORE``, with ``cli_bodies`` importable,
    and with ``changes`` applied (``None`` removes a variable)."""
    env = {k: v for k, v in os.environ.items() if k != "DURABLE_STORE"}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), *filter(None, [env.get("PYTHONPATH")])])
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def durable(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable.cli", *args],
        capture_output=True,
        text=True,
        input=stdin,
        env=env if env is not None else environment(),
        timeout=PATIENCE,
        check=False,
    )


class Worker:
    """``durable worker`` in a subprocess, its log read line by line as it is written."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "durable.cli", "worker", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env if env is not None else environment(),
        )
        self.log: list[str] = []

    def wait_for(self, text: str) -> str:
        """The first log line containing ``text``; fails if the worker ends first."""
        assert self.process.stderr is not None
        deadline = time.monotonic() + PATIENCE
        for line in self.log:
            if text in line:
                return line
        while time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line:
                break
            self.log.append(line)
            if text in line:
                return line
        raise AssertionError(f"the worker never logged {text!r}; its log:\n{''.join(self.log)}")

    def finish(self) -> int:
        """Wait for the process to end by itself; its exit code, with the rest of its log."""
        code = self.process.wait(timeout=PATIENCE)
        assert self.process.stderr is not None
        self.log.extend(self.process.stderr.readlines())
        return code

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        self.process.send_signal(sig)
        return self.finish()


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    """Workers a test started; any still running at the end are killed."""
    started: list[Worker] = []
    yield started
    for worker in started:
        if worker.process.poll() is None:
            worker.process.kill()
            worker.process.wait()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    pytest.importorskip("durable_sqlite")
    return f"sqlite:///{tmp_path / 'store.db'}"


# --- what the commands say ------------------------------------------------------------------


def test_stores_lists_the_memory_store_with_its_capabilities() -> None:
    done = durable("stores", "--json")
    assert done.returncode == 0, done.stderr
    listed = {s["name"]: s for s in json.loads(done.stdout)["stores"]}
    assert listed["memory"]["schemes"] == "memory://"
    assert "transact" in listed["memory"]["capabilities"]


def test_an_unknown_scheme_names_the_installed_stores_and_the_install_command() -> None:
    done = durable("show", "nosuch://x", "wf")
    assert done.returncode == 2
    assert "no installed store opens nosuch:// URLs" in done.stderr
    assert "memory (memory://)" in done.stderr
    assert "pip install durable-sqlite" in done.stderr
    assert len(done.stderr.strip().splitlines()[-1]) > 0


ONLY_THE_CORE = """
import importlib.metadata, sys
everything = importlib.metadata.entry_points
importlib.metadata.entry_points = lambda **params: [
    ep for ep in everything(**params) if ep.value.startswith("durable.")
]
from durable.cli import main
sys.exit(main(sys.argv[1:]))
"""
"""The command as it runs with durable-core alone installed: no store's entry point is seen."""


@pytest.mark.parametrize(
    ("url", "package"),
    [
        ("postgresql://db.internal/orders", "durable-postgres"),
        ("postgres://db.internal/orders", "durable-postgres"),
        ("redis://127.0.0.1:6379/0", "durable-redis"),
        ("rediss://cache.internal:6380/0", "durable-redis"),
        ("redis+cluster://127.0.0.1:7000", "durable-redis"),
        ("sqlite:///orders.db", "durable-sqlite"),
    ],
)
def test_a_store_that_is_not_installed_is_named_with_the_one_package_that_opens_it(
    url: str, package: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", ONLY_THE_CORE, "show", url, "wf"],
        capture_output=True,
        text=True,
        env=environment(),
        timeout=PATIENCE,
        check=False,
    )

    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    scheme = url.split("://")[0]
    assert f"no installed store opens {scheme}:// URLs: `pip install {package}`" in line
    # Until the distributions are on PyPI, the line a reader copies must work from a clone.
    assert f"`pip install ./packages/durable-core ./packages/{package}`" in line, line
    others = {"durable-postgres", "durable-redis", "durable-sqlite"} - {package}
    assert not any(other in line for other in others), line


def test_version_names_durable_core_and_every_installed_store() -> None:
    import importlib.metadata

    from durable.plugins import stores

    done = durable("--version")

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"durable-core {importlib.metadata.version('durable-core')}"
    for plugin in stores().values():
        assert f"  store {plugin.name}: {plugin.distribution} {plugin.version}" in lines


def test_malformed_json_is_a_usage_error_that_shows_the_input() -> None:
    done = durable("arrive", "memory://", "wf", "approval", "{not json")
    assert done.returncode == 2
    assert "VALUE is not valid JSON" in done.stderr
    assert "'{not json'" in done.stderr


def test_arrive_prints_the_value_the_key_now_holds() -> None:
    done = durable("arrive", "memory://", "wf", "approval", '{"by": "ana"}', "--create")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"by": "ana"}


def test_send_prints_the_inbox_key() -> None:
    done = durable("send", "memory://", "wf", '"hello"', "--create")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("durable.inbox:")


def test_show_of_an_unknown_workflow_exits_3() -> None:
    done = durable("show", "memory://", "never-started")
    assert done.returncode == 3
    assert "no workflow 'never-started'" in done.stderr


def test_list_on_an_empty_lifecycle_store_prints_the_header_alone() -> None:
    done = durable("list", "memory://")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["WORKFLOW", "KIND", "STATUS", "UPDATED"]
    assert done.stderr == ""


def test_discard_without_a_terminal_refuses_unless_yes(sqlite_url: str) -> None:
    assert durable("send", sqlite_url, "wf", '"hi"', "--create").returncode == 0
    refused = durable("discard", sqlite_url, "wf", stdin="")
    assert refused.returncode == 5
    assert "--yes" in refused.stderr
    done = durable("discard", sqlite_url, "wf", "--yes")
    assert done.returncode == 0, done.stderr
    assert "discarded wf" in done.stdout


# --- one shape: the store URL first, or DURABLE_STORE ----------------------------------------

COMMANDS: dict[str, tuple[tuple[str, ...], int, str]] = {
    # command: (arguments after the URL, exit code, what stdout or stderr shows)
    "arrive": (("wf", "approval", "true", "--create"), 0, "true"),
    "send": (("wf", '"hi"', "--create"), 0, "durable.inbox:"),
    "show": (("wf",), 3, "no workflow 'wf' in memory://"),
    "list": ((), 0, ""),
    "discard": (("wf", "--yes"), 3, "no workflow 'wf' in memory://"),
}


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("form", ["argument", "environment"])
def test_every_command_takes_the_store_url_first_or_from_durable_store(
    command: str, form: str
) -> None:
    rest, code, shows = COMMANDS[command]
    if form == "argument":
        done = durable(command, "memory://", *rest)
    else:
        done = durable(command, *rest, env=environment(DURABLE_STORE="memory://"))

    assert done.returncode == code, done.stderr
    assert shows in done.stdout + done.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_command_given_no_url_and_no_durable_store_says_how_to_give_one(command: str) -> None:
    rest, _, _ = COMMANDS[command]
    done = durable(command, *rest)

    assert done.returncode == 2
    assert done.stderr.startswith("durable: no store URL: give it first")
    assert "DURABLE_STORE" in done.stderr


def test_the_url_argument_wins_over_durable_store(sqlite_url: str) -> None:
    env = environment(DURABLE_STORE="memory://")
    durable("send", sqlite_url, "wf", '"kept"', "--create", env=env)

    shown = durable("show", sqlite_url, "wf", "--json", env=env)

    assert shown.returncode == 0, shown.stderr
    assert [r["value"] for r in json.loads(shown.stdout)["records"]] == ["kept"]


def test_options_may_sit_between_the_url_and_the_other_arguments(sqlite_url: str) -> None:
    durable("send", sqlite_url, "wf", '"hi"', "--create")

    shown = durable("show", sqlite_url, "--json", "wf")
    refused = durable("worker", sqlite_url, "--limit", "3", "datetime:timedelta")

    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["workflow"] == "wf"
    assert "datetime:timedelta is not an async function" in refused.stderr


def worker_started(worker: Worker) -> str:
    return worker.wait_for("worker: cli_bodies:greet on ")


@pytest.mark.parametrize("form", ["argument", "environment", "deprecated --store"])
def test_a_worker_takes_its_store_url_first_from_durable_store_or_from_deprecated_store(
    form: str, workers: list[Worker]
) -> None:
    if form == "argument":
        worker = Worker("memory://", "cli_bodies:greet")
    elif form == "environment":
        worker = Worker("cli_bodies:greet", env=environment(DURABLE_STORE="memory://"))
    else:
        worker = Worker("cli_bodies:greet", "--store", "memory://")
    workers.append(worker)

    started = worker_started(worker)
    code = worker.stop()

    assert "on memory://, 8 at once, liveness 30s, delivery lease 30s" in started
    assert code == 0, "".join(worker.log)
    warned = [line for line in worker.log if "--store is deprecated" in line]
    if form == "deprecated --store":
        assert "write the URL first: durable worker memory:// cli_bodies:greet" in warned[0]
    else:
        assert warned == []


def test_a_worker_given_no_url_says_how_to_give_one() -> None:
    done = durable("worker", "cli_bodies:greet")
    assert done.returncode == 2
    assert "no store URL: give it first (durable worker sqlite:///orders.db" in done.stderr


def test_a_worker_given_the_old_order_says_the_url_comes_first() -> None:
    done = durable("worker", "cli_bodies:greet", "memory://")
    assert done.returncode == 2
    assert "the URL comes first, durable worker memory:// cli_bodies:greet" in done.stderr


def test_a_worker_given_a_url_twice_is_refused() -> None:
    done = durable("worker", "memory://", "cli_bodies:greet", "--store", "memory://")
    assert done.returncode == 2
    assert "give the store URL once" in done.stderr


# --- what a worker may run ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ("no_colon", "expected MODULE:BODY"),
        ("no.such.module:body", "cannot import"),
        ("json:no_such_attribute", "has no attribute"),
        ("datetime:timedelta", "datetime:timedelta is not an async function (a type)"),
        ("json:dumps", "json:dumps is not an async function (a function)"),
        ("cli_bodies:synchronous", "cli_bodies:synchronous is not an async function"),
        ("cli_bodies:NOT_CALLABLE", "cli_bodies:NOT_CALLABLE is not callable (a str)"),
        ("cli_bodies:two_arguments", "an async function of (run: 'Run[Any]', order: 'str')"),
        ("cli_bodies:no_arguments", "an async function of (), which cannot be called"),
    ],
)
def test_a_worker_refuses_what_is_not_an_async_function_of_one_run_before_opening_its_store(
    spec: str, complaint: str, sqlite_url: str, tmp_path: Path
) -> None:
    done = durable("worker", sqlite_url, spec)

    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert complaint in line
    assert not (tmp_path / "store.db").exists(), "the store was opened"


@pytest.mark.parametrize("spec", ["cli_bodies:greet_in_french", "cli_bodies:greeter"])
def test_a_worker_runs_a_partial_of_an_async_function_and_an_object_with_an_async_call(
    spec: str, sqlite_url: str, workers: list[Worker]
) -> None:
    assert durable("send", sqlite_url, "wf-1", '"ana"', "--create").returncode == 0
    worker = Worker(sqlite_url, spec)
    workers.append(worker)

    worker.wait_for("workflow 'wf-1': finished")
    assert worker.stop() == 0, "".join(worker.log)

    shown = json.loads(durable("show", sqlite_url, "wf-1", "--json").stdout)
    greeting = next(r["value"] for r in shown["records"] if r["key"] == "greeting")
    assert greeting in ("bonjour, ana", "hello, ana")


def test_a_worker_with_no_schedules_starts_no_tick_while_another_worker_does(
    sqlite_url: str, workers: list[Worker]
) -> None:
    fast = ("--tick", "0.05", "--poll", "0.05")
    made = durable(
        "schedule", sqlite_url, "create", "often", "--kind", "payout", "--every", "1",
        "--input", '{"amount": 5}',
    )  # fmt: skip
    assert made.returncode == 0, made.stderr

    def payouts() -> list[str]:
        listed = durable("list", sqlite_url, "--kind", "payout", "--json")
        assert listed.returncode == 0, listed.stderr
        return sorted(w["workflow"] for w in json.loads(listed.stdout)["workflows"])

    quiet = Worker(sqlite_url, "cli_bodies:workflows", "--no-schedules", *fast)
    workers.append(quiet)
    assert "starting no schedule's ticks (--no-schedules)" in quiet.wait_for("worker: cli_bodies")
    # It serves the schedule's kind: a payout started by hand runs to the end...
    started = durable("start", sqlite_url, "payout", "by-hand", '{"amount": 3}')
    assert started.returncode == 0, started.stderr
    quiet.wait_for("workflow 'by-hand': finished")
    # ...and over two of the schedule's ticks (forty of the worker's looks) starts none.
    time.sleep(2.5)
    assert payouts() == ["by-hand"]

    loud = Worker(sqlite_url, "cli_bodies:workflows", *fast)
    workers.append(loud)
    deadline = time.monotonic() + PATIENCE
    while not (ticks := [w for w in payouts() if w.startswith("often@")]):
        assert time.monotonic() < deadline, "the worker with schedules started no tick"
        time.sleep(0.1)
    assert "--no-schedules" not in loud.wait_for("worker: cli_bodies")
    assert quiet.stop() == 0, "".join(quiet.log)
    assert loud.stop() == 0, "".join(loud.log)
    assert ticks


# --- options ---------------------------------------------------------------------------------


def test_non_positive_worker_limits_are_refused_by_argparse() -> None:
    done = durable("worker", "memory://", "cli_bodies:greet", "--limit", "0")
    assert done.returncode == 2
    assert "positive" in done.stderr


def test_the_old_lease_option_is_refused_naming_liveness_and_the_delivery_lease(
    sqlite_url: str, tmp_path: Path
) -> None:
    done = durable("worker", sqlite_url, "cli_bodies:greet", "--lease", "2")

    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert "--liveness" in line
    assert "delivery_lease=" in line
    assert not (tmp_path / "store.db").exists()


def test_worker_help_shows_every_default() -> None:
    done = durable("worker", "--help")
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())
    for option, default in [
        ("--limit N", "default 8"),
        ("--liveness S", "default 30"),
        ("--budget S", "default 900"),
        ("--grace S", "default 30"),
        ("--poll S", "default 1"),
        ("--tick S", "default 1"),
        ("--retry S", "default 5"),
        ("--connect-timeout S", "default: keep trying, with backoff"),
    ]:
        described = text.split(f" {option} ", 1)[1].split(" --", 1)[0]
        assert default + ")" in described, (option, described)
    assert "--lease" not in text


def test_list_help_shows_its_default() -> None:
    done = durable("list", "--help")
    assert "default 100" in " ".join(done.stdout.split())


def test_minus_v_shows_durables_debug_lines_and_not_the_drivers_and_minus_vv_adds_them(
    sqlite_url: str,
) -> None:
    assert durable("send", sqlite_url, "wf", '"hi"', "--create").returncode == 0
    quiet = durable("list", sqlite_url)
    ours = durable("-v", "list", sqlite_url)
    everything = durable("-vv", "list", sqlite_url)

    def debug_from(done: subprocess.CompletedProcess[str]) -> set[str]:
        return set(re.findall(r" DEBUG (\S+): ", done.stderr))

    assert debug_from(quiet) == set()
    assert "durable.cli" in debug_from(ours)
    assert all(name.startswith(("durable.", "durable_")) for name in debug_from(ours))
    assert "aiosqlite" in debug_from(everything)


# --- show ------------------------------------------------------------------------------------


def test_show_cuts_a_long_value_saying_how_much_and_full_prints_it_whole(sqlite_url: str) -> None:
    value = "x" * 100_000
    assert durable("arrive", sqlite_url, "wf", "big", json.dumps(value), "--create").returncode == 0

    cut = durable("show", sqlite_url, "wf")
    whole = durable("show", sqlite_url, "wf", "--full")
    machine = durable("show", sqlite_url, "wf", "--json")

    assert cut.returncode == whole.returncode == machine.returncode == 0
    (line,) = [line for line in cut.stdout.splitlines() if " big " in line]
    assert len(line) < 400
    encoded = json.dumps(value)
    assert f"[{len(encoded) - 200:,} more characters; --full shows them]" in line
    assert line.split(" big  ", 1)[1].startswith(encoded[:200] + "...")
    assert any(line.endswith(f" big  {encoded}") for line in whole.stdout.splitlines())
    assert json.loads(machine.stdout)["records"][0]["value"] == value


def test_show_pretty_prints_a_long_object_cut_by_lines_and_full_prints_it_whole(
    sqlite_url: str,
) -> None:
    # The shape of a model's response: an object, fields in order, a list of parts.
    value = {
        "kind": "response",
        "model_name": "test",
        "parts": [{"part_kind": "text", "content": f"line {n} " + "y" * 300} for n in range(30)],
        "usage": {"input_tokens": 51, "output_tokens": 4},
    }
    assert (
        durable("arrive", sqlite_url, "wf", "reply", json.dumps(value), "--create").returncode == 0
    )
    assert durable("arrive", sqlite_url, "wf", "after", '"tail"').returncode == 0

    cut = durable("show", sqlite_url, "wf")
    whole = durable("show", sqlite_url, "wf", "--full")
    assert cut.returncode == whole.returncode == 0, cut.stderr + whole.stderr

    def block(stdout: str) -> list[str]:
        """The value's lines: from its record's line to the next record's."""
        lines = stdout.splitlines()
        first = next(i for i, line in enumerate(lines) if " reply  " in line)
        last = next(i for i, line in enumerate(lines) if " after  " in line)
        return [lines[first].split(" reply  ", 1)[1], *lines[first + 1 : last]]

    pretty = json.dumps(value, indent=2).splitlines()
    shown = block(cut.stdout)
    assert shown[0] == "{"
    assert len(shown) == 21  # the first 20 lines and the marker
    assert shown[-1] == f"    ... [{len(pretty) - 20} more lines; --full shows them]"
    assert [line.strip() for line in shown[1:3]] == ['"kind": "response",', '"model_name": "test",']
    assert all(line.startswith("    ") for line in shown[1:])
    long_line = next(line for line in shown if "line 0 " in line)
    assert long_line.endswith("more characters; --full shows them]")
    assert len(long_line) < 300
    # --full: every line, whole, and together the value itself.
    assert json.loads("\n".join(block(whole.stdout))) == value
    # A value that fits stays on its line.
    assert any(line.endswith(' after  "tail"') for line in cut.stdout.splitlines())


# --- malformed URLs ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url", ["sqlite://", "sqlite:///", "sqlite://server/orders.db", "sqlite:///:memory:"]
)
def test_a_malformed_sqlite_url_is_a_usage_error_showing_the_right_form(url: str) -> None:
    pytest.importorskip("durable_sqlite")
    done = durable("show", url, "wf")

    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "sqlite:///" in line.split(url, 1)[-1] or "memory://" in line


def test_a_worker_whose_store_refuses_for_good_exits_1_at_once_instead_of_retrying(
    tmp_path: Path,
) -> None:
    pytest.importorskip("durable_sqlite")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not an SQLite database, and waiting will not make it one" * 16)

    done = durable("worker", f"sqlite:///{junk}", "cli_bodies:greet")

    assert done.returncode == 1, done.stderr
    assert "cannot open" not in done.stderr, "a file that is not a database is not an outage"
    assert done.stderr.strip().splitlines()[-1].startswith("durable: the store failed: ")


# --- stopping ----------------------------------------------------------------------------------


def test_a_worker_stops_on_sigterm_and_exits_0(workers: list[Worker]) -> None:
    worker = Worker("memory://", "cli_bodies:greet")
    workers.append(worker)
    worker_started(worker)
    assert worker.stop() == 0
    assert any("worker: stopped" in line for line in worker.log)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_second_signal_while_draining_stops_the_worker_at_once_leaving_the_delivery_out(
    sig: signal.Signals, sqlite_url: str, workers: list[Worker]
) -> None:
    assert durable("send", sqlite_url, "wf-1", '"ana"', "--create").returncode == 0
    worker = Worker(sqlite_url, "cli_bodies:hold", "--grace", "600")
    workers.append(worker)
    worker.wait_for("holding wf-1")

    worker.process.send_signal(sig)
    worker.wait_for("worker: stopping; taking no more work")
    began = time.monotonic()
    code = worker.stop(sig)
    took = time.monotonic() - began

    assert code == 0, "".join(worker.log)
    assert took < 10, f"a second {sig.name} took {took:.1f}s to stop the worker"
    log = "".join(worker.log)
    assert "worker: stopping at once" in log
    assert "Traceback" not in log
    shown = json.loads(durable("show", sqlite_url, "wf-1", "--json").stdout)
    assert shown["scheduled"] is not None, "the cancelled pass's delivery is still out"
    assert "finished" not in log


# --- the lifecycle commands (the memory store keeps nothing between commands, so each of
# these is one command; test_cli_stores.py runs them in sequence on every real store) ------


def test_start_prints_the_workflow_its_kind_and_its_status() -> None:
    done = durable("start", "memory://", "payout", "o-1", '{"amount": 5}')
    assert done.returncode == 0, done.stderr
    assert done.stdout == "started o-1 (payout): ready\n"


def test_start_refuses_a_kind_name_a_key_could_not_hold_and_malformed_input() -> None:
    bad_kind = durable("start", "memory://", "pay:out", "o-1")
    bad_json = durable("start", "memory://", "payout", "o-1", "{amount: 5}")
    assert bad_kind.returncode == 2, bad_kind.stderr
    assert "'pay:out'" in bad_kind.stderr
    assert bad_json.returncode == 2, bad_json.stderr
    assert "INPUT is not valid JSON" in bad_json.stderr


def test_start_with_a_registry_runs_the_kinds_parser_before_opening_the_store() -> None:
    refused = durable(
        "start",
        "memory://",
        "payout",
        "o-1",
        '{"amount": 0}',
        "--workflows",
        "cli_bodies:workflows",
    )
    accepted = durable(
        "start",
        "memory://",
        "payout",
        "o-1",
        '{"amount": 3}',
        "--workflows",
        "cli_bodies:workflows",
    )
    assert refused.returncode == 2, refused.stderr
    assert "kind 'payout' refused the input" in refused.stderr
    assert accepted.returncode == 0, accepted.stderr
    assert accepted.stdout == "started o-1 (payout): ready\n"


@pytest.mark.parametrize("command", ["cancel", "retry", "result"])
def test_a_lifecycle_command_on_an_unknown_workflow_exits_3_naming_it(command: str) -> None:
    done = durable(command, "memory://", "never-started")
    assert done.returncode == 3, done.stderr
    assert "'never-started'" in done.stderr


def test_list_refuses_a_status_that_does_not_exist_naming_the_seven() -> None:
    done = durable("list", "memory://", "--status", "sleepy")
    assert done.returncode == 2, done.stderr
    assert "ready" in done.stderr
    assert "cancelled" in done.stderr


def test_the_help_names_the_new_exit_codes() -> None:
    done = durable("--help")
    assert "6 refused by the workflow's state" in " ".join(done.stdout.split())
    assert "7 the workflow failed or was cancelled" in " ".join(done.stdout.split())
    assert "8 timed out" in done.stdout


def test_a_worker_serving_a_registry_starts_and_names_itself(workers: list[Worker]) -> None:
    worker = Worker("memory://", "cli_bodies:workflows", "--name", "box-7")
    workers.append(worker)
    line = worker.wait_for("worker: cli_bodies:workflows as box-7 on memory://")
    assert "8 at once" in line
    assert worker.stop() == 0, "".join(worker.log)


# --- the status line, for each status (design §2.5) ------------------------------------


def _status(status: str, **fields: object) -> WorkflowStatus:
    base: dict[str, object] = {
        "workflow": "o-1",
        "status": Status(status),
        "kind": "payout",
        "attempts": 1,
        "updated_at": datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC),
    }
    return WorkflowStatus(**{**base, **fields})  # type: ignore[arg-type]


NOW = datetime(2026, 1, 1, 12, 4, 0, tzinfo=UTC)
SINCE = datetime(2026, 1, 1, 12, 3, 4, tzinfo=UTC)
DECLINED = Failure("ValueError", "card declined\nat the gateway", "Traceback ...", 5)


@pytest.mark.parametrize(
    ("st", "history", "due", "line"),
    [
        (_status("ready"), (), False, "ready since 2026-01-01 12:00:00 UTC"),
        (
            _status(
                "running",
                owner="host:4242",
                token=7,
                since=SINCE,
                step="charge",
                until=NOW + timedelta(seconds=20),
            ),
            (),
            False,
            "running step 'charge' on host:4242 (pass 7) since 2026-01-01 12:03:04 UTC",
        ),
        (
            _status(
                "running",
                owner="host:4242",
                token=7,
                since=SINCE,
                until=NOW + timedelta(seconds=20),
            ),
            (Entry("reserve", 1, SINCE),),
            False,
            "running on host:4242 (pass 7) since 2026-01-01 12:03:04 UTC, after step 'reserve'",
        ),
        (
            _status(
                "running",
                owner="host:4242",
                token=7,
                since=SINCE,
                until=datetime(2026, 1, 1, 12, 3, 34, tzinfo=UTC),
            ),
            (),
            False,
            "running on host:4242 (pass 7) since 2026-01-01 12:03:04 UTC; silent since "
            "2026-01-01 12:03:34 UTC, presumed dead (it will be retried)",
        ),
        (
            _status("sleeping", until=datetime(2026, 1, 1, 12, 5, tzinfo=UTC)),
            (),
            True,
            "sleeping until 2026-01-01 12:05:00 UTC",
        ),
        (
            _status(
                "sleeping",
                until=datetime(2026, 1, 1, 12, 5, 2, tzinfo=UTC),
                failure=Failure("ValueError", "card declined", "", 2),
            ),
            (),
            False,
            "retrying at 2026-01-01 12:05:02 UTC after attempt 2: ValueError: card declined",
        ),
        (_status("blocked", keys=("approval",)), (), False, "blocked on approval"),
        (
            _status("blocked", keys=("approval", "payment")),
            (),
            True,
            "blocked on approval, payment (a value arrived; waiting for a worker)",
        ),
        (_status("finished", value={"paid": 120}), (), False, 'finished: {"paid": 120}'),
        (
            _status("finished", value="x" * 200),
            (),
            False,
            'finished: "' + "x" * 76 + "...",
        ),
        (
            _status("failed", attempts=5, failure=DECLINED),
            (),
            False,
            "failed after 5 attempts: ValueError: card declined",
        ),
        (
            _status("failed", attempts=1, failure=Failure("durable.PassLost", "gone", "", 1)),
            (),
            False,
            "failed after 1 attempt: durable.PassLost: gone",
        ),
        (
            _status("cancelled", updated_at=datetime(2026, 1, 1, 12, 7, tzinfo=UTC)),
            (),
            False,
            "cancelled at 2026-01-01 12:07:00 UTC",
        ),
    ],
    ids=lambda value: value.status.value if isinstance(value, WorkflowStatus) else "",
)
def test_the_status_line_says_where_a_workflow_is_in_one_line(
    st: WorkflowStatus, history: tuple[Entry, ...], due: bool, line: str
) -> None:
    shown = status_line(st, history, due, now=NOW)
    assert shown == line
    assert "\n" not in shown


# --- a store without lifecycle: what each command says -------------------------------------


def plain(*args: str) -> subprocess.CompletedProcess[str]:
    """The command with a store registered under ``plain://`` that keeps records and
    schedules passes but offers no lifecycle (``plain_store.py``), holding ``wf``."""
    return subprocess.run(
        [sys.executable, str(HERE / "plain_store.py"), *args],
        capture_output=True,
        text=True,
        env=environment(),
        timeout=PATIENCE,
        check=False,
    )


def test_show_on_a_store_without_lifecycle_says_so_and_shows_the_rest() -> None:
    text = plain("show", "plain://", "wf")
    shown = plain("show", "plain://", "wf", "--json")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == "status: this store does not offer lifecycle"
    assert lines[1] == "workflow wf"
    assert json.loads(shown.stdout)["status"] is None
    assert "status" in json.loads(shown.stdout)["unreported"]


def test_list_on_a_store_without_lifecycle_lists_bare_ids_and_refuses_a_filter() -> None:
    listed = plain("list", "plain://")
    filtered = plain("list", "plain://", "--status", "failed")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == "wf\n"
    assert filtered.returncode == 4, filtered.stderr
    assert "does not offer lifecycle" in filtered.stderr


@pytest.mark.parametrize(
    "command",
    [("start", "payout", "o-1"), ("cancel", "wf"), ("retry", "wf"), ("result", "wf")],
    ids=lambda command: command[0],
)
def test_a_lifecycle_command_on_a_store_without_lifecycle_exits_4_saying_so(
    command: tuple[str, ...],
) -> None:
    done = plain(command[0], "plain://", *command[1:])
    assert done.returncode == 4, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert "plain:// does not offer lifecycle" in line


def test_a_worker_serving_a_registry_on_a_store_without_lifecycle_exits_4_at_once() -> None:
    """Kinds need the store to record which kind each workflow is; a bare body still runs
    there (the previous path), but a registry is refused before any work is taken."""
    done = plain("worker", "plain://", "cli_bodies:workflows")
    assert done.returncode == 4, done.stderr
    assert "does not offer lifecycle" in done.stderr
    assert "Traceback" not in done.stderr


# --- guard rails: an SQLite file that does not exist is not created ---------------------------

READING = {
    "show": ("wf",),
    "list": (),
    "cancel": ("wf",),
    "retry": ("wf",),
    "result": ("wf",),
    "discard": ("wf", "--yes"),
    "arrive": ("wf", "confirm", "true"),
    "send": ("wf", '"hi"'),
}


@pytest.mark.parametrize("command", sorted(READING))
def test_a_command_on_an_sqlite_file_that_does_not_exist_exits_3_creating_nothing(
    command: str, tmp_path: Path
) -> None:
    missing = tmp_path / "typo.db"
    done = durable(command, f"sqlite:///{missing}", *READING[command])

    assert done.returncode == 3, done.stderr
    assert done.stderr == (
        f"durable: no store at sqlite:///{missing}: the file {str(missing)!r} does not exist "
        "(nothing was created; `durable start` or `--create` makes it)\n"
    )
    assert not missing.exists()


def test_send_with_create_makes_the_sqlite_file_and_the_workflow(tmp_path: Path) -> None:
    made = tmp_path / "orders.db"
    done = durable("send", f"sqlite:///{made}", "wf", '"hi"', "--create")

    assert done.returncode == 0, done.stderr
    assert made.exists()


@pytest.mark.parametrize(
    "command",
    [("arrive", "wf", "approval", "true"), ("send", "wf", '"hi"'), ("discard", "wf", "--yes")],
    ids=["arrive", "send", "discard"],
)
def test_on_the_memory_store_an_unknown_id_exits_3_without_create(command: tuple[str, ...]) -> None:
    verb, *rest = command
    done = durable(verb, "memory://", *rest)

    assert done.returncode == 3, done.stderr
    assert "no workflow 'wf'" in done.stderr
    assert done.stdout == ""


def test_on_the_memory_store_a_value_the_default_kind_refuses_exits_2() -> None:
    registry = ("--workflows", "cli_bodies:guarded")
    refused = durable("arrive", "memory://", "wf", "confirm", '"yes"', "--create", *registry)
    accepted = durable("arrive", "memory://", "wf", "confirm", "true", "--create", *registry)

    assert refused.returncode == 2, refused.stderr
    assert "(kind 'approval') refuses 'yes' under 'confirm'" in refused.stderr
    assert accepted.returncode == 0, accepted.stderr
    assert accepted.stdout == "true\n"


def test_a_worker_serving_a_queue_on_a_store_without_lifecycle_exits_4_at_once() -> None:
    """A queue is recorded by the lifecycle, so a worker cannot serve named queues without
    it: refused before any work is taken, rather than serving every workflow as "default"."""
    done = plain("worker", "plain://", "cli_bodies:greet", "--queue", "payments")
    assert done.returncode == 4, done.stderr
    assert "cannot serve named queues" in done.stderr
    assert "Traceback" not in done.stderr
