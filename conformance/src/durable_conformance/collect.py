"""The suite as pytest nodes, and how one test runs against one store.

The suite is collected by the plugin itself rather than by pytest's file and function
patterns, so that it runs the same from any directory, inside a project whose own
``python_files``, ``python_functions`` or ``asyncio_mode`` say something else entirely,
and without collecting the project's own tests. Each test runs on an event loop of its
own (``asyncio.Runner``), so no asyncio plugin's mode or loop scope reaches it, inside a
fresh testbed from the store's ``testing`` hook, and under a deadline that holds even
against code that never gives the loop back (:mod:`durable_conformance.deadline`), so that
a broken store fails a test rather than hanging the run. A test that ran out of time, or
whose testing hook raised, fails in one line: the traceback would only show the suite's
machinery, and a hook's own is shown once, at the end of the run.
"""

from __future__ import annotations

import asyncio
import importlib
import pkgutil
import traceback
import unittest
from collections.abc import Callable, Coroutine, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from _pytest._code import Code, ExceptionInfo
from _pytest._code.code import Traceback
from durable.interfaces import StoreError
from durable.plugins import StorePlugin

from durable_conformance import suite
from durable_conformance.deadline import CEILING, Deadline, Overrun
from durable_conformance.report import COULD_NOT_RUN, FAILED_BECAUSE, NOT_OFFERED, TIMED_OUT
from durable_conformance.requirements import (
    MARK,
    Requirement,
    requirement_of,
    suite_problems,
    suite_tests,
)
from durable_conformance.stores import redact, scrub
from durable_conformance.subject import (
    CouldNotRun,
    DeclaredButUnimplemented,
    HookFailed,
    NotOffered,
    StoreUnderTest,
)

__all__ = ["NODE_PREFIX", "StoreRun", "SuiteCollector", "TimedOut", "suite_modules"]

NODE_PREFIX = "durable_conformance/suite"
"""Every suite test's node id starts with this, wherever the package is installed, so a
failed test's id can be pasted back onto the command line to run it again."""

SuiteTest = Callable[[StoreUnderTest], Coroutine[Any, Any, None]]

_STARTUP_FAILURES = (OSError, ImportError, TimeoutError, StoreError)
"""What a testing hook raises when the store cannot be reached or cannot be loaded, as
opposed to failing for a reason of its own: ``OSError`` covers refused connections and
timeouts, ``StoreError`` a store's own word for an unreachable server (``RedisUnavailable``,
``PostgresUnavailable``)."""


def _unreachable(error: BaseException) -> bool:
    """Whether ``error``, or any error it was raised from, says the store could not be
    reached: a driver's own connection error usually carries the ``OSError`` beneath it."""
    seen: set[int] = set()
    found: BaseException | None = error
    while found is not None and id(found) not in seen:
        if isinstance(found, _STARTUP_FAILURES):
            return True
        seen.add(id(found))
        found = found.__cause__ or found.__context__
    return False


class TimedOut(AssertionError):
    """A test that did not finish within ``--durable-timeout``. A failure."""


def suite_modules() -> list[ModuleType]:
    """Every public module of the suite, imported, in reading order."""
    names = [i.name for i in pkgutil.iter_modules(suite.__path__) if not i.name.startswith("_")]
    order = {name: i for i, name in enumerate(suite.READING_ORDER)}
    names.sort(key=lambda name: (order.get(name, len(order)), name))
    return [importlib.import_module(f"{suite.__name__}.{name}") for name in names]


