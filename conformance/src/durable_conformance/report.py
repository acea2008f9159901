"""The certification: outcomes per requirement and store, the table, the verdicts, the JSON.

A skip is never a pass. A test ends in one of four ways, and the table keeps them apart:
``passed``; ``failed`` (including a store that declares a capability and does not provide
it); ``not offered`` (a capability the store does not declare, or a proof that does not
apply to it, such as another process for a store living in one); and ``could not run``
(no server, a missing dependency), which, for anything the store owes, means it is not
certified however green the rest is.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

__all__ = ["Outcome", "Result", "Results", "StoreFacts", "Verdict"]

Outcome = str
PASSED, FAILED, NOT_OFFERED, COULD_NOT_RUN = "passed", "failed", "not offered", "could not run"
_WORST_FIRST = (FAILED, COULD_NOT_RUN, PASSED, NOT_OFFERED)

FAILED_BECAUSE = "durable_failed_because"
"""The user property saying why a test failed when the reason is the run's, not the
requirement's: :data:`TIMED_OUT`, or the testing hook's error in one line."""
TIMED_OUT = "timed out"
_MESSAGE_LIMIT = 500


@dataclass
class StoreFacts:
    """What the header and the verdict say about a store."""

    name: str
    distribution: str | None
    version: str | None
    capabilities: frozenset[str]
    url: str | None = None
    server: str | None = None


@dataclass
class Result:
    nodeid: str
    store: str
    requirement: str
    outcome: Outcome
    message: str | None = None
    duration: float = 0.0
    because: str | None = None
    """For a failure: :data:`TIMED_OUT`, or the testing hook's error, or ``None``."""


@dataclass
class Verdict:
    store: str
    certified: bool
    complete: bool
    line: str
    required: tuple[int, int]
    offered: tuple[int, int]
    failed: list[str] = field(default_factory=list)
    timed_out: list[str] = field(default_factory=list)
    hook_failed: dict[str, int] = field(default_factory=dict)
    """The testing hook's errors during the run, each with the number of tests it failed."""
    could_not_run: list[str] = field(default_factory=list)
    not_offered: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Collected:
    store: str
    requirement: str
    capability: str | None


def _worst(outcomes: Iterable[Outcome]) -> Outcome | None:
    found = set(outcomes)
    for outcome in _WORST_FIRST:
        if outcome in found:
            return outcome
    return None


