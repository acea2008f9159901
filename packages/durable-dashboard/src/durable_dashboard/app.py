"""The dashboard as an ASGI application (Starlette): server-rendered HTML, no build step.

Pages:

- ``/``: workflows by status and kind, with counts, filters (``?status=``, ``?kind=``) and
  paging (``?cursor=``, the store's own ``Lifecycle.statuses`` cursor);
- ``/workflow?id=ID``: one workflow's status line, its timeline as an inline SVG, its records
  and inbox (values cut to :data:`CUT` characters), its parent and its children (linked,
  with their statuses);
- ``/doctor``: the doctor's findings (:func:`durable.doctor.examine`, read-only: it never
  repairs), each with its count, the workflows (linked) and what to do;
- with ``allow_writes``: ``POST /cancel`` and ``POST /retry``, each form carrying a one-time
  token, so a second submission of the same form (a double click, a reload) does nothing.

Every value read from the store is escaped (:func:`html.escape`) before it reaches the page,
and a Content-Security-Policy lets only the page's own inline script (by nonce) run, so a
workflow id or record holding ``<script>`` is shown as text.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import UTC, datetime
from html import escape
from typing import Any
from urllib.parse import parse_qs, urlencode

import durable
from durable import doctor
from durable.children import children_of, parent_of
from durable.cli import status_line
from durable.interfaces import (
    INBOX_PREFIX,
    Durable,
    Entry,
    Lifecycle,
    NotRetryable,
    Status,
    UnknownWorkflow,
    WorkflowStatus,
)
from durable.workflows import LifecycleDurable
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from durable_dashboard.timeline import draw, duration

__all__ = ["CUT", "create_app", "doctor_section", "relations"]

CUT = 300
"""How many characters of a value a page shows before cutting it."""

PAGE = 50
"""Workflows per page of the list."""

COUNT_CAP = 1000
"""The list counts at most this many workflows of each status (paging the store's index)."""

log = logging.getLogger("durable.dashboard")


def cut(value: object, limit: int = CUT) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + f"… ({len(text)} characters)"


def e(value: object) -> str:
    """Escaped for HTML text and attribute values alike."""
    return escape(str(value), quote=True)


class _Tokens:
    """One-time form tokens: each rendered form gets one, each POST spends one."""

    def __init__(self, keep: int = 2000) -> None:
        self._live: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._keep = keep

    def issue(self, action: str, workflow: str) -> str:
        token = secrets.token_urlsafe(18)
        self._live[token] = (action, workflow)
        while len(self._live) > self._keep:
            self._live.popitem(last=False)
        return token

    def spend(self, token: str, action: str, workflow: str) -> bool:
        return self._live.pop(token, None) == (action, workflow)


STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;color:#212121;background:#fafafa}
header{background:#263238;color:#fff;padding:10px 20px}header a{color:#fff;text-decoration:none}
main{padding:16px 20px}table{border-collapse:collapse;background:#fff;width:100%}
td,th{border-bottom:1px solid #e0e0e0;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#eceff1}code,pre{font:12px ui-monospace,monospace;white-space:pre-wrap;
word-break:break-all;margin:0}.status{padding:1px 6px;border-radius:8px;color:#fff;
font-size:12px}.ready{background:#546e7a}.running{background:#0277bd}.sleeping{background:#5c6bc0}
.blocked{background:#8e24aa}.finished{background:#2e7d32}.failed{background:#c62828}
.cancelled{background:#6d4c41}.counts a{margin-right:12px}.counts .on{font-weight:bold}
.line{font-size:16px;margin:6px 0 12px}.note{color:#616161}form.inline{display:inline}
section{margin:18px 0}tr.attention td:nth-child(2){color:#c62828;font-weight:bold}
"""

SCRIPT = """
(function () {
  var live = document.getElementById('live');
  var every = Number(document.body.dataset.refresh) * 1000;
  document.addEventListener('submit', function (ev) {
    var button = ev.target.querySelector('button');
    if (ev.target.dataset.sent) { ev.preventDefault(); return; }
    ev.target.dataset.sent = '1';
    if (button) { button.disabled = true; }
  });
  function tick() {
    if (!live || live.dataset.live !== '1') { return; }
    fetch(location.href, {headers: {'X-Durable-Refresh': '1'}, cache: 'no-store'})
      .then(function (r) { return r.text(); })
      .then(function (text) {
        var next = new DOMParser().parseFromString(text, 'text/html').getElementById('live');
        if (next) {
          live.innerHTML = next.innerHTML;
          live.dataset.live = next.dataset.live;
          live.dataset.status = next.dataset.status || '';
          document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes) + 1);
        }
      })
      .catch(function () {})
      .then(function () { setTimeout(tick, every); });
  }
  if (every > 0) { setTimeout(tick, every); }
})();
"""


def _page(
    title: str, body: str, nonce: str, refresh: float, *, live: bool, status: str = ""
) -> str:
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        f"<title>{e(title)} · durable</title><style>{STYLE}</style></head>"
        f'<body data-refresh="{refresh:g}" data-refreshes="0">'
        '<header><a href="/"><b>durable</b> dashboard</a> '
        '<a id="doctor-link" href="/doctor">· doctor</a></header>'
        f'<main><div id="live" data-live="{1 if live else 0}" data-status="{e(status)}">'
        f"{body}</div></main>"
        f'<script nonce="{e(nonce)}">{SCRIPT}</script></body></html>'
    )


def _badge(status: Status | str) -> str:
    return f'<span class="status {e(status)}">{e(status)}</span>'


def _when(at: datetime | None) -> str:
    return "-" if at is None else e(at.isoformat(timespec="seconds").replace("+00:00", "Z"))


def _link(workflow: str) -> str:
    return f'<a href="/workflow?{e(urlencode({"id": workflow}))}">{e(workflow)}</a>'


async def relations(store: Durable[Any], workflow: str, history: Sequence[Entry]) -> str:
    """The workflow's parent (linked, with the key it was started under) and its children
    (linked, each with its key and status), from the link records both sides hold
    (:mod:`durable.children`), as already-escaped HTML."""
    held = {entry.key: entry.value for entry in history}
    parts = ['<section id="relations"><h3>Parent and children</h3>']
    parent = parent_of(held)
    if parent is None:
        parts.append('<p id="parent" class="note">parent: none (not a child workflow)</p>')
    else:
        name, key = parent
        parts.append(
            f'<p id="parent">parent: {_link(name)} '
            f'<span class="note">(started this under key <code>{e(key)}</code>)</span></p>'
        )
    kids = children_of(held)
    if not kids:
        parts.append('<p class="note">children: none</p>')
    else:
        life = store if isinstance(store, LifecycleDurable) else None
        parts.append('<table id="children"><tr><th>key</th><th>child</th><th>status</th></tr>')
        for key, kid, _ in kids:
            st = await life.status(kid) if life is not None else None
            parts.append(
                f'<tr data-child="{e(kid)}" data-status="{e(st.status if st else "unknown")}">'
                f"<td><code>{e(key)}</code></td><td>{_link(kid)}</td>"
                f"<td>{_badge(st.status) if st else 'unknown'}</td></tr>"
            )
        parts.append("</table>")
    parts.append("</section>")
    return "".join(parts)


def doctor_section(report: doctor.Report) -> str:
    """The doctor's findings (:func:`durable.doctor.examine`), as already-escaped HTML."""
    parts = [
        f'<p class="note">{report.examined} workflow(s) examined; read-only: '
        "<code>durable doctor --repair</code> makes the safe repairs.</p>"
        '<table id="findings"><tr><th>finding</th><th>count</th><th>workflows</th>'
        "<th>what to do</th></tr>"
    ]
    for finding in report.findings:
        tone = "attention" if finding.attention and finding.count else "fine"
        ids = ", ".join(_link(x) for x in finding.ids)
        if finding.count > len(finding.ids):
            ids += f" <span class=note>(and {finding.count - len(finding.ids)} more)</span>"
        parts.append(
            f'<tr data-finding="{e(finding.name)}" data-count="{finding.count}" class="{tone}">'
            f"<td>{e(finding.name)}</td><td>{finding.count}</td><td>{ids or '-'}</td>"
            f"<td>{e(finding.advice)}</td></tr>"
        )
    parts.append("</table>")
    if report.unreported:
        parts.append(
            f'<p class="note">not checked on this store: {e(", ".join(report.unreported))}</p>'
        )
    return "".join(parts)


def create_app(
    url: str | None = None,
    *,
    store: Durable[Any] | None = None,
    allow_writes: bool = False,
    refresh: float = 2.0,
) -> Starlette:
    """The dashboard over the store at ``url`` (opened for the application's lifetime), or over
    an already opened ``store``. ``allow_writes`` adds cancel and retry buttons; ``refresh`` is
    how many seconds a live page waits between refreshes (0: never)."""
    if (url is None) == (store is None):
        raise TypeError("give exactly one of url and store")
    state: dict[str, Durable[Any]] = {}
    tokens = _Tokens()

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if store is not None:
            state["store"] = store
            yield
            return
        assert url is not None
        async with durable.open(url) as opened:
            state["store"] = opened
            yield

    def lifecycle() -> LifecycleDurable[Any] | None:
        opened = state["store"]
        if isinstance(opened, LifecycleDurable) and isinstance(opened.checkpointer, Lifecycle):
            return opened
        return None

    def respond(
        title: str, body: str, *, live: bool, status: str = "", code: int = 200
    ) -> Response:
        nonce = secrets.token_urlsafe(12)
        policy = (
            "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
            f"script-src 'nonce-{nonce}'; connect-src 'self'; form-action 'self'; "
            "base-uri 'none'; frame-ancestors 'none'"
        )
        return HTMLResponse(
            _page(title, body, nonce, refresh, live=live, status=status),
            status_code=code,
            headers={
                "Content-Security-Policy": policy,
                "X-Content-Type-Options": "nosniff",
                "Referrer-Policy": "no-referrer",
                "Cache-Control": "no-store",
            },
        )

    async def index(request: Request) -> Response:
        opened = lifecycle()
        if opened is None:
            return respond(
                "workflows",
                "<p>This store does not offer lifecycle (kinds, status, outcome), so there is "
                "nothing to list by status; open a workflow by id: "
                '<form action="/workflow"><input name="id"><button>show</button></form></p>',
                live=False,
            )
        query = request.query_params
        wanted = query.get("status") or None
        kind = query.get("kind") or None
        cursor = query.get("cursor") or None
        try:
            status = Status(wanted) if wanted else None
            page = await opened.list(status=status, kind=kind, limit=PAGE, cursor=cursor)
        except ValueError as error:
            return respond("workflows", f"<p>Bad filter: {e(error)}</p>", live=False, code=400)
        counts: dict[Status, str] = {}
        kinds: dict[str, int] = {}
        for each in Status:
            seen, more, after = 0, True, None
            while more and seen < COUNT_CAP:
                counted = await opened.list(status=each, kind=kind, limit=250, cursor=after)
                seen += len(counted.statuses)
                for row in counted.statuses:
                    name = row.kind if row.kind is not None else "-"
                    kinds[name] = kinds.get(name, 0) + 1
                after = counted.cursor
                more = after is not None
            counts[each] = f"{seen}+" if more else str(seen)

        def href(**change: str | None) -> str:
            params = {"status": wanted, "kind": kind} | change
            return "/?" + urlencode({k: v for k, v in params.items() if v})

        parts = ['<h2>Workflows</h2><p class="counts">']
        all_on = ' class="on"' if status is None else ""
        parts.append(f'<a{all_on} href="{e(href(status=None))}">all</a>')
        for each in Status:
            on = ' class="on"' if each is status else ""
            parts.append(
                f'<a{on} href="{e(href(status=each.value))}" data-status="{e(each)}">'
                f'{_badge(each)} <span class="count">{e(counts[each])}</span></a>'
            )
        parts.append('</p><p class="counts">kinds: ')
        kind_on = ' class="on"' if kind is None else ""
        parts.append(f'<a{kind_on} href="{e(href(kind=None))}">all</a>')
        for name, number in sorted(kinds.items()):
            on = ' class="on"' if name == kind else ""
            target = href(kind=name) if name != "-" else href(kind=None)
            parts.append(
                f'<a{on} href="{e(target)}" data-kind="{e(name)}">{e(name)} ({number})</a>'
            )
        parts.append(
            '</p><table id="workflows"><tr><th>workflow</th><th>status</th><th>kind</th>'
            "<th>attempts</th><th>updated</th><th>where it is</th></tr>"
        )
        now = datetime.now(UTC)
        for row in page.statuses:
            parts.append(
                f'<tr data-workflow="{e(row.workflow)}" data-status="{e(row.status)}">'
                f"<td>{_link(row.workflow)}</td><td>{_badge(row.status)}</td>"
                f"<td>{e(row.kind or '-')}</td><td>{row.attempts}</td>"
                f"<td>{_when(row.updated_at)}</td><td>{e(cut(status_line(row, now=now), 160))}</td>"
                "</tr>"
            )
        parts.append("</table>")
        if not page.statuses:
            parts.append('<p class="note">No workflows match.</p>')
        if page.cursor is not None:
            parts.append(f'<p><a id="next" href="{e(href(cursor=page.cursor))}">next page</a></p>')
        counts_note = f"counts stop at {COUNT_CAP}" + (f", of kind {kind}" if kind else "")
        parts.append(f'<p class="note">{e(counts_note)}; newest updated first.</p>')
        return respond("workflows", "".join(parts), live=cursor is None)

    async def workflow_page(request: Request) -> Response:
        workflow = request.query_params.get("id", "")
        opened = state["store"]
        history: list[Entry] = await opened.checkpointer.history(workflow)
        life = lifecycle()
        st: WorkflowStatus | None = await life.status(workflow) if life is not None else None
        if st is None and not history:
            return respond(
                "not found",
                f"<p>No workflow {e(workflow)!s} in this store.</p>",
                live=False,
                code=404,
            )
        now = datetime.now(UTC)
        live = st is None or not st.status.terminal
        parts = [f'<h2 id="workflow">{e(workflow)}</h2>']
        if st is None:
            parts.append(
                '<p class="line">no status recorded '
                "(this store keeps none, or it never started)</p>"
            )
        else:
            parts.append(
                f'<p class="line">{_badge(st.status)} <span id="status-line">'
                f"{e(cut(status_line(st, history, now=now), 600))}</span></p>"
                "<table class=facts>"
                f"<tr><th>kind</th><td>{e(st.kind or '-')}</td></tr>"
                f"<tr><th>attempts</th><td>{st.attempts}</td></tr>"
                f"<tr><th>started</th><td>{_when(st.started_at)}</td></tr>"
                f"<tr><th>updated</th><td>{_when(st.updated_at)}</td></tr>"
                f"<tr><th>input</th><td><code>{e(cut(st.input))}</code></td></tr>"
            )
            if st.status is Status.FINISHED:
                parts.append(f"<tr><th>value</th><td><code>{e(cut(st.value))}</code></td></tr>")
            if st.failure is not None:
                parts.append(
                    f"<tr><th>failure</th><td><code>{e(cut(str(st.failure), 600))}</code>"
                    "<details><summary>traceback</summary>"
                    f"<pre>{e(cut(st.failure.traceback, 4000))}"
                    "</pre></details></td></tr>"
                )
            parts.append("</table>")
            if allow_writes:
                parts.append(_actions(st))
        parts.append("<section><h3>Timeline</h3>")
        parts.append(draw(history, st, now, live=live))
        parts.append("</section>")
        records = [x for x in history if not x.key.startswith(INBOX_PREFIX)]
        inbox = [x for x in history if x.key.startswith(INBOX_PREFIX)]
        for title, rows, ident in (("Records", records, "records"), ("Inbox", inbox, "inbox")):
            parts.append(f'<section><h3>{title} ({len(rows)})</h3><table id="{ident}">')
            parts.append("<tr><th>at (store clock)</th><th>+</th><th>key</th><th>value</th></tr>")
            first = history[0].at if history else now
            for entry in rows:
                parts.append(
                    f'<tr data-key="{e(entry.key)}"><td>{_when(entry.at)}</td>'
                    f"<td>{e(duration(entry.at - first))}</td><td><code>{e(entry.key)}</code></td>"
                    f"<td><code>{e(cut(entry.value))}</code></td></tr>"
                )
            parts.append("</table></section>")
        parts.append(await relations(opened, workflow, history))
        if live and refresh > 0:
            parts.append(f'<p class="note">Refreshing every {refresh:g} s while it runs.</p>')
        return respond(
            workflow, "".join(parts), live=live, status="" if st is None else st.status.value
        )

    async def doctor_page(request: Request) -> Response:
        # Read-only: never repair from a page (a GET, a reload, a crawler).
        report = await doctor.examine(state["store"], repair=False)
        verdict = "needs attention" if report.attention else "nothing needs attention"
        body = f'<h2>Doctor</h2><p class="line" id="verdict">{e(verdict)}</p>'
        return respond("doctor", body + doctor_section(report), live=False)

    def _actions(st: WorkflowStatus) -> str:
        buttons = []
        if not st.status.terminal:
            buttons.append(("cancel", "Cancel"))
        if st.status in (Status.FAILED, Status.CANCELLED):
            buttons.append(("retry", "Retry"))
        return "".join(
            f'<form class="inline" method="post" action="/{action}">'
            f'<input type="hidden" name="workflow" value="{e(st.workflow)}">'
            f'<input type="hidden" name="token" value="{e(tokens.issue(action, st.workflow))}">'
            f'<button type="submit" id="{action}">{label}</button></form> '
            for action, label in buttons
        )

    def write(action: str, move: Callable[[LifecycleDurable[Any], str], Any]) -> Callable[..., Any]:
        async def endpoint(request: Request) -> Response:
            if not allow_writes:
                return PlainTextResponse(
                    "read-only: start the dashboard with --allow-writes", status_code=403
                )
            fields = parse_qs((await request.body()).decode("utf-8", "replace"))
            workflow = (fields.get("workflow") or [""])[0]
            token = (fields.get("token") or [""])[0]
            back = "/workflow?" + urlencode({"id": workflow})
            if not tokens.spend(token, action, workflow):
                # A second submission of the same form, or a form from another page load.
                return respond(
                    "already submitted",
                    f"<p>This {e(action)} form was already submitted (or has expired); "
                    f'nothing was done again. <a href="{e(back)}">back to {e(workflow)}</a></p>',
                    live=False,
                    code=409,
                )
            opened = lifecycle()
            if opened is None:
                return PlainTextResponse("this store does not offer lifecycle", status_code=400)
            try:
                await move(opened, workflow)
            except (NotRetryable, UnknownWorkflow) as error:
                return respond(action, f"<p>{e(error)}</p>", live=False, code=409)
            log.info("dashboard: %s %s", action, workflow)
            return RedirectResponse(back, status_code=303)

        return endpoint

    async def cancel(store: LifecycleDurable[Any], workflow: str) -> None:
        await store.cancel(workflow)

    async def retry(store: LifecycleDurable[Any], workflow: str) -> None:
        await store.retry(workflow)

    return Starlette(
        routes=[
            Route("/", index),
            Route("/workflow", workflow_page),
            Route("/doctor", doctor_page),
            Route("/cancel", write("cancel", cancel), methods=["POST"]),
            Route("/retry", write("retry", retry), methods=["POST"]),
        ],
        lifespan=lifespan,
    )
