"""The requirement marker, and the rule that no suite test may go without one.

A requirement is what the contract asks of a store, named once: ``fencing.stale-record``.
Every test in the suite proves one, and carries it as ``@requirement(...)``. The marker is
what the certification table is built from, and what capability gating reads: a test that
forgot it would run against every store, ungated, and vanish from the table, so the suite
refuses to collect such a test at all (:func:`suite_problems`).

This module imports nothing from ``durable``, because the plugin module that pytest loads
in every run imports it.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any, TypeVar

import pytest

__all__ = [
    "MARK",
    "Requirement",
    "requirement",
    "requirement_of",
    "suite_problems",
    "suite_tests",
]

MARK = "durable_requirement"
"""The pytest marker name: ``-m durable_requirement`` selects the suite's tests."""

_ID = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*(\.[a-z0-9]+(-[a-z0-9]+)*)+")

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Requirement:
    """One thing the contract asks of a store.

    ``id`` reads ``area.what-is-required``; the area is also the start of every test name
    that proves it (``test_fencing_...``), so ``-k fencing`` selects what a reader expects.
    ``capability`` is ``None`` for what every store owes, or the capability name that
    gates it (``transact``, ``atomic-arrive``, ``cluster``, or a third party's own).
    """

    id: str
    capability: str | None = None
    statement: str = ""

    @property
    def area(self) -> str:
        return self.id.split(".", 1)[0]

    @property
    def required(self) -> bool:
        return self.capability is None


def requirement(id: str, *, capability: str | None = None) -> Callable[[F], F]:
    """Mark a suite test as the proof of requirement ``id``.

    ``capability`` gates it: a store that does not declare the capability reports the
    requirement "not offered" instead of running it. The test's docstring (first line)
    is the requirement's statement in the report.
    """
    if not _ID.fullmatch(id):
        raise ValueError(
            f"requirement id {id!r} must read 'area.what-is-required' in lowercase words "
            "joined by hyphens, like 'fencing.stale-record'"
        )
    if capability is not None and (not isinstance(capability, str) or not capability):
        raise ValueError(f"requirement {id!r}: capability must be a non-empty name or None")

    def mark(test: F) -> F:
        marked: F = getattr(pytest.mark, MARK)(id, capability=capability)(test)
        return marked

    return mark


def requirement_of(test: object) -> Requirement | None:
    """The requirement a suite test carries, or ``None`` when it carries none."""
    for mark in getattr(test, "pytestmark", ()):
        if getattr(mark, "name", None) == MARK:
            (id,) = mark.args
            doc = inspect.getdoc(test) or ""
            statement = " ".join(doc.split("\n\n", 1)[0].split())
            return Requirement(id, mark.kwargs.get("capability"), statement)
    return None


def suite_tests(module: ModuleType) -> Iterator[tuple[str, Callable[..., Any]]]:
    """Every ``test_*`` function defined in ``module``, in source order."""
    found = [
        (name, value)
        for name, value in vars(module).items()
        if name.startswith("test_")
        and callable(value)
        and getattr(value, "__module__", None) == module.__name__
    ]
    found.sort(key=lambda item: _first_line(item[1]))
    yield from found


def _first_line(test: Callable[..., Any]) -> int:
    code = getattr(inspect.unwrap(test), "__code__", None)
    return code.co_firstlineno if code is not None else 0


def suite_problems(module: ModuleType) -> list[str]:
    """What is wrong with ``module`` as a part of the suite; empty when nothing is.

    A test must carry a requirement, be a coroutine function taking the store under test,
    and be named for its requirement's area, so that ``-k AREA`` finds it.
    """
    problems: list[str] = []
    for name, test in suite_tests(module):
        where = f"{module.__name__}.{name}"
        found = requirement_of(test)
        if found is None:
            problems.append(
                f"{where} carries no @requirement(...): every suite test must name the "
                "requirement it proves, or it would escape capability gating and the table"
            )
            continue
        if not inspect.iscoroutinefunction(test):
            problems.append(f"{where} must be an async def taking the store under test")
        area = found.area.replace("-", "_")
        if not name.startswith(f"test_{area}_"):
            problems.append(
                f"{where} proves {found.id!r}, so its name must start with 'test_{area}_' "
                f"for '-k {found.area}' to select it"
            )
    return problems
