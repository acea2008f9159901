"""pytest fixtures for testing workflows: ``durable_testbed`` and ``durable_clock``.

Loaded in every pytest run where durable-core is installed (its ``pytest11`` entry point),
so it costs nothing until a fixture is asked for: it adds two options and imports no
store. The options are ``--durable-kit-store NAME`` (default ``memory``, or the
``DURABLE_KIT_STORE`` environment variable) and ``--durable-kit-url URL``. They are not
the conformance plugin's ``--durable-store``/``--durable-url``, which turn a run into a
store's certification and run the conformance suite instead of your tests; the names are
the same installed store names, and the stores are opened by the same testing hooks.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from durable.clock import ManualClock
    from durable.testing import Kit

__all__ = ["durable_clock", "durable_testbed"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("durable-kit", "testing workflows (durable.testing)")
    group.addoption(
        "--durable-kit-store",
        dest="durable_kit_store",
        metavar="NAME",
        default=None,
        help="the installed durable store the durable_testbed fixture opens "
        "(default: $DURABLE_KIT_STORE, else memory)",
    )
    group.addoption(
        "--durable-kit-url",
        dest="durable_kit_url",
        metavar="URL",
        default=None,
        help="a server for --durable-kit-store, instead of the store's testing default",
    )


def kit_store(config: pytest.Config) -> tuple[str, str | None]:
    """The store name and URL the options (or ``DURABLE_KIT_STORE``/``_URL``) select."""
    name = config.getoption("durable_kit_store", None) or os.environ.get(
        "DURABLE_KIT_STORE", "memory"
    )
    url = config.getoption("durable_kit_url", None) or os.environ.get("DURABLE_KIT_URL")
    return name, url


@pytest.fixture
def durable_clock() -> ManualClock:
    """A fresh :class:`~durable.clock.ManualClock` (2026-01-01 UTC)."""
    from durable.clock import ManualClock

    return ManualClock()


@pytest.fixture
def durable_testbed(
    request: pytest.FixtureRequest, durable_clock: ManualClock
) -> Callable[..., AbstractAsyncContextManager[Kit[Any]]]:
    """Opens a fresh, isolated store of the selected kind, removed when the block ends::

    async def test_it(durable_testbed):
        async with durable_testbed() as kit:
            await kit.run_until("w", body)

    Keywords are :func:`durable.testing.open_kit`'s (``clock=`` defaults to
    ``durable_clock``); a store that cannot open (its server down) fails the test.
    """
    from durable.testing import open_kit

    name, url = kit_store(request.config)

    def opener(**options: Any) -> AbstractAsyncContextManager[Kit[Any]]:
        options.setdefault("clock", durable_clock)
        return open_kit(name, url, **options)

    return opener
