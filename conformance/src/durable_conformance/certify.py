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
        probe_timeout: float,
        report_path: Path | None,
        selectors: list[str],
    ) -> None:
        self.runs = [
            StoreRun(p, selection.urls[p.name], timeout, probe_timeout) for p in selection.plugins
        ]
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

    # -- before anything: can each store be reached? ----------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if session.config.option.collectonly:
            # Listing the suite needs no server, and a --collect-only run (a docs check, an
            # IDE's test discovery) must not fail because the one named is not up.
            return
        for run in self.runs:
            run.probe()
            if run.unreachable is not None:
                self.results.could_not_run(run.name, run.unreachable)
            elif run.hook_failed is not None:
                self.results.hook_failed(run.name, run.hook_failed)

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

    @pytest.hookimpl(wrapper=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> Generator[None, None, None]:
        """Around every other selection (-k, -m): first keep the suite tests the command
        line named by node id; last set aside the tests of a store the probe could not open,
        each of which would only repeat the probe's error. Those are answered for in the
        report (could not run, or failed for a failing hook) but not run."""
        self._select_node_ids(config, items)
        yield
        unrun = [i for i in items if isinstance(i, SuiteItem) and not i.run.runnable]
        if not unrun:
            return
        for item in unrun:
            assert isinstance(item, SuiteItem)
            self.results.not_run(item.nodeid)
        config.hook.pytest_deselected(items=unrun)
        items[:] = [i for i in items if not (isinstance(i, SuiteItem) and not i.run.runnable)]

    def _select_node_ids(self, config: pytest.Config, items: list[pytest.Item]) -> None:
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
        collect_only = bool(config.option.collectonly)
        for run in self.runs:
            if not collect_only:
                run.probe()
            plugin = run.plugin
            capabilities = ", ".join(sorted(plugin.capabilities)) or "none"
            # An unreachable server's reason is said once, with the verdict, where a -q run
            # shows it too; a failing hook is a bug to fix, and is named at once as well.
            server = run.server or (
                "not probed (--collect-only)"
                if collect_only
                else "could not run (the reason ends the run)"
                if run.unreachable
                else f"none, the testing hook failed: {run.hook_failed}"
            )
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
        # All of a store's tests set aside leaves pytest with nothing run (exit 5), which is
        # not the news: the store could not be certified.
        quiet = (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)
        if session.exitstatus in quiet and self.results.must_fail():
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        tr = terminalreporter
        tr.section("durable conformance")
        for run in self.runs:
            if run.hook_traceback is not None:
                tr.write_line(f"the testing hook of store {run.name!r} failed:")
                tr.write_line(run.hook_traceback.rstrip())
                tr.write_line("")
            for line, (first, count) in run.hook_failures.items():
                tests = f"{count} test{'s' if count > 1 else ''}"
                tr.write_line(f"store {run.name!r}: {line}, failing {tests}; the first time:")
                tr.write_line(first.rstrip())
                tr.write_line("")
        table = self.results.table()
        for line in table:
            tr.write_line(line)
        if table:
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
