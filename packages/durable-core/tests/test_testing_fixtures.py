"""The kit's pytest plugin, in pytest runs of their own: its fixtures reach a test with no
conftest, its option selects the store, and it loads beside the conformance plugin (whose
``--durable-store`` it does not take: that one turns a run into a certification)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TEST = """
async def test_the_selected_store(durable_testbed, durable_clock):
    async with durable_testbed() as kit:
        assert kit.name == "{name}"
        assert kit.clock is durable_clock
        await kit.durable.arrive("w", "k", 1)
        assert "k" in await kit.durable.checkpointer.load("w")
"""


def pytest_run(
    directory: Path, *args: str, autoload: bool = True
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("DURABLE_KIT_STORE", None)
    if not autoload:
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=directory,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("name", ["memory", "sqlite"])
def test_the_option_selects_the_store(tmp_path: Path, name: str) -> None:
    (tmp_path / "test_it.py").write_text(TEST.format(name=name))
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\n")
    args = () if name == "memory" else (f"--durable-kit-store={name}",)
    ran = pytest_run(tmp_path, *args)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "1 passed" in ran.stdout


def test_both_plugins_load_at_once(tmp_path: Path) -> None:
    (tmp_path / "test_it.py").write_text(TEST.format(name="sqlite"))
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\n")
    plugins = ("-p", "asyncio", "-p", "durable.fixtures", "-p", "durable_conformance")
    helped = pytest_run(tmp_path, *plugins, "--help", autoload=False)
    assert helped.returncode == 0, helped.stdout + helped.stderr
    assert "--durable-kit-store" in helped.stdout
    assert "--durable-store" in helped.stdout
    ran = pytest_run(tmp_path, *plugins, "--durable-kit-store=sqlite", autoload=False)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "1 passed" in ran.stdout


def test_an_unknown_store_is_named(tmp_path: Path) -> None:
    (tmp_path / "test_it.py").write_text(TEST.format(name="nothing"))
    (tmp_path / "pytest.ini").write_text("[pytest]\nasyncio_mode = auto\n")
    ran = pytest_run(tmp_path, "--durable-kit-store=nothing")
    assert ran.returncode == 1
    assert "no store is called 'nothing'" in ran.stdout
