"""The ``sqlite`` plugin: URLs, options, discovery, and the testing hook the suite uses."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import subprocess
import sys
import textwrap
from datetime import timedelta
from pathlib import Path

import durable
import pytest
from durable.clock import ManualClock
from durable.plugins import StorePlugin
from durable_sqlite import DatabaseRefused, SqliteDurable, SqliteProbe, Synchronous, plugin
from durable_sqlite.plugin import (
    MalformedURL,
    Options,
    durable_store,
    open_sqlite,
    parse_url,
    url_for,
)


def test_the_plugin_declares_its_name_scheme_and_capabilities() -> None:
    plugin = durable_store()
    assert isinstance(plugin, StorePlugin)
    assert plugin.name == "sqlite"
    assert plugin.schemes == ("sqlite",)
    assert plugin.capabilities == {
        "transact",
        "atomic-arrive",
        "enumerate",
        "lifecycle",
        "queues",
        "limits",
        "operations",
    }
    assert plugin.testing is not None
    assert plugin.distribution == "durable-sqlite"


def test_the_plugin_is_found_through_its_entry_point() -> None:
    assert durable.plugins.for_url("sqlite:///orders.db").name == "sqlite"


# -- URLs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///orders.db", Path("orders.db")),
        ("sqlite:///data/orders.db", Path("data/orders.db")),
        ("sqlite:////var/lib/app/orders.db", Path("/var/lib/app/orders.db")),
        ("sqlite:///with%20space.db", Path("with space.db")),
        ("sqlite://", None),
        ("sqlite:///?synchronous=normal", None),
    ],
)
def test_urls_name_a_path_the_way_sqlalchemy_does(url: str, path: Path | None) -> None:
    assert parse_url(url)[0] == path


@pytest.mark.parametrize("url", ["sqlite://:memory:", "sqlite:///:memory:"])
def test_an_in_memory_url_is_refused_with_the_reason_and_the_alternative(url: str) -> None:
    with pytest.raises(DatabaseRefused, match="cannot be a durable store") as refused:
        parse_url(url)
    assert "memory://" in str(refused.value)
    assert "crash" in str(refused.value)


def test_a_url_with_a_host_is_refused() -> None:
    with pytest.raises(ValueError, match="names a host"):
        parse_url("sqlite://server/orders.db")


def test_options_come_from_the_query_string_or_from_keywords() -> None:
    clock = ManualClock()
    _, options = parse_url(
        "sqlite:///o.db?synchronous=normal&delivery_lease=60&busy_timeout=2.5&poll=0.01",
        clock=clock,
    )
    assert options == Options(
        synchronous=Synchronous.NORMAL,
        lease=timedelta(seconds=60),
        busy_timeout=timedelta(seconds=2.5),
        poll=timedelta(milliseconds=10),
        clock=clock,
    )
    _, keywords = parse_url("sqlite:///o.db", lease=timedelta(seconds=5), synchronous="FULL")
    assert keywords.lease == timedelta(seconds=5)
    assert keywords.synchronous is Synchronous.FULL


def test_the_old_lease_option_is_read_as_the_delivery_lease_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="durable_sqlite"):
        _, options = parse_url("sqlite:///o.db?lease=60")
    assert options.lease == timedelta(seconds=60)
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "durable_sqlite.plugin"]
    assert "lease= is deprecated: write delivery_lease=" in warning
    assert "--liveness" in warning


def test_a_store_url_carries_the_delivery_lease_by_its_new_name(tmp_path: Path) -> None:
    assert "delivery_lease=30" in url_for(tmp_path / "o.db", Options())


@pytest.mark.parametrize(
    "url", ["sqlite://", "sqlite:///", "sqlite://host/o.db", "sqlite:///:memory:"]
)
async def test_a_url_naming_no_usable_file_is_a_value_error_showing_the_right_form(
    url: str,
) -> None:
    with pytest.raises(MalformedURL) as refused:
        async with open_sqlite(url):
            pass
    assert isinstance(refused.value, ValueError)
    assert isinstance(refused.value, DatabaseRefused)
    assert "sqlite:///" in str(refused.value) or "memory://" in str(refused.value)


def test_keywords_win_over_the_query_string() -> None:
    _, options = parse_url(
        "sqlite:///o.db?delivery_lease=60&synchronous=normal", lease=timedelta(seconds=2)
    )
    assert options.lease == timedelta(seconds=2)
    assert options.synchronous is Synchronous.NORMAL


@pytest.mark.parametrize(
    ("url", "options", "error"),
    [
        ("sqlite:///o.db?fsync=never", {}, "unknown sqlite option"),
        ("sqlite:///o.db?delivery_lease=soon", {}, "delivery_lease must be a number"),
        ("sqlite:///o.db?delivery_lease=0", {}, "delivery_lease must be positive"),
        ("sqlite:///o.db?lease=1&delivery_lease=2", {}, "both delivery_lease= and lease="),
        ("sqlite:///o.db?synchronous=off", {}, "does not offer OFF"),
        ("postgresql://host/db", {}, "not an sqlite: URL"),
        ("sqlite:///o.db?codec=json", {}, "a URL cannot carry"),
    ],
)
def test_bad_options_are_refused_by_name(url: str, options: dict[str, object], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        parse_url(url, **options)


# -- open ------------------------------------------------------------------------------


async def test_durable_open_makes_a_ready_store_and_closes_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/orders.db?synchronous=normal&delivery_lease=7"
    async with durable.open(url) as store:
        assert isinstance(store, SqliteDurable)
        assert store.scheduler.lease == timedelta(seconds=7)
        await store.arrive("order-1", "approved", True)
    async with open_sqlite(f"sqlite:///{tmp_path}/orders.db") as again:
        assert await again.checkpointer.load("order-1") == {"approved": True}


async def test_open_of_a_url_naming_no_file_is_refused() -> None:
    with pytest.raises(DatabaseRefused, match="names no file"):
        async with open_sqlite("sqlite://"):
            pass


async def test_open_passes_a_clock_through_to_both_halves(tmp_path: Path) -> None:
    clock = ManualClock()
    async with open_sqlite(f"sqlite:///{tmp_path}/c.db", clock=clock) as store:
        await store.checkpointer.supply("wf", "k", 1)
        (entry,) = await store.checkpointer.history("wf")
        assert entry.at == clock.now()
        await store.scheduler.make_ready("wf")
        assert await store.scheduler.scheduled("wf") == clock.now()


# -- the testing hook ------------------------------------------------------------------


async def test_each_testbed_is_a_fresh_file_of_its_own() -> None:
    async with plugin.testing(None) as one, plugin.testing(None) as two:
        await one.durable.checkpointer.supply("wf", "k", 1)
        assert await two.durable.checkpointer.load("wf") == {}
        first, second = Path(str(one.extras["path"])), Path(str(two.extras["path"]))
        assert first != second
        assert first.parent != second.parent
    assert not first.parent.exists()
    assert not second.parent.exists()


async def test_reopen_is_a_second_connection_on_the_same_file() -> None:
    async with plugin.testing(None) as bed:
        assert bed.reopen is not None
        await bed.durable.checkpointer.supply("wf", "k", 1)
        async with bed.reopen() as second:
            assert isinstance(second, SqliteDurable)
            assert isinstance(bed.durable, SqliteDurable)
            assert second.connection is not bed.durable.connection
            assert await second.checkpointer.load("wf") == {"k": 1}
            holder = await second.checkpointer.claim(
                "wf", liveness=timedelta(seconds=5), budget=timedelta(seconds=50)
            )
            assert holder is not None
        assert (
            await bed.durable.checkpointer.claim(
                "wf", liveness=timedelta(seconds=5), budget=timedelta(seconds=50)
            )
            is None
        )


async def test_the_probe_counts_only_what_committed() -> None:
    async with plugin.testing(None) as bed:
        probe = bed.probe
        assert isinstance(probe, SqliteProbe)
        cp = bed.durable.checkpointer
        holder = await cp.claim("wf", liveness=timedelta(seconds=5), budget=timedelta(seconds=50))
        assert holder is not None
        assert await probe.count("wf", "n") == 0
        assert (await cp.transact(holder, "once", probe.bump("wf", "n"))).value == 1
        assert (await cp.transact(holder, "once", probe.bump("wf", "n"))).first is False
        with pytest.raises(RuntimeError, match="by design"):
            await cp.transact(holder, "fails", probe.bump_then_fail("wf", "n"))
        assert await probe.count("wf", "n") == 1
        assert await probe.count("other", "n") == 0
        assert await cp.load("wf") == {"once": 1}


async def test_the_testbed_url_reaches_the_same_file_from_another_process() -> None:
    async with plugin.testing(None) as bed:
        assert bed.url is not None
        await bed.durable.checkpointer.supply("wf", "k", "from the parent")
        reader = textwrap.dedent(
            """
            import asyncio, sys
            from durable_sqlite.plugin import open_sqlite

            async def main():
                async with open_sqlite(sys.argv[1]) as store:
                    print((await store.checkpointer.load("wf"))["k"])

            asyncio.run(main())
            """
        )
        child = await asyncio.create_subprocess_exec(
            sys.executable, "-c", reader, bed.url, stdout=subprocess.PIPE
        )
        out, _ = await child.communicate()
        assert out.decode().strip() == "from the parent"


async def test_the_testing_url_sets_the_options_of_every_testbed(tmp_path: Path) -> None:
    async with plugin.testing(f"sqlite:///{tmp_path}?synchronous=normal&lease=9") as bed:
        assert isinstance(bed.durable, SqliteDurable)
        assert bed.durable.scheduler.lease == timedelta(seconds=9)
        pragma = await bed.durable.connection.execute_fetchall("PRAGMA synchronous")
        assert list(pragma) == [(1,)]
        assert Path(str(bed.extras["path"])).parent.parent == tmp_path
        assert bed.url is not None
        assert "synchronous=normal" in bed.url
        assert bed.server is not None
        assert "NORMAL" in bed.server
    async with plugin.testing("sqlite://?synchronous=normal") as elsewhere:
        assert elsewhere.extras["synchronous"] == "NORMAL"
    async with plugin.testing(None, lease=timedelta(seconds=3)) as chosen:
        assert isinstance(chosen.durable, SqliteDurable)
        assert chosen.durable.scheduler.lease == timedelta(seconds=3)


async def test_a_testing_url_naming_something_other_than_a_directory_is_refused(
    tmp_path: Path,
) -> None:
    with pytest.raises(ValueError, match="must name a directory"):
        async with plugin.testing(f"sqlite:///{tmp_path}/nowhere"):
            pass


def test_the_probe_table_is_not_part_of_a_users_store(tmp_path: Path) -> None:
    async def make() -> None:
        async with open_sqlite(f"sqlite:///{tmp_path}/user.db"):
            pass

    asyncio.run(make())
    raw = sqlite3.connect(tmp_path / "user.db")
    try:
        names = {r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    finally:
        raw.close()
    assert "durable_probe" not in names
