"""docs/requirements.md, the audit of what a store owes, names every requirement the suite
proves: a requirement added to the suite without a row there is a sentence nobody has
tied to the contract, and the page would quietly stop being the whole list."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from durable_conformance.collect import suite_modules
from durable_conformance.requirements import requirement_of, suite_tests

PAGE = Path(__file__).resolve().parents[2] / "docs" / "requirements.md"

_NAMED = re.compile(r"`([a-z][a-z0-9-]*(?:\.[a-z0-9]+(?:-[a-z0-9]+)*)+)`")


def _suite_ids() -> set[str]:
    found = (requirement_of(test) for m in suite_modules() for _, test in suite_tests(m))
    return {r.id for r in found if r is not None}


def _page_ids() -> set[str]:
    return set(_NAMED.findall(PAGE.read_text(encoding="utf-8")))


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ImportError:  # its parent is no package: `claim.races-discard`
        return False


def test_every_requirement_of_the_suite_is_on_the_requirements_page() -> None:
    assert PAGE.is_file(), f"{PAGE} is missing"
    missing = sorted(_suite_ids() - _page_ids())
    assert not missing, (
        f"requirements proved by the suite but named nowhere in {PAGE.name}: {missing}; "
        "add each to the row of the docstring sentence it proves (or to 'Beyond "
        "durable.interfaces' if the sentence is not in durable.interfaces)"
    )


def test_every_requirement_the_page_names_is_one_the_suite_proves() -> None:
    suite = _suite_ids()
    areas = {i.split(".", 1)[0] for i in suite}
    # Module names (`durable.run`) share an id's shape and the area `durable`: they are
    # told apart by being importable.
    stale = sorted(
        i for i in _page_ids() - suite if i.split(".", 1)[0] in areas and not _is_module(i)
    )
    assert not stale, f"{PAGE.name} names requirements the suite does not hold: {stale}"
