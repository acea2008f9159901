"""Every example in the docs runs, so that no example rots.

Each page (``README.md`` and every ``docs/**/*.md``) is read for fenced code blocks, and
each ```` ```python ```` block, and each ```` ```bash ```` block that calls ``durable``, is
one test, named ``PAGE:LINE``. A page's blocks run in order, in one temporary directory of
the page's own and one Python namespace, as a reader following the page would run them:
a later block may use what an earlier one defined or wrote. A block that is a full program
runs as it is (``asyncio.run(main())``, or ``async with`` and ``await`` at the top level,
which run in an event loop the page keeps). After it runs, every name the block uses and
never binds must exist, so a function that refers to something undefined fails here even
though nothing called it.

A block that is not a whole program says what it needs in an HTML comment on the line
before its fence, which the rendered page does not show::

    <!-- docs-test: body store=sqlite setup=stock -->

Directives (several may share one comment):

``setup=NAME[,NAME...]``
    Run the named preludes (``PRELUDES`` below) first. A prelude supplies the names a
    fragment leaves to the reader (a stand-in gateway, a parser, a ``stock`` table), and
    may check afterwards that what the block defined behaves as the page says.
``body``
    The block is the inside of a workflow body: it becomes ``async def body(run)`` and runs
    one pass with ``resume`` against the block's store. It may use ``run``, ``workflow``,
    ``store`` (the ``Durable``) and ``checkpointer``.
``store=NAME[,NAME...]``
    Run against a fresh store of each named installed store (``memory``, ``sqlite``,
    ``postgres``, ``redis``), from that store's own testing hook, so that it is isolated and
    removed afterwards, and skipped with the hook's reason when its server does not answer.
    An entry with ``://`` is a URL for the hook of the store that opens it, naming the
    server to use (``redis+cluster://``, with no host, has the redis hook start a throwaway
    cluster). The names ``url`` and ``store`` reach the first entry's testbed. Every string
    literal in the block that is a URL of a testbed's store is pointed at it (at the first
    such testbed of its kind: a cluster URL only at a cluster, any other only at a single
    server), its own query options kept and the testbed's added. Those are the isolation
    options (postgres's ``schema``, redis's ``prefix``); code that builds its own pool or
    client passes them as keywords instead, so a keyword argument naming one with a string
    literal in a call of the store's (``migrate(pool, schema="orders_wf")``; the calls are
    ``STORE_CALLS``) gets the testbed's value, and the option is left out of every URL
    literal of the block, which then names the server alone, as psycopg and redis-py want.
    Such a block must therefore not also count on a URL literal for its isolation, nor have
    two testbeds with that option. A testbed's URL inside an f-string is refused: it
    could be pointed at nothing whole. Without ``store=``, a body runs against the memory
    store.
``file=PATH``
    Write the block to ``PATH`` in the page's directory instead of running it (a module a
    later command imports, such as the workflow a ``durable worker`` runs). It must compile
    and define every name it uses. Several blocks of a page may name one ``PATH``: they are
    the parts of one file, shown with prose between them, and the file is their sources
    joined in page order, written, checked and installed whole whenever any part runs.
``entry-point=NAME[:OBJECT][,NAME[:OBJECT]...]``
    With ``file=``: also install the module as the store plugin ``NAME`` (an entry point in
    the ``durable`` group of a distribution called ``NAME``), for the page's commands only,
    as a third party's ``pip install`` would, before the page's first block runs. Several
    entry points make one distribution, called by the first: each names the module, or
    with ``:OBJECT`` an object of it (``litestore-split = litestore:split``).
``certify=NAME[,NAME...]``
    With ``entry-point=``: the named stores are also certified, in a test of their own
    (``test_a_store_the_docs_write_is_certified``): the file, installed as the same
    distribution outside the page, must pass a whole ``pytest --durable-store=NAME`` run.
    The page's own ``pytest`` lines are only collected (below); this is the one place a
    page's store meets the whole suite.

There is no directive to skip a block: every example runs. One that needs a server at a
named host names it in a URL literal, and ``store=`` points that at a testbed. (A block
against a store whose server this machine lacks is skipped with the hook's reason, as
every test of that store is.)

For a ```` ```bash ```` block, only lines that start with ``durable``, ``pytest`` or
``python``, and ``pip install`` lines that install folders of this clone (``pip install
./packages/durable-core ./packages/durable-sqlite``), run; the rest (``cd``, ``pip install
hatch``, the reader's tooling) do not. Each runs as the reader types it: the program is
looked up on the page's ``PATH`` (the ``durable`` and ``pytest`` console scripts, not
``python -m``), in the page's directory, with nothing added to ``PYTHONPATH``, and must exit
0, or the code its comment names (``# exits 3``). The environment differs from the
reader's only where the reader's set-up does: the environment this test runs in is active
(its ``bin`` first on ``PATH``, as ``hatch run`` or an activated virtualenv has it), and
bytecode is cached outside the page (``PYTHONPYCACHEPREFIX``), which changes nothing a
command does. So a command that only works with the page's directory on the import path
(``durable worker orders:payout`` importing ``orders``) fails here as it fails for a reader.

A page that installs from the clone runs in a fresh virtualenv of its own, made with
``python -m venv`` before its first block and active for every command of the page (its
``bin`` first on ``PATH``, ``VIRTUAL_ENV`` naming it, and the environment this test runs
in taken off ``PATH``, so a command the page's install did not provide fails instead of
falling back to ours). Its ``pip install`` lines run in the root of the clone, and must say
so in their comment (``# in the root of a clone of durable``), so that the page and this
test agree on where. ``pip`` may fetch what the build needs (hatchling) and the
distributions' own dependencies from the package index. Until the distributions are on
PyPI, no page may install one of them from the index
(``test_no_page_installs_our_distributions_from_the_index``).

A ``pytest`` line is collected rather than run, with ``--collect-only``: that proves its
options, the stores it names and its ``-k`` (a selection of nothing exits 5), while the
suite itself runs in ``hatch run certify``. ``durable worker`` starts in the background and
keeps running until the page is done, when it is sent SIGTERM and must exit 0. Bash blocks
take ``after="TEXT"`` (wait, before running, until a background worker has logged
``TEXT``) and ``expect="TEXT"`` (``TEXT`` must appear in what the block's commands print,
on either stream, or what the workers they started log).

The isolation rewrites of ``store=`` are the one liberty this test takes with what a page
prints, and they stay: a reader runs an example against a server of their own, while this
test runs it on a machine whose servers other runs share, so it points the example at a
fresh schema or key prefix that it removes afterwards, keeping every option the page wrote;
without that, two runs (or a run and a developer) would see each other's workflows. They
apply to the ``python`` blocks this test runs itself. A shell line is run as written: the
pages' commands name stores that need no server (``sqlite:///orders.db``, a file in the
page's own directory) or are only collected (``pytest``).

A ```` ```text ```` block marked ``<!-- docs-test: output -->`` is the exact standard output
of the block before it (of a shell block, its commands' standard output, one after another;
what they log on standard error is not part of it).
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import contextlib
import io
import json
import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import symtable
import sys
import textwrap
import time
import tomllib
import unittest
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from types import CodeType
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import durable
import pytest
from durable.clock import ManualClock
from durable.plugins import StorePlugin, Testbed, for_url
from durable.plugins import store as store_plugin
from durable.run import Blocked, Finished, Sleeping, resume

REPO = Path(__file__).resolve().parents[3]
PATIENCE = 60.0
"""Seconds to wait for a command or a worker's log line before failing (never asserted)."""