class StoreRun:
    """One store in this run: its plugin, where it points, and what it told us so far."""

    def __init__(
        self, plugin: StorePlugin, url: str | None, timeout: float, probe_timeout: float
    ) -> None:
        self.plugin = plugin
        self.url = url
        self.timeout = timeout
        self.probe_timeout = probe_timeout
        self.server: str | None = None
        self.probed = False
        self.unreachable: str | None = None
        """Why the probe before the suite could not open a testbed, in one line with the
        URL's secrets hidden: a server that does not answer, a missing driver, no testing
        hook. The store's tests are then not run at all, and the store could not run."""
        self.hook_failed: str | None = None
        """The same, for a testing hook that failed for a reason of its own (a bug, not a
        missing server): the store is failed, its tests not run."""
        self.hook_traceback: str | None = None
        """That failure's traceback, printed once at the end of the run."""
        self.hook_failures: dict[str, tuple[str, int]] = {}
        """A testing hook (or ``reopen``) that opened the probe's testbed and then raised
        during the run: each distinct one-line error, with the first traceback of it and
        how many tests it failed. Each test fails in one line; the traceback is shown once."""
        self.cannot_start: str | None = None
        """Why the testing hook could not give a testbed, once it has failed to during the
        run (a server that went away after the probe): every later test of the store could
        not run for the same reason, and says so at once."""

    @property
    def name(self) -> str:
        return self.plugin.name

    @property
    def runnable(self) -> bool:
        """Whether the probe opened a testbed, so that the store's tests are worth running."""
        return self.unreachable is None and self.hook_failed is None

    def probe(self) -> None:
        """Open and close one testbed, once, before the suite runs.

        Every test opens a testbed of its own, so a store whose testbed cannot be opened
        would otherwise fail or skip each of its hundred tests with the same error and a
        hundred tracebacks; one attempt, bounded by ``probe_timeout``, says it once. The
        attempt also gives the header its server line.
        """
        if self.probed:
            return
        self.probed = True

        async def peek() -> None:
            async with AsyncExitStack() as stack:
                await self._testbed(stack)

        deadline = Deadline(self.probe_timeout)
        try:
            with deadline, asyncio.Runner() as runner:
                deadline.watch(runner.get_loop())
                runner.run(asyncio.wait_for(peek(), self.probe_timeout))
        except Overrun as overrun:
            self.hook_failed = (
                f"no testbed within {self.probe_timeout:g} s (--durable-probe-timeout), and the "
                f"event loop was never given back: stopped in {overrun.where}"
            )
        except CouldNotRun as why:
            self.unreachable = self._one_line(str(why))
        except TimeoutError:
            self.unreachable = (
                f"no testbed within {self.probe_timeout:g} s (--durable-probe-timeout): is the "
                "server there, and does it answer?"
            )
        except Exception as error:
            # A hook failing for a reason of its own is a failure, not a missing server; its
            # traceback is worth showing once, so a store author can find the line.
            if isinstance(error, HookFailed):
                error = error.error
            self.hook_failed = self._one_line(f"{type(error).__name__}: {error}")
            self.hook_traceback = scrub("".join(traceback.format_exception(error)), self.url)

    def _one_line(self, text: str) -> str:
        return " ".join(scrub(text, self.url).split())

    async def _testbed(self, stack: AsyncExitStack) -> Any:
        testing = self.plugin.testing
        if testing is None:
            self.cannot_start = (
                f"store {self.name!r} has no testing hook (StorePlugin.testing), so the suite "
                "cannot get a fresh, isolated instance of it"
            )
        if self.cannot_start is not None:
            raise CouldNotRun(self.cannot_start)
        assert testing is not None
        try:
            testbed = await stack.enter_async_context(testing(self.url))
        except pytest.skip.Exception as skipped:
            self.cannot_start = f"the testing hook skipped: {skipped.msg}"
            raise CouldNotRun(self.cannot_start) from None
        except unittest.SkipTest as skipped:
            self.cannot_start = f"the testing hook skipped: {skipped}"
            raise CouldNotRun(self.cannot_start) from None
        except Exception as error:
            if not _unreachable(error):
                raise HookFailed("the testing hook", error) from error
            self.cannot_start = (
                f"the testing hook could not start a testbed: {type(error).__name__}: {error}"
            )
            raise CouldNotRun(self.cannot_start) from None
        if self.server is None:
            shown = testbed.server or (self.url and redact(self.url))
            self.server = redact(shown) if shown else "the store's testing default"
        return testbed

    def run(self, test: SuiteTest, requirement: Requirement, item: SuiteItem) -> None:
        capability = requirement.capability
        if capability is not None and capability not in self.plugin.capabilities:
            item.mark_outcome(NOT_OFFERED)
            pytest.skip(f"not offered: {self.name} does not declare {capability!r}")
        deadline = Deadline(self.timeout)
        try:
            with deadline, asyncio.Runner() as runner:
                deadline.watch(runner.get_loop())
                runner.run(self._run(test, requirement, item, deadline))
        except Overrun as overrun:
            item.user_properties.append((FAILED_BECAUSE, TIMED_OUT))
            raise TimedOut(self._overran(requirement, overrun)) from None
        except TimedOut:
            item.user_properties.append((FAILED_BECAUSE, TIMED_OUT))
            raise
        except HookFailed as failed:
            self._hook_failed(failed, item)
            raise
        except NotOffered as why:
            item.mark_outcome(NOT_OFFERED)
            pytest.skip(f"not offered: {why}")
        except CouldNotRun as why:
            item.mark_outcome(COULD_NOT_RUN)
            pytest.skip(f"could not run: {why}")
        except NotImplementedError as error:
            if capability is None:
                raise
            raise DeclaredButUnimplemented(
                f"store {self.name!r} declares {capability!r} but raised NotImplementedError "
                f"proving {requirement.id}: {error}"
            ) from error

    async def _run(
        self, test: SuiteTest, requirement: Requirement, item: SuiteItem, outside: Deadline
    ) -> None:
        deadline = asyncio.timeout(self.timeout)
        try:
            async with deadline, AsyncExitStack() as stack:
                testbed = await self._testbed(stack)
                subject = StoreUnderTest(
                    self.plugin, testbed, url=self.url, warnings_seen=item.warnings_seen
                )
                await test(subject)
        except TimeoutError:
            if not deadline.expired():
                raise
            if outside.overrun is not None:
                # The stuck code ran in a task nobody awaited: it was stopped all the same,
                # and where is the news.
                raise TimedOut(self._overran(requirement, outside.overrun)) from None
            raise TimedOut(
                f"{requirement.id} did not finish within {self.timeout:g} s (--durable-timeout)"
            ) from None

    def _overran(self, requirement: Requirement, overrun: Overrun) -> str:
        late = f"{requirement.id} did not finish within {self.timeout:g} s (--durable-timeout)"
        if overrun.stuck:
            return (
                f"{late}, and its event loop was never given back: stopped from outside in "
                f"{overrun.where}. Code that loops without awaiting holds the loop, so that no "
                "timeout and no other task can run; a loop that polls must await between looks"
            )
        return (
            f"{late}, and had not ended {CEILING:g} s after it was cancelled: stopped from "
            f"outside in {overrun.where}"
        )

    def _hook_failed(self, failed: HookFailed, item: SuiteItem) -> None:
        """Remember ``failed`` for the end of the run, and let the test say it in a line."""
        line = self._one_line(str(failed))
        item.user_properties.append((FAILED_BECAUSE, line))
        first, count = self.hook_failures.get(line, (None, 0))
        if first is None:
            first = scrub("".join(traceback.format_exception(failed.error)), self.url)
        self.hook_failures[line] = (first, count + 1)


