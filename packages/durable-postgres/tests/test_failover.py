"""A Postgres primary killed mid-run and its standby promoted: what the workers were told survives.

Each test starts its own pair on loopback ports (``initdb``, ``pg_basebackup -R``, a second
server streaming from the first), starts workflows, and runs several worker processes
against the multi-host URL ``postgresql://...@primary,standby/...?target_session_attrs=
read-write``. While they write, the primary's WAL sender is stopped (SIGSTOP) for ``lag``
seconds (a standby that has fallen behind, as one does under load or on a slow link), the
primary is
killed with SIGKILL (its whole process group: the postmaster and every backend at once, a
machine that lost power), and the standby is promoted with ``pg_promote()``. The workers
are never restarted: their pools find the promoted server through the same URL.

Then the promoted server is asked about everything the workers wrote down as acknowledged
(``failover_worker.py`` keeps that journal outside the store):

* no fencing token was handed to two passes of one workflow;
* every acknowledged record is there, with the value the pass was told was stored;
* every workflow finished (none lost, none stuck);
* the ``transact`` effect was performed exactly once per workflow.

With ``synchronous_standby_names`` naming the standby (and ``synchronous_commit=on``) a
commit is acknowledged only once the standby has it, so all four must hold. Without it the
same run is allowed to lose what the standby had not received, and the test reports how
much it lost rather than failing.

``DURABLE_FAILOVER=full`` (``hatch run failover``) runs the long version: more workflows,
more workers, with and without lag, each case several times. The smoke cases run in the
ordinary test run, a few seconds each. Every process started here is stopped by its pid
in a ``finally``, and every wait is bounded. The figures are printed (``-s`` shows them)
and, with ``DURABLE_FAILOVER_REPORT=PATH``, appended to ``PATH`` as JSON lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any

import durable
import psycopg
import pytest
from durable.doctor import Finding, examine
from durable.interfaces import Status, StoreUnavailable
from durable_postgres import PostgresDurable
from psycopg import sql

HERE = Path(__file__).parent
FULL = os.environ.get("DURABLE_FAILOVER", "") == "full"
STANDBY_NAME = "durable_standby"
STEPS = 6
"""Steps before each workflow's ``transact``, and as many after it."""
PAUSE = 0.1
"""Seconds of a pass's own work after each step, so that a run spans the failover."""
RECORDS_PER_WORKFLOW = 2 * STEPS + 1


def effects_table(schema: str) -> sql.Composed:
    """The application's table the ``transact`` effect writes (``failover_worker.py``)."""
    return sql.SQL("{}.failover_effects").format(sql.Identifier(schema))


@dataclass(frozen=True, slots=True)
class Scale:
    """How big one failover run is."""

    workflows: int
    workers: int
    before_kill: float  # the share of all records acknowledged before the primary dies
    finish_within: float  # seconds after the promotion for every workflow to finish


SMOKE = Scale(workflows=16, workers=3, before_kill=0.3, finish_within=45)
LONG = Scale(workflows=80, workers=4, before_kill=0.4, finish_within=120)


def _bindir() -> Path | None:
    """Where initdb, postgres and pg_basebackup are: ``DURABLE_POSTGRES_BIN``, then
    ``pg_config --bindir``, then the newest ``/usr/lib/postgresql/*/bin``."""
    named = os.environ.get("DURABLE_POSTGRES_BIN")
    candidates: list[Path] = [Path(named)] if named else []
    pg_config = shutil.which("pg_config")
    if pg_config:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            found = subprocess.run(
                [pg_config, "--bindir"], capture_output=True, text=True, timeout=10, check=True
            )
            candidates.append(Path(found.stdout.strip()))
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True)
    needed = ("initdb", "postgres", "pg_basebackup")
    return next((c for c in candidates if all((c / n).is_file() for n in needed)), None)


