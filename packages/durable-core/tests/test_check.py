"""The deploy check (``durable.check``, ``durable check``) on the kit's store.

The store is the one ``--durable-kit-store`` selects (memory by default); CI runs this file
once per store beside the testing kit's own tests.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from durable.check import Verdict, check, render
from durable.interfaces import Inspectable, Settlement, Status
from durable.run import Blocked
from durable.workflows import Workflows

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # the registries, which `durable check` imports by name too
    sys.path.insert(0, str(HERE))
check_bodies: Any = importlib.import_module("check_bodies")
EFFECTS: dict[str, int] = check_bodies.EFFECTS


async def _world(kit: Any) -> dict[str, Any]:
    """Everything the check could have changed: records, status rows and live claims."""
    seen: dict[str, Any] = {}
    checkpointer = kit.durable.checkpointer
    for workflow in ("paid", "approved", "done"):
        status = await kit.durable.status(workflow)
        claimed = (
            await checkpointer.claimed(workflow) if isinstance(checkpointer, Inspectable) else None
        )
        seen[workflow] = (await checkpointer.load(workflow), status, claimed)
    return seen


async def _production(kit: Any) -> None:
    """Three workflows written by ``production``: one blocked on its approval, one whose
    approval ("yes") has arrived, one finished (never checked)."""
    kind = check_bodies.production["payout"]
    for workflow in ("paid", "approved", "done"):
        await kit.durable.start(kind, workflow, {"order": workflow})
    for workflow in ("paid", "approved", "done"):
        outcome = await kit.run(workflow, lambda run, w=workflow: kind.body(run, {"order": w}))
        assert outcome == Blocked(("approval",))
    await kit.durable.arrive("approved", "approval", "yes")
    lifecycle = kit.durable.checkpointer
    began = await lifecycle.begin(
        "done", liveness=kit.liveness, budget=kit.liveness * 10, owner="test"
    )
    await lifecycle.settle(began.holder, Settlement(Status.FINISHED, 1, value="ok"))


async def test_an_unchanged_registry_is_fine_and_nothing_is_written(durable_testbed: Any) -> None:
    async with durable_testbed() as kit:
        await _production(kit)
        ran = EFFECTS["ran"]
        before = await _world(kit)
        # A live claim held across the check: no claim is taken, so it is never fenced.
        holder = await kit.durable.checkpointer.claim(
            "paid", liveness=kit.liveness, budget=kit.liveness * 10
        )
        assert holder is not None
        report = await check(kit.durable, check_bodies.unchanged)
        assert {f.workflow: f.verdict for f in report.findings} == {
            "paid": Verdict.FINE,
            "approved": Verdict.FINE,
        }
        assert report.broken == []
        assert EFFECTS["ran"] == ran
        after = await _world(kit)
        checkpointer = kit.durable.checkpointer
        inspectable = checkpointer
        assert isinstance(inspectable, Inspectable)
        claimed = await inspectable.claimed("paid")
        assert claimed is not None
        assert claimed.token == holder.token  # still the test's claim: none was taken
        await checkpointer.record(holder, "after-the-check", 1)  # and it is not fenced
        await checkpointer.release(holder)
        assert after["paid"][2] is not None
        after["paid"] = (*after["paid"][:2], None)
        assert after == before


async def test_a_renamed_step_is_reported_with_both_keys(durable_testbed: Any) -> None:
    async with durable_testbed() as kit:
        await _production(kit)
        ran = EFFECTS["ran"]
        before = await _world(kit)
        report = await check(kit.durable, check_bodies.renamed)
        assert EFFECTS["ran"] == ran
        assert await _world(kit) == before
        found = {f.workflow: f for f in report.findings}
        assert set(found) == {"paid", "approved"}
        for finding in found.values():
            assert finding.verdict is Verdict.DIVERGED
            assert finding.reached == ("charge-card",)
        assert found["paid"].unreached == ("charge",)
        # The approval arrived, and the dry run stopped before the body reached it: an
        # undeclared signal is listed too (the kind's signals= would leave it out).
        assert found["approved"].unreached == ("charge", "approval")


async def test_a_parser_that_now_refuses_a_stored_value_is_reported(
    durable_testbed: Any,
) -> None:
    async with durable_testbed() as kit:
        await _production(kit)
        ran = EFFECTS["ran"]
        before = await _world(kit)
        report = await check(kit.durable, check_bodies.stricter)
        assert EFFECTS["ran"] == ran
        assert await _world(kit) == before
        found = {f.workflow: f for f in report.findings}
        assert found["paid"].verdict is Verdict.FINE  # blocked before the approval
        refused = found["approved"]
        assert refused.verdict is Verdict.REFUSED
        assert (refused.key, refused.value) == ("approval", "yes")
        assert refused.error is not None
        assert "expected a whole number" in refused.error
        assert [f.workflow for f in report.broken] == ["approved"]


async def test_a_key_reused_as_another_operation_is_reported_with_both(
    durable_testbed: Any,
) -> None:
    """The store keeps the operation that wrote each record (every store here offers
    ``operations``): a step key the new code awaits is reported as reused, with the key and
    both operations, and the run stops there, writing nothing."""
    async with durable_testbed() as kit:
        await _production(kit)
        before = await _world(kit)
        report = await check(kit.durable, check_bodies.reused)
        assert await _world(kit) == before
        found = {f.workflow: f for f in report.findings}
        for workflow in ("paid", "approved"):
            finding = found[workflow]
            assert finding.verdict is Verdict.REUSED, finding
            assert finding.key == "charge"
            assert finding.error == "recorded by a step, used as an awaiting"
            assert finding.as_json()["key"] == "charge"
        assert report.counts()["reused"] == 2
        assert "reused: recorded by a step" in render(report)


async def test_an_unknown_kind_is_reported(durable_testbed: Any) -> None:
    async with durable_testbed() as kit:
        await _production(kit)
        seen: list[int] = []
        report = await check(kit.durable, Workflows(), page=1, progress=seen.append)
        assert {f.verdict for f in report.findings} == {Verdict.UNKNOWN_KIND}
        assert sorted(f.workflow for f in report.findings) == ["approved", "paid"]
        assert seen == [1, 2]  # a page of one row at a time, each workflow once


def _durable_check(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DURABLE_STORE"}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run(
        [sys.executable, "-m", "durable.cli", "check", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


async def test_the_command_exits_10_on_a_break_and_0_when_fine(durable_testbed: Any) -> None:
    async with durable_testbed() as kit:
        url = kit.testbed.url
        if url is None or kit.name == "memory":
            pytest.skip("a store another process can open")
        await _production(kit)
        fine = _durable_check(url, "check_bodies:unchanged")
        assert fine.returncode == 0, fine.stderr
        assert "every unfinished workflow reads its records" in fine.stdout
        misplaced = _durable_check("check_bodies:renamed", url)
        assert misplaced.returncode == 2, misplaced.stderr
        assert "where MODULE:NAME belongs" in misplaced.stderr
        broken = _durable_check("check_bodies:renamed", "--store", url, "--json")
        assert broken.returncode == 10, broken.stderr
        shown = json.loads(broken.stdout)
        assert shown["counts"]["diverged"] == 2
        assert {b["workflow"] for b in shown["broken"]} == {"paid", "approved"}
        assert all(b["unreached"][0] == "charge" for b in shown["broken"])
        assert all(b["reached"] == ["charge-card"] for b in shown["broken"])
