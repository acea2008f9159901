"""The dashboard in a real browser (headless Chromium) against real stores (SQLite, Postgres)
that a worker has filled with workflows in all seven statuses."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import unittest
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import durable
import pytest
from dashboard_browser import CHROMIUM, dump_dom, screenshot, serving
from dashboard_fill import HOSTILE, Filled, family, filled, settle
from durable.interfaces import Status
from durable.workflows import LifecycleDurable
from durable_dashboard import create_app
from durable_dashboard.command import is_loopback

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(
        CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)"
    ),
]

DOCS_IMAGE = Path(__file__).resolve().parents[3] / "docs" / "img" / "dashboard.png"


@pytest.fixture(params=["sqlite", "postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    if request.param == "sqlite":
        async with durable.open(f"sqlite:///{tmp_path / 'dash.db'}") as opened:
            yield opened
        return
    from durable_postgres.testing import find_server, testbed

    try:
        server = await find_server(None)
    except unittest.SkipTest as skip:
        pytest.skip(str(skip))
    async with testbed(server) as bed:
        yield bed.durable


@pytest.fixture
async def world(store: LifecycleDurable[Any]) -> AsyncIterator[Filled]:
    async with filled(store) as done:
        yield done


def page(base: str, workflow: str) -> str:
    return f"{base}/workflow?{urllib.parse.urlencode({'id': workflow})}"


async def test_the_list_shows_every_status_with_counts_filters_and_kinds(
    world: Filled, request: pytest.FixtureRequest
) -> None:
    async with serving(create_app(store=world.store, refresh=0)) as base:
        dom = await dump_dom(base + "/")
        for status, workflow in world.ids.items():
            rows = dom.find("tr", data_workflow=workflow)
            assert [r["data-status"] for r in rows] == [status.value], workflow
            (link,) = dom.find("a", data_status=status.value)
            assert link  # each status has its filter link
        counts = dict(
            re.findall(
                r'data-status="(\w+)"><span[^>]*>\w+</span> <span class="count">(\d+)', dom.markup
            )
        )
        assert counts == {
            "ready": "1",
            "running": "1",
            "sleeping": "1",
            "blocked": "2",
            "finished": "3",
            "failed": "1",
            "cancelled": "1",
        }
        assert {k["data-kind"] for k in dom.find("a") if "data-kind" in k} == {
            "approval",
            "doomed",
            "hanging",
            "mailbox",
            "napper",
            "order",
            "unserved",
        }
        blocked = await dump_dom(base + "/?status=blocked")
        shown = {r["data-workflow"] for r in blocked.find("tr") if "data-workflow" in r}
        assert shown == {"approval-1", world.waiting}
        orders = await dump_dom(base + "/?kind=order")
        shown = {r["data-workflow"] for r in orders.find("tr") if "data-workflow" in r}
        assert shown == {"order-1", HOSTILE}
        await screenshot(base + "/", f"dashboard-list-{request.node.callspec.id}.png")


async def test_a_workflow_page_draws_its_timeline_and_shows_records_and_inbox(
    world: Filled, request: pytest.FixtureRequest
) -> None:
    async with serving(create_app(store=world.store, refresh=0)) as base:
        dom = await dump_dom(page(base, "order-1"))
        assert dom.texts["status-line"].startswith("finished")
        assert dom.find("svg", class_="timeline")
        # The charge step failed once, then succeeded: two attempt bars, red and green.
        assert len(dom.find("g", class_="attempt-failed")) == 1
        assert len(dom.find("g", class_="attempt-ok")) == 1
        keys = [r["data-key"] for r in dom.find("tr") if "data-key" in r]
        assert "durable.step:charge:attempt:1" in keys
        assert "durable.step:charge:failed:1" in keys
        assert "charge" in keys
        assert "note" in keys
        assert "… (" in dom.texts["records"]  # the 2000-character value is cut
        assert "x" * 400 not in dom.texts["records"]
        mail = await dump_dom(page(base, "mail-1"))
        assert (
            len([r for r in mail.find("tr") if r.get("data-key", "").startswith("durable.inbox:")])
            == 1
        )
        assert mail.find("g", class_="message")
        assert mail.find("g", class_="receive")
        nap = await dump_dom(page(base, "nap-1"))
        assert nap.find("g", class_="sleep")
        assert nap.texts["status-line"].startswith("sleeping until")
        waiting = await dump_dom(page(base, "approval-1"))
        assert waiting.find("g", class_="wait")
        failed = await dump_dom(page(base, "doomed-1"))
        assert "the card was declined <b>twice</b>" in failed.texts["status-line"]
        running = await dump_dom(page(base, "hang-1"))
        assert running.find("g", class_="pass")
        assert running.find("g", class_="attempt-open") == []
        relations = dom.texts["relations"]
        assert "parent: none" in relations
        assert "children: none" in relations
        shot = await screenshot(
            page(base, "order-1"), f"dashboard-workflow-{request.node.callspec.id}.png"
        )
        if os.environ.get("DURABLE_DOCS_SCREENSHOT") and request.node.callspec.id == "sqlite":
            DOCS_IMAGE.parent.mkdir(exist_ok=True)
            shutil.copyfile(shot, DOCS_IMAGE)


async def test_a_workflow_id_and_a_record_holding_script_render_as_text(world: Filled) -> None:
    async with serving(create_app(store=world.store, refresh=0)) as base:
        for url in (page(base, HOSTILE), base + "/"):
            dom = await dump_dom(url)
            # One script element: the page's own. The id's <script> is text, and never ran.
            assert dom.tags("script") == 1, url
            assert dom.tags("b") == 1  # the header's; not the failure's <b>
            assert "<title>pwned</title>" not in dom.markup
            assert "&lt;script&gt;document.title='pwned'&lt;/script&gt;" in dom.markup
        assert dom.find("tr", data_workflow=HOSTILE)
        hostile = await dump_dom(page(base, HOSTILE))
        assert hostile.texts["workflow"] == HOSTILE
        assert HOSTILE in hostile.texts["records"]  # the note step's value, as text


async def test_an_open_page_picks_up_a_change_of_status(
    world: Filled, request: pytest.FixtureRequest
) -> None:
    """The page of a blocked workflow is open; while it is, the value it waits for arrives
    and a worker finishes it. The page's next refresh shows it finished, and refreshing stops."""
    seen: list[str] = []
    app = create_app(store=world.store, refresh=0.5)

    async def changing(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and (b"x-durable-refresh", b"1") in scope["headers"]:
            st = await world.store.status(world.waiting)
            seen.append(st.status.value if st is not None else "none")
            if len(seen) == 1:  # the page has loaded and its script runs: change it now
                await world.store.arrive(world.waiting, "approved", "yes")
                await settle(world.store, world.waiting, Status.FINISHED)
        await app(scope, receive, send)

    async with serving(changing) as base:
        dom = await dump_dom(page(base, world.waiting), budget_ms=20000)
        (live,) = dom.find("div", id="live")
        assert live["data-status"] == "finished"
        assert live["data-live"] == "0"
        assert dom.texts["status-line"].startswith("finished")
        assert seen[0] == "blocked"
        # One refresh: it found the workflow blocked, changed it, and was answered finished;
        # then the page stopped refreshing (a settled workflow does not change).
        assert len(seen) == 1
        (body,) = dom.find("body")
        assert body["data-refreshes"] == "1"
        await screenshot(
            page(base, world.waiting), f"dashboard-changed-{request.node.callspec.id}.png"
        )


async def test_a_parent_shows_its_children_and_a_child_links_its_parent(
    store: LifecycleDurable[Any], request: pytest.FixtureRequest
) -> None:
    async with family(store) as parent, serving(create_app(store=store, refresh=0)) as base:
        dom = await dump_dom(page(base, parent))
        kids = {r["data-child"]: r["data-status"] for r in dom.find("tr") if "data-child" in r}
        assert kids == {"house-1/kid-a": "finished", "house-1/kid-<b>": "blocked"}
        links = {a["href"] for a in dom.find("a")}
        for kid in kids:
            assert "/workflow?" + urllib.parse.urlencode({"id": kid}) in links
        assert "kid-<b>" in dom.texts["children"]  # the key, as text
        assert dom.tags("b") == 1  # the header's: the key's <b> is not markup
        assert "parent: none" in dom.texts["parent"]
        await screenshot(page(base, parent), f"dashboard-parent-{request.node.callspec.id}.png")
        child = await dump_dom(page(base, "house-1/kid-<b>"))
        assert child.texts["parent"].startswith("parent: house-1")
        assert "kid-<b>" in child.texts["parent"]  # the key it was started under
        assert page("", parent) in {a["href"] for a in child.find("a")}
        assert "children: none" in child.texts["relations"]


async def test_the_doctor_page_shows_the_orphans_and_repairs_nothing(
    store: LifecycleDurable[Any], request: pytest.FixtureRequest
) -> None:
    # Records written by the checkpointer alone (a split store's crash before it queued):
    # nothing will ever run them. One has a hostile id.
    for orphan in ("wf-orphan", HOSTILE):
        await store.checkpointer.supply(orphan, "confirm", True)
    async with serving(create_app(store=store, refresh=0)) as base:
        index = await dump_dom(base + "/")
        (link,) = index.find("a", id="doctor-link")
        assert link["href"] == "/doctor"
        for _ in range(2):  # loading it twice repairs nothing
            dom = await dump_dom(base + "/doctor")
            (row,) = dom.find("tr", data_finding="orphans")
            assert row["data-count"] == "2"
            assert row["class"] == "attention"
            links = {a["href"] for a in dom.find("a")}
            for orphan in ("wf-orphan", HOSTILE):
                assert page("", orphan) in links
            assert "--repair` requeues them" in dom.texts["findings"]  # its advice
            assert dom.texts["verdict"] == "needs attention"
            assert dom.tags("script") == 1
            assert HOSTILE in dom.texts["findings"]
        names = {r["data-finding"] for r in dom.find("tr") if "data-finding" in r}
        assert {"orphans", "lapsed_claims", "stale_ready", "failing", "dead_letters"} <= names
        await screenshot(base + "/doctor", f"dashboard-doctor-{request.node.callspec.id}.png")
    for orphan in ("wf-orphan", HOSTILE):
        assert await store.scheduler.scheduled(orphan) is None  # type: ignore[attr-defined]


def _post(url: str, fields: dict[str, str]) -> tuple[int, str]:
    data = urllib.parse.urlencode(fields).encode()

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, data=data, method="POST"), timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