class SuiteCollector(pytest.Collector):
    """The suite, under the session; one child per suite module."""

    def __init__(self, *, runs: list[StoreRun], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.runs = runs

    def collect(self) -> Iterator[pytest.Item | pytest.Collector]:
        for module in suite_modules():
            yield SuiteModule.from_parent(
                self,
                name=Path(module.__file__ or module.__name__).name,
                path=Path(module.__file__ or "."),
                nodeid=f"{NODE_PREFIX}/{Path(module.__file__ or module.__name__).name}",
                module=module,
                runs=self.runs,
            )


class SuiteModule(pytest.Collector):
    """One suite module: each test in it, once per store.

    Not a ``pytest.File``, so that nothing keyed on files (``--lf``'s skipping of files
    without failures, say) reads its synthetic node id as a path on disk.
    """

    def __init__(self, *, module: ModuleType, runs: list[StoreRun], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.module = module
        self.runs = runs

    def collect(self) -> Iterator[pytest.Item]:
        problems = suite_problems(self.module)
        if problems:
            raise self.CollectError("\n".join(problems))
        for name, test in suite_tests(self.module):
            found = requirement_of(test)
            assert found is not None
            for run in self.runs:
                yield SuiteItem.from_parent(
                    self, name=f"{name}[{run.name}]", test=test, requirement=found, run=run
                )

    def repr_failure(self, excinfo: ExceptionInfo[BaseException]) -> str:  # type: ignore[override]
        if isinstance(excinfo.value, self.CollectError):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))


class SuiteItem(pytest.Item):
    """One suite test against one store."""

    def __init__(
        self, *, test: SuiteTest, requirement: Requirement, run: StoreRun, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.test = test
        self.requirement = requirement
        self.run = run
        self.warnings_seen: list[str] = []
        self.add_marker(
            getattr(pytest.mark, MARK)(requirement.id, capability=requirement.capability)
        )
        self.extra_keyword_matches.update({requirement.id, run.name})
        self.user_properties.extend(
            [
                ("durable_store", run.name),
                ("durable_requirement", requirement.id),
                ("durable_capability", requirement.capability),
            ]
        )

    def mark_outcome(self, outcome: str) -> None:
        self.user_properties.append(("durable_outcome", outcome))

    def runtest(self) -> None:
        try:
            self.run.run(self.test, self.requirement, self)
        finally:
            self.user_properties.extend(("durable_warning", w) for w in self.warnings_seen)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        code = Code.from_function(self.test)
        return Path(str(code.path)), code.firstlineno, f"{self.name} proves {self.requirement.id}"

    def repr_failure(self, excinfo: ExceptionInfo[BaseException]) -> str | Any:  # type: ignore[override]
        if isinstance(excinfo.value, DeclaredButUnimplemented):
            return f"declared but unimplemented: {excinfo.value}"
        if isinstance(excinfo.value, TimedOut):
            return f"timed out: {excinfo.value}"
        if isinstance(excinfo.value, HookFailed):
            return (
                f"{self.run._one_line(str(excinfo.value))} (its traceback is shown once, at "
                "the end of the run)"
            )
        style = self.config.getoption("tbstyle", "auto")
        return self._repr_failure_py(excinfo, style="long" if style == "auto" else style)

    def _traceback_filter(self, excinfo: ExceptionInfo[BaseException]) -> Traceback:
        traceback = excinfo.traceback
        if self.config.getoption("fulltrace", False):
            return traceback
        code = Code.from_function(self.test)
        cut = traceback.cut(path=code.path, firstlineno=code.firstlineno)
        return cut.filter(excinfo) if cut else traceback
