"""The bench's output as a reader meets it: a table whose columns line up whatever the
labels, a legend that says which way "x raw" reads, and a --help that shows defaults."""

from __future__ import annotations

import subprocess
import sys

from durable_bench.__main__ import (
    DEFAULT_FANOUT,
    DEFAULT_LISTING_SIZE,
    DEFAULT_STEPS,
    DEFAULT_WORKFLOWS,
    LEGEND,
    THROUGHPUT,
    Row,
    format_table,
    parser,
)

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
    assert any(n.startswith("list 100 failed among 30 finished ") for n in names), names
