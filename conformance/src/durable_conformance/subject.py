"""What a suite test is handed: the store under test, one fresh testbed of it.

A test says what it needs (a second handle, a probe, a codec of its own, another process)
by asking this object, and the object answers with the thing or with one of three
verdicts a test cannot reach on its own: the requirement does not apply to this store
(:class:`NotOffered`), something it needs is missing (:class:`CouldNotRun`), or the store
declares something it does not do (:class:`DeclaredButUnimplemented`). Keeping those
decisions here keeps every test a plain statement of the requirement.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import secrets
import sys
import warnings
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

from durable.interfaces import Checkpointer, Durable, Scheduler
from durable.plugins import Probe, StorePlugin, Testbed

__all__ = [
    "CouldNotRun",
    "DeclaredButUnimplemented",
    "DurableConformanceWarning",
    "HookFailed",
    "NotOffered",
    "StoreUnderTest",
]


class NotOffered(Exception):
    """The requirement does not apply to this store: a capability it does not declare, or
    a proof (another process) that a store living in one process cannot give."""


class CouldNotRun(Exception):
    """Something the test needs is missing: a server, a dependency, a second handle.

    Never a pass: a required requirement that could not run leaves the store uncertified.
    """


class DeclaredButUnimplemented(AssertionError):
    """The store declares a capability and then does not provide it. A failure."""


class HookFailed(AssertionError):
    """The store's testing hook (or its testbed's ``reopen``) raised for a reason of its
    own: a bug in the hook, not in what the test proves. A failure, said in one line per
    test; the run shows the hook's traceback once, at its end."""

    def __init__(self, called: str, error: Exception) -> None:
        self.called = called
        self.error = error
        super().__init__(f"{called} failed: {type(error).__name__}: {error}")


class DurableConformanceWarning(UserWarning):
    """Something the store does that it does not declare (so nobody may rely on it)."""


CHILD = "from durable_conformance._child import main; main()"
"""What another process runs: ``durable.open(url)`` and the steps it is given."""

OTHER_PROCESS_SECONDS = 60.0


