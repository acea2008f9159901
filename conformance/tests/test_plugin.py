"""The plugin as a store author and a CI job meet it: options, discovery, the table, the
verdicts, the JSON report, and the exit status that a skip cannot turn green."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from durable_conformance import suite
from durable_conformance.collect import suite_modules
from durable_conformance.requirements import suite_tests

ONE_TEST = "test_claim_exactly_one_of_many_concurrent_claims_wins"


def test_the_memory_store_is_certified_by_the_whole_suite(project: Any) -> None:
    """The reference store passes everything it owes and everything it declares, and what
    does not apply to it (another process, a cluster) is not offered, not failed."""
    result, report = project.certify("--durable-store=memory")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]
    entry = report["stores"]["memory"]
    assert entry["certified"] is True
    assert entry["verdict"] == "CERTIFIED"
    assert entry["complete"] is True
    assert entry["failed"] == []
    assert entry["could_not_run"] == []
    assert entry["required"]["passed"] == entry["required"]["total"] > 50
    assert entry["offered"]["passed"] == entry["offered"]["total"] > 0
    assert set(entry["not_offered"]) == {
        "durability.visible-to-another-process",
        "cluster.workflows-on-every-shard",
    }
    found = project.outcomes(report, "memory")
    assert set(found.values()) == {"passed", "not offered"}
    summary = entry["summary"]
    assert summary.startswith("memory ")
    assert ": CERTIFIED, " in summary
    result.stdout.fnmatch_lines(
        [
            "durable-conformance *, durable-core *",
            "durable store memory: durable-core *; capabilities: atomic-arrive, enumerate, "
            "lifecycle, limits, operations, queues, transact; server: process memory",
            "*= durable conformance =*",
            "requirement * capability * memory",
            "claim.one-winner * passed",
            "cluster.workflows-on-every-shard * cluster * not offered",
            f"{summary}",
        ]
    )


def test_the_json_report_names_versions_stores_and_every_test(project: Any) -> None:
    result, report = project.certify("--durable-store=memory,nothing-more", "-k", ONE_TEST)
    assert result.ret == pytest.ExitCode.OK
    assert report["durable_conformance"]
    assert report["durable_core"]
    assert set(report["stores"]) == {"memory", "nothing-more"}
    third_party = report["stores"]["nothing-more"]
    assert third_party["distribution"] == "durable-broken-stores"
    assert third_party["version"] == "0.0.1"
    assert third_party["capabilities"] == ["atomic-arrive", "enumerate", "lifecycle", "transact"]
    assert third_party["server"].startswith("process memory")
    assert third_party["certified"] is False
    assert third_party["complete"] is False
    assert "partial run" in third_party["summary"]
    (claim,) = [r for r in report["requirements"] if r["id"] == "claim.one-winner"]
    assert claim["capability"] is None
    assert claim["statement"].startswith("Of many concurrent claims")
    assert claim["outcomes"] == {"memory": "passed", "nothing-more": "passed"}
    (test,) = claim["tests"]["memory"]
    assert test["nodeid"] == f"durable_conformance/suite/claim.py::{ONE_TEST}[memory]"
    assert test["outcome"] == "passed"
    assert test["duration"] >= 0
    fencing = next(r for r in report["requirements"] if r["id"] == "fencing.stale-record")
    assert fencing["outcomes"] == {"memory": None, "nothing-more": None}


def test_k_selects_by_area_and_the_table_shows_only_what_ran(project: Any) -> None:
    result = project.run("--durable-store=memory", "-k", "fencing", "-v")
    assert result.ret == pytest.ExitCode.OK
    ran = [line for line in result.outlines if " PASSED" in line or " SKIPPED" in line]
    assert ran
    assert all("::test_fencing_" in line for line in ran), ran
    table = result.stdout.str().split("durable conformance")[1]
    assert "fencing.stale-record" in table
    assert "claim.one-winner" not in table
    result.stdout.fnmatch_lines(["memory *: NOT CERTIFIED, *; partial run: *"])


def test_a_failed_tests_node_id_can_be_passed_back(project: Any) -> None:
    nodeid = f"durable_conformance/suite/claim.py::{ONE_TEST}[memory]"
    result = project.run("--durable-store=memory,nothing-more", nodeid)
    result.assert_outcomes(passed=1)


def test_not_offered_is_reported_and_undeclared_transact_warned(project: Any) -> None:
    """A store that does not declare transact has its transact requirements reported not
    offered (not failed, not passed), is warned that it implements transact all the same,
    and the run passes."""
    result, report = project.certify(
        "--durable-store=undeclared-transact", "-k", "test_transact or test_capabilities"
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-3000:]
    found = project.outcomes(report, "undeclared-transact")
    transact = {r: o for r, o in found.items() if r.startswith("transact.")}
    assert transact
    assert set(transact.values()) == {"not offered"}
    assert found["capabilities.transact-as-declared"] == "passed"
    entry = report["stores"]["undeclared-transact"]
    assert any("implements transact" in w for w in entry["warnings"]), entry["warnings"]
    assert set(transact) <= set(entry["not_offered"])
    result.stdout.fnmatch_lines(
        [
            "transact.once-across-passes * transact * not offered",
            "undeclared-transact 0.0.1: NOT CERTIFIED, * (1 warning)",
            "    warning: implements transact *",
        ]
    )


def test_declared_but_unimplemented_is_a_failure(project: Any) -> None:
    """A store that declares transact and gives no probe, or raises NotImplementedError, is
    failed on every transact requirement, not excused."""
    stores = "no-probe,unimplemented-transact"
    result, report = project.certify(f"--durable-store={stores}", "-k", "test_transact")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    for store in stores.split(","):
        found = project.outcomes(report, store)
        transact = {r: o for r, o in found.items() if r.startswith("transact.")}
        assert transact, store
        assert set(transact.values()) == {"failed"}, (store, transact)
    result.stdout.fnmatch_lines(
        [
            "*declared but unimplemented: store 'no-probe' declares 'transact' but its "
            "testing hook gives no probe*",
            "*declared but unimplemented: store 'unimplemented-transact' declares 'transact' "
            "but raised NotImplementedError*",
        ]
    )


def test_a_store_that_could_not_run_is_not_certified_and_fails_the_run(project: Any) -> None:
    """A store whose server is down, or which has no testing hook, could not run: that is
    neither a pass nor a skip to shrug at, and the run exits non-zero with no test failed."""
    result, report = project.certify(
        "--durable-store=no-server,no-testing", "-k", "test_claim or test_fencing"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert result.parseoutcomes().get("failed", 0) == 0
    for store in ("no-server", "no-testing"):
        found = project.outcomes(report, store)
        ran = {o for o in found.values() if o is not None}
        assert ran == {"could not run"}, (store, ran)
        assert report["stores"][store]["could_not_run"]
        assert report["stores"][store]["not_run"]
    result.stdout.fnmatch_lines(
        [
            "durable store no-server: *server: could not run (the reason ends the run)",
            "no-server 0.0.1: NOT CERTIFIED, could not run, no test ran: the testing hook could "
            "not start a testbed: ConnectionRefusedError: *Connection refused (127.0.0.1:1)",
            "no-testing 0.0.1: NOT CERTIFIED, could not run, no test ran: store 'no-testing' "
            "has no testing hook*",
        ]
    )


UNREACHABLE = [
    pytest.param(
        "redis",
        "redis://:hunter2@127.0.0.1:1/0",
        "RedisUnavailable: could not reach Redis at 127.0.0.1:1/0",
        id="redis",
    ),
    pytest.param(
        "postgres",
        "postgresql://probe:hunter2@127.0.0.1:1/x",
        "PostgresUnavailable: could not connect to Postgres at postgresql://probe:***@127.0.0.1:1/x",
        id="postgres",
    ),
]


@pytest.mark.parametrize(("store", "url", "error"), UNREACHABLE)
def test_an_unreachable_server_is_one_could_not_run_line_not_a_traceback_per_test(
    project: Any, store: str, url: str, error: str
) -> None:
    """A real store pointed at a port nobody listens on: the probe before the suite says so
    once, no test runs, and the run fails in a screenful rather than one traceback per test."""
    result, report = project.certify(f"--durable-store={store}", f"--durable-url={url}")
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, output[-3000:]
    assert len(output.splitlines()) < 40, output[-3000:]
    assert output.count(error) == 1, output
    assert "hunter2" not in output
    assert "Traceback" not in output
    assert "could not run" in output
    assert set(result.parseoutcomes()) == {"deselected"}
    entry = report["stores"][store]
    assert entry["certified"] is False
    assert error in entry["not_run"]
    assert set(project.outcomes(report, store).values()) == {"could not run"}
    result.stdout.fnmatch_lines(
        [f"{store} *: NOT CERTIFIED, could not run, no test ran: *{error}*"]
    )


def test_listing_the_suite_with_collect_only_needs_no_server(project: Any) -> None:
    """--collect-only (an IDE's discovery, the docs' check of a command) only lists the
    suite: no probe runs, so an unreachable server neither fails nor slows the listing."""
    result = project.run(
        "--durable-store=redis", "--durable-url=redis://127.0.0.1:1/0", "--collect-only", "-q"
    )
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.OK, output[-3000:]
    assert "could not reach Redis" not in output
    assert "test_claim" in output
    probed = project.run("--durable-store=redis", "--durable-url=redis://127.0.0.1:1/0", "-q")
    assert probed.ret == pytest.ExitCode.TESTS_FAILED, "the same URL, run, must fail"


def test_a_reachable_store_in_the_same_run_is_still_certified(project: Any) -> None:
    """One store's server being down costs that store its certificate, not the others."""
    result, report = project.certify(
        "--durable-store=memory,redis", "--durable-url=redis://127.0.0.1:1/0", "-q"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()[-3000:]
    assert report["stores"]["memory"]["certified"] is True
    assert report["stores"]["redis"]["certified"] is False
    assert "could not reach Redis at 127.0.0.1:1/0" in report["stores"]["redis"]["not_run"]
    assert result.stdout.str().count("could not reach Redis") == 1
    header = next(line for line in result.outlines if line.startswith("requirement "))
    assert header.split() == ["requirement", "capability", "memory"]
    result.stdout.fnmatch_lines(
        ["memory *: CERTIFIED, *", "redis *: NOT CERTIFIED, could not run, no test ran: *"]
    )


def test_a_testing_hook_that_fails_for_its_own_reason_fails_the_store_once(
    project: Any,
) -> None:
    """A hook that raises something other than an unreachable server is a bug in the store:
    the store is failed, not excused, and the traceback is shown once, not per test."""
    result, report = project.certify("--durable-store=hook-fails,memory", "-k", "test_claim")
    output = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert output.count("Traceback (most recent call last)") == 1, output
    assert output.count("TypeError: testing() got a value it cannot use") == 3, output
    assert set(project.outcomes(report, "hook-fails").values()) - {None} == {"failed"}
    assert report["stores"]["memory"]["failed"] == []
    result.stdout.fnmatch_lines(
        [
            "durable store hook-fails: *; server: none, the testing hook failed: TypeError: "
            "testing() got a value it cannot use",
            "the testing hook of store 'hook-fails' failed:",
            "Traceback (most recent call last):",
            "*",
            "TypeError: testing() got a value it cannot use",
            "*",
            "hook-fails 0.0.1: NOT CERTIFIED, failed, no test ran: the testing hook failed: "
            "TypeError: testing() got a value it cannot use",
        ]
    )


def test_a_probe_that_hangs_is_cut_by_the_probe_timeout(project: Any) -> None:
    result, report = project.certify(
        "--durable-store=hangs", "--durable-probe-timeout=0.5", "-k", "test_claim"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert report["stores"]["hangs"]["not_run"].startswith(
        "no testbed within 0.5 s (--durable-probe-timeout)"
    )
    assert result.duration < 30


def test_an_unknown_store_fails_at_once_naming_the_installed_ones(project: Any) -> None:
    result = project.run("--durable-store=mystore")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: no store is called 'mystore'; installed stores: *memory (durable-core *)*"]
    )
    assert "collected" not in result.stdout.str()


def test_a_store_plugin_that_fails_to_import_is_reported_with_its_error(project: Any) -> None:
    project.pytester.makepyfile(
        durable_broken_import="raise ImportError('its driver, libfoo, is not installed')"
    )
    project.install(**{"import-fails": "durable_broken_import"})
    listed = project.run("--durable-list-stores")
    assert listed.ret == 1
    listed.stdout.fnmatch_lines(
        ["  import-fails: BROKEN: ImportError: its driver, libfoo, is not installed"]
    )
    named = project.run("--durable-store=import-fails")
    assert named.ret == pytest.ExitCode.USAGE_ERROR
    named.stderr.fnmatch_lines(
        ["ERROR: store 'import-fails' is installed but broken: ImportError: its driver*"]
    )
    result, report = project.certify("--durable-store=all", "-k", ONE_TEST)
    assert result.ret == pytest.ExitCode.TESTS_FAILED, "a broken plugin left the run green"
    assert report["broken"] == {"import-fails": "ImportError: its driver, libfoo, is not installed"}
    result.stdout.fnmatch_lines(
        ["durable store import-fails: BROKEN: ImportError*", "import-fails: BROKEN: ImportError*"]
    )


def test_two_store_plugins_with_one_name_are_an_error(project: Any) -> None:
    project.install(**{"nothing-more-again": "durable_broken_stores:SAME_NAME"})
    result = project.run("--durable-store=nothing-more")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: store 'nothing-more' is installed but broken: two plugins name themselves*"]
    )


