"""Bad input: each a clear error naming what to fix, and nothing written."""

from __future__ import annotations

import contextlib
import logging
import socket
import sys
import unittest
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import psycopg
import pytest
from durable import StoreError, StoreUnavailable, UnencodableValue
from durable_postgres import (
    InvalidSchemaName,
    PostgresCheckpointer,
    PostgresDurable,
    PostgresEffect,
    PostgresScheduler,
    PostgresUnavailable,
    SchemaMissing,
    StoreClosed,
    UnstorableName,
    UnstorableValue,
    check_schema_name,
    migrate,
)
from durable_postgres import testing as postgres_testing
from durable_postgres.plugin import PostgresOptions, open_postgres
from psycopg import AsyncCursor
from psycopg_pool import AsyncConnectionPool

if TYPE_CHECKING:
    from durable.plugins import Testbed

pytestmark = pytest.mark.timeout(60)

LONG = timedelta(minutes=5)


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def pg(bed: Testbed[PostgresEffect]) -> PostgresDurable:
    assert isinstance(bed.durable, PostgresDurable)
    return bed.durable


async def schemas_named(server: str, schema: str) -> int:
    conninfo, _ = PostgresOptions.read(server, {})
    async with await psycopg.AsyncConnection.connect(conninfo) as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,)
        )
        row = await cursor.fetchone()
    assert row is not None
    return int(row[0])


# -- the server --------------------------------------------------------------------------


async def test_an_unreachable_server_is_named_with_what_to_check(closed_port: int) -> None:
    url = f"postgresql://postgres:s3cret@127.0.0.1:{closed_port}/test"
    with pytest.raises(PostgresUnavailable) as caught:
        async with open_postgres(url):
            pytest.fail("opened a store on a closed port")
    message = str(caught.value)
    assert f"127.0.0.1:{closed_port}" in message
    assert "Connection refused" in message
    assert "check the URL's host and port" in message
    assert "s3cret" not in message
    assert "***" in message


async def test_a_role_the_server_does_not_know_is_named(server: str) -> None:
    schema = "durable_never_created_a"
    base = server.split("//", 1)[1].split("@", 1)[-1]
    url = f"postgresql://no_such_role_7f3a@{base}"
    url += ("&" if "?" in url else "?") + f"schema={schema}"
    with pytest.raises(PostgresUnavailable) as caught:
        async with open_postgres(url):
            pytest.fail("opened a store as a role that does not exist")
    assert 'role "no_such_role_7f3a" does not exist' in str(caught.value)
    assert "check the user name in the URL" in str(caught.value)
    assert await schemas_named(server, schema) == 0


async def test_a_database_the_server_does_not_have_is_named(server: str) -> None:
    parts = server.split("?", 1)
    url = parts[0].rsplit("/", 1)[0] + "/no_such_database_7f3a"
    with pytest.raises(PostgresUnavailable) as caught:
        async with open_postgres(url):
            pytest.fail("opened a store on a database that does not exist")
    assert 'database "no_such_database_7f3a" does not exist' in str(caught.value)
    assert "check the database name in the URL" in str(caught.value)


async def test_a_query_parameter_neither_durable_nor_libpq_knows_is_named(
    closed_port: int,
) -> None:
    url = f"postgresql://postgres@127.0.0.1:{closed_port}/test?shema=typo"
    with pytest.raises(ValueError, match='"shema"') as caught:
        async with open_postgres(url):
            pytest.fail("opened a store with a misspelt option")
    assert "durable's own options are" in str(caught.value)


# -- schema names ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("Orders", "lowercase"),
        ("orders-durable", "plain SQL identifier"),
        ('x"; DROP SCHEMA public CASCADE; --', "plain SQL identifier"),
        ("1orders", "starting with a letter"),
        ("", "plain SQL identifier"),
        ("x" * 64, "at most 63"),
        ("pg_orders", "reserves"),
    ],
)
def test_a_schema_name_that_is_not_an_identifier_is_refused(name: str, says: str) -> None:
    with pytest.raises(InvalidSchemaName, match=says):
        check_schema_name(name)