class Results:
    """Everything a run learned, gathered from pytest's reports as they arrive."""

    def __init__(self, stores: list[StoreFacts], broken: dict[str, str]) -> None:
        self.stores = {s.name: s for s in stores}
        self.broken = dict(broken)
        self.collected: dict[str, _Collected] = {}
        self.statements: dict[str, str] = {}
        self.capability_of: dict[str, str | None] = {}
        self.selected: set[str] | None = None
        """The node ids chosen to run (after -k, -m and node ids), once collection ends."""
        self.results: dict[str, Result] = {}
        self.warnings: dict[str, list[str]] = {s.name: [] for s in stores}
        self.unrun: dict[str, tuple[Outcome, str]] = {}
        """Stores whose tests were not run, because the probe before the suite could not
        open a testbed: the outcome every test of the store gets, and the one error why."""

    # -- gathering ---------------------------------------------------------------------

    def collect(
        self, nodeid: str, store: str, requirement: str, capability: str | None, statement: str
    ) -> None:
        self.collected[nodeid] = _Collected(store, requirement, capability)
        self.capability_of.setdefault(requirement, capability)
        if statement:
            self.statements.setdefault(requirement, statement)

    def could_not_run(self, store: str, why: str) -> None:
        """The probe could not reach ``store``: none of its tests will run."""
        self.unrun[store] = (COULD_NOT_RUN, why)

    def hook_failed(self, store: str, why: str) -> None:
        """``store``'s testing hook failed on the probe for a reason of its own: none of its
        tests will run, and each is failed."""
        self.unrun[store] = (FAILED, f"the testing hook failed: {why}")

    def not_run(self, nodeid: str) -> None:
        """A test set aside because its store's probe failed, answered for as the store is."""
        found = self.collected[nodeid]
        outcome, why = self.unrun[found.store]
        self.results[nodeid] = Result(nodeid, found.store, found.requirement, outcome, why)

    def report(self, report: pytest.TestReport) -> None:
        found = self.collected.get(report.nodeid)
        if found is None:
            return
        props = dict(report.user_properties)
        if report.passed:
            outcome = PASSED if report.when == "call" else None
        elif report.failed:
            outcome = FAILED
        else:
            outcome = str(props.get("durable_outcome", COULD_NOT_RUN))
        for warning in (v for k, v in report.user_properties if k == "durable_warning"):
            if warning not in self.warnings[found.store]:
                self.warnings[found.store].append(str(warning))
        if outcome is None:
            return
        previous = self.results.get(report.nodeid)
        if previous is not None and _worst([previous.outcome, outcome]) == previous.outcome:
            previous.duration += report.duration
            return
        because = props.get(FAILED_BECAUSE) if outcome == FAILED else None
        self.results[report.nodeid] = Result(
            report.nodeid,
            found.store,
            found.requirement,
            outcome,
            _message(report) if outcome != PASSED else None,
            report.duration + (previous.duration if previous else 0.0),
            str(because) if because is not None else None,
        )

    # -- reading -----------------------------------------------------------------------

    def requirements(self) -> list[str]:
        """Every requirement id, in suite order."""
        return list(dict.fromkeys(c.requirement for c in self.collected.values()))

    def outcome(self, requirement: str, store: str) -> Outcome | None:
        return _worst(
            r.outcome
            for r in self.results.values()
            if r.requirement == requirement and r.store == store
        )

    def verdict(self, store: str) -> Verdict:
        facts = self.stores[store]
        items = [n for n, c in self.collected.items() if c.store == store]
        complete = bool(items) and all(n in self.results for n in items)
        outcomes = {r: self.outcome(r, store) for r in self.requirements()}
        not_offered = [r for r, o in outcomes.items() if o == NOT_OFFERED]

        def owed(requirement: str) -> bool:
            capability = self.capability_of[requirement]
            return capability is None or capability in facts.capabilities

        required = [r for r in outcomes if self.capability_of[r] is None and r not in not_offered]
        offered = [
            r
            for r in outcomes
            if self.capability_of[r] is not None and owed(r) and r not in not_offered
        ]
        failed = [r for r, o in outcomes.items() if o == FAILED]
        mine = [r for r in self.results.values() if r.store == store and r.outcome == FAILED]
        timed_out = list(dict.fromkeys(r.requirement for r in mine if r.because == TIMED_OUT))
        hook_failed: dict[str, int] = {}
        for result in mine:
            if result.because not in (None, TIMED_OUT):
                hook_failed[str(result.because)] = hook_failed.get(str(result.because), 0) + 1
        # A requirement failed only because the hook raised says nothing of the store's own
        # code, and listing a hundred of them would bury the one line that does; one that
        # timed out is listed as such.
        by_the_store = {r.requirement for r in mine if r.because is None}
        could_not_run = [r for r, o in outcomes.items() if o == COULD_NOT_RUN]
        passed_required = sum(outcomes[r] == PASSED for r in required)
        passed_offered = sum(outcomes[r] == PASSED for r in offered)
        certified = complete and not failed and not could_not_run and store not in self.unrun
        name = f"{store} {facts.version or '(version unknown)'}"
        counts = (
            f"{passed_required} of {len(required)} required, "
            f"{passed_offered} of {len(offered)} offered"
        )
        if store in self.unrun:
            # Every requirement would be listed with the same reason; the reason says it all.
            outcome, reason = self.unrun[store]
            state = "could not run" if outcome == COULD_NOT_RUN else "failed"
            line = f"{name}: NOT CERTIFIED, {state}, no test ran: {reason}"
            complete = False
        elif certified:
            line = f"{name}: CERTIFIED, {counts}"
        else:
            why = []
            shown = [r for r in failed if r in by_the_store]
            if shown:
                why.append(f"failed: {', '.join(shown)}")
            if timed_out:
                why.append(f"timed out: {', '.join(timed_out)}")
            why.extend(
                f"{line} (in {count} test{'s' if count > 1 else ''})"
                for line, count in hook_failed.items()
            )
            if could_not_run:
                why.append(f"could not run: {', '.join(could_not_run)}")
            if not complete:
                ran = sum(n in self.results for n in items)
                why.append(f"partial run: {ran} of {len(items)} tests ran")
            line = f"{name}: NOT CERTIFIED, {counts}; {'; '.join(why)}"
        warnings = list(self.warnings.get(store, []))
        if warnings:
            line += f" ({len(warnings)} warning{'s' if len(warnings) > 1 else ''})"
        return Verdict(
            store,
            certified,
            complete,
            line,
            (passed_required, len(required)),
            (passed_offered, len(offered)),
            failed,
            timed_out,
            hook_failed,
            could_not_run,
            not_offered,
            warnings,
        )

    def must_fail(self) -> bool:
        """Whether the run must end non-zero even if pytest saw no failure: a broken plugin,
        or something owed that could not run."""
        return (
            bool(self.broken)
            or bool(self.unrun)
            or any(self.verdict(store).could_not_run for store in self.stores)
        )

    # -- rendering ---------------------------------------------------------------------

    def table(self) -> list[str]:
        """One row per requirement with a test chosen to run, one column per store that ran.

        A store none of whose tests ran (its server could not be reached) has no column: it
        would be the same word on every row, and its verdict line says why in one line.
        """
        chosen = self.selected if self.selected is not None else set(self.collected)
        shown = {
            c.requirement
            for n in chosen
            if (c := self.collected.get(n)) is not None and c.store not in self.unrun
        }
        requirements = [r for r in self.requirements() if r in shown]
        if not requirements:
            return []
        names = [n for n in self.stores if n not in self.unrun]
        first = max(len("requirement"), *(len(r) for r in requirements))
        capability = max(len("capability"), *(len(c or "") for c in self.capability_of.values()))
        widths = [max(len(n), len(COULD_NOT_RUN)) for n in names]
        header = f"{'requirement':<{first}}  {'capability':<{capability}}  " + "  ".join(
            f"{n:<{w}}" for n, w in zip(names, widths, strict=True)
        )
        lines = [header.rstrip(), "-" * len(header.rstrip())]
        for requirement in requirements:
            cells = [
                f"{self.outcome(requirement, n) or '-':<{w}}"
                for n, w in zip(names, widths, strict=True)
            ]
            row = (
                f"{requirement:<{first}}  {self.capability_of[requirement] or '':<{capability}}  "
                + "  ".join(cells)
            )
            lines.append(row.rstrip())
        return lines

    def verdict_lines(self) -> list[str]:
        lines = []
        for store in self.stores:
            verdict = self.verdict(store)
            lines.append(verdict.line)
            lines.extend(f"    warning: {w}" for w in verdict.warnings)
        lines.extend(f"{name}: BROKEN: {why}" for name, why in sorted(self.broken.items()))
        return lines

    def as_json(self, *, conformance_version: str, core_version: str) -> dict[str, Any]:
        stores: dict[str, Any] = {}
        for name, facts in self.stores.items():
            verdict = self.verdict(name)
            stores[name] = {
                "distribution": facts.distribution,
                "version": facts.version,
                "capabilities": sorted(facts.capabilities),
                "url": facts.url,
                "server": facts.server,
                "certified": verdict.certified,
                "verdict": "CERTIFIED" if verdict.certified else "NOT CERTIFIED",
                "summary": verdict.line,
                "complete": verdict.complete,
                "not_run": self.unrun[name][1] if name in self.unrun else None,
                "required": {"passed": verdict.required[0], "total": verdict.required[1]},
                "offered": {"passed": verdict.offered[0], "total": verdict.offered[1]},
                "failed": verdict.failed,
                "timed_out": verdict.timed_out,
                "hook_failed": verdict.hook_failed,
                "could_not_run": verdict.could_not_run,
                "not_offered": verdict.not_offered,
                "warnings": verdict.warnings,
            }
        requirements = []
        for requirement in self.requirements():
            tests: dict[str, list[dict[str, Any]]] = {name: [] for name in self.stores}
            for nodeid, found in self.collected.items():
                if found.requirement != requirement:
                    continue
                result = self.results.get(nodeid)
                tests[found.store].append(
                    {
                        "nodeid": nodeid,
                        "outcome": result.outcome if result else None,
                        "message": result.message if result else None,
                        "duration": round(result.duration, 4) if result else None,
                        "because": result.because if result else None,
                    }
                )
            requirements.append(
                {
                    "id": requirement,
                    "capability": self.capability_of[requirement],
                    "statement": self.statements.get(requirement, ""),
                    "outcomes": {name: self.outcome(requirement, name) for name in self.stores},
                    "tests": tests,
                }
            )
        return {
            "durable_conformance": conformance_version,
            "durable_core": core_version,
            "stores": stores,
            "broken": dict(sorted(self.broken.items())),
            "requirements": requirements,
        }

    def write_json(self, path: Path, **versions: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.as_json(**versions), indent=2) + "\n", encoding="utf-8")


def _message(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        text = str(longrepr[2])
        text = text.removeprefix("Skipped: ")
    else:
        crash = getattr(longrepr, "reprcrash", None)
        text = str(getattr(crash, "message", None) or report.longreprtext)
    text = " ".join(text.split())
    return text if len(text) <= _MESSAGE_LIMIT else text[: _MESSAGE_LIMIT - 3] + "..."
