"""The stores these tests run against: durable-core's public fixtures.

A module asks for ``url`` (every store), ``shared_url`` (a store another process can open
too) or ``sql_url`` (SQLite and PostgreSQL), from :mod:`durable.store_fixtures`, which say
where the servers come from and how each test's schema or key prefix is named and removed.
"""

from __future__ import annotations

import sys
from pathlib import Path

from durable.store_fixtures import shared_url, sql_url, url

__all__ = ["shared_url", "sql_url", "url"]  # pytest finds fixtures in this namespace

# agent_app and agent_worker are imported by name, here and in worker processes.
sys.path.insert(0, str(Path(__file__).resolve().parent))