INSTALL_PATIENCE = 300.0
"""Seconds to wait for a virtualenv or a ``pip install`` (which builds wheels) to finish."""

WORKFLOW = "wf-docs"
"""The workflow id a ``body`` block runs under."""

PYTHON = {"python", "py", "python3"}
SHELL = {"bash", "sh", "shell", "console"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
DIRECTIVE = re.compile(r"^\s*<!--\s*docs-test:(?P<body>.*?)-->\s*$")
KNOWN = {
    "setup",
    "body",
    "store",
    "file",
    "entry-point",
    "certify",
    "after",
    "expect",
    "output",
}
COMMANDS = ("durable ", "pytest ", "python ")
"""What a line of a shell block starts with, when it is a command the page runs (an install
from the clone runs too: ``installs_from_clone``)."""


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


# --- reading blocks out of a page --------------------------------------------------------


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    language: str
    source: str
    directives: Mapping[str, str]
    output: str | None = None
    """The ``output`` block that follows it, if any: its exact standard output."""

    @property
    def name(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runs(self) -> bool:
        if self.language in PYTHON:
            return True
        return self.language in SHELL and bool(shell_commands(self.source))

    @property
    def installs(self) -> bool:
        """Whether the block installs from the clone, which gives its page a virtualenv."""
        return self.language in SHELL and any(
            installs_from_clone(line) for line in shell_commands(self.source)
        )


def parse_directives(text: str, where: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for token in shlex.split(text):
        key, _, value = token.partition("=")
        if key not in KNOWN:
            raise ValueError(
                f"{where}: unknown docs-test directive {key!r}; known: {', '.join(sorted(KNOWN))}"
            )
        found[key] = value
    if "entry-point" in found and "file" not in found:
        raise ValueError(f"{where}: entry-point= installs a file= block; this block has no file=")
    if "certify" in found and "entry-point" not in found:
        raise ValueError(f"{where}: certify= certifies entry-point= stores; this block has none")
    return found


def read_blocks(path: Path) -> list[Block]:
    """Every fenced block of the page, with the directives written just before it."""
    page = str(path.relative_to(REPO))
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    index = 0
    while index < len(lines):
        opened = FENCE.match(lines[index])
        if opened is None or not opened["info"].strip():
            if opened is not None:  # an untagged fence: find its end all the same
                blocks.append(Block(page, index + 1, "", "", {}))
                index = _close(lines, index, opened) + 1
                continue
            index += 1
            continue
        language = opened["info"].strip().split()[0].lower()
        end = _close(lines, index, opened)
        indent = len(opened["indent"])
        source = "\n".join(line[indent:] for line in lines[index + 1 : end]) + "\n"
        previous = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        marked = DIRECTIVE.match(previous)
        directives = (
            parse_directives(marked["body"], f"{page}:{index + 1}") if marked is not None else {}
        )
        blocks.append(Block(page, index + 1, language, source, directives))
        index = end + 1
    return _attach_outputs(blocks)


def _close(lines: list[str], start: int, opened: re.Match[str]) -> int:
    """The line that closes the fence opened at ``start``: the same character, at least as
    many of them, and nothing else."""
    fence = opened["fence"]
    for index in range(start + 1, len(lines)):
        stripped = lines[index].strip()
        if stripped and set(stripped) == {fence[0]} and len(stripped) >= len(fence):
            return index
    raise ValueError(f"a fence opened at line {start + 1} is never closed")


def _attach_outputs(blocks: list[Block]) -> list[Block]:
    attached: list[Block] = []
    for block in blocks:
        if "output" in block.directives:
            if not attached or not attached[-1].runs:
                raise ValueError(f"{block.name}: an output block follows no block that runs")
            previous = attached.pop()
            attached.append(
                Block(
                    previous.page,
                    previous.line,
                    previous.language,
                    previous.source,
                    previous.directives,
                    block.source,
                )
            )
            continue
        attached.append(block)
    return attached


def shell_commands(source: str) -> list[str]:
    """The logical lines of a shell block that run: ``durable``, ``pytest`` and ``python``
    commands, and installs from the clone."""
    joined = source.replace("\\\n", " ")
    lines = [line.strip() for line in joined.splitlines()]
    return [line for line in lines if line.startswith(COMMANDS) or installs_from_clone(line)]


def installs_from_clone(line: str) -> bool:
    """Whether ``line`` is a ``pip install`` of folders of this clone (``./packages/...``),
    the form the pages give until the distributions are on PyPI. An install from the index
    (the contributor's ``pip install 'hatch>=1.16' && hatch run demo``) is the reader's
    tooling and is not run."""
    words = shlex.split(line, comments=True)
    if words[:2] != ["pip", "install"]:
        return False
    requirements = [word for word in words[2:] if not word.startswith("-")]
    return bool(requirements) and all(word.startswith("./") for word in requirements)


ALL_BLOCKS = [block for path in pages() for block in read_blocks(path)]
RUNNING = [block for block in ALL_BLOCKS if block.runs]


def file_source(blocks: Sequence[Block], path: str) -> str:
    """The file ``path`` as a page writes it: every block naming it, joined in page order."""
    parts = [block.source for block in blocks if block.directives.get("file") == path]
    return "\n\n".join(part.strip("\n") for part in parts) + "\n"


# --- what a block may leave to the test -------------------------------------------------


@dataclass
class Gateway:
    """A stand-in payment provider: it answers and counts, and honours nothing else."""

    charges: int = 0
    payments: int = 0

    def charge(self, *details: object) -> str:
        self.charges += 1
        return f"ch_{self.charges}"

    def pay(self, *details: object) -> str:
        self.payments += 1
        return f"po_{self.payments}"


def as_count(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected a count, got {value!r}")
    return value


def as_text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text, got {value!r}")
    return value


def as_flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"expected true or false, got {value!r}")
    return value


@dataclass
class Context:
    """What a prelude is handed: the page's namespace and the block's store, if any."""

    namespace: dict[str, Any]
    testbed: Testbed[Any] | None
    store_name: str | None


async def gateway_prelude(context: Context) -> None:
    """``gateway``, ``charge_card``, ``pay``, ``order_id`` and ``amount``, as a payment
    example leaves them to the reader."""
    gateway = Gateway()
    context.namespace.update(
        gateway=gateway,
        charge_card=gateway.charge,
        pay=gateway.pay,
        order_id="order-7",
        amount=4_500,
    )


async def parsers_prelude(context: Context) -> None:
    context.namespace.update(as_count=as_count, as_text=as_text, as_flag=as_flag)


async def stock_prelude(context: Context) -> None:
    """A ``stock`` table holding the piano, in the block's store, for a ``transact``."""
    testbed = context.testbed
    if context.store_name == "sqlite" and testbed is not None:
        path = Path(str(testbed.extras["path"]))
        with contextlib.closing(sqlite3.connect(path)) as connection:
            connection.execute("CREATE TABLE stock (sku TEXT PRIMARY KEY, reserved INTEGER)")
            connection.execute("INSERT INTO stock VALUES ('piano', 0)")
            connection.commit()
        return
    raise LookupError(f"the stock prelude has no table for the {context.store_name} store")


async def drive_payout(namespace: Mapping[str, Any]) -> None:
    """The page's ``payout`` goes where it says: it sleeps, waits for approval, and pays out,
    charging once across every pass."""
    payout = namespace["payout"]
    gateway: Gateway = namespace["gateway"]
    clock = ManualClock()
    async with durable.open("memory://") as store:
        await store.send("order-7", {"id": 7, "amount": 4_500})
        sleeping = await resume(store, "order-7", payout, clock=clock)
        assert isinstance(sleeping, Sleeping), sleeping
        clock.advance(timedelta(days=2))
        assert await resume(store, "order-7", payout, clock=clock) == Blocked(("approval",))
        await store.arrive("order-7", "approval", True)
        finished = await resume(store, "order-7", payout, clock=clock)
    assert isinstance(finished, Finished), finished
    assert (gateway.charges, gateway.payments) == (1, 1)


async def payout_prelude(context: Context) -> None:
    await gateway_prelude(context)
    context.namespace.setdefault("__docs_checks__", []).append(drive_payout)


Prelude = Callable[[Context], Awaitable[None]]
PRELUDES: dict[str, Prelude] = {
    "gateway": gateway_prelude,
    "parsers": parsers_prelude,
    "stock": stock_prelude,
    "payout": payout_prelude,
}


# --- running a page --------------------------------------------------------------------


def store_entry(entry: str) -> tuple[StorePlugin, str | None]:
    """The store an entry of ``store=`` names, and the URL its testing hook is handed: an
    entry with ``://`` is a URL, for the store that opens it; any other is a store's name."""
    if "://" in entry:
        return for_url(entry), entry
    return store_plugin(entry), None


@dataclass(frozen=True)
class Target:
    """A testbed that URL literals may be pointed at: its store's schemes and its URL."""

    schemes: tuple[str, ...]
    url: str


STORE_CALLS = {
    "migrate",
    "on",
    "over",
    "open",
    "open_postgres",
    "open_redis",
    "open_sqlite",
    "PostgresCheckpointer",
    "PostgresScheduler",
    "RedisCheckpointer",
    "RedisStreamScheduler",
}
"""The calls whose ``schema=`` or ``prefix=`` keyword names a store's isolation option (a
keyword of any other call, ``tempfile.mkdtemp(prefix=...)`` say, is the reader's own)."""


def _callee(call: ast.Call) -> str | None:
    """The name a call is spelt with: ``migrate(...)`` and ``PostgresDurable.on(...)``."""
    if isinstance(call.func, ast.Name):
        return call.func.id
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return None


class Rewriter(ast.NodeTransformer):
    """Points every URL literal of a block at the testbed of its store, and every isolation
    option the block passes as a keyword at the testbed's value (see ``store=`` above)."""

    def __init__(self, targets: Sequence[Target]) -> None:
        self.targets = [(target.schemes, urlsplit(target.url)) for target in targets]
        self.isolation: dict[str, list[str]] = {}
        """Each isolation option (a query option of a testbed's URL): its value in each."""
        for _, parts in self.targets:
            for name, value in parse_qsl(parts.query):
                self.isolation.setdefault(name, []).append(value)
        self.given: set[str] = set()
        """The isolation options this block passes as keywords, left out of its URLs."""

    def rewrite(self, tree: ast.Module) -> ast.Module:
        # Found before anything is rewritten: a URL literal usually comes before the
        # keyword that sets its option (a pool's URL, then migrate(pool, schema=...)).
        self.given = {
            keyword.arg
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and _callee(node) in STORE_CALLS
            for keyword in node.keywords
            if keyword.arg is not None and self._isolating(keyword) is not None
        }
        visited = self.visit(tree)
        assert isinstance(visited, ast.Module)
        return ast.fix_missing_locations(visited)

    def visit_Call(self, node: ast.Call) -> ast.Call:
        self.generic_visit(node)
        if _callee(node) in STORE_CALLS:
            node.keywords = [self._keyword(keyword) for keyword in node.keywords]
        return node

    def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.JoinedStr:
        # The pieces of an f-string are not whole URLs: pointing one at a testbed would
        # splice the testbed's URL into the middle of the reader's, and leaving one of a
        # testbed's stores as it is would run the block against the reader's server.
        for part in node.values:
            if isinstance(part, ast.Constant) and isinstance(part.value, str):
                for schemes, _ in self.targets:
                    named = [scheme for scheme in schemes if f"{scheme}://" in part.value]
                    if named:
                        raise ValueError(
                            f"a {named[0]}:// URL inside an f-string cannot be pointed at the "
                            "block's testbed; write it as a plain string literal"
                        )
        return node

    def _isolating(self, node: ast.keyword) -> str | None:
        """The testbed's value for ``node``, if it sets an isolation option to a literal."""
        if (
            node.arg not in self.isolation
            or not isinstance(node.value, ast.Constant)
            or not isinstance(node.value.value, str)
        ):
            return None
        values = self.isolation[node.arg]
        if len(set(values)) > 1:
            raise ValueError(
                f"{node.arg}={node.value.value!r} could mean the {node.arg} of any of the "
                f"block's testbeds ({', '.join(values)}); give the block one store with a "
                f"{node.arg}, or set it in its URLs"
            )
        return values[0]

    def _keyword(self, node: ast.keyword) -> ast.keyword:
        value = self._isolating(node)
        if value is None:
            return node
        return ast.copy_location(ast.keyword(node.arg, ast.Constant(value)), node)

    def visit_Constant(self, node: ast.Constant) -> ast.Constant:
        own = urlsplit(node.value) if isinstance(node.value, str) else None
        if own is None or not own.scheme:
            return node
        # A cluster URL stays a cluster URL: pointing it at one node would test something else.
        cluster = own.scheme.endswith("+cluster")
        target = next(
            (
                parts
                for schemes, parts in self.targets
                if own.scheme in schemes and parts.scheme.endswith("+cluster") == cluster
            ),
            None,
        )
        if target is None:
            return node
        query = dict(parse_qsl(own.query)) | dict(parse_qsl(target.query))
        kept = {name: value for name, value in query.items() if name not in self.given}
        url = urlunsplit(target._replace(query=urlencode(kept)))
        return ast.copy_location(ast.Constant(url), node)


def undefined(source: str, namespace: Mapping[str, Any]) -> list[str]:
    """Names the block reads from its globals that neither it, the page nor Python binds."""
    wrapped = "async def __docs_block__():\n" + textwrap.indent(source, "    ") + "\n    pass\n"
    missing: set[str] = set()

    def visit(table: symtable.SymbolTable) -> None:
        for symbol in table.get_symbols():
            if symbol.is_referenced() and symbol.is_global():
                name = symbol.get_name()
                if name not in namespace and not hasattr(builtins, name):
                    missing.add(name)
        for child in table.get_children():
            visit(child)

    visit(symtable.symtable(wrapped, "<docs>", "exec"))
    return sorted(missing)


@dataclass
class Background:
    command: str
    process: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


@dataclass
class PageRun:
    """One page's blocks, run in order in a directory and a namespace of the page's own."""

    page: str
    blocks: list[Block]
    directory: Path
    environment: dict[str, str]
    """What every command of the page runs with (see the module's docstring)."""
    virtualenv: Path | None = None
    """Where the page's own virtualenv goes, when the page installs from the clone."""
    namespace: dict[str, Any] = field(default_factory=dict)
    outcomes: dict[int, BaseException | None] = field(default_factory=dict)
    background: list[Background] = field(default_factory=list)
    testbeds: dict[str, Testbed[Any]] = field(default_factory=dict)
    runner: asyncio.Runner = field(default_factory=asyncio.Runner)
    stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)
    finished: bool = False
    installed: bool = False

    def __post_init__(self) -> None:
        self.namespace.update(__name__="__main__", __file__=str(self.directory / "page.py"))

    def outcome(self, block: Block) -> BaseException | None:
        """Run every block of the page up to ``block`` that has not run; ``block``'s outcome."""
        if not self.installed:
            self.installed = True
            # The page's virtualenv is made, and a store the page installs is installed,
            # before its first command, as a reader has made a virtualenv and installed the
            # store before reading how to certify it. Here rather than when the page is set
            # up, so that a failure fails this page alone.
            try:
                self._make_virtualenv()
            except Exception as error:
                self.outcomes[self.blocks[0].line] = error
            else:
                for each in self.blocks:
                    if "entry-point" in each.directives:
                        self.outcomes[each.line] = self._attempt(each)
        for each in self.blocks:
            if each.line not in self.outcomes:
                self.outcomes[each.line] = self._attempt(each)
            if each.line == block.line:
                break
        if block.line == self.blocks[-1].line and not self.finished:
            failure = self.finish()
            if failure is not None and self.outcomes[block.line] is None:
                self.outcomes[block.line] = failure
        return self.outcomes[block.line]

    def _attempt(self, block: Block) -> BaseException | None:
        try:
            with _inside(self.directory):
                if block.language in PYTHON:
                    self._python(block)
                else:
                    self._shell(block)
        except BaseException as error:
            if isinstance(error, KeyboardInterrupt):
                raise
            return error
        return None

    # Python

    def _python(self, block: Block) -> None:
        if "file" in block.directives:
            self._file(block)
            return
        source = block.source
        if "body" in block.directives:
            source = "async def __docs_body__(run):\n" + textwrap.indent(source, "    ")
        beds = self.runner.run(self._prepare(block))
        # Checked before running, so that a function nothing calls is caught too, and a
        # fragment fails with what it lacks rather than with a NameError halfway through.
        given = {"run": None} if "body" in block.directives else {}
        missing = undefined(block.source, self.namespace | given)
        if missing:
            raise AssertionError(
                f"{block.name} uses {', '.join(missing)} but nothing defines "
                "(define each in the block, or name a prelude that does it: "
                f"<!-- docs-test: setup=... -->, see {Path(__file__).name})"
            )
        code = self._compile(source, block, beds)
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured):
            done = eval(code, self.namespace)
            if asyncio.iscoroutine(done):
                self.runner.run(done)
            if "body" in block.directives:
                self.runner.run(self._one_pass(beds[0][1]))
            for check in self.namespace.pop("__docs_checks__", []):
                self.runner.run(check(self.namespace))
        _compare_output(block, captured.getvalue())

    def _file(self, block: Block) -> None:
        target = self.directory / block.directives["file"]
        target.parent.mkdir(parents=True, exist_ok=True)
        source = file_source(self.blocks, block.directives["file"])
        target.write_text(source, encoding="utf-8")
        missing = undefined(source, {"__name__": target.stem})
        assert not missing, f"{block.name} ({target.name}) uses undefined {', '.join(missing)}"
        exec(compile(source, str(target), "exec"), {"__name__": target.stem})
        points = block.directives.get("entry-point")
        if points:
            self._install(points, target)

    def _install(self, points: str, module: Path) -> None:
        """A distribution ``name`` with ``module`` as its ``durable`` entry point, in the
        page's virtualenv, where ``pip install`` would put it (so seen by the page's
        commands, not by this process)."""
        if self.virtualenv is None:
            raise LookupError(
                f"entry-point={points} installs into the page's virtualenv, and {self.page} has "
                "none: a page has one when it installs from the clone (pip install ./...)"
            )
        site = Path(
            self._run(
                ["python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]
            ).stdout.strip()
        )
        shutil.copyfile(module, site / module.name)
        install_metadata(site, points, module.stem)

    # The page's virtualenv and commands

    def _make_virtualenv(self) -> None:
        """A fresh virtualenv, made as a reader makes one, and active for every command of
        the page as ``. .venv/bin/activate`` makes it (see the module's docstring)."""
        if self.virtualenv is None:
            return
        subprocess.run(
            [sys.executable, "-m", "venv", str(self.virtualenv)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=INSTALL_PATIENCE,
            check=True,
        )
        ours = {str(Path(sys.executable).parent), str(Path(sys.prefix) / "bin")}
        path = [entry for entry in self.environment["PATH"].split(os.pathsep) if entry not in ours]
        self.environment["PATH"] = os.pathsep.join([str(self.virtualenv / "bin"), *path])
        self.environment["VIRTUAL_ENV"] = str(self.virtualenv)
        self.environment.pop("PYTHONHOME", None)

    def _command(self, words: Sequence[str]) -> list[str]:
        """``words`` as the page's shell would run them: the program found on its ``PATH``."""
        program, *arguments = words
        found = shutil.which(program, path=self.environment["PATH"])
        if found is None:
            raise AssertionError(
                f"{self.page}: no `{program}` on the page's PATH; is it installed in the "
                f"page's environment?\nPATH={self.environment['PATH']}"
            )
        if program == "pytest":
            arguments = [*arguments, "--collect-only", "-q"]
        return [found, *arguments]

    def _run(
        self, words: Sequence[str], cwd: Path | None = None, patience: float = PATIENCE
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self._command(words),
            cwd=cwd or self.directory,
            env=self.environment,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=patience,
            check=False,
        )

    async def _prepare(self, block: Block) -> list[tuple[StorePlugin, Testbed[Any]]]:
        """The block's testbeds, one per ``store=`` entry, the first one's in the namespace;
        then its preludes."""
        entries = block.directives.get("store")
        if entries is None and "body" in block.directives:
            entries = "memory"
        beds = [await self._testbed(entry) for entry in entries.split(",")] if entries else []
        testbed = beds[0][1] if beds else None
        store_name = beds[0][0].name if beds else None
        if testbed is not None:
            durable_store = testbed.durable
            self.namespace.update(
                url=testbed.url,
                store=durable_store,
                checkpointer=durable_store.checkpointer,
                workflow=WORKFLOW,
            )
        for name in filter(None, block.directives.get("setup", "").split(",")):
            if name not in PRELUDES:
                raise LookupError(
                    f"{block.name}: no prelude called {name!r}; the preludes are "
                    f"{', '.join(sorted(PRELUDES))}"
                )
            await PRELUDES[name](Context(self.namespace, testbed, store_name))
        return beds

    async def _testbed(self, entry: str) -> tuple[StorePlugin, Testbed[Any]]:
        """The page's testbed for one ``store=`` entry, made the first time it is named and
        removed when the page is done."""
        plugin, url = store_entry(entry)
        if entry not in self.testbeds:
            if plugin.testing is None:
                raise LookupError(
                    f"the {plugin.name} store has no testing hook to run docs against"
                )
            self.testbeds[entry] = await self.stack.enter_async_context(plugin.testing(url))
        return plugin, self.testbeds[entry]

    async def _one_pass(self, testbed: Testbed[Any] | None) -> None:
        assert testbed is not None
        await resume(testbed.durable, WORKFLOW, self.namespace["__docs_body__"])

    def _compile(
        self, source: str, block: Block, beds: list[tuple[StorePlugin, Testbed[Any]]]
    ) -> CodeType:
        tree = ast.parse(source, block.name)
        targets = [Target(plugin.schemes, bed.url) for plugin, bed in beds if bed.url is not None]
        if targets:
            tree = Rewriter(targets).rewrite(tree)
        # Line numbers in tracebacks point into the page.
        ast.increment_lineno(tree, block.line - (1 if "body" in block.directives else 0))
        code: CodeType = compile(tree, block.page, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        return code

    # Shell

    def _shell(self, block: Block) -> None:
        after = block.directives.get("after")
        if after:
            self._wait(after, self.background)
        printed: list[str] = []
        output: list[str] = []
        started: list[Background] = []
        for line in shell_commands(block.source):
            code = re.search(r"#\s*exits?\s+(\d+)", line)
            words = shlex.split(line, comments=True)
            if words[:2] == ["durable", "worker"]:
                started.append(self._start(line, words))
                continue
            if installs_from_clone(line):
                if "clone" not in line.partition("#")[2]:
                    raise ValueError(
                        f"{block.name}: `{line}` runs in the root of the clone; say so on the "
                        "line (# in the root of a clone of durable), as the reader must know"
                    )
                done = self._run(words, cwd=REPO, patience=INSTALL_PATIENCE)
            else:
                done = self._run(words)
            wanted = int(code[1]) if code else 0
            assert done.returncode == wanted, (
                f"{block.name}: `{line}` exited {done.returncode}, not {wanted}:\n"
                f"{done.stdout[-2000:]}{done.stderr[-4000:]}"
            )
            printed.append(done.stdout + done.stderr)
            output.append(done.stdout)
        self.background.extend(started)
        expect = block.directives.get("expect")
        if expect and not any(expect in text for text in printed):
            self._wait(expect, started, also=printed)
        _compare_output(block, "".join(output))

    def _start(self, line: str, words: list[str]) -> Background:
        log = self.directory / f"worker-{len(self.background)}.log"
        process = subprocess.Popen(
            self._command(words),
            cwd=self.directory,
            env=self.environment,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log.open("wb"),
        )
        return Background(line, process, log)

    def _wait(self, text: str, workers: list[Background], also: list[str] | None = None) -> None:
        deadline = time.monotonic() + PATIENCE
        while time.monotonic() < deadline:
            if any(text in worker.text() for worker in workers):
                return
            if all(worker.process.poll() is not None for worker in workers):
                break
            time.sleep(0.05)
        logs = "\n".join(f"$ {w.command}\n{w.text()}" for w in workers)
        raise AssertionError(f"nothing logged {text!r}:\n{logs}\n{''.join(also or [])}")

    # The end of the page

    def finish(self) -> BaseException | None:
        """Stop the page's workers (SIGTERM; each must exit 0) and remove its stores."""
        self.finished = True
        failures: list[str] = []
        for worker in self.background:
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGTERM)
            try:
                code = worker.process.wait(timeout=PATIENCE)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                code = worker.process.wait()
            if code != 0:
                failures.append(f"`{worker.command}` exited {code}:\n{worker.text()}")
        try:
            self.runner.run(self.stack.aclose())
        finally:
            self.runner.close()
        for name in [m for m, module in sys.modules.items() if _under(module, self.directory)]:
            del sys.modules[name]
        return AssertionError("\n".join(failures)) if failures else None


def entry_points(points: str, module: str) -> dict[str, str]:
    """The entry points an ``entry-point=`` directive names, each name to what it loads."""
    found = {}
    for point in points.split(","):
        name, _, attribute = point.partition(":")
        found[name] = f"{module}:{attribute}" if attribute else module
    return found


def install_metadata(site: Path, points: str, module: str) -> None:
    """What ``pip install`` leaves beside a distribution whose one module is ``module`` and
    whose ``durable`` entry points are ``points`` (it is called by the first of them)."""
    named = entry_points(points, module)
    distribution = next(iter(named))
    info = site / f"{distribution}-0.0.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.0.0\n")
    lines = "".join(f"{name} = {value}\n" for name, value in named.items())
    (info / "entry_points.txt").write_text(f"[durable]\n{lines}")
    (info / "INSTALLER").write_text("durable-docs-test\n")


def _under(module: object, directory: Path) -> bool:
    location = getattr(module, "__file__", None)
    return isinstance(location, str) and Path(location).is_relative_to(directory)


def _compare_output(block: Block, printed: str) -> None:
    if block.output is None:
        return
    shown = [line.rstrip() for line in printed.rstrip("\n").splitlines()]
    documented = [line.rstrip() for line in block.output.rstrip("\n").splitlines()]
    assert shown == documented, (
        f"{block.name} printed\n{printed}\nbut the page shows\n{block.output}"
    )


@contextlib.contextmanager
def _inside(directory: Path) -> Iterator[None]:
    """The block's working directory and import path, as a reader's shell would have them."""
    before = Path.cwd()
    os.chdir(directory)
    sys.path.insert(0, str(directory))
    try:
        yield
    finally:
        sys.path.remove(str(directory))
        os.chdir(before)


@pytest.fixture(scope="session")
def page_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, PageRun]]:
    """One run per page, started by its first block and finished by its last."""
    bytecode = tmp_path_factory.mktemp("bytecode")
    # The reader's environment, with this test's own environment active; nothing is added
    # to PYTHONPATH (see the module's docstring for the two differences, and why).
    environment = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    environment["PYTHONPYCACHEPREFIX"] = str(bytecode)
    environment["PATH"] = os.pathsep.join(
        [str(Path(sys.executable).parent), *filter(None, [os.environ.get("PATH")])]
    )
    runs: dict[str, PageRun] = {}
    for block in RUNNING:
        if block.page not in runs:
            slug = re.sub(r"\W+", "-", block.page)
            directory = tmp_path_factory.mktemp(slug)
            blocks = [b for b in RUNNING if b.page == block.page]
            virtualenv = (
                tmp_path_factory.mktemp(f"{slug}-venv") / ".venv"
                if any(b.installs for b in blocks)
                else None
            )
            runs[block.page] = PageRun(block.page, blocks, directory, dict(environment), virtualenv)
    yield runs
    for run in runs.values():
        if not run.finished:
            with contextlib.suppress(Exception):
                run.finish()