def _server_user() -> str | None:
    """The user the servers run as: this one, or ``postgres`` when this is root (initdb
    refuses root). ``None`` when this is root and there is no ``postgres`` user."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(os.environ.get("DURABLE_POSTGRES_USER", "postgres")).pw_name
    except KeyError:
        return None


def _ports(count: int, held: list[IO[bytes]]) -> list[int]:
    """``count`` loopback ports free now, from ``DURABLE_FAILOVER_PORTS`` (``LOW-HIGH``,
    default 15500-15999), so that servers started here keep out of other servers' ranges.

    Each is reserved with a lock file (kept open in ``held`` until the pair is stopped), so
    that two test processes at once never pick the same port between a probe and a bind."""
    low, _, high = os.environ.get("DURABLE_FAILOVER_PORTS", "15500-15999").partition("-")
    free: list[int] = []
    for port in range(int(low), int(high) + 1):
        lock = open(Path(tempfile.gettempdir()) / f"durable-failover-port-{port}.lock", "ab")  # noqa: SIM115 (held open until the pair stops)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                lock.close()
                continue
        held.append(lock)
        free.append(port)
        if len(free) == count:
            return free
    pytest.skip(f"no {count} free loopback ports in {low}-{high}")


@dataclass
class Server:
    """One postgres process we started, and where it keeps its data."""

    name: str
    data: Path
    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres connect_timeout=2"


@dataclass
class Pair:
    """A primary and its streaming standby, both ours."""

    bindir: Path
    root: Path
    user: str | None
    synchronous: bool
    primary: Server
    standby: Server

    def run(self, *args: str) -> None:
        """A server tool run to completion (as the servers' user), failing with its output."""
        done = subprocess.run(
            [str(self.bindir / args[0]), *args[1:]],
            capture_output=True,
            text=True,
            timeout=120,
            user=self.user,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr.strip()}")

    def launch(self, server: Server, *settings: str) -> None:
        """The postmaster in a process group of its own, so that killing the group kills the
        server whole; its log goes to a file beside its data."""
        config = [
            f"port={server.port}",
            "listen_addresses=127.0.0.1",
            f"unix_socket_directories={self.root}",
            "max_connections=60",
            "wal_level=replica",
            "max_wal_senders=4",
            *settings,
        ]
        command = [str(self.bindir / "postgres"), "-D", str(server.data)]
        for setting in config:
            command += ["-c", setting]
        with open(self.root / f"{server.name}.log", "ab") as log:
            server.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                user=self.user,
            )

    def log(self, server: Server) -> str:
        path = self.root / f"{server.name}.log"
        return path.read_text(errors="replace")[-2000:] if path.exists() else ""


async def _ready(server: Server, *, within: float = 30) -> None:
    """Wait (bounded) until ``server`` accepts a connection."""
    async with asyncio.timeout(within):
        while True:
            assert server.process is not None
            if server.process.poll() is not None:
                raise RuntimeError(f"{server.name} exited with {server.process.returncode}")
            try:
                # Ours, and not another server that took the port while ours failed to bind.
                if await _one(server, "SHOW data_directory") == str(server.data):
                    return
            except psycopg.OperationalError:
                pass
            await asyncio.sleep(0.1)


async def _one(server: Server, query: str) -> Any:
    async with await psycopg.AsyncConnection.connect(server.dsn, autocommit=True) as conn:
        row = await (await conn.execute(query.encode())).fetchone()
        return None if row is None else row[0]


def _stop(process: subprocess.Popen[bytes] | None, *, group: bool, within: float = 10) -> None:
    """Stop ``process`` (SIGTERM for a worker; a postmaster's SIGINT is a fast shutdown),
    then SIGKILL it, or its process group, if it has not gone within ``within`` seconds."""
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGINT if group else signal.SIGTERM)
    try:
        process.wait(timeout=within)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(process.pid, signal.SIGKILL)
            else:
                process.kill()
        process.wait(timeout=within)


