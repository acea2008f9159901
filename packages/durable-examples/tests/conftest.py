"""Servers for the demo tests, from durable-core's :mod:`durable.store_fixtures`.

``url`` runs a test on each store in turn; ``postgres_url`` and ``redis_url`` give a test
one store of that kind: a fresh Postgres schema or a fresh Redis key prefix, removed
afterwards. Which server: ``DURABLE_POSTGRES_URL`` / ``DURABLE_REDIS_URL`` when set, else
the loopback default; the test is skipped, with the reason, when nothing answers there.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from durable import store_fixtures
from durable.store_fixtures import url

__all__ = ["postgres_url", "redis_url", "url"]  # pytest finds fixtures in this namespace


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A Postgres store URL naming a schema of its own (``durable_demo_…``), dropped
    afterwards."""
    with store_fixtures.postgres_url("demo") as named:
        yield named


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A Redis store URL with a key prefix of its own (``durable-demo-…``), whose keys are
    deleted afterwards."""
    with store_fixtures.redis_url("demo") as named:
        yield named