async def test_a_bad_schema_name_in_the_url_is_refused_before_connecting(
    closed_port: int,
) -> None:
    url = f"postgresql://postgres@127.0.0.1:{closed_port}/test?schema=Bad-Name"
    with pytest.raises(InvalidSchemaName, match="'Bad-Name'"):
        async with open_postgres(url):
            pytest.fail("opened a store with a bad schema name")


async def test_the_stores_and_migrate_refuse_a_bad_schema_name(
    bed: Testbed[PostgresEffect],
) -> None:
    pool = pg(bed).pool
    with pytest.raises(InvalidSchemaName):
        PostgresCheckpointer(pool, schema="a b")
    with pytest.raises(InvalidSchemaName):
        PostgresScheduler(pool, schema="a;b")
    with pytest.raises(InvalidSchemaName):
        await migrate(pool, schema="A")


# -- options -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"max_size": 0}, "max_size must be a whole number of at least 1"),
        ({"min_size": "-1"}, "min_size must be a whole number of at least 0"),
        ({"min_size": 5, "max_size": 2}, "min_size .5. is larger than max_size .2."),
        ({"lease": -1}, "delivery_lease must be a positive number of seconds"),
        ({"delivery_lease": 0}, "delivery_lease must be a positive number of seconds"),
        ({"poll": "soon"}, "poll must be a positive number of seconds"),
        ({"timeout": 0}, "timeout must be a positive number of seconds"),
        ({"prepare": "maybe"}, "prepare must be true or false"),
    ],
)
def test_a_bad_option_is_named(options: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        PostgresOptions.read("postgresql://h/db", options)


def test_the_old_lease_option_is_read_as_the_delivery_lease_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="durable_postgres"):
        conninfo, options = PostgresOptions.read("postgresql://h/db?lease=7&sslmode=disable", {})
    assert options.lease == timedelta(seconds=7)
    assert conninfo == "postgresql://h/db?sslmode=disable"
    (warning,) = [r.getMessage() for r in caplog.records if r.name == "durable_postgres.plugin"]
    assert "lease= is deprecated: write delivery_lease=" in warning
    assert "--liveness" in warning


def test_the_delivery_lease_under_both_names_is_refused() -> None:
    with pytest.raises(ValueError, match="both delivery_lease= and lease="):
        PostgresOptions.read("postgresql://h/db?lease=7&delivery_lease=8", {})


def test_an_unknown_option_is_named() -> None:
    with pytest.raises(TypeError, match="lese"):
        PostgresOptions.read("postgresql://h/db", {"lese": 3})


def test_a_url_that_is_not_postgres_is_refused() -> None:
    with pytest.raises(ValueError, match="not a Postgres URL"):
        PostgresOptions.read("mysql://h/db", {})


def test_libpq_parameters_reach_libpq_exactly_as_written() -> None:
    url = "postgresql://h/db?options=-c%20statement_timeout%3D5s&schema=a&application_name=a+b"
    conninfo, options = PostgresOptions.read(url, {})
    assert conninfo == "postgresql://h/db?options=-c%20statement_timeout%3D5s&application_name=a+b"
    assert options.schema == "a"


def test_options_in_the_url_are_read_and_removed_from_what_libpq_is_given() -> None:
    conninfo, options = PostgresOptions.read(
        "postgres://u@h:5/db?sslmode=disable&schema=orders&max_size=20&delivery_lease=1.5"
        "&prepare=false",
        {"min_size": 3},
    )
    assert conninfo == "postgres://u@h:5/db?sslmode=disable"
    assert options == PostgresOptions(
        schema="orders", min_size=3, max_size=20, lease=timedelta(seconds=1.5), prepare=False
    )


# -- the tables --------------------------------------------------------------------------


async def test_a_schema_never_migrated_is_named_with_the_call_that_creates_it(
    bed: Testbed[PostgresEffect],
) -> None:
    cp = PostgresCheckpointer(pg(bed).pool, schema="durable_not_migrated")
    with pytest.raises(SchemaMissing, match=r"migrate\(pool, schema='durable_not_migrated'\)") as e:
        await cp.load("wf")
    # An outage to a worker, never a failed attempt of the workflow it was running.
    assert isinstance(e.value, StoreUnavailable)