@pytest.mark.timeout(4 * PATIENCE)
@pytest.mark.parametrize("block", RUNNING, ids=[block.name for block in RUNNING])
def test_the_example_runs(block: Block, page_runs: dict[str, PageRun]) -> None:
    run = page_runs[block.page]
    failure = run.outcome(block)
    if isinstance(failure, unittest.SkipTest):
        pytest.skip(str(failure))
    if failure is not None:
        earlier = [
            b.name
            for b in run.blocks
            if b.line < block.line and isinstance(run.outcomes.get(b.line), Exception)
        ]
        if earlier:
            failure.add_note(f"(an earlier block of the page failed too: {', '.join(earlier)})")
        raise failure


@pytest.mark.parametrize("path", pages(), ids=[str(p.relative_to(REPO)) for p in pages()])
def test_every_fence_names_its_language(path: Path) -> None:
    """An untagged fence would hide a Python example from these tests."""
    untagged = [block.name for block in read_blocks(path) if not block.language]
    assert not untagged, f"give these fences a language (```python, ```text, ...): {untagged}"


CERTIFIED = [block for block in ALL_BLOCKS if "certify" in block.directives]

CERTIFY_PATIENCE = 300.0
"""Seconds a whole certification run of a page's store may take (it takes under one)."""


@pytest.mark.timeout(CERTIFY_PATIENCE + PATIENCE)
@pytest.mark.parametrize("block", CERTIFIED, ids=[block.name for block in CERTIFIED])
def test_a_store_the_docs_write_is_certified(block: Block, tmp_path: Path) -> None:
    """A store a page writes is certified by the whole suite, exactly as the page shows it:
    its parts joined into one module, installed as a distribution with its entry point
    (on the import path of a fresh process, where ``pip install`` would put it), and
    certified from an empty directory by ``pytest --durable-store=NAME``, as its author
    would run it. The page's own ``pytest`` line is only collected; this runs the suite."""
    names = block.directives["certify"]
    path = block.directives["file"]
    site = tmp_path / "site"
    site.mkdir()
    module = site / Path(path).name
    module.write_text(
        file_source([b for b in ALL_BLOCKS if b.page == block.page], path), encoding="utf-8"
    )
    install_metadata(site, block.directives["entry-point"], module.stem)
    work = tmp_path / "work"
    work.mkdir()
    report = tmp_path / "certification.json"
    environment = dict(os.environ, PYTHONPATH=str(site))
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"),
            f"--durable-store={names}",
            f"--durable-report={report}",
        ],
        cwd=work,
        env=environment,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=CERTIFY_PATIENCE,
        check=False,
    )
    assert done.returncode == 0, f"{done.stdout[-8000:]}{done.stderr[-4000:]}"
    verdicts = json.loads(report.read_text(encoding="utf-8"))["stores"]
    for name in names.split(","):
        assert verdicts[name]["certified"], verdicts[name]["summary"]


