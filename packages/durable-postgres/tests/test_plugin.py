"""The plugin as the core and the conformance suite find it, and its testing hook."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import uuid
from datetime import timedelta

import durable
import psycopg
import pytest
from durable.interfaces import Checkpointer, Durable, Enumerable, Inspectable, Observable, Scheduler
from durable.plugins import store
from durable_postgres import PostgresDurable, PostgresEffect
from durable_postgres import testing as postgres_testing
from durable_postgres.plugin import PostgresOptions, redact
from durable_postgres.testing import drop_schema

pytestmark = pytest.mark.timeout(60)


def run_python(source: str) -> list[str]:
    """The lines a fresh interpreter prints running ``source``."""
    done = subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_plugin_is_found_by_name_and_both_schemes() -> None:
    plugin = store("postgres")
    assert plugin.schemes == ("postgresql", "postgres")
    assert durable.plugins.for_url("postgres://h/db") is plugin
    assert durable.plugins.for_url("postgresql://h/db") is plugin
    assert plugin.capabilities == {
        "transact",
        "atomic-arrive",
        "enumerate",
        "lifecycle",
        "queues",
        "limits",
        "operations",
    }
    assert plugin.distribution == "durable-postgres"
    assert plugin.version is not None


def test_loading_the_entry_point_imports_no_driver_and_every_export_resolves() -> None:
    """Every durable command loads every store's entry point: psycopg must wait until the
    store is opened. Then each name the package exports is there, from where it says."""
    shown = run_python(
        "import importlib, pkgutil, sys, types, durable.plugins, durable_postgres as package\n"
        "durable.plugins.stores()\n"
        "print(sorted(m for m in ('psycopg', 'psycopg_pool') if m in sys.modules))\n"
        "for found in pkgutil.iter_modules(package.__path__):\n"
        "    importlib.import_module('durable_postgres.' + found.name)\n"
        # A submodule of an exported name would shadow it once imported: none may be one.
        "print([n for n in package.__all__ if isinstance(getattr(package, n), types.ModuleType)])\n"
        "print(sorted(m for m in ('psycopg', 'psycopg_pool') if m in sys.modules))\n"
    )
    assert shown == ["[]", "[]", "['psycopg', 'psycopg_pool']"]


def test_urls_are_redacted_for_logs_and_headers() -> None:
    assert redact("postgresql://u:pw@h:5/db?schema=x") == "postgresql://u:***@h:5/db?schema=x"
    assert redact("postgresql://u@h/db?password=pw&x=1") == "postgresql://u@h/db?password=***&x=1"
    assert redact("postgresql://h/db") == "postgresql://h/db"


@pytest.mark.parametrize("scheme", ["postgresql", "postgres"])
async def test_durable_open_gives_a_ready_atomic_store_in_the_schema_named(
    server: str, scheme: str
) -> None:
    conninfo, _ = PostgresOptions.read(server, {})
    schema = f"durable_open_{scheme}"
    url = scheme + conninfo[conninfo.index("://") :]
    url += ("&" if "?" in url else "?") + f"schema={schema}&max_size=3&delivery_lease=7"
    try:
        async with durable.open(url) as opened:
            assert isinstance(opened, PostgresDurable)
            assert opened.atomic is True
            assert opened.checkpointer.schema == schema
            assert opened.scheduler.lease == timedelta(seconds=7)
            assert opened.pool.max_size == 3
            assert isinstance(opened, Durable)
            assert isinstance(opened.checkpointer, Checkpointer)
            assert isinstance(opened.scheduler, Scheduler)
            assert isinstance(opened.checkpointer, Enumerable)
            assert isinstance(opened.checkpointer, Inspectable)
            assert isinstance(opened.scheduler, Observable)
            await opened.arrive("wf", "k", 1)
            assert await opened.checkpointer.load("wf") == {"k": 1}
    finally:
        await asyncio.to_thread(drop_schema, conninfo, schema)


async def test_each_testbed_has_its_own_schema_dropped_afterwards(server: str) -> None:
    async with (
        postgres_testing.testbed(server) as one,
        postgres_testing.testbed(server) as two,
    ):
        schemas = {one.extras["schema"], two.extras["schema"]}
        assert len(schemas) == 2
        assert one.url is not None
        assert f"schema={one.extras['schema']}" in one.url
        assert one.server is not None
        assert "PostgreSQL" in one.server
        await one.durable.checkpointer.supply("wf", "k", "one")
        assert await two.durable.checkpointer.load("wf") == {}
        assert one.reopen is not None
        async with one.reopen() as again:
            assert isinstance(again, PostgresDurable)
            assert isinstance(one.durable, PostgresDurable)
            assert again.pool is not one.durable.pool
            assert await again.checkpointer.load("wf") == {"k": "one"}
    conninfo, _ = PostgresOptions.read(server, {})
    async with await psycopg.AsyncConnection.connect(conninfo) as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = ANY(%s)", (list(schemas),)
        )
        assert await cursor.fetchone() == (0,)


async def test_the_probe_moves_counters_in_the_testbeds_schema(server: str) -> None:
    async with postgres_testing.testbed(server) as bed:
        probe = bed.probe
        assert probe is not None
        cp = bed.durable.checkpointer
        holder = await cp.claim("wf", liveness=timedelta(minutes=1), budget=timedelta(minutes=1))
        assert holder is not None
        effect: PostgresEffect = probe.bump("wf", "c")
        assert (await cp.transact(holder, "once", effect)).value == 1
        assert (await cp.transact(holder, "twice", probe.bump("wf", "c"))).value == 2
        assert await probe.count("wf", "c") == 2
        assert await probe.count("wf", "never") == 0


async def test_the_testing_hook_passes_options_through(server: str) -> None:
    hook = store("postgres").testing  # as the suite finds it: importing testing when called
    assert hook is not None
    async with hook(server, lease=3) as bed:
        assert bed.durable.scheduler.lease == timedelta(seconds=3)


def test_dropping_a_test_schema_ends_a_transaction_left_open_on_it(server: str) -> None:
    """A connection left inside a transaction on the schema's table would block the drop
    for ever; ``drop_schema`` waits briefly, ends that backend and drops the schema."""
    conninfo, _ = PostgresOptions.read(server, {})
    schema = f"durable_drop_{uuid.uuid4().hex[:12]}"
    holder = psycopg.connect(conninfo)
    try:
        holder.execute(f'CREATE SCHEMA "{schema}"')
        holder.execute(f'CREATE TABLE "{schema}".t (x int)')
        holder.commit()
        holder.execute(f'INSERT INTO "{schema}".t VALUES (1)')  # the transaction stays open
        drop_schema(conninfo, schema, wait="200ms")
        with psycopg.connect(conninfo, autocommit=True) as check:
            found = check.execute(
                "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,)
            ).fetchone()
        assert found == (0,)
        with pytest.raises(psycopg.OperationalError):  # its backend was ended
            holder.execute("SELECT 1")
    finally:
        holder.close()


def test_a_multi_host_url_reaches_libpq_whole_for_failover() -> None:
    # Each host in turn, and only one that takes writes: after a failover the pool's new
    # connections find the promoted standby (test_failover.py does it for real).
    conninfo, options = PostgresOptions.read(
        "postgresql://app@db-a:5432,db-b:5433/orders?target_session_attrs=read-write"
        "&schema=orders_durable&connect_timeout=2",
        {},
    )
    given = psycopg.conninfo.conninfo_to_dict(conninfo)
    assert (given["host"], given["port"]) == ("db-a,db-b", "5432,5433")
    assert given["target_session_attrs"] == "read-write"
    assert "schema" not in given
    assert options.schema == "orders_durable"