async def test_a_durable_over_two_pools_is_refused_at_construction(
    bed: Testbed[PostgresEffect],
) -> None:
    store = pg(bed)
    other: AsyncConnectionPool[Any] = AsyncConnectionPool(store.pool.conninfo, open=False)
    with pytest.raises(ValueError, match="on one pool"):
        PostgresDurable(store.checkpointer, PostgresScheduler(other, schema=store.scheduler.schema))


async def test_a_store_used_after_its_block_says_so(bed: Testbed[PostgresEffect]) -> None:
    assert bed.url is not None
    async with open_postgres(bed.url) as store:
        pass
    with pytest.raises(StoreClosed, match="pool is closed") as e:
        await store.checkpointer.load("wf")
    assert isinstance(e.value, StoreUnavailable)


# -- values the column cannot hold ------------------------------------------------------


async def test_a_lone_surrogate_is_refused_by_name_and_nothing_is_written(
    bed: Testbed[PostgresEffect],
) -> None:
    store = pg(bed)
    cp = store.checkpointer
    probe = bed.probe
    assert probe is not None
    holder = await cp.claim("wf", liveness=LONG, budget=LONG)
    assert holder is not None
    bad = {"name": "caf\udce9"}  # what os.fsdecode makes of a Latin-1 file name
    attempts = [
        ("key 'k'", cp.record(holder, "k", bad)),
        ("key 's'", cp.supply("wf", "s", bad)),
        ("key '<inbox>'", cp.append("wf", bad)),
        ("key 'a'", store.arrive("wf", "a", bad)),
        ("key '<inbox>'", store.send("wf", bad)),
    ]
    for where, attempt in attempts:
        with pytest.raises(UnstorableValue, match="lone surrogate") as caught:
            await attempt
        assert f"workflow 'wf', {where}" in str(caught.value)
        assert isinstance(caught.value, UnencodableValue)
    bump = probe.bump("wf", "c")

    async def effect(cursor: AsyncCursor[Any]) -> object:
        await bump(cursor)
        return bad

    with pytest.raises(UnstorableValue, match="workflow 'wf', key 't'"):
        await cp.transact(holder, "t", effect)
    assert await cp.load("wf") == {}
    assert await store.scheduler.scheduled("wf") is None
    assert await probe.count("wf", "c") == 0


class _Verbatim:
    """A codec that stores strings as they are, so a NUL reaches the column."""

    def encode(self, value: object) -> str:
        if not isinstance(value, str):
            raise TypeError("only strings")
        return value

    def decode(self, encoded: str) -> object:
        return encoded


async def test_a_nul_character_is_refused_by_name_and_nothing_is_written(
    bed: Testbed[PostgresEffect],
) -> None:
    assert bed.url is not None
    async with open_postgres(bed.url, codec=_Verbatim()) as store:
        with pytest.raises(UnstorableValue, match="NUL character") as caught:
            await store.checkpointer.supply("wf", "k", "a\x00b")
        assert "workflow 'wf', key 'k'" in str(caught.value)
        assert await store.checkpointer.load("wf") == {}


async def test_an_id_or_key_the_column_cannot_hold_is_named(cp: PostgresCheckpointer) -> None:
    # A NUL, which text cannot hold, is a control character: refused by the core's boundary
    # before the store is reached, as on every store.
    with pytest.raises(ValueError, match=r"workflow id 'w\\x00f' has a control character"):
        await cp.supply("w\x00f", "k", 1)
    with pytest.raises(UnstorableName, match="record key"):
        await cp.supply("wf", "k\udce9", 1)
    assert await cp.workflows() == []


async def test_a_codec_that_does_not_encode_to_text_is_named(
    bed: Testbed[PostgresEffect],
) -> None:
    class Bytes:
        def encode(self, value: object) -> bytes:
            return repr(value).encode()

        def decode(self, encoded: bytes) -> object:
            return encoded

    cp = PostgresCheckpointer(pg(bed).pool, schema=pg(bed).checkpointer.schema, codec=Bytes())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"stores text.*encoded bytes"):
        await cp.supply("wf", "k", 1)


