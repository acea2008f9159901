"""The durable command, run as a user runs it: a subprocess of this interpreter.

Against the memory store only, which keeps nothing between invocations; the stores'
own packages and the examples run the same commands against SQLite, Postgres and Redis.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def durable(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable.cli", *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=60,
        check=False,
    )


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


def test_malformed_json_is_a_usage_error_that_shows_the_input() -> None:
    done = durable("arrive", "memory://", "wf", "approval", "{not json")
    assert done.returncode == 2
    assert "VALUE is not valid JSON" in done.stderr
    assert "'{not json'" in done.stderr


def test_arrive_prints_the_value_the_key_now_holds() -> None:
    done = durable("arrive", "memory://", "wf", "approval", '{"by": "ana"}')
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"by": "ana"}


def test_send_prints_the_inbox_key() -> None:
    done = durable("send", "memory://", "wf", '"hello"')
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith("durable.inbox:")


def test_show_of_an_unknown_workflow_exits_3() -> None:
    done = durable("show", "memory://", "never-started")
    assert done.returncode == 3
    assert "no workflow 'never-started'" in done.stderr


def test_list_on_an_enumerable_store_succeeds() -> None:
    done = durable("list", "memory://")
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""


def test_discard_without_a_terminal_refuses_unless_yes() -> None:
    refused = durable("discard", "memory://", "wf", stdin="")
    assert refused.returncode == 5
    assert "--yes" in refused.stderr
    done = durable("discard", "memory://", "wf", "--yes")
    assert done.returncode == 0, done.stderr
    assert "discarded wf" in done.stdout


@pytest.mark.parametrize(
    ("spec", "complaint"),
    [
        ("no_colon", "expected MODULE:BODY"),
        ("no.such.module:body", "cannot import"),
        ("json:no_such_attribute", "has no attribute"),
    ],
)
def test_a_bad_body_spec_is_a_usage_error(spec: str, complaint: str) -> None:
    done = durable("worker", spec, "--store", "memory://")
    assert done.returncode == 2
    assert complaint in done.stderr


def test_non_positive_worker_limits_are_refused_by_argparse() -> None:
    done = durable("worker", "json:dumps", "--store", "memory://", "--limit", "0")
    assert done.returncode == 2
    assert "positive" in done.stderr


def test_a_worker_stops_on_sigterm_and_exits_0() -> None:
    import signal
    import time

    worker = subprocess.Popen(
        [sys.executable, "-m", "durable.cli", "worker", "json:dumps", "--store", "memory://"],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        assert worker.stderr is not None
        line = worker.stderr.readline()
        while "worker: json:dumps on memory://" not in line and time.monotonic() < deadline:
            line = worker.stderr.readline()
        assert "worker: json:dumps on memory://" in line
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
        assert "worker: stopped" in worker.stderr.read()
    finally:
        if worker.poll() is None:
            worker.kill()
