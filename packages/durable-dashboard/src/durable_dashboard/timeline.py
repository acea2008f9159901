"""A workflow's history drawn as a picture: an inline SVG of bars and marks on a time axis.

Everything comes from what the store already keeps (``Checkpointer.history``, each record
stamped with the store's clock, and the lifecycle row), so the picture is the same on every
certified store. What each record was is read from its key and value:

- ``durable.step:<key>:attempt:<n>`` opens an attempt of step ``<key>``; it ends at that
  step's ``:failed:<n>`` record (a red bar) or at the step's own result ``<key>`` (green);
  ``:retry:<n>`` holds the deadline of the backoff slept before the next attempt (grey);
- ``durable.inbox:...`` is an inbox message (a diamond), and a record whose value is
  ``{"durable.receive": <inbox key>}`` the receive that took it;
- a record whose value is an ISO timestamp is drawn as a sleep from the moment it was
  recorded until that deadline (``Run.sleep`` records its deadline so; a step that returns
  a timestamp string is drawn the same way, which the label makes plain);
- any other record (a step's result, a value that arrived for a wait) is a mark;
- the open waits of a blocked workflow, and the pass of a running one, run to now.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from html import escape

from durable.interfaces import INBOX_PREFIX, Entry, Status, WorkflowStatus
from durable.run import RECEIVE_FIELD, STEP_PREFIX

__all__ = ["Mark", "draw", "duration", "marks"]

WIDTH, LANE, LEFT, TOP = 960, 22, 190, 28
MAX_LANES = 60


@dataclass(frozen=True)
class Mark:
    """One thing on the timeline: a bar from ``start`` to ``end``, or a point when they meet."""

    lane: str
    what: str  # attempt-ok, attempt-failed, attempt-open, backoff, sleep, wait, message,
    # receive, record, pass
    start: datetime
    end: datetime
    label: str


def duration(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _timestamp(value: object) -> datetime | None:
    if not isinstance(value, str) or len(value) < 19 or value[4:5] != "-":
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def marks(history: Sequence[Entry], st: WorkflowStatus | None, now: datetime) -> list[Mark]:
    """What to draw, in the order the records landed."""
    out: list[Mark] = []
    open_attempts: dict[str, tuple[int, datetime]] = {}
    stepped: set[str] = set()
    for entry in history:
        key, value, at = entry.key, entry.value, entry.at
        if key.startswith(STEP_PREFIX):
            parts = key[len(STEP_PREFIX) :].rsplit(":", 2)
            if len(parts) != 3:
                out.append(Mark(key, "record", at, at, key))
                continue
            step, kind, number = parts
            stepped.add(step)
            if kind == "attempt":
                open_attempts[step] = (int(number) if number.isdigit() else 0, at)
            elif kind in ("failed", "reconciled"):
                began = open_attempts.pop(step, (0, at))[1]
                details = value if isinstance(value, dict) else {}
                why = str(details.get("type", "")) if kind == "failed" else "reconciled"
                what = "attempt-failed" if kind == "failed" else "attempt-ok"
                label = f"attempt {number} {kind}: {why}" if why else f"attempt {number} {kind}"
                out.append(Mark(step, what, began, at, label))
            elif kind == "retry":
                until = _timestamp(value) or at
                out.append(Mark(step, "backoff", at, max(until, at), f"backoff before {number}"))
            continue
        if key.startswith(INBOX_PREFIX):
            out.append(Mark("inbox", "message", at, at, "message " + key[len(INBOX_PREFIX) :]))
            continue
        if isinstance(value, dict) and RECEIVE_FIELD in value:
            out.append(Mark(key, "receive", at, at, f"received {value[RECEIVE_FIELD]}"))
            continue
        if key in open_attempts:
            tried, began = open_attempts.pop(key)
            out.append(Mark(key, "attempt-ok", began, at, f"attempt {tried} succeeded"))
            continue
        deadline = _timestamp(value)
        if deadline is not None and key not in stepped:
            out.append(Mark(key, "sleep", at, max(deadline, at), "sleep until " + value_str(value)))
            continue
        out.append(Mark(key, "record", at, at, "recorded"))
    for step, (tried, began) in open_attempts.items():
        out.append(Mark(step, "attempt-open", began, now, f"attempt {tried} in flight"))
    if st is not None:
        if st.status is Status.BLOCKED:
            for key in st.keys:
                out.append(Mark(key, "wait", st.updated_at, now, "waiting"))
        if st.status is Status.RUNNING and st.since is not None:
            step = f" (step {st.step})" if st.step else ""
            out.append(Mark("pass", "pass", st.since, now, f"pass {st.token}{step} running"))
    return out


def value_str(value: object) -> str:
    return value if isinstance(value, str) else repr(value)


COLOURS = {
    "attempt-ok": "#2e7d32",
    "attempt-failed": "#c62828",
    "attempt-open": "#f9a825",
    "backoff": "#9e9e9e",
    "sleep": "#5c6bc0",
    "wait": "#8e24aa",
    "pass": "#0277bd",
    "message": "#ef6c00",
    "receive": "#ef6c00",
    "record": "#455a64",
}


def draw(history: Sequence[Entry], st: WorkflowStatus | None, now: datetime, *, live: bool) -> str:
    """The SVG, every text in it escaped. ``live``: the axis runs to ``now``."""
    drawn = marks(history, st, now)
    if not drawn:
        return '<p class="empty">Nothing recorded yet.</p>'
    lanes: list[str] = []
    for mark in drawn:
        if mark.lane not in lanes:
            lanes.append(mark.lane)
    hidden = max(0, len(lanes) - MAX_LANES)
    lanes = lanes[:MAX_LANES]
    begin = min(m.start for m in drawn)
    if st is not None and st.started_at is not None:
        begin = min(begin, st.started_at)
    end = max(m.end for m in drawn)
    if live:
        end = max(end, now)
    span = max((end - begin).total_seconds(), 0.001)
    scale = (WIDTH - LEFT - 44) / span

    def x(when: datetime) -> float:
        return LEFT + (when - begin).total_seconds() * scale

    height = TOP + LANE * len(lanes) + 30
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}" role="img" '
        f'aria-label="timeline of {len(drawn)} events over {escape(duration(end - begin))}">'
    ]
    for i in range(6):
        tx = LEFT + (WIDTH - LEFT - 44) * i / 5
        tick = timedelta(seconds=span * i / 5)
        parts.append(
            f'<line x1="{tx:.1f}" y1="{TOP - 6}" x2="{tx:.1f}" y2="{height - 24}" '
            'stroke="#e0e0e0"/>'
            f'<text x="{tx:.1f}" y="{TOP - 10}" font-size="10" text-anchor="middle" '
            f'fill="#616161">+{escape(duration(tick))}</text>'
        )
    for row, lane in enumerate(lanes):
        y = TOP + row * LANE
        shown = lane if len(lane) <= 26 else lane[:25] + "…"
        parts.append(
            f'<text x="{LEFT - 8}" y="{y + 15}" font-size="11" text-anchor="end" '
            f'fill="#212121"><title>{escape(lane)}</title>{escape(shown)}</text>'
        )
    for mark in drawn:
        if mark.lane not in lanes:
            continue
        y = TOP + lanes.index(mark.lane) * LANE
        colour = COLOURS.get(mark.what, "#455a64")
        x0, x1 = x(mark.start), x(mark.end)
        took = mark.end - mark.start
        title = f"{mark.lane}: {mark.label}, {mark.start.isoformat(timespec='milliseconds')}"
        if mark.end > mark.start:
            title += f", {duration(took)}"
        tip = f"<title>{escape(title)}</title>"
        if mark.what in ("message", "receive", "record") or x1 - x0 < 2:
            cx = x0
            if mark.what in ("message", "receive"):
                parts.append(
                    f'<g class="mark {mark.what}"><path d="M{cx:.1f} {y + 4} l6 7 l-6 7 l-6 -7 z" '
                    f'fill="{colour}">{tip}</path></g>'
                )
            else:
                parts.append(
                    f'<g class="mark {mark.what}"><circle cx="{cx:.1f}" cy="{y + 11}" r="5" '
                    f'fill="{colour}">{tip}</circle></g>'
                )
            continue
        dash = (
            ' stroke-dasharray="4 3" fill-opacity="0.35"'
            if mark.what
            in (
                "sleep",
                "wait",
                "backoff",
            )
            else ""
        )
        parts.append(
            f'<g class="mark {mark.what}"><rect x="{x0:.1f}" y="{y + 4}" '
            f'width="{max(x1 - x0, 2):.1f}" height="14" rx="3" fill="{colour}" '
            f'stroke="{colour}"{dash}>{tip}</rect>'
        )
        if x1 - x0 > 46:
            parts.append(
                f'<text x="{x0 + 4:.1f}" y="{y + 15}" font-size="10" fill="#fff">'
                f"{escape(duration(took))}</text>"
            )
        parts.append("</g>")
    foot = height - 8
    parts.append(
        f'<text x="{LEFT}" y="{foot}" font-size="10" fill="#616161">'
        f"{escape(begin.isoformat(timespec='seconds'))} (store clock, UTC)"
        + (f"; {hidden} more lanes not drawn" if hidden else "")
        + "</text></svg>"
    )
    return "".join(parts)