class StoreUnderTest:
    """One fresh, isolated instance of the store under test, and what a test may ask of it.

    ``durable``, ``checkpointer`` and ``scheduler`` are the testbed's first handle. Every
    test gets its own, shared with no other test.
    """

    def __init__(
        self,
        plugin: StorePlugin,
        testbed: Testbed[Any],
        *,
        url: str | None,
        warnings_seen: list[str],
    ) -> None:
        self.plugin = plugin
        self.testbed = testbed
        self.url = url
        self._warnings = warnings_seen

    def __repr__(self) -> str:
        return f"<store under test {self.name!r}: {self.durable!r}>"

    @property
    def name(self) -> str:
        return self.plugin.name

    @property
    def durable(self) -> Durable[Any]:
        return self.testbed.durable

    @property
    def checkpointer(self) -> Checkpointer[Any]:
        return self.testbed.durable.checkpointer

    @property
    def scheduler(self) -> Scheduler:
        return self.testbed.durable.scheduler

    @property
    def capabilities(self) -> frozenset[str]:
        return self.plugin.capabilities

    def offers(self, capability: str) -> bool:
        return capability in self.plugin.capabilities

    def workflow(self, label: str = "wf") -> str:
        """A workflow id no other test uses, readable in a store's own tools."""
        return f"{label}-{secrets.token_hex(4)}"

    def warn(self, message: str) -> None:
        """Report something the store does but does not declare. Not a failure."""
        self._warnings.append(message)
        warnings.warn(DurableConformanceWarning(f"{self.name}: {message}"), stacklevel=2)

    @property
    def probe(self) -> Probe[Any]:
        """The store's transact probe; its absence is an error only where transact is
        declared, which is the only place a test asks for it."""
        if self.testbed.probe is None:
            raise DeclaredButUnimplemented(
                f"store {self.name!r} declares 'transact' but its testing hook gives no probe "
                "(Testbed.probe): the suite cannot hand transact an effect to co-commit"
            )
        return self.testbed.probe

    @asynccontextmanager
    async def handles(self, count: int) -> AsyncIterator[list[Durable[Any]]]:
        """Up to ``count`` independent handles on this testbed's backing store, the first
        being ``durable``. A store whose testbed cannot ``reopen`` gives one."""
        async with AsyncExitStack() as stack:
            found: list[Durable[Any]] = [self.durable]
            if self.testbed.reopen is not None:
                for _ in range(count - 1):
                    found.append(await self._reopened(stack))
            yield found

    @asynccontextmanager
    async def second_handle(self) -> AsyncIterator[Durable[Any]]:
        """A second, independent handle on the same backing store (another connection)."""
        if self.testbed.reopen is None:
            raise CouldNotRun(
                f"store {self.name!r}'s testbed has no reopen(), so what one handle wrote "
                "cannot be shown to be visible to another"
            )
        async with AsyncExitStack() as stack:
            yield await self._reopened(stack)

    async def _reopened(self, stack: AsyncExitStack) -> Durable[Any]:
        reopen = self.testbed.reopen
        assert reopen is not None
        try:
            reopened: Durable[Any] = await stack.enter_async_context(reopen())
        except Exception as error:
            raise HookFailed("the testbed's reopen()", error) from error
        return reopened

    @asynccontextmanager
    async def with_options(self, **options: Any) -> AsyncIterator[Durable[Any]]:
        """A handle on a fresh or this testbed's store, opened with ``options`` (``codec``,
        ``lease``).

        In order: the store's ``testing`` hook when it accepts the options (a fresh
        testbed); else ``open(testbed.url, **options)``, another handle on this testbed's
        store; else, for a store that lives in one process (no url), ``open`` on its own
        scheme, which for such a store is a fresh instance.
        """
        testing = self.plugin.testing
        if testing is not None and _accepts(testing, options):
            async with AsyncExitStack() as stack:
                try:
                    testbed = await stack.enter_async_context(testing(self.url, **options))
                except Exception as error:
                    raise HookFailed("the testing hook", error) from error
                yield testbed.durable
            return
        if not _accepts(self.plugin.open, options):
            raise CouldNotRun(
                f"store {self.name!r} accepts none of {sorted(options)} in testing() or "
                "open(), so the suite cannot choose them"
            )
        url = self.testbed.url
        if url is None:
            if not self.plugin.schemes:
                raise CouldNotRun(f"store {self.name!r} names no URL scheme to open")
            url = f"{self.plugin.schemes[0]}://"
        async with self.plugin.open(url, **options) as opened:
            yield opened

    async def in_another_process(self, steps: list[dict[str, object]]) -> list[object]:
        """Run ``steps`` in a new Python process that opens this testbed's ``url``.

        Each step is ``{"op": ..., ...}`` as :mod:`durable_conformance._child` reads it; the
        result is one JSON value per step. A store that lives in one process has no url,
        and this proof does not apply to it.
        """
        url = self.testbed.url
        if url is None:
            raise NotOffered(
                f"store {self.name!r} lives in one process (its testbed has no url), so "
                "there is no other process to prove anything to"
            )
        request = json.dumps({"url": url, "steps": steps}).encode()
        try:
            child = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                CHILD,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as error:
            raise CouldNotRun(f"could not start another Python process: {error}") from error
        try:
            out, err = await asyncio.wait_for(child.communicate(request), OTHER_PROCESS_SECONDS)
        except TimeoutError:
            child.kill()
            await child.wait()
            raise AssertionError(
                f"the other process did not finish within {OTHER_PROCESS_SECONDS:.0f} s"
            ) from None
        if child.returncode != 0:
            raise AssertionError(
                f"the other process (durable.open({url!r})) failed with exit code "
                f"{child.returncode}:\n{err.decode(errors='replace')}"
            )
        results = json.loads(out.decode())
        assert isinstance(results, list)
        return results


def _accepts(function: Callable[..., Any], options: dict[str, Any]) -> bool:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return True
    names = {
        p.name
        for p in parameters
        if p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    }
    return set(options) <= names
