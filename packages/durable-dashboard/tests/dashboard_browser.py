"""Headless Chromium (the distribution's package, installed by ``.ci/run``) and a dashboard
served by uvicorn on a free loopback port, for the tests.

Chromium is driven through its command line: ``--dump-dom`` prints the DOM after the page's
scripts ran for ``--virtual-time-budget`` milliseconds of page time (timers fire at once in
virtual time; network requests are waited for in real time), ``--screenshot`` writes a PNG.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import uvicorn

CHROMIUM = next(
    filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None
)


def artifacts() -> Path:
    """Where screenshots are kept: ``$DURABLE_ARTIFACTS`` (CI uploads it), else a temp dir."""
    folder = Path(
        os.environ.get("DURABLE_ARTIFACTS") or Path(tempfile.gettempdir()) / "durable-artifacts"
    )
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextlib.asynccontextmanager
async def serving(app: Any) -> AsyncIterator[str]:
    """``app`` served on 127.0.0.1 at a free port (the OS picks it); yields the base URL."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    try:
        for _ in range(200):
            if server.started or task.done():
                break
            await asyncio.sleep(0.025)
        if task.done():
            task.result()
        assert server.started, "uvicorn did not start"
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 15)


async def chromium(url: str, *mode: str, budget_ms: int = 3000) -> str:
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory(prefix="durable-chromium-") as profile:
        process = await asyncio.create_subprocess_exec(
            CHROMIUM,
            "--headless",
            "--no-sandbox",  # root in CI containers
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            "--window-size=1280,900",
            f"--virtual-time-budget={budget_ms}",
            *mode,
            url,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(), 90)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise
    assert process.returncode == 0, err.decode(errors="replace")[-2000:]
    return out.decode()


async def dump_dom(url: str, budget_ms: int = 3000) -> Dom:
    return Dom(await chromium(url, "--dump-dom", budget_ms=budget_ms))


async def screenshot(url: str, name: str, budget_ms: int = 2000) -> Path:
    path = artifacts() / name
    path.unlink(missing_ok=True)
    await chromium(url, f"--screenshot={path}", budget_ms=budget_ms)
    assert path.is_file(), f"no screenshot at {path}"
    assert path.stat().st_size > 1000, f"an empty screenshot at {path}"
    print(f"screenshot: {path}")
    return path


class Dom(HTMLParser):
    """The dumped DOM: every element's tag and attributes, and the text inside each id."""

    def __init__(self, markup: str) -> None:
        super().__init__(convert_charrefs=True)
        self.markup = markup
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.texts: dict[str, str] = {}
        self._open: list[tuple[str, str | None]] = []
        self.feed(markup)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {k: v or "" for k, v in attrs}
        self.elements.append((tag, attributes))
        if tag in {"input", "br", "meta", "img", "line", "circle", "path", "rect"}:
            return
        ident = attributes.get("id")
        self._open.append((tag, ident))
        if ident is not None:
            self.texts.setdefault(ident, "")

    def handle_endtag(self, tag: str) -> None:
        for i in range(len(self._open) - 1, -1, -1):
            if self._open[i][0] == tag:
                del self._open[i:]
                break

    def handle_data(self, data: str) -> None:
        for _, ident in self._open:
            if ident is not None:
                self.texts[ident] += data

    def find(self, tag: str | None = None, **attributes: str) -> list[dict[str, str]]:
        def matches(have: dict[str, str]) -> bool:
            for name, want in attributes.items():
                name = name.rstrip("_").replace("_", "-")
                if name == "class":
                    if want not in have.get("class", "").split():
                        return False
                elif have.get(name) != want:
                    return False
            return True

        return [a for t, a in self.elements if (tag is None or t == tag) and matches(a)]

    def tags(self, tag: str) -> int:
        return sum(1 for t, _ in self.elements if t == tag)
