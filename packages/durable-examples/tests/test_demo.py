"""``hatch run demo`` as a user runs it, in a subprocess, against each store.

The demo checks its own books and exits non-zero when any check fails, so a test needs
the exit code and a few lines of the output: that a worker was really killed inside a
capture and the order still finished, that the operator's approval went through the
``durable`` command, and that a second run resumed from the store instead of starting over.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

DEMO_TIMEOUT = 120  # seconds; a run takes well under 15


def demo(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_examples.demo", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT,
        check=False,
    )


def explain(run: subprocess.CompletedProcess[str]) -> str:
    return f"exit {run.returncode}\n--- stdout\n{run.stdout}\n--- stderr\n{run.stderr}"


def assert_first_run(run: subprocess.CompletedProcess[str]) -> None:
    out = run.stdout
    assert run.returncode == 0, explain(run)
    assert "is inside capture:L2 of order-1002" in out, explain(run)
    assert "; the other worker must reclaim order-1002" in out
    assert "durable arrive" in out
    assert re.search(
        r"reconciled: the gateway already holds charge ch_order-1002:capture:L2\n", out
    ), explain(run)
    assert (
        "ok    the killed capture was reconciled, not charged again (1 request, reconciled to "
        "ch_order-1002:capture:L2)" in out
    )
    assert "FAIL" not in out
    assert out.rstrip().endswith("every check passed")


def assert_resumed(run: subprocess.CompletedProcess[str]) -> None:
    out = run.stdout
    assert run.returncode == 0, explain(run)
    assert "order-1001  already finished (paid)" in out, explain(run)
    assert "order-1002  already finished (paid)" in out
    assert "order-1003  already finished (compensated)" in out
    assert "no worker is needed" in out
    assert "gateway requests +0, stock movements +0" in out
    assert out.rstrip().endswith("every check passed")


@pytest.fixture(scope="module")
def sqlite_demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A directory where the demo has run once on its default store, and what it printed."""
    where = tmp_path_factory.mktemp("sqlite-demo")
    run = demo(where)
    assert_first_run(run)
    return where, run.stdout


def copy_of(where: Path, into: Path) -> Path:
    shutil.copytree(where / ".durable-demo", into / ".durable-demo")
    return into


def test_the_default_demo_kills_a_worker_mid_pass_and_every_order_still_ends_once(
    sqlite_demo: tuple[Path, str],
) -> None:
    where, out = sqlite_demo

    assert (where / ".durable-demo" / "payout.db").is_file()
    assert "on sqlite:///.durable-demo/payout.db?delivery_lease=2" in out
    assert "order-1001 paid" in out
    assert "order-1003 compensated" in out


def test_a_second_run_resumes_from_the_file_and_charges_nothing_twice(
    sqlite_demo: tuple[Path, str], tmp_path: Path
) -> None:
    assert_resumed(demo(copy_of(sqlite_demo[0], tmp_path)))


def test_the_demo_exits_non_zero_when_its_books_disagree(
    sqlite_demo: tuple[Path, str], tmp_path: Path
) -> None:
    where = copy_of(sqlite_demo[0], tmp_path)
    [ledger] = (where / ".durable-demo").glob("gateway-*.db")
    with sqlite3.connect(ledger) as raw:
        raw.execute(
            "INSERT INTO operation VALUES ('order-1001:payout-again', 'payout', 330, 'paid', "
            "'po_forged', '2026-01-01T00:00:00Z')"
        )

    run = demo(where)

    assert run.returncode == 1, explain(run)
    assert "FAIL  order-1001: should be paid out 330 once" in run.stdout
    assert run.stdout.rstrip().endswith("SOME CHECKS FAILED")


def test_the_demo_refuses_a_store_that_lives_in_one_process(tmp_path: Path) -> None:
    run = demo(tmp_path, "--store", "memory://")

    assert run.returncode == 2, explain(run)
    assert "memory:// store lives in one process" in run.stdout


def test_the_demo_runs_and_resumes_on_postgres(postgres_url: str, tmp_path: Path) -> None:
    assert_first_run(demo(tmp_path, "--store", postgres_url))
    assert_resumed(demo(tmp_path, "--store", postgres_url))


def test_the_demo_runs_and_resumes_on_redis(redis_url: str, tmp_path: Path) -> None:
    assert_first_run(demo(tmp_path, "--store", redis_url))
    assert_resumed(demo(tmp_path, "--store", redis_url))


def test_ctrl_c_stops_the_demo_and_its_workers_without_a_traceback(tmp_path: Path) -> None:
    demo_run = subprocess.Popen(
        [sys.executable, "-m", "durable_examples.demo"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    stdout = demo_run.stdout
    assert stdout is not None

    def pump() -> None:
        for line in stdout:
            lines.put(line)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    seen: list[str] = []
    try:
        # Pressed while the workers are running: after the first event the demo reports.
        while not any(line.startswith("  +") for line in seen):
            seen.append(lines.get(timeout=DEMO_TIMEOUT))
        demo_run.send_signal(signal.SIGINT)
        demo_run.wait(timeout=DEMO_TIMEOUT)
    finally:
        if demo_run.poll() is None:
            demo_run.kill()
            demo_run.wait()
    reader.join(timeout=5)
    assert demo_run.stderr is not None
    stderr = demo_run.stderr.read()
    out = "".join(seen) + "".join(lines.queue)

    assert demo_run.returncode == 130, f"exit {demo_run.returncode}\n{out}\n{stderr}"
    assert "Traceback" not in stderr, stderr
    assert "demo: interrupted; the workers were stopped" in stderr
    assert "interrupted: stopping the workers" in out
    workers = [int(pid) for pid in re.findall(r"worker \d \(pid (\d+)\)", out)]
    assert len(workers) == 2, out
    for pid in workers:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    for log in (tmp_path / ".durable-demo").glob("worker-*.log"):
        assert "Traceback" not in log.read_text(), log.read_text()
