"""The docs' performance plot, drawn from the bench's JSON.

``python -m durable_bench.plot RESULTS.json OUT.png`` (``hatch run peers:python -m
durable_bench.plot ...``: matplotlib comes with the peers environment) reads the rows that
``python -m durable_bench --peers --json RESULTS.json`` wrote and draws, per backend, each
system's cost per step and its workflows per second from start to outcome, one at a time and
16 at once. The bench draws the same picture itself when given ``--plot OUT.png``.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

BACKENDS = ("postgres", "sqlite")


def _system(name: str) -> str:
    return name.split(":", 1)[0]


def render(rows: list[dict[str, Any]], out: Path) -> None:
    """Draw the peer rows of ``rows`` (dicts as the bench's JSON holds them) into ``out``."""
    matplotlib: Any = importlib.import_module("matplotlib")
    matplotlib.use("Agg")
    pyplot: Any = importlib.import_module("matplotlib.pyplot")
    peer_rows = [r for r in rows if str(r["store"]).startswith("peers/")]
    if not peer_rows:
        raise ValueError("no peer rows to plot: run the bench with --peers")
    figure, axes = pyplot.subplots(len(BACKENDS), 2, figsize=(11, 3.4 * len(BACKENDS)))
    for line, backend in enumerate(BACKENDS):
        mine = [r for r in peer_rows if r["store"] == f"peers/{backend}"]
        steps = [r for r in mine if "(per step)" in r["name"]]
        left, right = axes[line][0], axes[line][1]
        names = [_system(r["name"]) for r in steps]
        colours = ["#2a7ab9" if n.startswith("durable") else "#9a9a9a" for n in names]
        left.barh(names, [r["p50_ms"] for r in steps], color=colours)
        left.invert_yaxis()
        left.set_xlabel("ms per step (lower is better)")
        run = steps[0]["name"].split(": ", 1)[1].split(" (per step)")[0] if steps else "a run"
        left.set_title(f"{backend}: one step, in a {run}")
        for i, r in enumerate(steps):
            left.annotate(f" {r['p50_ms']:.2f}", (r["p50_ms"], i), va="center", fontsize=8)
        systems = list(dict.fromkeys(names))
        width = 0.4
        for shift, (at_once, shade) in enumerate(((1, "#7fb2db"), (16, "#2a7ab9"))):
            rates = []
            for system in systems:
                found = [
                    r["per_second"]
                    for r in mine
                    if _system(r["name"]) == system and f"({at_once} at once)" in r["name"]
                ]
                rates.append(found[0] if found else 0.0)
            right.barh(
                [i + shift * width for i in range(len(systems))],
                rates,
                height=width,
                color=shade,
                label=f"{at_once} at once",
            )
        right.set_yticks([i + width / 2 for i in range(len(systems))], systems)
        right.invert_yaxis()
        right.set_xlabel("workflows per second (higher is better)")
        right.set_title(f"{backend}: start -> 5 steps -> outcome")
        right.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    figure.savefig(out, dpi=110)
    pyplot.close(figure)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2:
        print("usage: python -m durable_bench.plot RESULTS.json OUT.png", file=sys.stderr)
        return 2
    render(json.loads(Path(args[0]).read_text()), Path(args[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