def test_the_readme_set_up_commands_name_scripts_the_hatch_env_defines() -> None:
    """The README's set-up commands are not run here (one of them is this test run), so
    what can rot in them is checked instead: each ``hatch run X`` names a script of the
    default environment, and CI runs the test command the README gives."""
    readme = next(b for b in ALL_BLOCKS if b.page == "README.md" and b.language in SHELL)
    named = re.findall(r"hatch run (\S+)", readme.source)
    scripts = tomllib.loads((REPO / "hatch.toml").read_text(encoding="utf-8"))["envs"]["default"][
        "scripts"
    ]
    assert named, "the README's set-up block runs no hatch script"
    assert [name for name in named if name not in scripts] == []
    assert "hatch run test" in (REPO / ".ci" / "run").read_text(encoding="utf-8")


# --- installing from the clone ------------------------------------------------------------


@dataclass(frozen=True)
class Distribution:
    name: str
    folder: str
    """Its folder in the clone, as a ``pip install`` run in the clone's root names it."""
    ours: frozenset[str]
    """The distributions of this clone it depends on."""


def distributions() -> dict[str, Distribution]:
    """Every distribution of the clone, by its canonical name."""
    projects = {}
    for pyproject in [
        *sorted(REPO.glob("packages/*/pyproject.toml")),
        REPO / "conformance/pyproject.toml",
    ]:
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        folder = "./" + str(pyproject.parent.relative_to(REPO))
        projects[_canonical(project["name"])] = (folder, project.get("dependencies", []))
    return {
        name: Distribution(
            name,
            folder,
            frozenset(
                _canonical(match[0])
                for requirement in requires
                if (match := re.match(r"[A-Za-z0-9._-]+", requirement)) is not None
                and _canonical(match[0]) in projects
            ),
        )
        for name, (folder, requires) in projects.items()
    }


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pip_installs(text: str) -> list[list[str]]:
    """The requirements of every ``pip install`` in a page's code, fenced or inline (an
    inline span may break across lines, as Markdown allows)."""
    pieces = re.findall(r"^\s*(?:`{3,}|~{3,}).*?$(.*?)^\s*(?:`{3,}|~{3,})\s*$", text, re.M | re.S)
    lines = [line for piece in pieces for line in piece.splitlines()]
    prose = re.sub(r"^\s*(?:`{3,}|~{3,}).*?^\s*(?:`{3,}|~{3,})\s*$", "", text, flags=re.M | re.S)
    lines += [span.replace("\n", " ") for span in re.findall(r"`([^`]+)`", prose)]
    installs = []
    for line in lines:
        for found in re.finditer(r"\bpip install\b(.*)", line):
            command = re.split(r"&&|;|\||#", found[1])[0]
            installs.append([word for word in shlex.split(command) if not word.startswith("-")])
    return installs


