"""The bench's output as a reader meets it: a table whose columns line up whatever the
labels, a legend that says which way "x raw" reads, and a --help that shows defaults."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest
from durable_bench.__main__ import (
    DEFAULT_CHECK_SIZE,
    DEFAULT_FANOUT,
    DEFAULT_LISTING_SIZE,
    DEFAULT_STEPS,
    DEFAULT_WORKFLOWS,
    LEGEND,
    PEERS_ENV,
    THROUGHPUT,
    Row,
    _bench_replica,
    format_table,
    parser,
)
from durable_redis.servers import binaries_available

ROWS = [
    Row("memory", "raw round trip", 0.005, 0.007, 206505),
    Row("memory", "record", 0.011, 0.017, 91283, 2.26),
    Row("redis/cluster", "100-step pass (per step)", 0.612, 1.204, 1634, 3.1),
    Row("redis/cluster", "raw x64 tasks", 0, 0, 41250, kind=THROUGHPUT),
    Row(
        "a-third-party-store/with-a-long-variant",
        "1024 workflows concurrently",
        0,
        0,
        1234567,
        0.42,
        "ratio = steps/s over raw ops/s",
        THROUGHPUT,
    ),
]


def _columns(line: str) -> list[tuple[int, int]]:
    """(start, end) of each run of non-space text separated by two or more spaces."""
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(line):
        if line[i] == " ":
            i += 1
            continue
        start = i
        while i < len(line) and not (line[i] == " " and line[i + 1 : i + 2] in (" ", "")):
            i += 1
        spans.append((start, i))
    return spans


def test_every_column_lines_up_whatever_the_length_of_a_label() -> None:
    lines = format_table(ROWS)
    heading, rule, *body = lines[: 2 + len(ROWS)]
    assert set(rule) == {"-"}
    assert len(rule) == len(heading)
    heads = _columns(heading)
    assert [heading[a:b] for a, b in heads] == [
        "store",
        "row",
        "p50 ms",
        "p90 ms",
        "per s",
        "x raw",
    ]
    for line, row in zip(body, ROWS, strict=True):
        assert line.startswith(row.store + " ")
        # The two label columns start where their headings start...
        assert line[heads[1][0] :].startswith(row.name), (heading, line)
        # ...and every number ends where its heading ends.
        for _a, b in _columns(line[heads[1][0] + len(row.name) :]):
            shift = heads[1][0] + len(row.name)
            assert shift + b in {end for _, end in heads[2:]}, (heading, line)
    ratio_end = heads[-1][1]
    assert body[1][:ratio_end].endswith("2.26")
    assert body[4][:ratio_end].endswith("0.42")


def test_the_legend_follows_the_table_and_says_which_way_x_raw_reads() -> None:
    lines = format_table(ROWS)
    legend = lines[2 + len(ROWS) :]
    assert legend[0] == ""
    text = " ".join(line.strip() for line in legend[1:])
    assert legend[1:] == LEGEND
    assert "on latency rows" in text
    assert "lower is better" in text
    assert "on throughput rows" in text
    assert "higher is better" in text
    assert text.index("latency rows") < text.index("lower is better") < text.index("throughput")
    assert "relative to the bare driver" in text
    assert all(len(line) <= 79 for line in legend)


def test_help_is_plain_text_and_shows_every_options_default() -> None:
    ran = subprocess.run(
        [sys.executable, "-m", "durable_bench", "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    out = ran.stdout
    flat = " ".join(out.split())
    assert out.startswith("usage: python -m durable_bench")
    assert "``" not in out
    assert "*" not in out
    assert all(len(line) <= 79 for line in out.splitlines())
    for option in ("--store", "--steps", "--fanout", "--json", "--url"):
        assert option in out, option
    helps = {a.dest: a.help or "" for a in parser()._actions if a.dest != "help"}
    for dest, text in helps.items():
        assert "(default: " in text, f"--{dest} does not show its default: {text}"
    assert f"(default: {DEFAULT_STEPS})" in flat
    assert f"(default: {' '.join(map(str, DEFAULT_FANOUT))})" in flat
    assert "lower is better" in flat
    assert "higher is better" in flat


def test_the_parser_reads_what_the_help_promises() -> None:
    args = parser().parse_args([])
    assert args.steps == DEFAULT_STEPS
    assert args.fanout == DEFAULT_FANOUT
    assert args.store is None
    assert args.json is None
    assert args.url == []
    assert (args.workflows, args.listing_size) == (DEFAULT_WORKFLOWS, DEFAULT_LISTING_SIZE)
    assert args.check_size == DEFAULT_CHECK_SIZE == 10_000  # the 10,000 unfinished
    assert DEFAULT_LISTING_SIZE == 100_000  # the "100 failed among 100,000 finished"
    args = parser().parse_args(["--store", "memory", "--steps", "10", "--fanout"])
    assert (args.store, args.steps, args.fanout) == ("memory", 10, [])


def test_a_store_offering_lifecycle_gets_the_start_to_outcome_and_listing_rows() -> None:
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "durable_bench",
            "--store",
            "memory",
            "--steps",
            "10",
            "--fanout",
            "--workflows",
            "5",
            "--listing-size",
            "30",
            "--prune-size",
            "30",
            "--check-size",
            "40",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    rows = [line for line in ran.stdout.splitlines() if line.startswith("memory ")]
    names = [" ".join(line.split()[1:]) for line in rows]
    assert any(n.startswith("start -> outcome, 5 steps (limit 1) ") for n in names), names
    assert any(n.startswith("start -> outcome, 5 steps (limit 16) ") for n in names), names
    assert any(n.startswith("child start -> outcome, 1 step ") for n in names), names
    assert any(n.startswith("list 100 failed among 30 finished ") for n in names), names
    assert any(n.startswith("durable check over 40 unfinished (per workflow) ") for n in names), (
        names
    )
    assert any(n.startswith("limited queue (4 at once, 50 ms passes) ") for n in names), names
    assert any(n.startswith("prune 30 ended workflows ") for n in names), names
    assert any(n.startswith("Run.step, no prune ") for n in names), names


@pytest.mark.skipif(not binaries_available(), reason="needs redis-server on PATH")
async def test_the_replica_rows_measure_a_step_without_and_with_wait_replicas() -> None:
    rows = await _bench_replica(40, range(17900, 18000))
    assert [row.name for row in rows] == [
        "Run.step, replica, wait off",
        "Run.step, replica, wait_replicas=1",
    ]
    assert all(row.store == "redis/replica" and row.p50_ms > 0 for row in rows)
    assert rows[1].note.endswith("x off")


def _bench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "durable_bench", *args],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        check=False,
    )


def test_the_peer_rows_say_why_they_are_skipped_where_their_packages_are_absent() -> None:
    """CI's environment has no DBOS or LangGraph: --peers must still run, print nothing for
    them, and say what is missing and where it comes from, rather than fail or hang."""
    from durable_bench import peers

    if not peers.missing():
        pytest.skip("the peers' packages are installed here; hatch run bench --peers runs them")
    env = {**os.environ, PEERS_ENV: "1"}  # as inside the peers environment: no hand-over
    ran = _bench("--store", "none", "--peers", env=env)
    assert ran.returncode == 0, ran.stderr
    assert "peers: skipped, not installed here: dbos" in ran.stderr, ran.stderr
    assert "hatch run bench --peers" in ran.stderr
    assert "peers/" not in ran.stdout


def test_the_size_mode_measures_each_operation_among_few_and_many_on_every_store() -> None:
    """A tiny --size run on every installed store: each of the five operations gets a row
    with both figures and their ratio. A store whose server is not here says so."""
    ran = _bench("--steps", "10", "--size", "40")
    assert ran.returncode == 0, ran.stderr
    out = ran.stdout
    assert "Flat in size (p50):" in out, out
    section = out.split("Flat in size (p50):", 1)[1].splitlines()
    measured = {line.split()[0] for line in section[3:] if line.strip()}
    assert {"memory", "sqlite"} <= measured, (measured, ran.stderr)
    for store in measured:
        for operation in ("load,", "Run.step,", "claim,", "next_ready,", "list(status=failed),"):
            rows = [
                line.split()
                for line in section
                if line.startswith(store + " ") and operation in line and "-> 40" in line
            ]
            assert len(rows) == 1, (store, operation, section)
            few, many, ratio = (float(x) for x in rows[0][-3:])
            assert few > 0
            assert many > 0
            # The table prints milliseconds to three places and the ratio of the unrounded
            # figures: a ratio of 0.011 ms over 0.010 ms may stand beside a printed 0.98.
            half = 0.0005
            low, high = (many - half) / (few + half), (many + half) / max(few - half, 1e-9)
            assert low * 0.95 - 0.01 <= ratio <= high * 1.05 + 0.01, (store, operation, rows)
    for store in ("postgres", "redis"):
        assert store in measured or f"size: {store} could not run" in ran.stderr, ran.stderr


def test_the_plot_is_drawn_from_the_json_where_matplotlib_is_installed(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib comes with the peers environment")
    from durable_bench import plot

    rows = [
        asdict(Row("peers/postgres", f"{s}: 100-step run (per step)", ms, 0, 1000 / ms))
        for s, ms in (("durable / postgres", 1.0), ("DBOS async / postgres", 6.0))
    ] + [
        asdict(Row("peers/sqlite", f"{s}: start -> outcome, 5 steps ({w} at once)", 0, 0, rate))
        for s, rate in (("durable / sqlite", 300.0), ("LangGraph / sqlite", 40.0))
        for w in (1, 16)
    ]
    out = tmp_path / "plot.png"
    plot.render(rows, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_statement_count_sees_every_statement_and_each_commit(tmp_path: Path) -> None:
    """The SQLite counts of the peer rows: a commented statement is a statement, a write
    outside a transaction is a commit of its own, and BEGIN ... COMMIT is one commit."""
    import sqlite3

    from durable_bench.peers import StatementCount

    counted = StatementCount()
    connection = sqlite3.connect(tmp_path / "counted.db", isolation_level=None)
    connection.set_trace_callback(counted)
    connection.execute("CREATE TABLE t (n INTEGER)")
    connection.execute("-- why this insert\nINSERT INTO t VALUES (1)")
    connection.execute("BEGIN")
    connection.execute("INSERT INTO t VALUES (2)")
    connection.execute("-- a read\nSELECT n FROM t").fetchall()
    connection.execute("COMMIT")
    connection.close()
    assert (counted.statements, counted.commits) == (6, 2)
