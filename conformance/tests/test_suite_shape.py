"""The suite's own shape: every test names its requirement, gating names real capabilities,
``-k AREA`` finds what a reader expects, and the verdict arithmetic holds."""

from __future__ import annotations

from types import ModuleType

import pytest
from durable.plugins import CAPABILITIES
from durable_conformance import Requirement, requirement
from durable_conformance.collect import suite_modules
from durable_conformance.report import Result, Results, StoreFacts
from durable_conformance.requirements import requirement_of, suite_problems, suite_tests
from durable_conformance.stores import redact

MODULES = suite_modules()


@pytest.mark.parametrize("module", MODULES, ids=[m.__name__.rsplit(".", 1)[1] for m in MODULES])
def test_every_suite_test_carries_a_requirement_and_is_named_for_its_area(
    module: ModuleType,
) -> None:
    assert suite_problems(module) == []
    assert list(suite_tests(module)), f"{module.__name__} holds no test"


def _requirements() -> list[Requirement]:
    found = [requirement_of(test) for module in MODULES for _, test in suite_tests(module)]
    return [r for r in found if r is not None]


def test_every_requirement_is_gated_on_a_known_capability_or_none() -> None:
    gates = {found.capability for found in _requirements()}
    assert gates - {None} <= set(CAPABILITIES)


def test_every_requirement_has_a_statement() -> None:
    for module in MODULES:
        for name, test in suite_tests(module):
            found = requirement_of(test)
            assert found is not None
            assert found.statement, f"{name} has no docstring"


def test_the_suite_covers_every_area_of_the_contract() -> None:
    areas = {found.area for found in _requirements()}
    assert {
        "claim",
        "tokens",
        "renew",
        "release",
        "fencing",
        "record",
        "supply",
        "order",
        "append",
        "history",
        "discard",
        "transact",
        "durability",
        "codec",
        "boundary",
        "isolation",
        "scheduler",
        "durable",
        "run",
        "resume",
        "graph",
        "worker",
        "capabilities",
    } <= areas


def test_a_missing_marker_a_sync_test_and_a_misnamed_one_are_each_caught() -> None:
    module = ModuleType("durable_conformance.suite.example")

    async def test_example_forgot() -> None: ...

    @requirement("example.sync")
    def test_example_sync() -> None: ...

    @requirement("fencing.misnamed")
    async def test_example_misnamed() -> None: ...

    for test in (test_example_forgot, test_example_sync, test_example_misnamed):
        test.__module__ = module.__name__
        setattr(module, test.__name__, test)
    problems = suite_problems(module)
    assert len(problems) == 3, problems
    assert "test_example_forgot carries no @requirement" in problems[0]
    assert "must be an async def" in problems[1]
    assert "must start with 'test_fencing_'" in problems[2]


def test_a_requirement_id_must_read_area_dot_requirement() -> None:
    with pytest.raises(ValueError, match=r"must read 'area\.what-is-required'"):
        requirement("NoArea")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://app:s3cret@db:5432/orders", "postgresql://app:***@db:5432/orders"),
        ("redis://:s3cret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
        ("redis://app@host/0", "redis://app@host/0"),
        ("sqlite:////var/lib/app.db", "sqlite:////var/lib/app.db"),
        (
            "postgresql://db/orders?password=s3cret&sslmode=require",
            "postgresql://db/orders?password=***&sslmode=require",
        ),
    ],
)
def test_urls_are_shown_with_their_credentials_redacted(url: str, shown: str) -> None:
    assert redact(url) == shown


def _results(*outcomes: tuple[str, str | None, str]) -> Results:
    results = Results([StoreFacts("s", "dist", "1.0", frozenset({"transact"}))], {})
    for i, (requirement_id, capability, outcome) in enumerate(outcomes):
        nodeid = f"n{i}"
        results.collect(nodeid, "s", requirement_id, capability, "")
        results.results[nodeid] = _result(nodeid, requirement_id, outcome)
    return results


def _result(nodeid: str, requirement_id: str, outcome: str) -> Result:
    return Result(nodeid, "s", requirement_id, outcome)


def test_the_verdict_counts_requirements_not_tests_and_not_offered_counts_for_nothing() -> None:
    verdict = _results(
        ("a.one", None, "passed"),
        ("a.one", None, "passed"),
        ("a.two", None, "not offered"),
        ("b.one", "transact", "passed"),
        ("c.one", "cluster", "not offered"),
    ).verdict("s")
    assert verdict.certified
    assert verdict.line == "s 1.0: CERTIFIED, 1 of 1 required, 1 of 1 offered"


def test_one_test_that_could_not_run_leaves_its_requirement_and_the_store_uncertified() -> None:
    results = _results(("a.one", None, "passed"), ("a.one", None, "could not run"))
    verdict = results.verdict("s")
    assert not verdict.certified
    assert verdict.could_not_run == ["a.one"]
    assert results.must_fail()
    assert verdict.line.endswith("could not run: a.one")


def test_a_failure_outranks_everything_else_for_its_requirement() -> None:
    verdict = _results(
        ("a.one", None, "could not run"), ("a.one", None, "failed"), ("a.one", None, "passed")
    ).verdict("s")
    assert verdict.failed == ["a.one"]
    assert verdict.could_not_run == []