README_PAGES = [
    *pages(),
    *sorted(REPO.glob("packages/*/README.md")),
    REPO / "conformance/README.md",
]


@pytest.mark.parametrize("path", README_PAGES, ids=[str(p.relative_to(REPO)) for p in README_PAGES])
def test_no_page_installs_our_distributions_from_the_index(path: Path) -> None:
    """None of this clone's distributions is on PyPI yet, so ``pip install durable-sqlite``
    finds nothing; every page installs from the clone's folders instead, and names with each
    the distributions of the clone it depends on, which pip would otherwise look for on the
    index. (When they are published, this test goes, and the pages name them again.)"""
    ours = distributions()
    by_folder = {d.folder: d for d in ours.values()}
    wrong: list[str] = []
    for requirements in pip_installs(path.read_text(encoding="utf-8")):
        named = set()
        for requirement in requirements:
            folder = re.sub(r"\[.*\]$", "", requirement).rstrip("/")
            if folder in by_folder:
                named.add(by_folder[folder].name)
                continue
            match = re.match(r"[A-Za-z0-9._-]+", requirement)
            if match is not None and _canonical(match[0]) in ours and not folder.startswith("."):
                wrong.append(
                    f"`pip install {' '.join(requirements)}` installs {match[0]} from PyPI, "
                    f"which does not have it: install {ours[_canonical(match[0])].folder} "
                    "in the root of a clone"
                )
        for name in sorted(named):
            missing = sorted(ours[name].ours - named)
            if missing:
                wrong.append(
                    f"`pip install {' '.join(requirements)}` makes pip look for "
                    f"{', '.join(missing)} on PyPI, which does not have it: add "
                    f"{' '.join(ours[m].folder for m in missing)} to the same command"
                )
    assert wrong == []


