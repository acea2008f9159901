"""The stores these tests run against, shared by every module that runs on each of them.

A module asks for ``url`` (every store), ``shared_url`` (a store another process can open
too) or ``sql_url`` (SQLite and PostgreSQL): the public fixtures of
:mod:`durable.store_fixtures`, which say where the servers come from and how each test's
schema or key prefix is named and removed.
"""

from __future__ import annotations

from durable.store_fixtures import shared_url, sql_url, url

__all__ = ["shared_url", "sql_url", "url"]  # pytest finds fixtures in this namespace
