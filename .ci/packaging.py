#!/usr/bin/env python3
"""The packaging check: "pip-install only the backend you need", proven on every change.

The design promises that a team installs ``durable-core`` and the one store it runs on, and
nothing else. That is a claim about wheels, not about the source tree: an editable workspace
install hides a missing dependency, a module left out of a wheel, an entry point naming a
file that is not shipped, or a store that quietly imports another store's driver. So this
script checks the artefacts a user would get, the way a user would get them:

1. metadata: every published ``pyproject.toml`` carries what the index shows (licence,
   classifiers, URLs, ``requires-python``), each store pins ``durable-core`` to a range that
   admits the core being built, and the two helpers of the monorepo stay unpublishable;
2. workflows: ``.github/workflows/*.yml`` validate against the GitHub workflow schema;
3. build: ``hatch build`` inside each distribution's folder (each builds alone), then a
   look inside every wheel and sdist, and ``twine check --strict`` on all of them; and
   ``hatch build --all -t wheel`` at the root, which must build every workspace member and
   nothing else (the root is not a distribution);
4. per store, in a fresh virtualenv: install that store's wheel and the core's wheel from the
   local build (third-party dependencies come from the index, ours never do, and the script
   checks where each ``durable-*`` distribution came from), then show that the store is found
   through its entry point, ``durable.open()`` works against the real server, a claim /
   record / load round trip survives a second connection, and no other store's driver is
   importable;
5. then the conformance suite's wheel, installed the same way, run as a third party runs it:
   ``pytest --durable-store=NAME`` from an empty directory outside the repository;
6. ``durable-pydantic-ai`` alone in a fresh virtualenv: its wheel and the core's (its two
   dependencies, ``durable-core`` and ``pydantic-ai-slim``, the latter from the index), no
   store importable, and an agent run recorded and replayed on the core's memory store.

Stdlib only, so it runs under any Python 3.11+: ``hatch run python .ci/packaging.py`` (the
hatch environment provides ``twine`` and ``check-jsonschema``) or plain ``python3`` (the two
tools are then installed once into a cached virtualenv). ``hatch`` itself must be on PATH.

Servers: ``DURABLE_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``) and
``DURABLE_REDIS_URL`` (default ``redis://127.0.0.1:6379/0``). A server that does not answer
is reported as "could not run"; that fails the run only under ``CI=true``, where every server
is expected unless named in ``DURABLE_PACKAGING_OPTIONAL`` (comma-separated store names).

``release`` mode is what ``.github/workflows/publish.yml`` runs on a tag such as
``durable-redis-v0.2.0``: it refuses an unknown or private package and a tag whose version is
not the one in ``pyproject.toml``, then builds and checks that one package into ``--out``.
"""

# ruff: noqa: T201  (a CI script: it reports by printing)
from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import threading
import time
import tomllib
import zipfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Dist:
    name: str
    folder: str
    package: str  # the import name the wheel ships
    store: str | None = None  # the entry-point name in the ``durable`` group
    drivers: tuple[str, ...] = ()  # third-party modules only this store may bring
    entry: str = "plugin"  # the module under ``package`` its entry point names
    lazy: bool = False  # loading the entry point must not import ``drivers``

    @property
    def path(self) -> Path:
        return ROOT / self.folder

    @property
    def stem(self) -> str:  # the file-name form: durable_core-0.1.0-py3-none-any.whl
        return self.name.replace("-", "_")


CORE = Dist("durable-core", "packages/durable-core", "durable")
STORES = (
    Dist("durable-sqlite", "packages/durable-sqlite", "durable_sqlite", "sqlite", ("aiosqlite",)),
    Dist(
        "durable-postgres",
        "packages/durable-postgres",
        "durable_postgres",
        "postgres",
        ("psycopg", "psycopg_pool"),
        entry="entry",
        lazy=True,
    ),
    Dist(
        "durable-redis",
        "packages/durable-redis",
        "durable_redis",
        "redis",
        ("redis",),
        entry="entry",
        lazy=True,
    ),
)
CONFORMANCE = Dist("durable-conformance", "conformance", "durable_conformance")
DASHBOARD = Dist("durable-dashboard", "packages/durable-dashboard", "durable_dashboard")
PYDANTIC_AI = Dist("durable-pydantic-ai", "packages/durable-pydantic-ai", "durable_pydantic_ai")
PUBLISHED = (CORE, *STORES, CONFORMANCE, DASHBOARD, PYDANTIC_AI)
# What durable-pydantic-ai may bring besides the core: Pydantic AI's slim distribution (and
# what that requires), never a store.
PYDANTIC_AI_DEPENDENCIES = {"durable-core", "pydantic-ai-slim"}
PRIVATE = ("packages/durable-bench", "packages/durable-examples")
PRIVATE_CLASSIFIER = "Private :: Do Not Upload"

REQUIRED_CLASSIFIERS = ("Framework :: AsyncIO", "Typing :: Typed")
REQUIRED_URLS = ("Homepage", "Documentation", "Source", "Changelog", "Issues")
REQUIRES_PYTHON = ">=3.11"
LICENSE = "Apache-2.0"
# What durable-core requires at run time (the contract: pluggy, typing_extensions). Extras,
# such as `cron` (cronsim, for cron schedules), are optional and not counted here.
CORE_DEPENDENCIES = {"pluggy", "typing-extensions"}