def test_an_install_from_pypi_of_ours_is_found_and_one_from_the_clone_is_not() -> None:
    text = (
        "Install `pip install durable-redis` or\n"
        "```bash\npip install 'hatch>=1.16' && hatch run demo  # tooling\n"
        "pip install ./packages/durable-core './packages/durable-redis[hiredis]'  # clone\n```\n"
        "and `pip install\n./packages/durable-sqlite`."
    )
    assert pip_installs(text) == [
        ["hatch>=1.16"],
        ["./packages/durable-core", "./packages/durable-redis[hiredis]"],
        ["durable-redis"],
        ["./packages/durable-sqlite"],
    ]
    assert installs_from_clone("pip install ./packages/durable-core ./packages/durable-sqlite")
    assert not installs_from_clone("pip install 'hatch>=1.16' && hatch run demo")
    assert not installs_from_clone("pip install durable-sqlite")


# --- the Rewriter on its own -------------------------------------------------------------

POSTGRES = Target(
    ("postgresql", "postgres"), "postgresql://postgres@127.0.0.1:5432/test?schema=durable_test_1"
)
ONE_NODE = Target(
    ("redis", "rediss", "redis+cluster", "rediss+cluster"),
    "redis://127.0.0.1:6379/0?prefix=durable-test-1",
)
CLUSTER = Target(ONE_NODE.schemes, "redis+cluster://127.0.0.1:7000?prefix=durable-test-2")


