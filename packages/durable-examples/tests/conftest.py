"""Servers for the demo tests: a fresh Postgres schema and a fresh Redis prefix per test,
and ``url`` (each store in turn), durable-core's public fixture from
:mod:`durable.store_fixtures`.

Which server: ``DURABLE_POSTGRES_URL`` / ``DURABLE_REDIS_URL`` when set (an error if it does
not answer, since someone asked for it), else the loopback default when it answers, else
the test is skipped with the reason. Everything a test creates is removed afterwards: the
schema is dropped, the prefix's keys deleted (found by a scan of that prefix alone).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator

import psycopg
import pytest
import redis
from durable.store_fixtures import url

__all__ = ["postgres_url", "redis_url", "url"]  # pytest finds fixtures in this namespace

POSTGRES_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"
REDIS_DEFAULT = "redis://127.0.0.1:6379/0"


def _with_option(url: str, name: str, value: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{name}={value}"


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A Postgres store URL naming a schema of its own, dropped afterwards."""
    named = os.environ.get("DURABLE_POSTGRES_URL")
    server = named or POSTGRES_DEFAULT
    try:
        psycopg.connect(server, connect_timeout=2).close()
    except psycopg.Error as error:
        if named:
            raise
        pytest.skip(f"no Postgres answers at {server} ({error}); set DURABLE_POSTGRES_URL")
    schema = f"demo_{secrets.token_hex(4)}"
    yield _with_option(server, "schema", schema)
    from durable_postgres.testing import drop_schema

    drop_schema(server, schema)


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A Redis store URL with a key prefix of its own, whose keys are deleted afterwards."""
    named = os.environ.get("DURABLE_REDIS_URL")
    server = named or REDIS_DEFAULT
    client = redis.Redis.from_url(server, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as error:
        client.close()
        if named:
            raise
        pytest.skip(f"no Redis answers at {server} ({error}); set DURABLE_REDIS_URL")
    prefix = f"demo-{secrets.token_hex(4)}"
    try:
        yield _with_option(server, "prefix", prefix)
        stale = list(client.scan_iter(match=f"{prefix}:*", count=500))
        if stale:
            client.delete(*stale)
    finally:
        client.close()