async def test_read_only_by_default_and_cancel_and_retry_once_per_form_with_allow_writes(
    world: Filled,
) -> None:
    workflow = "approval-1"
    async with serving(create_app(store=world.store, refresh=0)) as base:
        dom = await dump_dom(page(base, workflow))
        assert dom.find("form") == []
        assert dom.find("button") == []
        code, _ = await asyncio.to_thread(_post, base + "/cancel", {"workflow": workflow})
        assert code == 403
    assert (st := await world.store.status(workflow)) is not None
    assert st.status is Status.BLOCKED

    async with serving(create_app(store=world.store, refresh=0, allow_writes=True)) as base:
        dom = await dump_dom(page(base, workflow))
        (form,) = [f for f in dom.find("form") if f.get("action") == "/cancel"]
        assert form["method"] == "post"
        (token,) = [i["value"] for i in dom.find("input", name="token")]
        fields = {"workflow": workflow, "token": token}
        code, _ = await asyncio.to_thread(_post, base + "/cancel", fields)
        assert code == 303
        await settle(world.store, workflow, Status.CANCELLED)
        code, text = await asyncio.to_thread(_post, base + "/cancel", fields)
        assert code == 409
        assert "already submitted" in text
        forged = {"workflow": workflow, "token": "made-up"}
        assert (await asyncio.to_thread(_post, base + "/retry", forged))[0] == 409
        dom = await dump_dom(page(base, workflow))
        assert [f["action"] for f in dom.find("form")] == ["/retry"]
        (token,) = [i["value"] for i in dom.find("input", name="token")]
        code, _ = await asyncio.to_thread(
            _post, base + "/retry", {"workflow": workflow, "token": token}
        )
        assert code == 303
        st = await world.store.status(workflow)
        assert st is not None
        assert st.status in (Status.READY, Status.RUNNING, Status.BLOCKED)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _command(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "durable.cli", "dashboard", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_loopback_is_told_apart() -> None:
    assert is_loopback("127.0.0.1")
    assert is_loopback("::1")
    assert is_loopback("localhost")
    assert not is_loopback("0.0.0.0")
    assert not is_loopback("192.168.1.2")


async def test_the_durable_dashboard_command_serves_the_store_it_is_given(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    async with durable.open(url) as opened:
        assert isinstance(opened, LifecycleDurable)
        await opened.start("payout", "from-the-cli", {"amount": 3})
    port = _free_port()
    process = _command(url, "--port", str(port))
    try:
        assert process.stdout is not None
        line = await asyncio.to_thread(process.stdout.readline)
        assert f"http://127.0.0.1:{port}/" in line
        assert "read-only" in line
        dom = None
        for _ in range(100):
            try:
                dom = await dump_dom(f"http://127.0.0.1:{port}/", budget_ms=500)
                break
            except AssertionError:
                await asyncio.sleep(0.1)
        assert dom is not None
        assert dom.find("tr", data_workflow="from-the-cli")
    finally:
        process.terminate()
        process.wait(30)


def test_bound_beyond_loopback_it_warns_that_it_has_no_authentication(tmp_path: Path) -> None:
    process = _command(f"sqlite:///{tmp_path / 'w.db'}", "--host", "0.0.0.0", "--port", "0")
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        assert "WARNING" in line, line
        assert "NO authentication" in line, line
    finally:
        process.terminate()
        process.wait(30)


def test_without_the_package_the_command_says_how_to_install_it(tmp_path: Path) -> None:
    """As if durable-dashboard were not installed: importing it fails, and the stand-in
    command exits 4 naming the package."""
    program = (
        "import sys; sys.modules['durable_dashboard.command'] = None; "
        "from durable.cli import main; sys.exit(main(sys.argv[1:]))"
    )
    done = subprocess.run(
        [sys.executable, "-c", program, "dashboard", f"sqlite:///{tmp_path / 'x.db'}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 4, done.stderr
    assert "pip install durable-dashboard" in done.stderr