def rewritten(source: str, *targets: Target) -> str:
    return ast.unparse(Rewriter(targets).rewrite(ast.parse(source)))


def test_a_url_literal_is_pointed_at_the_testbed_keeping_its_own_options() -> None:
    source = 'open("postgres://app@db/orders?sslmode=require&schema=orders_wf")'
    assert rewritten(source, POSTGRES) == (
        "open('postgresql://postgres@127.0.0.1:5432/test?sslmode=require&schema=durable_test_1')"
    )


def test_an_isolation_option_given_as_a_keyword_is_the_testbeds_and_left_out_of_urls() -> None:
    source = (
        'pool = Pool("postgresql://app@db/orders?sslmode=require&schema=x", max_size=20)\n'
        'migrate(pool, schema="orders_wf")\n'
        'store = PostgresDurable.on(pool, schema="orders_wf")'
    )
    assert rewritten(source, POSTGRES).splitlines() == [
        "pool = Pool('postgresql://postgres@127.0.0.1:5432/test?sslmode=require', max_size=20)",
        "migrate(pool, schema='durable_test_1')",
        "store = PostgresDurable.on(pool, schema='durable_test_1')",
    ]


def test_a_keyword_that_is_no_isolation_option_or_no_literal_changes_nothing() -> None:
    source = 'pool = Pool("postgresql://app@db/orders", name="schema")\nmigrate(pool, schema=name)'
    assert rewritten(source, POSTGRES).splitlines() == [
        "pool = Pool('postgresql://postgres@127.0.0.1:5432/test?schema=durable_test_1', "
        "name='schema')",
        "migrate(pool, schema=name)",
    ]