# -- effects -----------------------------------------------------------------------------


async def test_an_effect_that_is_not_async_is_refused_and_nothing_is_written(
    cp: PostgresCheckpointer,
) -> None:
    holder = await cp.claim("wf", liveness=LONG, budget=LONG)
    assert holder is not None
    with pytest.raises(TypeError, match="not an awaitable"):
        await cp.transact(holder, "t", lambda cursor: 1)  # type: ignore[arg-type,return-value]
    with pytest.raises(TypeError, match="async function of a cursor"):
        await cp.transact(holder, "t", "UPDATE stock SET n = n + 1")  # type: ignore[arg-type]
    assert await cp.load("wf") == {}


async def test_an_effect_that_swallows_a_database_error_is_told_how_to_recover(
    bed: Testbed[PostgresEffect],
) -> None:
    cp = pg(bed).checkpointer
    probe = bed.probe
    assert probe is not None
    holder = await cp.claim("wf", liveness=LONG, budget=LONG)
    assert holder is not None
    bump = probe.bump("wf", "c")

    async def swallowing(cursor: AsyncCursor[Any]) -> object:
        await bump(cursor)
        with contextlib.suppress(psycopg.errors.DivisionByZero):
            await cursor.execute("SELECT 1/0")
        return 1

    with pytest.raises(StoreError, match=r"left its transaction aborted.*transaction\(\)"):
        await cp.transact(holder, "t", swallowing)
    assert await probe.count("wf", "c") == 0
    assert await cp.load("wf") == {}


async def test_an_effect_that_commits_by_itself_is_reported(
    bed: Testbed[PostgresEffect],
) -> None:
    cp = pg(bed).checkpointer
    probe = bed.probe
    assert probe is not None
    holder = await cp.claim("wf", liveness=LONG, budget=LONG)
    assert holder is not None
    bump = probe.bump("wf", "c")

    async def committing(cursor: AsyncCursor[Any]) -> object:
        await bump(cursor)
        await cursor.execute("COMMIT")
        return 1

    with pytest.raises(StoreError, match="ended the transaction"):
        await cp.transact(holder, "t", committing)
    assert await cp.load("wf") == {}  # no record; the effect's own COMMIT stands, as reported
    assert await probe.count("wf", "c") == 1

    async def calling_commit(cursor: AsyncCursor[Any]) -> object:
        await cursor.connection.commit()
        return 1

    with pytest.raises(psycopg.ProgrammingError, match="commit"):
        await cp.transact(holder, "t", calling_commit)
    assert await cp.load("wf") == {}


async def test_an_effects_own_errors_reach_the_caller_untouched(
    cp: PostgresCheckpointer,
) -> None:
    holder = await cp.claim("wf", liveness=LONG, budget=LONG)
    assert holder is not None

    async def missing_table(cursor: AsyncCursor[Any]) -> object:
        await cursor.execute("UPDATE no_such_table SET n = 1")
        return 1

    with pytest.raises(psycopg.errors.UndefinedTable):
        await cp.transact(holder, "t", missing_table)
    assert await cp.load("wf") == {}


# -- skipping ----------------------------------------------------------------------------


async def test_with_no_server_the_testing_hook_skips_with_the_reason(
    monkeypatch: pytest.MonkeyPatch, closed_port: int
) -> None:
    monkeypatch.delenv("DURABLE_POSTGRES_URL", raising=False)
    monkeypatch.setattr(postgres_testing, "_found", [])
    monkeypatch.setattr(
        postgres_testing, "DEFAULT_URL", f"postgresql://postgres@127.0.0.1:{closed_port}/test"
    )
    monkeypatch.setitem(sys.modules, "testcontainers.postgres", None)
    with pytest.raises(unittest.SkipTest, match="no Postgres server answered") as caught:
        async with postgres_testing.testbed(None):
            pytest.fail("a testbed without a server")
    assert "DURABLE_POSTGRES_URL" in str(caught.value)
