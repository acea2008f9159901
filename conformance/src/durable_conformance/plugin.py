"""The pytest plugin that certifies a durable store: ``pytest --durable-store=NAME``.

pytest loads this module in every run in every environment where durable-conformance is
installed (the ``pytest11`` entry point), so it does nothing at all unless asked: it adds
its options and its marker, and imports neither ``durable`` nor the suite until
``--durable-store`` or ``--durable-list-stores`` is given. A broken store, or a broken
durable-core, can then fail a certification run but never anyone else's tests.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from durable_conformance.requirements import MARK

DEFAULT_TIMEOUT = 120.0
DEFAULT_PROBE_TIMEOUT = 30.0

pytest.register_assert_rewrite("durable_conformance.suite")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("durable", "durable store conformance (durable-conformance)")
    group.addoption(
        "--durable-store",
        dest="durable_store",
        metavar="NAME[,NAME...]|all",
        default=None,
        help="certify the named installed durable store(s), or every installed one with "
        "'all': runs the conformance suite instead of this directory's tests (unless paths "
        "are given too) and ends with a certification table",
    )
    group.addoption(
        "--durable-url",
        dest="durable_urls",
        metavar="URL",
        action="append",
        default=[],
        help="a server for the store whose scheme the URL has, instead of the store's testing "
        "default; repeat for several stores",
    )
    group.addoption(
        "--durable-report",
        dest="durable_report",
        metavar="PATH",
        default=None,
        help="write the certification (requirement x store, and a verdict per store) as JSON",
    )
    group.addoption(
        "--durable-list-stores",
        dest="durable_list_stores",
        action="store_true",
        default=False,
        help="list installed durable stores, their versions and capabilities, and any store "
        "plugin that failed to load; exits non-zero if one did",
    )
    group.addoption(
        "--durable-timeout",
        dest="durable_timeout",
        metavar="SECONDS",
        type=float,
        default=DEFAULT_TIMEOUT,
        help=f"fail a conformance test that runs longer than this (default {DEFAULT_TIMEOUT:.0f})",
    )
    group.addoption(
        "--durable-probe-timeout",
        dest="durable_probe_timeout",
        metavar="SECONDS",
        type=float,
        default=DEFAULT_PROBE_TIMEOUT,
        help="before the suite, each store's testing hook opens one testbed; a store that "
        "gives none within this long (its server down, say) could not run, and its tests are "
        f"not run (default {DEFAULT_PROBE_TIMEOUT:.0f})",
    )


LOOP_SCOPE = "asyncio_default_fixture_loop_scope"


def _default_the_fixture_loop_scope(config: pytest.Config) -> None:
    """Set pytest-asyncio's fixture loop scope to ``function`` when the user has not.

    Left unset, pytest-asyncio opens every run with a deprecation warning, which from a
    directory without an ini file (where a store author certifies) reads as something the
    store must fix. The suite runs on its own event loop, so the setting changes nothing
    for it; a scope the user chose is left alone. Runs from ``pytest_cmdline_main``, before
    any ``pytest_configure`` (where pytest-asyncio reads it), and only for ``--durable-store``,
    so that nobody else's tests see a different default.
    """
    if not config.pluginmanager.hasplugin("asyncio"):
        return
    try:
        chosen = config.getini(LOOP_SCOPE)
    except ValueError:  # a pytest-asyncio that does not know the option
        return
    if not chosen:
        # pytest has no public way to default an ini value; getini answers from this cache
        # (filled by the call above), and the plugin's tests catch a pytest where it no
        # longer does.
        config._inicache[LOOP_SCOPE] = "function"


def pytest_cmdline_main(config: pytest.Config) -> int | None:
    if config.getoption("durable_store") is not None:
        _default_the_fixture_loop_scope(config)
    if not config.getoption("durable_list_stores"):
        return None
    from durable_conformance.stores import list_stores

    return list_stores(sys.stdout)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{MARK}(id, capability=None): the durable conformance requirement a test proves",
    )
    spec = config.getoption("durable_store")
    if spec is None:
        for option in ("durable_urls", "durable_report"):
            if config.getoption(option):
                name = "--" + option.removesuffix("s").replace("_", "-")
                raise pytest.UsageError(f"{name} needs --durable-store=NAME")
        return
    try:
        from durable_conformance.certify import Certification
        from durable_conformance.collect import NODE_PREFIX
        from durable_conformance.stores import select
    except ImportError as error:
        raise pytest.UsageError(
            f"--durable-store: durable-core could not be imported ({error})"
        ) from error
    if getattr(config.option, "numprocesses", None):
        raise pytest.UsageError(
            "--durable-store runs in one process: the suite's concurrency tests are about "
            "timing, and spreading them over workers (-n) would make them prove less; drop -n"
        )
    timeout = config.getoption("durable_timeout")
    probe_timeout = config.getoption("durable_probe_timeout")
    for name, value in (("--durable-timeout", timeout), ("--durable-probe-timeout", probe_timeout)):
        if value <= 0:
            raise pytest.UsageError(f"{name} must be positive")
    selection = select(spec, config.getoption("durable_urls"))
    report = config.getoption("durable_report")
    selectors = [a for a in config.args if a.replace("\\", "/").startswith(NODE_PREFIX)]
    given = config.args_source == pytest.Config.ArgsSource.ARGS
    paths = [a for a in config.args if a not in selectors] if given else []
    # The suite is added to the session by Certification; what is left of the arguments is
    # what the user asked for besides, which by default is nothing.
    config.args[:] = paths
    config.pluginmanager.register(
        Certification(
            selection,
            timeout=timeout,
            probe_timeout=probe_timeout,
            report_path=Path(report).resolve() if report else None,
            selectors=selectors,
        ),
        "durable-conformance-certification",
    )