def test_each_url_literal_goes_to_the_testbed_of_its_store_and_kind() -> None:
    source = (
        'open("redis://localhost:6379/0?prefix=payments")\n'
        'open("rediss+cluster://node-1:6379?prefix=payments&ttl=604800")\n'
        'open("postgres://app@db/orders")\n'
        'open("sqlite:///orders.db")\n'
        'print("order: 7")'
    )
    assert rewritten(source, CLUSTER, POSTGRES, ONE_NODE).splitlines() == [
        "open('redis://127.0.0.1:6379/0?prefix=durable-test-1')",
        "open('redis+cluster://127.0.0.1:7000?prefix=durable-test-2&ttl=604800')",
        "open('postgresql://postgres@127.0.0.1:5432/test?schema=durable_test_1')",
        "open('sqlite:///orders.db')",
        "print('order: 7')",
    ]


def test_a_cluster_url_is_never_pointed_at_one_node() -> None:
    assert rewritten('open("redis+cluster://node-1:6379")', ONE_NODE) == (
        "open('redis+cluster://node-1:6379')"
    )


def test_an_isolation_keyword_two_testbeds_have_is_refused_as_ambiguous() -> None:
    with pytest.raises(ValueError, match=r"prefix='payments' could mean the prefix of any"):
        rewritten('RedisDurable.over(client, prefix="payments")', ONE_NODE, CLUSTER)


def test_a_store_entry_is_a_stores_name_or_a_url_for_the_store_that_opens_it() -> None:
    assert store_entry("postgres") == (store_plugin("postgres"), None)
    assert store_entry("redis+cluster://") == (store_plugin("redis"), "redis+cluster://")


def test_a_block_cannot_be_marked_to_skip() -> None:
    """Every example runs: a directive that would let one rot quietly is refused."""
    with pytest.raises(ValueError, match="unknown docs-test directive 'skip'"):
        parse_directives('skip reason="needs a server"', "page.md:1")


def test_only_a_stores_own_calls_have_their_isolation_keywords_rewritten() -> None:
    source = (
        'scratch = tempfile.mkdtemp(prefix="scratch-")\n'
        'store = RedisDurable.over(client, prefix="payments")\n'
        'open("redis://localhost:6379/0")'
    )
    assert rewritten(source, ONE_NODE).splitlines() == [
        "scratch = tempfile.mkdtemp(prefix='scratch-')",
        "store = RedisDurable.over(client, prefix='durable-test-1')",
        "open('redis://127.0.0.1:6379/0')",
    ]


def test_an_f_string_naming_no_store_is_left_alone() -> None:
    source = 'print(f"order {n}: https://shop.example/orders/{n}")'
    assert rewritten(source, ONE_NODE) == "print(f'order {n}: https://shop.example/orders/{n}')"


def test_a_store_url_inside_an_f_string_is_refused_rather_than_run_unisolated() -> None:
    with pytest.raises(ValueError, match="redis:// URL inside an f-string"):
        rewritten('open(f"redis://{host}:6379/0?prefix=payments")', ONE_NODE)


def test_certify_without_an_entry_point_is_refused() -> None:
    with pytest.raises(ValueError, match="certify= certifies entry-point= stores"):
        parse_directives("file=mystore.py certify=mystore", "page.md:1")


def test_several_entry_points_name_the_module_or_an_object_of_it() -> None:
    assert entry_points("litestore,litestore-split:split", "litestore") == {
        "litestore": "litestore",
        "litestore-split": "litestore:split",
    }


def test_the_parts_of_a_file_are_joined_in_page_order() -> None:
    parts = [
        Block("page.md", 1, "python", "import asyncio\n", {"file": "store.py"}),
        Block("page.md", 5, "python", "print('elsewhere')\n", {}),
        Block("page.md", 9, "python", "\nSCHEMA = ''\n", {"file": "store.py"}),
    ]
    assert file_source(parts, "store.py") == "import asyncio\n\nSCHEMA = ''\n"


def test_an_entry_point_without_a_file_is_refused() -> None:
    with pytest.raises(ValueError, match="entry-point= installs a file= block"):
        parse_directives("entry-point=mystore", "page.md:1")
