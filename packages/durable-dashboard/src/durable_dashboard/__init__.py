"""A web dashboard for durable workflows: ``durable dashboard URL``, or :func:`create_app`
for any ASGI server."""

from __future__ import annotations

from durable_dashboard.app import create_app

__all__ = ["__version__", "create_app"]

__version__ = "0.1.0"