DEFAULT_URLS = {
    "postgres": ("DURABLE_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    "redis": ("DURABLE_REDIS_URL", "redis://127.0.0.1:6379/0"),
}
DEFAULT_PORTS = {"postgresql": 5432, "postgres": 5432, "redis": 6379, "rediss": 6379}

PIP_TIMEOUT = 300
# Conformance runs wait on leases and deadlines: on a 2-core machine, one at a time keeps the
# timing-sensitive tests honest. --conformance-jobs raises it.
CONFORMANCE_SLOTS = threading.Semaphore(1)
SMOKE_TIMEOUT = 120
CONFORMANCE_TIMEOUT = 600


# ---------------------------------------------------------------------------------------
# Reporting: every check is one line with a verdict, and the run ends with a tally that
# reads like a test runner's closing line.

PASSED, FAILED, SKIPPED = "passed", "FAILED", "could not run"


@dataclass
class Result:
    name: str
    verdict: str
    detail: str = ""


@dataclass
class Report:
    results: list[Result] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    def say(self, text: str = "") -> None:
        self.lines.append(text)

    def add(self, name: str, verdict: str, detail: str = "") -> bool:
        self.results.append(Result(name, verdict, detail))
        mark = {PASSED: "ok  ", FAILED: "FAIL", SKIPPED: "skip"}[verdict]
        first, *rest = (detail or "").splitlines() or [""]
        self.say(f"  {mark} {name}" + (f": {first}" if first else ""))
        self.lines.extend("         " + line for line in rest)
        return verdict == PASSED

    def check(self, name: str, problems: Sequence[str]) -> bool:
        if problems:
            return self.add(name, FAILED, "\n".join(problems))
        return self.add(name, PASSED)

    def flush(self) -> None:
        for line in self.lines:
            print(line, flush=True)
        self.lines.clear()


def heading(text: str) -> None:
    print(f"\n== packaging: {text}", flush=True)


def tail(text: str, lines: int = 60) -> str:
    kept = text.strip().splitlines()
    cut = len(kept) - lines
    return "\n".join(([f"... ({cut} lines above cut)"] if cut > 0 else []) + kept[-lines:])


@dataclass
class Ran:
    code: int
    output: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.code == 0


def run(
    argv: Sequence[str | Path],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 300,
) -> Ran:
    start = time.monotonic()
    try:
        done = subprocess.run(
            [str(a) for a in argv],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as expired:
        out = expired.output or ""
        out = out.decode(errors="replace") if isinstance(out, bytes) else out
        return Ran(124, f"{out}\n(timed out after {timeout:.0f}s)", time.monotonic() - start)
    except OSError as error:
        return Ran(127, f"could not start {argv[0]}: {error}", time.monotonic() - start)
    return Ran(done.returncode, done.stdout, time.monotonic() - start)


def is_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


# ---------------------------------------------------------------------------------------
# Versions and specifiers, in as much of PEP 440 as our own pins use (stdlib only).

_VERSION = re.compile(
    r"^(?P<release>\d+(?:\.\d+)*)(?P<pre>(?:a|b|rc)\d+)?(?P<post>\.post\d+)?(?P<dev>\.dev\d+)?$"
)
_REQUIREMENT = re.compile(
    r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(?P<spec>[^;]*)"
)


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def release_tuple(version: str) -> tuple[int, ...]:
    match = _VERSION.match(version)
    if match is None:
        raise ValueError(
            f"{version!r} is not a version of the form 1.2.3 (with a1/b1/rc1/.post1/.dev1)"
        )
    parts = tuple(int(p) for p in match["release"].split("."))
    return parts + (0,) * (3 - len(parts))


def requirement(line: str) -> tuple[str, list[tuple[str, str]]]:
    match = _REQUIREMENT.match(line)
    if match is None:
        raise ValueError(f"cannot read the requirement {line!r}")
    specs = []
    for clause in filter(None, (c.strip() for c in match["spec"].split(","))):
        op = re.match(r"(~=|==|!=|<=|>=|<|>)\s*(.+)", clause)
        if op is None:
            raise ValueError(f"cannot read {clause!r} in {line!r}")
        specs.append((op[1], op[2].strip()))
    return normalize(match["name"]), specs


def admits(specs: list[tuple[str, str]], version: str) -> bool:
    v = release_tuple(version)
    for op, bound in specs:
        b = release_tuple(bound.rstrip(".*"))
        ok = {
            ">=": v >= b,
            ">": v > b,
            "<": v < b,
            "<=": v <= b,
            "==": v == b,
            "!=": v != b,
            "~=": v >= b and v[: len(bound.split(".")) - 1] == b[: len(bound.split(".")) - 1],
        }[op]
        if not ok:
            return False
    return True


def compatible_upper(bound: str) -> tuple[int, ...]:
    """The exclusive upper end of ``~=bound``: ``~=0.1.2`` is ``<0.2``, ``~=0.1`` is ``<1``."""
    parts = release_tuple(bound)[: max(2, len(bound.split(".")))]
    head = (*parts[:-2], parts[-2] + 1)
    return head + (0,) * (3 - len(head))


def next_breaking(version: str) -> tuple[int, ...]:
    """The first version that may break ``version``'s API: the next minor before 1.0
    (0.1 -> 0.2), the next major after (1.4 -> 2.0)."""
    major, minor, _ = release_tuple(version)[:3]
    return (0, minor + 1, 0) if major == 0 else (major + 1, 0, 0)


# ---------------------------------------------------------------------------------------
# 1. metadata


def pyproject(folder: Path) -> dict[str, object]:
    with (folder / "pyproject.toml").open("rb") as handle:
        return tomllib.load(handle)


def metadata_problems(dist: Dist, core_version: str) -> list[str]:
    problems: list[str] = []
    data = pyproject(dist.path)
    project = data.get("project")
    if not isinstance(project, dict):
        return [f"{dist.folder}/pyproject.toml has no [project] table"]
    say = problems.append
    if project.get("name") != dist.name:
        say(f"name is {project.get('name')!r}, expected {dist.name!r}")
    if "version" in project.get("dynamic", []):
        say("version is dynamic; each distribution states its own version in pyproject.toml")
    try:
        release_tuple(str(project.get("version", "")))
    except ValueError as error:
        say(f"version: {error}")
    if not str(project.get("description", "")).strip():
        say("description is empty")
    readme = project.get("readme")
    if readme != "README.md":
        say(f"readme is {readme!r}, expected 'README.md' (rendered as Markdown on the index)")
    elif not (dist.path / "README.md").is_file():
        say("README.md is missing")
    if project.get("requires-python") != REQUIRES_PYTHON:
        say(f"requires-python is {project.get('requires-python')!r}, expected {REQUIRES_PYTHON!r}")
    if project.get("license") != LICENSE:
        say(f"license is {project.get('license')!r}, expected the SPDX expression {LICENSE!r}")
    if not (dist.path / "LICENSE").is_file():
        say("LICENSE is missing from the distribution's folder")
    classifiers = [str(c) for c in project.get("classifiers", [])]
    wanted = list(REQUIRED_CLASSIFIERS)
    if dist is CONFORMANCE:
        wanted.append("Framework :: Pytest")
    for classifier in wanted:
        if classifier not in classifiers:
            say(f"classifier {classifier!r} is missing")
    for classifier in classifiers:
        if classifier.startswith("License ::"):
            say(
                f"{classifier!r}: PEP 639 replaces licence classifiers with `license = {LICENSE!r}`"
            )
        if classifier.startswith("Private ::"):
            say(f"{classifier!r} would make the index refuse this published distribution")
    urls = project.get("urls", {})
    for key in REQUIRED_URLS:
        if not isinstance(urls, dict) or not str(urls.get(key, "")).startswith("https://"):
            say(f"[project.urls] has no https {key} URL")
    if not (dist.path / "src" / dist.package / "py.typed").is_file():
        say(f"src/{dist.package}/py.typed is missing (the Typing :: Typed promise)")

    dependencies = [str(d) for d in project.get("dependencies", [])]
    names: dict[str, list[tuple[str, str]]] = {}
    for line in dependencies:
        try:
            name, specs = requirement(line)
        except ValueError as error:
            say(str(error))
            continue
        names[name] = specs
    if dist is CORE:
        extra = sorted(set(names) - CORE_DEPENDENCIES)
        if extra:
            allowed = ", ".join(sorted(CORE_DEPENDENCIES))
            say(f"durable-core depends on {extra}; the contract allows {allowed}")
    else:
        core_specs = names.get("durable-core")
        if core_specs is None:
            say("does not depend on durable-core")
        else:
            specs = core_specs
            ops = {op for op, _ in specs}
            pin = "durable-core" + ",".join(o + b for o, b in specs)
            if not ({">=", "~="} & ops and ({"<", "~="} & ops)):
                say(f"{pin} needs a lower and an upper bound")
            elif not admits(specs, core_version):
                say(f"{pin} excludes the core being built ({core_version})")
            else:
                upper = [release_tuple(b) for op, b in specs if op == "<"]
                upper += [compatible_upper(b) for op, b in specs if op == "~="]
                if upper and min(upper) > next_breaking(core_version):
                    say(
                        f"{pin} admits versions past the next "
                        f"breaking one ({'.'.join(map(str, next_breaking(core_version)))})"
                    )
        for other in PUBLISHED:
            if other is not CORE and normalize(other.name) in names:
                say(f"depends on {other.name}; a distribution depends on durable-core only")
    if dist is PYDANTIC_AI and set(names) != PYDANTIC_AI_DEPENDENCIES:
        say(
            f"durable-pydantic-ai depends on {sorted(names)}; it may depend on "
            f"{', '.join(sorted(PYDANTIC_AI_DEPENDENCIES))} only"
        )
    if dist.store is not None:
        for other in STORES:
            if other is dist:
                continue
            for driver in other.drivers:
                if normalize(driver) in names or (
                    driver == "psycopg_pool" and "psycopg-pool" in names
                ):
                    say(f"depends on {driver}, the {other.store} store's driver")
        entry_points = project.get("entry-points", {})
        group = entry_points.get("durable", {}) if isinstance(entry_points, dict) else {}
        if group.get(dist.store) != f"{dist.package}.{dist.entry}":
            say(
                f"[project.entry-points.durable] should map "
                f'{dist.store} = "{dist.package}.{dist.entry}"'
            )
    if dist is CONFORMANCE:
        entry_points = project.get("entry-points", {})
        group = entry_points.get("pytest11", {}) if isinstance(entry_points, dict) else {}
        if not group:
            say("[project.entry-points.pytest11] is missing: pytest would not load the plugin")
    return problems


def private_problems(folder: str) -> list[str]:
    project = pyproject(ROOT / folder).get("project", {})
    classifiers = project.get("classifiers", []) if isinstance(project, dict) else []
    if PRIVATE_CLASSIFIER not in classifiers:
        return [
            f"{folder} must keep the {PRIVATE_CLASSIFIER!r} classifier so it can never be uploaded"
        ]
    return []


def check_metadata(report: Report) -> str:
    heading("metadata")
    core_version = str(pyproject(CORE.path)["project"]["version"])  # type: ignore[index]
    for dist in PUBLISHED:
        report.check(f"metadata {dist.name}", metadata_problems(dist, core_version))
    for folder in PRIVATE:
        report.check(f"unpublishable {folder}", private_problems(folder))
    report.flush()
    return core_version


# ---------------------------------------------------------------------------------------
# Tools: hatch from PATH; twine and check-jsonschema from this interpreter when it has them
# (the hatch environment), otherwise from a virtualenv made once in the cache.

TOOLS = {"twine": "twine>=6.1", "check_jsonschema": "check-jsonschema>=0.29"}


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "durable-packaging"


def venv_python(venv: Path) -> Path:
    return venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def base_python() -> str:
    return getattr(sys, "_base_executable", None) or sys.executable


def clean_env(venv: Path | None = None) -> dict[str, str]:
    """The environment a fresh shell would give: no trace of the hatch environment this
    script may run inside, so nothing of the workspace leaks into a test virtualenv."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("HATCH_ENV", "PYTHON", "VIRTUAL_ENV", "CONDA"))
    }
    env.update(
        PYTHONNOUSERSITE="1",
        PYTHONDONTWRITEBYTECODE="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        PIP_NO_INPUT="1",
        PIP_PROGRESS_BAR="off",
    )
    active = os.environ.get("VIRTUAL_ENV")
    path = [
        p
        for p in env.get("PATH", "").split(os.pathsep)
        if p and not (active and p.startswith(active))
    ]
    if venv is not None:
        env["VIRTUAL_ENV"] = str(venv)
        path.insert(0, str(venv_python(venv).parent))
    env["PATH"] = os.pathsep.join(path)
    return env


def tool(module: str, report: Report) -> list[str] | None:
    import importlib.util

    if importlib.util.find_spec(module) is not None:
        return [sys.executable, "-m", module]
    venv = cache_dir() / "tools"
    python = venv_python(venv)
    probe = (
        run([python, "-c", f"import {module}"], env=clean_env(venv)) if python.exists() else None
    )
    if probe is None or not probe.ok:
        report.say(
            f"  ..   {module} is not in this environment; installing {TOOLS[module]} into {venv}"
        )
        report.flush()
        if not python.exists():
            made = run([base_python(), "-m", "venv", venv])
            if not made.ok:
                report.add(f"tool {module}", FAILED, tail(made.output))
                return None
        got = run(
            [python, "-m", "pip", "install", "--quiet", *TOOLS.values()],
            env=clean_env(venv),
            timeout=PIP_TIMEOUT,
        )
        if not got.ok:
            report.add(f"tool {module}", FAILED, tail(got.output))
            return None
    return [str(python), "-m", module]


def hatch() -> list[str] | None:
    found = shutil.which("hatch")
    return [found] if found else None


# ---------------------------------------------------------------------------------------
# 2. workflows


def check_workflows(report: Report) -> None:
    heading("GitHub workflows (check-jsonschema, vendor.github-workflows)")
    files = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))
    if not files:
        report.add("workflows", FAILED, "no files in .github/workflows")
    else:
        checker = tool("check_jsonschema", report)
        if checker is not None:
            for file in files:
                ran = run(
                    [*checker, "--builtin-schema", "vendor.github-workflows", file], timeout=120
                )
                name = f"workflow {file.relative_to(ROOT)}"
                report.add(name, PASSED) if ran.ok else report.add(name, FAILED, tail(ran.output))
    report.flush()


# ---------------------------------------------------------------------------------------
# 3. build and inspect


def version_of(dist: Dist) -> str:
    return str(pyproject(dist.path)["project"]["version"])  # type: ignore[index]


def artefacts(dist: Dist, out: Path) -> tuple[Path, Path]:
    version = version_of(dist)
    return out / f"{dist.stem}-{version}-py3-none-any.whl", out / f"{dist.stem}-{version}.tar.gz"


def build(dist: Dist, out: Path, report: Report) -> bool:
    command = hatch()
    if command is None:
        return report.add(
            f"build {dist.name}", FAILED, "hatch is not on PATH (pip install 'hatch>=1.18')"
        )
    for stale in artefacts(dist, out):
        stale.unlink(missing_ok=True)
    ran = run([*command, "build", out], cwd=dist.path, env=clean_env(), timeout=300)
    wheel, sdist = artefacts(dist, out)
    if not ran.ok:
        return report.add(f"build {dist.name}", FAILED, tail(ran.output))
    missing = [p.name for p in (wheel, sdist) if not p.is_file()]
    if missing:
        return report.add(f"build {dist.name}", FAILED, f"hatch build did not produce {missing}")
    return report.add(
        f"build {dist.name}", PASSED, f"{wheel.name}, {sdist.name} ({ran.seconds:.1f}s)"
    )


def inspect_problems(dist: Dist, out: Path) -> list[str]:
    """What the index and the installer will see: the files, the licence, the metadata."""
    wheel, sdist = artefacts(dist, out)
    version = version_of(dist)
    problems: list[str] = []
    say = problems.append
    info = f"{dist.stem}-{version}.dist-info"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(f"{info}/METADATA").decode()
        entry_points = (
            archive.read(f"{info}/entry_points.txt").decode()
            if f"{info}/entry_points.txt" in names
            else ""
        )
    shipped = [n for n in names if not n.startswith(info + "/")]
    for required in (
        f"{dist.package}/__init__.py",
        f"{dist.package}/py.typed",
        f"{info}/licenses/LICENSE",
    ):
        if required not in names:
            say(f"the wheel lacks {required}")
    if dist.store is not None and f"{dist.package}/{dist.entry}.py" not in names:
        say(f"the wheel lacks {dist.package}/{dist.entry}.py, which its entry point names")
    strays = [n for n in shipped if not n.startswith(dist.package + "/")]
    if strays:
        say(f"the wheel ships files outside {dist.package}/: {strays[:5]}")
    if any("/tests/" in n or n.startswith("tests/") for n in shipped):
        say("the wheel ships tests")
    headers = dict(
        (k, v)
        for k, _, v in (line.partition(": ") for line in metadata.split("\n\n", 1)[0].splitlines())
        if v
    )
    if headers.get("License-Expression") != LICENSE:
        say(f"METADATA License-Expression is {headers.get('License-Expression')!r}")
    if headers.get("Description-Content-Type", "").split(";")[0] != "text/markdown":
        say("METADATA has no Markdown long description")
    if dist.store is not None and f"{dist.store} = {dist.package}.{dist.entry}" not in entry_points:
        say(f"entry_points.txt does not register {dist.store} = {dist.package}.{dist.entry}")
    # Every module in the wheel must come from the sdist, or a rebuild from the sdist (what
    # a distro packager does) would lose it.
    with tarfile.open(sdist) as archive:
        members = {m.name.split("/", 1)[1] for m in archive.getmembers() if "/" in m.name}
    for name in ("pyproject.toml", "README.md", "LICENSE", "PKG-INFO", "CHANGELOG.md"):
        if name not in members:
            say(f"the sdist lacks {name}")
    lost = [n for n in shipped if f"src/{n}" not in members]
    if lost:
        say(f"the sdist lacks files the wheel ships: {lost[:5]}")
    return problems


def build_all(dists: Sequence[Dist], out: Path, report: Report) -> list[Dist]:
    """Build and inspect ``dists``; return those that built (inspection failures are
    reported, but the install checks still run on what built, to say as much as they can)."""
    heading(f"build (hatch build inside each folder) into {out}")
    built = [d for d in dists if build(d, out, report)]
    for dist in built:
        report.check(f"contents {dist.name}", inspect_problems(dist, out))
    report.flush()
    twine = tool("twine", report)
    files = [p for d in built for p in artefacts(d, out)]
    if twine is not None and files:
        ran = run([*twine, "check", "--strict", *files], timeout=300)
        report.add(
            "twine check --strict", PASSED if ran.ok else FAILED, "" if ran.ok else tail(ran.output)
        )
    report.flush()
    return built


def check_workspace_build(out: Path, report: Report) -> bool:
    """``hatch build --all`` at the root, as README.md tells a reader to build everything:
    one wheel per workspace member, published or private, and none for the root."""
    command = hatch()
    if command is None:
        return report.add("hatch build --all", FAILED, "hatch is not on PATH")
    out.mkdir(parents=True, exist_ok=True)
    ran = run(
        [*command, "build", "--all", "-t", "wheel", out], cwd=ROOT, env=clean_env(), timeout=600
    )
    if not ran.ok:
        return report.add("hatch build --all at the root", FAILED, tail(ran.output))
    members = [d.path for d in PUBLISHED] + [ROOT / folder for folder in PRIVATE]
    names = [pyproject(folder)["project"]["name"] for folder in members]  # type: ignore[index]
    expected = {str(name).replace("-", "_") for name in names}
    built = {p.name.split("-", 1)[0] for p in out.glob("*.whl")}
    problems = [f"no wheel for {name}" for name in sorted(expected - built)]
    problems += [f"a wheel that is no member's: {name}" for name in sorted(built - expected)]
    report.check(f"hatch build --all at the root builds the {len(expected)} members", problems)
    report.flush()
    return not problems


# ---------------------------------------------------------------------------------------
# 4. and 5. a fresh virtualenv per store, then the conformance suite inside it

# Runs inside the store's virtualenv, from a directory outside the repository. Stdlib and
# what the two wheels installed, nothing else.
SMOKE = textwrap.dedent(
    """
    import asyncio, importlib.metadata as md, importlib.util, json, sys, traceback, uuid
    from datetime import timedelta

    store, distribution, url = sys.argv[1:4]
    forbidden = json.loads(sys.argv[4])
    deferred = json.loads(sys.argv[5])  # drivers that finding the stores must not import
    failures = []

    def check(what, ok, detail=""):
        print(("ok   " if ok else "FAIL ") + what + (": " + detail if detail else ""), flush=True)
        if not ok:
            failures.append(what)
        return ok

    import durable
    from durable.plugins import UnknownStore, broken_stores

    points = [ep for ep in md.entry_points(group="durable") if ep.name == store]
    check(f"entry point durable:{store} registered by {distribution}",
          any(ep.dist is not None and ep.dist.name == distribution for ep in points),
          ", ".join(f"{ep.value} from {ep.dist.name if ep.dist else '?'}" for ep in points)
          or "none")
    installed = durable.stores()
    broken = broken_stores()
    check(f"durable.stores() includes {store!r}", store in installed,
          f"installed: {sorted(installed)}; broken: {broken}")
    check("no store plugin is broken", not broken, json.dumps(broken))
    if deferred:
        loaded = [module for module in deferred if module in sys.modules]
        check("finding the stores imports none of " + ", ".join(deferred), not loaded,
              f"imported: {loaded}")
    if store in installed:
        plugin = installed[store]
        check(f"the {store} plugin names its distribution", plugin.distribution == distribution,
              f"distribution={plugin.distribution!r}, version={plugin.version!r}")
    for module in forbidden:
        check(f"{module} is not importable", importlib.util.find_spec(module) is None,
              "another store's driver (or store) came along")
    try:
        durable.plugins.for_url("nosuchstore://x")
        check("an unknown scheme is refused", False, "for_url accepted nosuchstore://")
    except UnknownStore as error:
        check("an unknown scheme is refused, naming the installed stores",
              store in str(error), str(error))

    async def round_trip():
        workflow = f"packaging-{uuid.uuid4().hex[:12]}"
        value = {"hello": "world", "n": 1, "items": [1, 2, 3]}
        async with durable.open(url) as opened:
            check(f"durable.open({url!r})", True, type(opened).__name__)
            holder = await opened.checkpointer.claim(
                workflow, liveness=timedelta(seconds=30), budget=timedelta(seconds=120))
            if not check("claim", holder is not None, repr(holder)):
                return
            recorded = await opened.checkpointer.record(holder, "greeting", value)
            check("record", recorded.first and recorded.value == value, repr(recorded))
            loaded = await opened.checkpointer.load(workflow)
            check("load", loaded == {"greeting": value}, repr(loaded))
            await opened.checkpointer.release(holder)
        async with durable.open(url) as again:  # a second connection: durable before return
            loaded = await again.checkpointer.load(workflow)
            check("load on a second connection", loaded == {"greeting": value}, repr(loaded))
            await again.discard(workflow)
            check("discard", await again.checkpointer.load(workflow) == {})

    if store in installed:
        try:
            asyncio.run(asyncio.wait_for(round_trip(), 60))
        except BaseException as error:
            check("claim/record/load round trip", False, f"{type(error).__name__}: {error}")
            traceback.print_exc(limit=-4, file=sys.stdout)
    sys.exit(1 if failures else 0)
    """
)

# Runs inside a virtualenv: where did each durable-* distribution come from? pip writes a
# PEP 610 direct_url.json for an install from a file and none for one from an index.
PROVENANCE = textwrap.dedent(
    """
    import importlib.metadata as md, importlib.util, json, re, sys, urllib.parse, urllib.request
    dist_dir, expected, forbidden = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
    found, wrong = {}, []
    for module in forbidden:
        if importlib.util.find_spec(module) is not None:
            wrong.append(f"{module} is importable: another store's driver came along")
    for dist in md.distributions():
        name = re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower()
        if not name.startswith("durable-"):
            continue
        found[name] = dist.version
        raw = dist.read_text("direct_url.json")
        url = json.loads(raw).get("url", "") if raw else ""
        path = ""
        if url.startswith("file:"):
            path = urllib.request.url2pathname(urllib.parse.urlsplit(url).path)
        if not path.startswith(dist_dir):
            wrong.append(f"{name} {dist.version} came from {url or 'an index'}, not {dist_dir}")
    for name, version in expected.items():
        if found.get(name) != version:
            wrong.append(f"{name} {version} is not installed (found {found.get(name)})")
    for name in sorted(set(found) - set(expected)):
        wrong.append(f"{name} {found[name]} is installed but was not asked for")
    print(json.dumps({"found": found, "wrong": wrong}))
    """
)


@dataclass(frozen=True)
class Server:
    url: str
    answering: bool
    expected: bool
    why: str = ""


def server_for(store: Dist, workdir: Path) -> Server:
    if store.store == "sqlite":
        return Server(f"sqlite:///{workdir / 'packaging.db'}", True, True)
    variable, default = DEFAULT_URLS[str(store.store)]
    url = os.environ.get(variable) or default
    optional = {s.strip() for s in os.environ.get("DURABLE_PACKAGING_OPTIONAL", "").split(",")}
    expected = is_ci() and store.store not in optional
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or DEFAULT_PORTS.get(parts.scheme, 0)
    try:
        with socket.create_connection((host, port), timeout=3):
            return Server(url, True, expected)
    except OSError as error:
        return Server(
            url, False, expected, f"{host}:{port} does not answer ({error}); set {variable}"
        )


def redact(url: str) -> str:
    return re.sub(r"//([^:/@]+):[^@/]+@", r"//\1:***@", url)


def pip_install(venv: Path, files: Sequence[Path], cwd: Path) -> Ran:
    return run(
        [venv_python(venv), "-m", "pip", "install", *files],
        cwd=cwd,
        env=clean_env(venv),
        timeout=PIP_TIMEOUT,
    )


def provenance(
    venv: Path, out: Path, expected: dict[str, str], forbidden: Sequence[str], cwd: Path
) -> list[str]:
    """Where each installed ``durable-*`` came from, and that no module in ``forbidden`` is
    importable."""
    script = cwd / "provenance.py"
    script.write_text(PROVENANCE)
    argv: list[str | Path] = [venv_python(venv), script, str(out), json.dumps(expected)]
    argv.append(json.dumps(list(forbidden)))
    ran = run(argv, cwd=cwd, env=clean_env(venv))
    if not ran.ok:
        return [tail(ran.output)]
    answer = json.loads(ran.output.strip().splitlines()[-1])
    return list(answer["wrong"])


def certification_problems(path: Path, store: Dist) -> tuple[list[str], str]:
    """Read the suite's JSON report: it must certify this store, and name the versions that
    were built (so the run tested these wheels, not something else on the path)."""
    if not path.is_file():
        return [f"--durable-report wrote no {path.name}"], ""
    try:
        data = json.loads(path.read_text())
    except ValueError as error:
        return [f"{path.name} is not JSON: {error}"], ""
    problems = []
    entry = data.get("stores", {}).get(store.store) if isinstance(data, dict) else None
    if not isinstance(entry, dict):
        return [f"{path.name} has no entry for the {store.store} store"], ""
    if entry.get("certified") is not True:
        problems.append(f"{path.name} does not certify {store.store}: {entry.get('summary')}")
    for key, dist in (("durable_conformance", CONFORMANCE), ("durable_core", CORE)):
        if data.get(key) != version_of(dist):
            problems.append(f"the report says {key} {data.get(key)}, built {version_of(dist)}")
    if entry.get("version") != version_of(store):
        problems.append(
            f"the report says {store.name} {entry.get('version')}, built {version_of(store)}"
        )
    return problems, str(entry.get("summary") or "")


def check_store(store: Dist, out: Path, scratch: Path, conformance: bool) -> Report:
    report = Report()
    report.say(f"\n-- {store.name}")
    workdir = Path(tempfile.mkdtemp(prefix=f"{store.store}-", dir=scratch))
    venv = workdir / "venv"
    outside = workdir / "outside"  # the third party's project directory: empty, not the repo
    outside.mkdir()
    server = server_for(store, workdir)
    if not server.answering:
        verdict = FAILED if server.expected else SKIPPED
        report.add(
            f"{store.name}: could not run, no server at {redact(server.url)}",
            verdict,
            server.why + (" (CI=true: this server is expected)" if server.expected else ""),
        )
        return report

    made = run([base_python(), "-m", "venv", venv], timeout=120)
    if not report.add(
        f"{store.name}: fresh virtualenv",
        PASSED if made.ok else FAILED,
        "" if made.ok else tail(made.output),
    ):
        return report
    core_wheel, _ = artefacts(CORE, out)
    store_wheel, _ = artefacts(store, out)
    installed = pip_install(venv, [core_wheel, store_wheel], outside)
    if not report.add(
        f"{store.name}: pip install {core_wheel.name} {store_wheel.name}",
        PASSED if installed.ok else FAILED,
        f"{installed.seconds:.1f}s" if installed.ok else tail(installed.output),
    ):
        return report
    others = [o for o in STORES if o is not store]
    drivers = [m for o in others for m in (*o.drivers, o.package)]
    forbidden = [*drivers, CONFORMANCE.package]
    expected = {CORE.name: version_of(CORE), store.name: version_of(store)}
    report.check(
        f"{store.name}: durable-* distributions came from the local build only",
        provenance(venv, out, expected, forbidden, workdir),
    )
    smoke = workdir / "smoke.py"
    smoke.write_text(SMOKE)
    ran = run(
        [
            venv_python(venv),
            smoke,
            str(store.store),
            store.name,
            server.url,
            json.dumps(forbidden),
            json.dumps(list(store.drivers) if store.lazy else []),
        ],
        cwd=outside,
        env=clean_env(venv),
        timeout=SMOKE_TIMEOUT,
    )
    lines = ran.output.splitlines()
    shown_url = redact(server.url).replace(str(workdir), "$WORKDIR")
    passed = sum(line.startswith("ok ") for line in lines)
    report.add(
        f"{store.name}: found by entry point, durable.open({shown_url}), round trip, "
        "no other store's driver importable",
        PASSED if ran.ok else FAILED,
        f"{passed} checks"
        if ran.ok
        else tail("\n".join(line for line in lines if not line.startswith("ok ")), 40),
    )
    cli = run([venv / "bin" / "durable", "stores"], cwd=outside, env=clean_env(venv), timeout=60)
    listed = cli.ok and any(line.split()[:1] == [store.store] for line in cli.output.splitlines())
    listed = listed and "broken" not in cli.output
    report.add(
        f"{store.name}: `durable stores` (the console script) lists it",
        PASSED if listed else FAILED,
        "" if listed else tail(cli.output, 20),
    )
    if not conformance:
        return report

    conformance_wheel, _ = artefacts(CONFORMANCE, out)
    installed = pip_install(venv, [core_wheel, store_wheel, conformance_wheel], outside)
    if not report.add(
        f"{store.name}: pip install {conformance_wheel.name}",
        PASSED if installed.ok else FAILED,
        f"{installed.seconds:.1f}s" if installed.ok else tail(installed.output),
    ):
        return report
    expected[CONFORMANCE.name] = version_of(CONFORMANCE)
    report.check(
        f"{store.name}: durable-conformance came from the local build only, bringing no driver",
        provenance(venv, out, expected, drivers, workdir),
    )
    report_file = workdir / "certification.json"
    argv: list[str | Path] = [
        venv / "bin" / "pytest",
        f"--durable-store={store.store}",
        f"--durable-report={report_file}",
    ]
    if store.store != "sqlite":
        argv.append(f"--durable-url={server.url}")
    shown = " ".join(str(a) for a in argv[1:]).replace(server.url, redact(server.url))
    shown = shown.replace(str(workdir), "$WORKDIR")
    name = f"{store.name}: pytest --durable-store={store.store}, from outside the repository"
    with CONFORMANCE_SLOTS:  # timing-sensitive tests: one suite at a time on a small machine
        ran = run(argv, cwd=outside, env=clean_env(venv), timeout=CONFORMANCE_TIMEOUT)
    summary = next((line for line in reversed(ran.output.splitlines()) if line.strip()), "")
    if ran.code == 5:
        report.add(
            name,
            FAILED,
            "collected no tests from an empty directory: the plugin must bring its own test "
            f"modules\n$ pytest {shown}\n" + tail(ran.output, 30),
        )
    elif not ran.ok:
        # The certification table lists every requirement; the ones that passed are noise here.
        kept = [line for line in ran.output.splitlines() if not re.search(r"\s(passed)$", line)]
        report.add(name, FAILED, f"exit {ran.code}\n$ pytest {shown}\n" + tail("\n".join(kept), 60))
    else:
        problems, verdict = certification_problems(report_file, store)
        if problems:
            report.add(name, FAILED, "\n".join(problems))
        else:
            report.add(name, PASSED, f"{verdict or summary.strip('= ')} ({ran.seconds:.0f}s)")
    return report


AGENT_SMOKE = textwrap.dedent(
    """
    # An agent run as a workflow, from the installed wheels alone: a scripted model stands in
    # for a real one, the memory store (in the core) for a server. Prints "ok ..." per check.
    import asyncio

    import durable
    from durable.run import Finished, resume
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from durable_pydantic_ai import Durability, run_agent

    calls = []


    def model(messages, info):
        calls.append(len(messages))
        if len(calls) == 1:
            return ModelResponse(parts=[ToolCallPart("double", {"n": 21}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("42")])


    agent = Agent(FunctionModel(model), name="smoke", capabilities=[Durability()])


    @agent.tool_plain
    def double(n: int) -> int:
        return 2 * n


    async def body(run):
        return (await run_agent(run, agent, "double 21")).output


    async def main():
        async with durable.open("memory://") as store:
            assert await resume(store, "wf", body) == Finished("42")
            assert await resume(store, "wf", body) == Finished("42")
            keys = list(await store.checkpointer.load("wf"))
        assert keys == ["agent:model:1", "agent:tool:1:c1", "agent:model:2"], keys
        assert len(calls) == 2, calls
        print("ok an agent run records its model requests and tool call, and replays them")


    asyncio.run(main())
    """
)


def check_pydantic_ai(out: Path, scratch: Path) -> Report:
    """durable-pydantic-ai installs alone, with its two dependencies: its wheel and the
    core's from the local build, pydantic-ai-slim from the index, and no store."""
    report = Report()
    dist = PYDANTIC_AI
    report.say(f"\n-- {dist.name}")
    workdir = Path(tempfile.mkdtemp(prefix="pydantic-ai-", dir=scratch))
    venv = workdir / "venv"
    outside = workdir / "outside"
    outside.mkdir()
    made = run([base_python(), "-m", "venv", venv], timeout=120)
    if not report.add(
        f"{dist.name}: fresh virtualenv",
        PASSED if made.ok else FAILED,
        "" if made.ok else tail(made.output),
    ):
        return report
    core_wheel, _ = artefacts(CORE, out)
    wheel, _ = artefacts(dist, out)
    installed = pip_install(venv, [core_wheel, wheel], outside)
    if not report.add(
        f"{dist.name}: pip install {core_wheel.name} {wheel.name}",
        PASSED if installed.ok else FAILED,
        f"{installed.seconds:.1f}s" if installed.ok else tail(installed.output),
    ):
        return report
    forbidden = [m for store in STORES for m in (*store.drivers, store.package)]
    forbidden.append(CONFORMANCE.package)
    expected = {CORE.name: version_of(CORE), dist.name: version_of(dist)}
    report.check(
        f"{dist.name}: durable-* distributions came from the local build only, no store",
        provenance(venv, out, expected, forbidden, workdir),
    )
    smoke = workdir / "agent_smoke.py"
    smoke.write_text(AGENT_SMOKE)
    ran = run([venv_python(venv), smoke], cwd=outside, env=clean_env(venv), timeout=SMOKE_TIMEOUT)
    report.add(
        f"{dist.name}: an agent run recorded and replayed on the memory store",
        PASSED if ran.ok else FAILED,
        "" if ran.ok else tail(ran.output, 40),
    )
    return report


# ---------------------------------------------------------------------------------------
# Entry points


@contextmanager
def scratch_dir(keep: bool) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="durable-packaging-"))
    try:
        yield path
    finally:
        if keep:
            print(f"\n(kept {path})")
        else:
            shutil.rmtree(path, ignore_errors=True)


def tally(report: Report, started: float) -> int:
    counts = {v: sum(r.verdict == v for r in report.results) for v in (PASSED, FAILED, SKIPPED)}
    heading(f"summary ({time.monotonic() - started:.0f}s)")
    for result in report.results:
        if result.verdict != PASSED:
            print(f"  {result.verdict}: {result.name}")
    line = f"packaging: {counts[PASSED]} passed, {counts[FAILED]} failed"
    if counts[SKIPPED]:
        line += f", {counts[SKIPPED]} skipped"
    print(line)
    return 1 if counts[FAILED] else 0


def check(args: argparse.Namespace) -> int:
    started = time.monotonic()
    report = Report()
    check_metadata(report)
    if not args.no_workflows:
        check_workflows(report)
    names = (
        {s.strip() for s in args.stores.split(",")}
        if args.stores
        else {str(s.store) for s in STORES}
    )
    unknown = names - {str(s.store) for s in STORES}
    if unknown:
        print(
            f"unknown store(s) {sorted(unknown)}; choose from sqlite, postgres, redis",
            file=sys.stderr,
        )
        return 2
    stores = [s for s in STORES if s.store in names]
    global CONFORMANCE_SLOTS
    CONFORMANCE_SLOTS = threading.Semaphore(max(1, args.conformance_jobs))
    with scratch_dir(args.keep) as scratch:
        out = Path(args.dist).resolve() if args.dist else scratch / "dist"
        out.mkdir(parents=True, exist_ok=True)
        built = build_all(PUBLISHED, out, report)
        check_workspace_build(scratch / "workspace-dist", report)
        heading("install and use each store from its wheel, then run the conformance suite")
        conformance = not args.no_conformance
        if conformance and CONFORMANCE not in built:
            conformance = False
            report.add("conformance suite", FAILED, "not run: durable-conformance did not build")
        ready = [s for s in stores if s in built and CORE in built]
        for store in stores:
            if store not in ready:
                report.add(
                    f"{store.name}: install", SKIPPED, "not attempted: a wheel did not build"
                )
        report.flush()
        jobs = max(1, min(args.jobs, len(ready) or 1))
        with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
            futures = [pool.submit(check_store, s, out, scratch, conformance) for s in ready]
            for future in futures:
                done = future.result()
                done.flush()
                report.results.extend(done.results)
        if PYDANTIC_AI in built and CORE in built:
            done = check_pydantic_ai(out, scratch)
            done.flush()
            report.results.extend(done.results)
        else:
            report.add(
                f"{PYDANTIC_AI.name}: install", SKIPPED, "not attempted: a wheel did not build"
            )
    return tally(report, started)


TAG = re.compile(r"^(?P<name>durable-[a-z]+(?:-[a-z]+)*)-v(?P<version>\d[0-9A-Za-z.]*)$")


def release(args: argparse.Namespace) -> int:
    """Build exactly the package a tag names, after refusing every way the tag can be wrong."""
    started = time.monotonic()
    report = Report()
    match = TAG.match(args.tag)
    if match is None:
        print(f"tag {args.tag!r} is not durable-<package>-v<version> (like durable-redis-v0.2.0)")
        return 2
    by_name = {d.name: d for d in PUBLISHED}
    dist = by_name.get(match["name"])
    if dist is None:
        private = [f for f in PRIVATE if f.endswith(match["name"])]
        why = "it is private (Private :: Do Not Upload)" if private else "no such distribution"
        print(f"tag {args.tag!r} names {match['name']!r}: {why}; publishable: {', '.join(by_name)}")
        return 2
    version = version_of(dist)
    if match["version"] != version:
        print(f"tag {args.tag!r} says {match['version']}; {dist.folder}/pyproject.toml: {version}")
        return 2
    heading(f"release {dist.name} {version}")
    report.check(f"metadata {dist.name}", metadata_problems(dist, version_of(CORE)))
    report.flush()
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    build_all([dist], out, report)
    ok = all(r.verdict == PASSED for r in report.results)
    strays = sorted(p.name for p in out.iterdir() if p not in artefacts(dist, out))
    if strays:
        ok = report.add(f"{out} holds only {dist.name}", FAILED, f"other files: {strays}")
    report.flush()
    github_output = os.environ.get("GITHUB_OUTPUT")
    if ok and github_output:
        with open(github_output, "a") as handle:
            handle.write(f"name={dist.name}\nversion={version}\nfolder={dist.folder}\n")
    return tally(report, started)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], prog=".ci/packaging.py")
    commands = parser.add_subparsers(dest="command")
    checking = commands.add_parser("check", help="the whole packaging check (the default)")
    for p in (parser, checking):
        p.add_argument("--stores", help="comma-separated subset of sqlite,postgres,redis")
        p.add_argument("--dist", help="build into this folder instead of a temporary one")
        p.add_argument("--no-conformance", action="store_true", help="skip the conformance suite")
        p.add_argument("--no-workflows", action="store_true", help="skip the workflow schema check")
        p.add_argument(
            "--jobs",
            type=int,
            default=int(os.environ.get("DURABLE_PACKAGING_JOBS", "3")),
            help="stores checked at once (default 3)",
        )
        p.add_argument(
            "--conformance-jobs",
            type=int,
            default=int(os.environ.get("DURABLE_PACKAGING_CONFORMANCE_JOBS", "1")),
            help="conformance suites run at once (default 1: their tests are timing-sensitive)",
        )
        p.add_argument("--keep", action="store_true", help="keep the virtualenvs and logs")
    releasing = commands.add_parser("release", help="build and check the one package a tag names")
    releasing.add_argument("--tag", required=True, help="e.g. durable-redis-v0.2.0")
    releasing.add_argument(
        "--out", default="dist", help="where the wheel and sdist go (default dist)"
    )
    args = parser.parse_args(argv)
    handlers: dict[str | None, Callable[[argparse.Namespace], int]] = {
        None: check,
        "check": check,
        "release": release,
    }
    return handlers[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
