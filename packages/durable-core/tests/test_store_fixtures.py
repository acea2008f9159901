"""The public store fixtures (``durable.store_fixtures``), used as a third party would.

A throwaway test folder whose conftest imports the fixtures runs in its own pytest; its
test starts a workflow in the store it is handed and writes the URL down. Afterwards that
store must be gone (the schema dropped, the prefix's keys deleted), while every store the
run reached was fresh (nothing from another test) and named after its module.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

PATIENCE = 120.0
ASYNC = ("-o", "asyncio_mode=auto", "-o", "asyncio_default_fixture_loop_scope=function")

CONFTEST = """
from durable.store_fixtures import url

__all__ = ["url"]
"""

TEST = """
from pathlib import Path

import durable

SEEN = Path(__file__).with_name("seen.txt")


async def test_a_fresh_store(url):
    async with durable.open(url) as store:
        page = await store.list()
        assert page.statuses == (), f"{url} was not fresh: {page.statuses}"
        await store.start("greet", "greeting-1", "ada")
        assert len((await store.list()).statuses) == 1
    with SEEN.open("a") as seen:
        seen.write(url + "\\n")
"""


def test_a_conftest_importing_the_fixtures_gets_a_fresh_store_each_removed_afterwards(
    tmp_path: Path,
) -> None:
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "test_orders.py").write_text(TEST)
    finished = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *ASYNC, "."],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=PATIENCE,
        check=False,
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    urls = (tmp_path / "seen.txt").read_text().split()
    by_scheme = {urlsplit(u).scheme: u for u in urls}
    assert by_scheme["memory"] == "memory://"
    assert by_scheme["sqlite"].startswith("sqlite:///"), urls
    for scheme, store in (("postgresql", "Postgres"), ("redis", "Redis")):
        # A server that does not answer is a skip with the reason, never a silent pass.
        assert scheme in by_scheme or f"no {store} answers" in finished.stdout, finished.stdout
    if "postgresql" in by_scheme:
        (schema,) = parse_qs(urlsplit(by_scheme["postgresql"]).query)["schema"]
        assert schema.startswith("durable_orders_")
        psycopg = pytest.importorskip("psycopg")
        server = by_scheme["postgresql"].split("?")[0]
        with psycopg.connect(server) as connection:
            left = connection.execute(
                "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (schema,)
            ).fetchall()
        assert left == [], f"the schema {schema} outlived its test"
    if "redis" in by_scheme:
        (prefix,) = parse_qs(urlsplit(by_scheme["redis"]).query)["prefix"]
        assert prefix.startswith("durable-orders-")
        redis = pytest.importorskip("redis")
        client = redis.Redis.from_url(by_scheme["redis"].split("?")[0])
        try:
            assert list(client.scan_iter(match=f"{prefix}:*")) == []
        finally:
            client.close()
