"""One certification run: registered by the plugin only when ``--durable-store`` is given.

It puts the suite into the session's collection (and, unless the user passed paths of
their own, nothing else), writes the header, gathers every report, and ends the run with
the table, a verdict per store, the JSON report, and an exit status that a skip cannot
turn green.
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

import pytest

from durable_conformance import __version__, suite
from durable_conformance.collect import NODE_PREFIX, StoreRun, SuiteCollector, SuiteItem
from durable_conformance.report import Results, StoreFacts
from durable_conformance.stores import Selection, core_version, describe, redact

__all__ = ["Certification"]


class Certification:
    """The hooks of a run that certifies stores."""

    def __init__(
        self,
        selection: Selection,
        *,
        timeout: float,
        report_path: Path | None,
        selectors: list[str],
    ) -> None:
        self.runs = [StoreRun(p, selection.urls[p.name], timeout) for p in selection.plugins]
        self.results = Results(
            [
                StoreFacts(
                    p.name,
                    p.distribution,
                    p.version,
                    p.capabilities,
                    url=redact(url) if (url := selection.urls[p.name]) else None,
                )
                for p in selection.plugins
            ],
            selection.broken,
        )
        self.report_path = report_path
        self.selectors = selectors

    # -- collection --------------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(
        self, collector: pytest.Collector
    ) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
        report = yield
        if isinstance(collector, pytest.Session) and report.passed and self.runs:
            report.result.append(
                SuiteCollector.from_parent(
                    collector,
                    name=NODE_PREFIX,
                    path=Path(suite.__file__ or ".").parent,
                    nodeid=NODE_PREFIX,
                    runs=self.runs,
                )
            )
        return report

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        if isinstance(item, SuiteItem):
            found = item.requirement
            self.results.collect(
                item.nodeid, item.run.name, found.id, found.capability, found.statement
            )

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        if not self.selectors:
            return
        kept, dropped = [], []
        for item in items:
            if not isinstance(item, SuiteItem) or any(
                _selects(selector, item.nodeid) for selector in self.selectors
            ):
                kept.append(item)
            else:
                dropped.append(item)
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = kept

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.results.selected = {i.nodeid for i in session.items if isinstance(i, SuiteItem)}

    # -- the header --------------------------------------------------------------------

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        lines = [f"durable-conformance {__version__}, durable-core {core_version()}"]
        for run in self.runs:
            run.start_once()
            plugin = run.plugin
            capabilities = ", ".join(sorted(plugin.capabilities)) or "none"
            server = run.server or f"could not start ({run.cannot_start or run.start_error})"
            lines.append(
                f"durable store {plugin.name}: {describe(plugin)}; capabilities: {capabilities}; "
                f"server: {server}"
            )
        lines.extend(
            f"durable store {name}: BROKEN: {why}"
            for name, why in sorted(self.results.broken.items())
        )
        return lines

    # -- results -----------------------------------------------------------------------

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.results.report(report)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        for run in self.runs:
            self.results.stores[run.name].server = run.server
        if self.report_path is not None:
            self.results.write_json(
                self.report_path, conformance_version=__version__, core_version=core_version()
            )
        if session.exitstatus == pytest.ExitCode.OK and self.results.must_fail():
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        tr = terminalreporter
        tr.section("durable conformance")
        for line in self.results.table():
            tr.write_line(line)
        if self.results.collected:
            tr.write_line("")
        for line in self.results.verdict_lines():
            good = ": CERTIFIED" in line
            tr.write_line(line, green=good, red=not good and "warning:" not in line, bold=True)
        if self.report_path is not None:
            tr.write_line(f"report written to {self.report_path}")


def _selects(selector: str, nodeid: str) -> bool:
    """Whether a command-line argument naming suite nodes (``.../claim.py``,
    ``...::test_x``, ``...::test_x[memory]``) selects ``nodeid``."""
    if nodeid == selector:
        return True
    return any(nodeid.startswith(selector + tail) for tail in ("::", "[", "/"))