def test_list_stores_names_versions_schemes_and_capabilities(project: Any) -> None:
    result = project.run("--durable-list-stores")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["durable stores (durable-core *):"])
    result.stdout.fnmatch_lines(
        [
            "  memory * durable-core * memory://  "
            "[[]atomic-arrive, enumerate, lifecycle, limits, operations, queues, transact]*"
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "  undeclared-transact * durable-broken-stores 0.0.1  undeclared-transact://  "
            "[[]atomic-arrive, enumerate, lifecycle]*"
        ]
    )
    assert "collected" not in result.stdout.str()


def test_durable_url_must_name_a_selected_store(project: Any) -> None:
    result = project.run("--durable-store=memory", "--durable-url=redis://:hunter2@host:6379")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: --durable-url 'redis://:***@host:6379': no selected store opens redis:// URLs*"]
    )
    assert "hunter2" not in result.stderr.str()
    alone = project.run("--durable-url=memory://")
    assert alone.ret == pytest.ExitCode.USAGE_ERROR
    alone.stderr.fnmatch_lines(["ERROR: --durable-url needs --durable-store=NAME"])


def test_a_suite_test_without_a_requirement_stops_collection(
    project: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A suite module with a test that names no requirement is a collection error: a new
    test can never run ungated and missing from the table."""
    extra = project.pytester.mkdir("more_suite")
    (extra / "unmarked.py").write_text(
        "from durable_conformance.subject import StoreUnderTest\n\n"
        "async def test_unmarked_forgot_its_marker(store: StoreUnderTest) -> None:\n"
        "    pass\n"
    )
    monkeypatch.setattr(suite, "__path__", [*suite.__path__, str(extra)])
    monkeypatch.delitem(sys.modules, f"{suite.__name__}.unmarked", raising=False)
    result = project.run("--durable-store=memory", "-k", ONE_TEST)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*durable_conformance.suite.unmarked.test_unmarked_forgot_its_marker carries no "
            "@requirement(...)*"
        ]
    )
    sys.modules.pop(f"{suite.__name__}.unmarked", None)


def test_without_durable_store_the_plugin_does_nothing(project: Any) -> None:
    project.pytester.makepyfile(test_mine="def test_mine():\n    assert True\n")
    result = project.run("-v")
    result.assert_outcomes(passed=1)
    assert "durable conformance" not in result.stdout.str()
    assert "durable-conformance" not in "\n".join(result.outlines[:6]).split("plugins:")[0]


def test_a_run_from_a_directory_without_an_ini_file_warns_of_nothing(
    pytester: pytest.Pytester,
) -> None:
    """A store author certifies from wherever they are; pytest-asyncio's warning that its
    fixture loop scope is unset must not greet them as if their store had to fix it."""
    assert not any(pytester.path.glob("*.ini"))
    assert not any(pytester.path.glob("*.toml"))
    result = pytester.runpytest_subprocess(
        "--durable-store=memory", "-p", "no:cacheprovider", "-k", "claim"
    )
    output = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.OK, output[-2000:]
    assert "PytestDeprecationWarning" not in output, output[:2000]
    assert "asyncio_default_fixture_loop_scope=function" in output, output[:2000]


def test_a_fixture_loop_scope_the_user_chose_is_kept(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = module\n")
    result = pytester.runpytest_subprocess(
        "--durable-store=memory", "-p", "no:cacheprovider", "-k", "claim"
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-2000:]
    assert "asyncio_default_fixture_loop_scope=module" in result.stdout.str()


def test_loading_the_plugin_imports_no_store_machinery() -> None:
    probe = (
        "import sys, durable_conformance.plugin\n"
        "print(sorted(m for m in sys.modules if m == 'durable' or m.startswith('durable.')))\n"
    )
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert ran.stdout.strip() == "[]", ran.stdout


def test_the_projects_own_tests_run_only_when_their_paths_are_given(project: Any) -> None:
    project.pytester.makepyfile(test_mine="def test_mine():\n    assert True\n")
    alone = project.run("--durable-store=memory", "-k", f"{ONE_TEST} or test_mine")
    alone.assert_outcomes(passed=1)
    both = project.run("--durable-store=memory", "-k", f"{ONE_TEST} or test_mine", "test_mine.py")
    both.assert_outcomes(passed=2)


@pytest.mark.parametrize("mode", ["strict", "auto"])
def test_a_projects_own_pytest_settings_do_not_hide_or_break_the_suite(
    project: Any, mode: str
) -> None:
    """The suite is collected by the plugin and run on its own event loop, so a project's
    python_files, python_functions and asyncio_mode change nothing."""
    project.pytester.makeini(
        "[pytest]\n"
        "python_files = check_*.py\n"
        "python_functions = check_*\n"
        f"asyncio_mode = {mode}\n"
        "asyncio_default_fixture_loop_scope = function\n"
    )
    result = project.run("--durable-store=memory", "-k", "test_claim or test_run_a_recorded_step")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-2000:]
    outcomes = result.parseoutcomes()
    selected = [
        name
        for module in suite_modules()
        for name, _ in suite_tests(module)
        if "test_claim" in name or "test_run_a_recorded_step" in name
    ]
    assert len(selected) >= 6, selected
    assert outcomes == {"passed": len(selected), "deselected": outcomes["deselected"]}, outcomes
