"""The ``durable`` entry point of the Postgres store: what the store is, without psycopg.

Every ``durable`` command loads every installed store's entry point to learn names and
schemes, so this module imports nothing of the driver; ``open`` and ``testing`` import
:mod:`durable_postgres.plugin` and :mod:`durable_postgres.testing` when they are called.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any

from durable.interfaces import Durable
from durable.plugins import StorePlugin, Testbed, hookimpl

__all__ = ["SCHEMES", "durable_store"]

SCHEMES = ("postgresql", "postgres")


def open_store(url: str, **options: Any) -> AbstractAsyncContextManager[Durable[Any]]:
    """:func:`durable_postgres.plugin.open_postgres`, imported on first use."""
    from durable_postgres.plugin import open_postgres

    return open_postgres(url, **options)


def testing(url: str | None, **options: Any) -> AbstractAsyncContextManager[Testbed[Any]]:
    """:func:`durable_postgres.testing.testbed`, imported on first use."""
    from durable_postgres.testing import testbed

    return testbed(url, **options)


@hookimpl
def durable_store() -> StorePlugin:
    """The Postgres store."""
    return StorePlugin(
        name="postgres",
        schemes=SCHEMES,
        open=open_store,
        capabilities=frozenset(
            {
                "transact",
                "atomic-arrive",
                "enumerate",
                "lifecycle",
                "queues",
                "limits",
                "operations",
            }
        ),
        testing=testing,
        distribution="durable-postgres",
        description="PostgreSQL via psycopg 3: a step and its business write in one commit",
    )
