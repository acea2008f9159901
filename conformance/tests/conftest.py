"""The plugin's own tests: pytester projects with deliberately broken stores installed.

A project here is a pytester directory holding ``durable_broken_stores`` (this folder's
``broken_stores.py``) and a ``durable-broken-stores`` distribution whose ``durable`` entry
points name its stores, so the suite discovers them through ``durable.plugins`` exactly as
it would a third party's. ``durable.plugins`` loads entry points once per process, so the
project resets it on the way in and out.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import durable.plugins

# Imported up front so that pytester's sys.modules snapshot keeps one copy of each between
# the in-process runs.
import durable_conformance.certify  # noqa: F401
import pytest
from durable_conformance.collect import suite_modules

suite_modules()

HERE = Path(__file__).parent

BROKEN = {
    "overwrites": "OVERWRITES",
    "no-fence": "NO_FENCE",
    "first-by-equality": "FIRST_BY_EQUALITY",
    "loses-order": "LOSES_ORDER",
    "racy-appends": "RACY_APPENDS",
    "restamps": "RESTAMPS",
    "deletes-claim": "DELETES_CLAIM",
    "skips-codec": "SKIPS_CODEC",
    "forgets-wakeup": "FORGETS_WAKEUP",
    "reinstates": "REINSTATES",
    "lifts-budget": "LIFTS_BUDGET",
    "short-lease": "SHORT_LEASE",
    "reclaims-any": "RECLAIMS_ANY",
    "picks-then-hides": "PICKS_THEN_HIDES",
    "stamps-before-sending": "STAMPS_BEFORE_SENDING",
    "stale-release": "STALE_RELEASE",
    "half-commits": "HALF_COMMITS",
    "two-winners": "TWO_WINNERS",
    "checks-then-appends": "CHECKS_THEN_APPENDS",
    "ignores-message-id": "IGNORES_MESSAGE_ID",
    "accepts-control": "ACCEPTS_CONTROL",
    "undeclared-transact": "UNDECLARED_TRANSACT",
    "no-probe": "NO_PROBE",
    "unimplemented-transact": "UNIMPLEMENTED",
    "no-server": "NO_SERVER",
    "no-testing": "NO_TESTING",
    "hook-fails": "HOOK_FAILS",
    "hangs": "HANGS",
    "nothing-more": "NOTHING_MORE",
    "stale-outcome": "STALE_OUTCOME",
    "index-misses-running": "INDEX_MISSES_RUNNING",
    "racy-start": "RACY_START",
    "counts-at-settle": "COUNTS_AT_SETTLE",
    "no-lifecycle": "NO_LIFECYCLE",
    "undeclared-lifecycle": "UNDECLARED_LIFECYCLE",
    "fences-from-a-read": "FENCES_FROM_A_READ",
    "supplies-after-a-lookup": "SUPPLIES_AFTER_A_LOOKUP",
    "hides-by-upsert": "HIDES_BY_UPSERT",
    "answers-from-a-read": "ANSWERS_FROM_A_READ",
    "busy-next-ready": "BUSY_NEXT_READY",
    "hook-fails-after-probe": "HOOK_FAILS_AFTER_PROBE",
    "accepts-zero-waits": "ACCEPTS_ZERO_WAITS",
    "bytes-as-text": "BYTES_AS_TEXT",
    "discards-in-two-steps": "DISCARDS_IN_TWO_STEPS",
    "split-record": "SPLIT_RECORD",
    "split-transact": "SPLIT_TRANSACT",
    "split-renew": "SPLIT_RENEW",
    "split-release": "SPLIT_RELEASE",
    "split-beat": "SPLIT_BEAT",
    "split-settle": "SPLIT_SETTLE",
    "two-commit-arrive": "TWO_COMMIT_ARRIVE",
    "two-commit-send": "TWO_COMMIT_SEND",
    "two-commit-discard": "TWO_COMMIT_DISCARD",
    "two-commit-start": "TWO_COMMIT_START",
    "two-commit-cancel": "TWO_COMMIT_CANCEL",
    "two-commit-retry": "TWO_COMMIT_RETRY",
    "claimed-past-liveness": "CLAIMED_PAST_LIVENESS",
    "scheduled-from-a-log": "SCHEDULED_FROM_A_LOG",
    "unsorted-workflows": "UNSORTED_WORKFLOWS",
    "admits-before-encoding": "ADMITS_BEFORE_ENCODING",
    "lists-anything": "LISTS_ANYTHING",
    "forgets-the-queue": "FORGETS_THE_QUEUE",
    "stamps-only-admission": "STAMPS_ONLY_ADMISSION",
    "ignores-queues": "IGNORES_QUEUES",
    "takes-then-defers": "TAKES_THEN_DEFERS",
    "takes-any-for-no-queues": "TAKES_ANY_FOR_NO_QUEUES",
    "durables-records-last": "DURABLES_RECORDS_LAST",
    "hides-failed-attempts": "HIDES_FAILED_ATTEMPTS",
    "hands-out-another-token": "HANDS_OUT_ANOTHER_TOKEN",
    "double-fires-ticks": "DOUBLE_FIRES_TICKS",
    "restarts-ended-children": "RESTARTS_ENDED_CHILDREN",
    "ignores-operations": "IGNORES_OPERATIONS",
    "leaks-slot-on-kill": "LEAKS_SLOT_ON_KILL",
    "counts-slots-per-handle": "COUNTS_SLOTS_PER_HANDLE",
    "ignores-the-time": "IGNORES_THE_TIME",
    "prunes-after-a-read": "PRUNES_AFTER_A_READ",
    "fences-the-batch": "FENCES_THE_BATCH",
    "unfenced-record-as": "UNFENCED_RECORD_AS",
    "split-record-as": "SPLIT_RECORD_AS",
    "limits-only-routed-takes": "LIMITS_ONLY_ROUTED_TAKES",
    "keeps-slot-on-cancel": "KEEPS_SLOT_ON_CANCEL",
    "takes-back-on-lowering": "TAKES_BACK_ON_LOWERING",
    "holds-any-slot": "HOLDS_ANY_SLOT",
    "forgets-priority": "FORGETS_PRIORITY",
    "ignores-priority": "IGNORES_PRIORITY",
    "holds-in-name": "HOLDS_IN_NAME",
    "trusts-operation-names": "TRUSTS_OPERATION_NAMES",
}
"""Entry point name -> object in durable_broken_stores."""


def pytest_configure(config: pytest.Config) -> None:
    # Not ``pytest_plugins``: that is refused in a conftest below the rootdir whenever it is
    # loaded late (``pytest .`` from the root).
    if not config.pluginmanager.has_plugin("pytester"):
        config.pluginmanager.import_plugin("pytester")


class Project:
    """A pytester directory with the broken stores installed."""

    def __init__(self, pytester: pytest.Pytester) -> None:
        self.pytester = pytester
        self.report_path = pytester.path / "certification.json"
        pytester.makepyfile(durable_broken_stores=(HERE / "broken_stores.py").read_text())
        self.dist = pytester.path / "durable_broken_stores-0.0.1.dist-info"
        self.dist.mkdir()
        (self.dist / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: durable-broken-stores\nVersion: 0.0.1\n"
        )
        self.entry_points = {name: f"durable_broken_stores:{obj}" for name, obj in BROKEN.items()}
        self._write_entry_points()
        pytester.syspathinsert()

    def _write_entry_points(self) -> None:
        lines = "".join(f"{name} = {target}\n" for name, target in self.entry_points.items())
        (self.dist / "entry_points.txt").write_text(f"[durable]\n{lines}")
        importlib.invalidate_caches()
        durable.plugins._reset_for_tests()

    def install(self, **entry_points: str) -> None:
        """Add ``name=module:object`` entry points to the project's distribution."""
        self.entry_points.update(entry_points)
        self._write_entry_points()

    def run(self, *args: str) -> pytest.RunResult:
        durable.plugins._reset_for_tests()
        try:
            # The inner run has no ini file of its own, and pytest-asyncio (installed in
            # this environment for the other tests) warns on every run that leaves its loop
            # scope unset; the suite runs on its own loop and is unaffected either way.
            return self.pytester.runpytest(
                "-p", "no:cacheprovider", "-o", "asyncio_default_fixture_loop_scope=function", *args
            )
        finally:
            durable.plugins._reset_for_tests()

    @staticmethod
    def outcomes(report: dict[str, Any], store: str) -> dict[str, str | None]:
        """Requirement id -> outcome for ``store``, from a JSON report."""
        return {r["id"]: r["outcomes"][store] for r in report["requirements"]}

    def certify(self, *args: str) -> tuple[pytest.RunResult, dict[str, Any]]:
        """Run the suite with ``args`` and return the result and its JSON report."""
        if self.report_path.exists():
            self.report_path.unlink()
        result = self.run(f"--durable-report={self.report_path}", *args)
        assert self.report_path.exists(), result.stdout.str()[-3000:]
        return result, json.loads(self.report_path.read_text())


@pytest.fixture
def project(pytester: pytest.Pytester) -> Iterator[Project]:
    yield Project(pytester)
    durable.plugins._reset_for_tests()