@contextlib.asynccontextmanager
async def replicated_pair(*, synchronous: bool) -> AsyncIterator[Pair]:
    """A primary and a standby streaming from it; synchronous names the standby in the
    primary's ``synchronous_standby_names``. Both are stopped (by pid) on the way out."""
    bindir = _bindir()
    if bindir is None:
        pytest.skip(
            "no PostgreSQL server binaries (initdb, postgres, pg_basebackup) found: set "
            "DURABLE_POSTGRES_BIN, or put pg_config on PATH"
        )
    user = _server_user()
    if os.geteuid() == 0 and user is None:
        pytest.skip("running as root and there is no 'postgres' user to run the servers as")
    root = Path(tempfile.mkdtemp(prefix="durable-failover-"))
    if user is not None:
        shutil.chown(root, user, user)
    locks: list[IO[bytes]] = []
    first, second = _ports(2, locks)
    pair = Pair(
        bindir,
        root,
        user,
        synchronous,
        Server("primary", root / "primary", first),
        Server("standby", root / "standby", second),
    )
    try:
        pair.run("initdb", "-D", str(pair.primary.data), "-U", "postgres", "--auth=trust")
        pair.run("initdb", "--version")
        replication = (
            [f"synchronous_standby_names={STANDBY_NAME}", "synchronous_commit=on"]
            if synchronous
            else ["synchronous_standby_names=", "synchronous_commit=on"]
        )
        pair.launch(pair.primary, *replication)
        await _ready(pair.primary)
        pair.run(
            "pg_basebackup",
            *("-h", "127.0.0.1", "-p", str(pair.primary.port), "-U", "postgres"),
            *("-D", str(pair.standby.data), "-R", "-X", "stream", "-c", "fast"),
        )
        # The standby's application name (what synchronous_standby_names matches) is its
        # cluster_name; it is given no synchronous_standby_names of its own, so that once
        # promoted it commits without waiting for a standby it does not have.
        pair.launch(pair.standby, f"cluster_name={STANDBY_NAME}")
        await _ready(pair.standby)
        wanted = "sync" if synchronous else "async"
        async with asyncio.timeout(30):
            while (  # noqa: ASYNC110 (polls the server)
                await _one(
                    pair.primary,
                    "SELECT sync_state FROM pg_stat_replication "
                    f"WHERE application_name = '{STANDBY_NAME}' AND state = 'streaming'",
                )
                != wanted
            ):
                await asyncio.sleep(0.1)
        yield pair
    finally:
        _stop(pair.standby.process, group=True)
        _stop(pair.primary.process, group=True)
        shutil.rmtree(root, ignore_errors=True)
        for lock in locks:
            lock.close()


@dataclass
class Figures:
    """What one failover run found: the test's report, and its verdict's evidence."""

    case: str
    workflows: int
    passes: int = 0
    records: int = 0
    lost_records: list[str] = field(default_factory=list)
    reused_tokens: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    effects_not_once: list[str] = field(default_factory=list)
    acknowledged_before_kill: int = 0
    seconds_to_finish: float = 0.0
    seconds_to_resume: float | None = None  # promotion to the first record acknowledged after
    seconds: float = 0.0  # the whole run, the pair's start and stop included

    def line(self) -> str:
        return (
            f"postgres failover [{self.case}]: lost {len(self.lost_records)} of "
            f"{self.records} acknowledged records; {len(self.reused_tokens)} fencing tokens "
            f"issued twice in {self.passes} passes; {len(self.unfinished)} of "
            f"{self.workflows} workflows unfinished; {len(self.effects_not_once)} transact "
            f"effects not performed exactly once ({self.acknowledged_before_kill} records "
            f"acknowledged before the kill; writes resumed {self.seconds_to_resume or 0:.1f}s "
            f"and all finished {self.seconds_to_finish:.1f}s after the promotion; "
            f"{self.seconds:.0f}s in all)"
        )


