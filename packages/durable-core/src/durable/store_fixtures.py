"""pytest fixtures that run a test once per store, each time on a fresh store URL.

Where :mod:`durable.fixtures` (``durable_testbed``) opens *one* store the run selects, these
parametrize a test over the stores themselves, for code that must behave alike on each of
them, or that hands a URL to another process (a ``durable worker``, ``durable show``).
They are opt-in, because fixture names this plain (``url``) must not appear in every pytest
run that has durable-core installed: a conftest imports the ones it wants, and pytest finds
them in the conftest's namespace::

    from durable.store_fixtures import shared_url, sql_url, url

    __all__ = ["shared_url", "sql_url", "url"]  # re-exported as fixtures, not unused

``url`` is every store (memory, SQLite, PostgreSQL, Redis), ``shared_url`` a store that
another process can open too (all but memory, which lives and dies with its process) and
``sql_url`` SQLite and PostgreSQL. SQLite is a file in the test's ``tmp_path``. PostgreSQL
and Redis come from ``DURABLE_POSTGRES_URL`` and ``DURABLE_REDIS_URL``, else the loopback
defaults, and are skipped with the reason when nothing answers there or when their store
is not installed. Each test gets a schema (``?schema=``) or key prefix (``?prefix=``) of
its own, named after its module (``durable_children_…`` for ``test_children.py``) so that
one left behind says where it came from, and removed afterwards.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

__all__ = [
    "POSTGRES_DEFAULT",
    "REDIS_DEFAULT",
    "postgres_url",
    "redis_url",
    "shared_url",
    "sql_url",
    "store_url",
    "url",
    "with_query",
]

POSTGRES_DEFAULT = "postgresql://postgres@127.0.0.1:5432/test"
"""The PostgreSQL server used when ``DURABLE_POSTGRES_URL`` is not set."""
REDIS_DEFAULT = "redis://127.0.0.1:6379/0"
"""The Redis server used when ``DURABLE_REDIS_URL`` is not set."""


def with_query(url: str, **options: str) -> str:
    """``url`` with ``options`` added to its query, the ones it had kept."""
    parts = urlsplit(url)
    query = [*parse_qsl(parts.query, keep_blank_values=True), *options.items()]
    return urlunsplit(parts._replace(query=urlencode(query)))


def _label(request: pytest.FixtureRequest) -> str:
    """``children`` for test_children.py: what a test's schema or prefix is named after."""
    name: str = request.module.__name__
    return name.rpartition(".")[2].removeprefix("test_")


@contextmanager
def postgres_url(label: str) -> Iterator[str]:
    """A PostgreSQL store URL in a schema of its own (``durable_<label>_…``), dropped on exit.

    The building block of the fixtures, for a test that needs a store of one kind (or two
    at once). Skips the test when psycopg or durable-postgres is missing or no server
    answers.
    """
    psycopg = pytest.importorskip("psycopg")
    pytest.importorskip("durable_postgres", reason="durable-postgres is not installed")
    from durable_postgres.testing import drop_schema

    base = os.environ.get("DURABLE_POSTGRES_URL", POSTGRES_DEFAULT)
    try:
        psycopg.connect(base, connect_timeout=5).close()
    except psycopg.Error as error:
        pytest.skip(f"no Postgres answers at {base} ({error}); set DURABLE_POSTGRES_URL")
    schema = f"durable_{label}_{uuid.uuid4().hex[:12]}"
    try:
        yield with_query(base, schema=schema)
    finally:
        drop_schema(base, schema)


@contextmanager
def redis_url(label: str, *, single_node: bool = False) -> Iterator[str]:
    """A Redis store URL under a key prefix of its own (``durable-<label>-…``), its keys
    deleted on exit.

    ``single_node`` skips the test when ``DURABLE_REDIS_URL`` names a cluster, for a test
    that opens one node's client itself. Skips it too when redis-py or durable-redis is
    missing or no server answers.
    """
    redis = pytest.importorskip("redis")
    pytest.importorskip("durable_redis", reason="durable-redis is not installed")
    base = os.environ.get("DURABLE_REDIS_URL", REDIS_DEFAULT)
    if single_node and "+cluster" in urlsplit(base).scheme:
        pytest.skip(f"this test opens one Redis node; {base} names a cluster")
    client = redis.Redis.from_url(base.replace("+cluster", ""), socket_connect_timeout=5)
    try:
        client.ping()
    except redis.RedisError as error:
        client.close()
        pytest.skip(f"no Redis answers at {base} ({error}); set DURABLE_REDIS_URL")
    prefix = f"durable-{label}-{uuid.uuid4().hex[:12]}"
    try:
        yield with_query(base, prefix=prefix)
    finally:
        for key in client.scan_iter(match=f"{prefix}:*"):
            client.delete(key)
        client.close()


def store_url(name: str, label: str, tmp_path: Path) -> AbstractContextManager[str]:
    """A fresh URL of the store ``name`` (``memory``, ``sqlite``, ``postgres``, ``redis``),
    removed on exit; ``label`` names its schema or prefix, ``tmp_path`` holds its file."""
    if name == "memory":
        return nullcontext("memory://")
    if name == "sqlite":
        return nullcontext(f"sqlite:///{tmp_path / 'store.db'}")
    if name == "postgres":
        return postgres_url(label)
    if name == "redis":
        return redis_url(label)
    raise ValueError(f"no store fixture for {name!r}: memory, sqlite, postgres or redis")


def _store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with store_url(request.param, _label(request), tmp_path) as fresh:
        yield fresh


@pytest.fixture(params=["memory", "sqlite", "postgres", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh URL of each store in turn, removed afterwards."""
    yield from _store_url(request, tmp_path)


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store two processes can share (the in-memory one lives and dies with its process)."""
    yield from _store_url(request, tmp_path)


@pytest.fixture(params=["sqlite", "postgres"])
def sql_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh URL of each SQL store in turn, removed afterwards."""
    yield from _store_url(request, tmp_path)