def _worker(url: str, root: Path, index: int, journal: Path) -> subprocess.Popen[bytes]:
    """Worker process ``index``, writing what it was told to ``journal``."""
    with open(root / f"worker-{index}.log", "ab") as log:
        return subprocess.Popen(
            [
                sys.executable,
                str(HERE / "failover_worker.py"),
                *(url, f"worker-{index}", str(journal), str(STEPS), str(PAUSE)),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def _journal(paths: list[Path]) -> Iterator[dict[str, Any]]:
    for path in paths:
        if path.exists():
            for line in path.read_text().splitlines():
                if line.strip():
                    yield json.loads(line)


def _acknowledged(paths: list[Path]) -> int:
    return sum(1 for entry in _journal(paths) if "record" in entry)


async def _until_finished(store: PostgresDurable, ids: list[str], within: float) -> list[str]:
    """The workflows still not finished after waiting up to ``within`` seconds (the store
    may be unreachable for part of that: its pool is finding the promoted server)."""
    left = list(ids)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within):
            while left:
                still = []
                for workflow in left:
                    try:
                        found = await store.status(workflow)
                    except StoreUnavailable:
                        still.append(workflow)
                        continue
                    if found is None or found.status is not Status.FINISHED:
                        still.append(workflow)
                left = still
                if left:
                    await asyncio.sleep(0.2)
    return left


async def failover(synchronous: bool, lag: float, scale: Scale) -> Figures:
    """One run: start, write, kill the primary, promote the standby, finish, and look."""
    mode = "synchronous" if synchronous else "asynchronous"
    figures = Figures(f"{mode}, standby {lag:g}s behind", scale.workflows)
    schema = "failover"
    started = time.monotonic()
    async with replicated_pair(synchronous=synchronous) as pair:
        url = (
            f"postgresql://postgres@127.0.0.1:{pair.primary.port},127.0.0.1:{pair.standby.port}"
            f"/postgres?target_session_attrs=read-write&connect_timeout=2&schema={schema}"
            "&timeout=2&delivery_lease=2&min_size=1&max_size=4"
        )
        journals = [pair.root / f"journal-{i}.jsonl" for i in range(scale.workers)]
        workers: list[subprocess.Popen[bytes]] = []
        ids = [f"wf-failover-{i}" for i in range(scale.workflows)]
        try:
            async with durable.open(url) as opened:
                store = opened
                assert isinstance(store, PostgresDurable)
                async with store.pool.connection() as conn:
                    await conn.execute(
                        sql.SQL(
                            "CREATE TABLE {} (workflow text, key text, performed int NOT NULL, "
                            "PRIMARY KEY (workflow, key))"
                        ).format(effects_table(schema))
                    )
                for workflow in ids:
                    await store.start("transfer", workflow)
                workers += [_worker(url, pair.root, i, path) for i, path in enumerate(journals)]
                target = int(scale.before_kill * scale.workflows * RECORDS_PER_WORKFLOW)
                async with asyncio.timeout(60):
                    while _acknowledged(journals) < target:  # noqa: ASYNC110 (polls files)
                        await asyncio.sleep(0.05)
                sender: int | None = None
                if lag:
                    # The primary's WAL sender stops sending: the standby falls behind while
                    # the primary goes on committing. (Pausing the standby's receiver instead
                    # would not do: what the sender had written waits in the socket's buffer
                    # and is read after the primary's death.)
                    sender = await _one(
                        pair.primary,
                        "SELECT pid FROM pg_stat_replication "
                        f"WHERE application_name = '{STANDBY_NAME}'",
                    )
                    assert sender is not None, pair.log(pair.primary)
                    os.kill(sender, signal.SIGSTOP)
                    await asyncio.sleep(lag)
                assert pair.primary.process is not None
                os.killpg(pair.primary.process.pid, signal.SIGKILL)
                if sender is not None:
                    # Each backend leads a process group of its own, so the group's SIGKILL
                    # spares it; a stopped one would never notice its postmaster is gone.
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(sender, signal.SIGKILL)
                pair.primary.process.wait(timeout=10)
                figures.acknowledged_before_kill = _acknowledged(journals)
                promoted = await _one(pair.standby, "SELECT pg_promote(true, 30)")
                assert promoted is True, pair.log(pair.standby)
                began, promoted_at = time.monotonic(), time.time()
                figures.unfinished = await _until_finished(store, ids, scale.finish_within)
                figures.seconds_to_finish = time.monotonic() - began
                after = [e["at"] for e in _journal(journals) if "record" in e]
                after = [at - promoted_at for at in after if at > promoted_at]
                figures.seconds_to_resume = min(after, default=None)
                for worker in workers:
                    _stop(worker, group=False, within=15)
                await _look(store, schema, ids, journals, figures)
        finally:
            for worker in workers:
                _stop(worker, group=False, within=15)
        if figures.unfinished:
            for i in range(scale.workers):
                print((pair.root / f"worker-{i}.log").read_text(errors="replace")[-3000:])
    figures.seconds = time.monotonic() - started
    _report(figures)
    return figures


async def _look(
    store: PostgresDurable, schema: str, ids: list[str], journals: list[Path], figures: Figures
) -> None:
    """Compare what the workers were told with what the promoted server holds."""
    tokens: Counter[tuple[str, int]] = Counter()
    records: list[tuple[str, str, str]] = []
    for entry in _journal(journals):
        if "pass" in entry:
            tokens[(entry["pass"], entry["token"])] += 1
        else:
            records.append((entry["record"], entry["key"], entry["value"]))
    figures.passes = sum(tokens.values())
    figures.records = len(records)
    figures.reused_tokens = [f"{wf} token {t} x{n}" for (wf, t), n in tokens.items() if n > 1]
    held: dict[str, dict[str, object]] = {}
    for workflow in ids:
        held[workflow] = await store.checkpointer.load(workflow)
    figures.lost_records = [
        f"{wf}/{key}: told {value!r}, holds {held.get(wf, {}).get(key)!r}"
        for wf, key, value in records
        if held.get(wf, {}).get(key) != value
    ]
    async with store.pool.connection() as conn:
        rows = await (
            await conn.execute(
                sql.SQL("SELECT workflow, performed FROM {}").format(effects_table(schema))
            )
        ).fetchall()
    performed = dict(rows)
    figures.effects_not_once = [
        f"{wf}: performed {performed.get(wf, 0)} times"
        for wf in ids
        if wf not in figures.unfinished and performed.get(wf, 0) != 1
    ]


def _report(figures: Figures) -> None:
    print(figures.line())
    target = os.environ.get("DURABLE_FAILOVER_REPORT")
    if target:
        with open(target, "a") as report:
            report.write(json.dumps(asdict(figures)) + "\n")


CASES = (
    [(sync, lag, round) for sync in (True, False) for lag in (0.0, 1.0) for round in range(3)]
    if FULL
    else [(True, 1.0, 0), (False, 1.0, 0)]
)


@pytest.mark.timeout(600 if FULL else 90)
@pytest.mark.parametrize(
    ("synchronous", "lag", "round"),
    CASES,
    ids=[f"{'sync' if s else 'async'}-lag{lag:g}-{r}" for s, lag, r in CASES],
)
async def test_a_promoted_standby_remembers_what_the_workers_were_told(
    synchronous: bool, lag: float, round: int
) -> None:
    figures = await failover(synchronous, lag, LONG if FULL else SMOKE)
    # Whatever the replication, no workflow is left behind: the workers follow the promotion
    # through the multi-host URL, without a restart.
    assert not figures.unfinished, figures.line()
    if synchronous:
        assert not figures.reused_tokens, figures.reused_tokens
        assert not figures.lost_records, figures.lost_records[:10]
        assert not figures.effects_not_once, figures.effects_not_once
    # Asynchronous: reported, not asserted. What the standby never received is gone, and a
    # pass that outlived the primary goes on from its own memory of the lost records: it can
    # finish its workflow over a step or an effect the promoted server never saw.


def _multi_host(pair: Pair, *extra: str) -> str:
    return (
        f"postgresql://postgres@127.0.0.1:{pair.primary.port},127.0.0.1:{pair.standby.port}"
        f"/postgres?target_session_attrs=read-write&schema=doctor{''.join(extra)}"
    )


async def _replication(url: str) -> Finding:
    async with durable.open(url) as store:
        found = (await examine(store)).finding("replication")
    assert found is not None
    return found


@pytest.mark.timeout(90)
async def test_the_doctor_warns_of_a_standby_that_would_lose_acknowledged_commits() -> None:
    async with replicated_pair(synchronous=False) as pair:
        found = await _replication(_multi_host(pair))
    assert (found.count, found.attention) == (1, True)
    assert found.ids == (f"{STANDBY_NAME} (async)",)
    assert "synchronous_standby_names" in found.advice


@pytest.mark.timeout(90)
async def test_the_doctor_is_content_with_a_synchronous_standby_unless_commits_do_not_wait() -> (
    None
):
    async with replicated_pair(synchronous=True) as pair:
        waiting = await _replication(_multi_host(pair))
        # The store's own sessions decide: a role, a database or the URL may turn it off.
        local = await _replication(_multi_host(pair, "&options=-c%20synchronous_commit%3Dlocal"))
    assert (waiting.count, waiting.attention) == (0, False)
    assert (local.count, local.attention) == (1, True)
    assert local.ids == (f"{STANDBY_NAME} (sync)",)
    assert "synchronous_commit is local" in local.advice


async def test_the_doctor_says_nothing_of_replication_on_a_server_without_standbys(
    store: PostgresDurable,
) -> None:
    found = (await examine(store)).finding("replication")
    assert found is not None
    assert (found.count, found.attention) == (0, False)
