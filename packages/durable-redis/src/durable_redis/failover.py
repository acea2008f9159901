"""A failover drill: real workers, a real primary killed, a real replica promoted.

The guarantees of this store rest on Redis remembering what it acknowledged, the highest
fencing token above all. A replica promoted after its primary died holds only what had
been shipped to it; this drill measures what that costs, with and without
``wait_replicas=`` (see :mod:`durable_redis.replication`):

1. start a primary with replicas and three Sentinels (:func:`~durable_redis.servers.
   start_replicated`), or a six-node Redis Cluster with one replica per primary;
2. queue workflows and start worker processes, each logging every fencing token a pass
   was handed, every step result and every ``transact`` result it was told is recorded;
3. while passes write, hold the victim's replicas ``lag`` seconds behind it (paused,
   behind a bulk write that fills the link), SIGKILL the primary, and let Sentinel, or
   the cluster, promote a replica;
4. in a cluster, start the killed node again, as an operator replacing a dead node would
   (it rejoins as the new primary's replica; a shard with no replica left cannot confirm
   a write at all);
5. wait for every workflow to finish, stop the workers, and count: fencing tokens handed
   to two passes of one workflow, acknowledged records missing or changed, workflows
   lost or stuck, and ``transact`` effects applied other than exactly once.

Run it as ``hatch run failover`` (both deployments, with and without the option) or
``python -m durable_redis.failover --help``. Every process it starts is stopped by its
PID, every wait is bounded, and every port is on loopback in ``--ports``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TextIO

from durable.parsers import exactly
from durable.run import Run
from durable.worker import work

from durable_redis.effect import LuaEffect
from durable_redis.plugin import open_redis
from durable_redis.servers import (
    LocalCluster,
    LocalServer,
    ReplicatedSet,
    start_cluster,
    start_replicated,
)

__all__ = ["Drill", "Figures", "drill", "main"]

log = logging.getLogger("durable_redis.failover")

PREFIX = "drill"
_BALLAST_MB = 48
_COUNT_ONCE = "return cjson.encode(redis.call('HINCRBY', KEYS[1], ARGV[1], 1))"


@dataclass(frozen=True)
class Drill:
    """One drill's shape."""

    deployment: str = "sentinel"  # or "cluster"
    wait: bool = True
    workflows: int = 60
    workers: int = 3
    steps: int = 30
    pause: float = 0.03  # seconds between a workflow's steps
    lag: float = 0.3  # seconds the victim's replicas are held behind before the kill
    kill_at: float = 0.3  # the share of all steps done when the primary is killed
    deadline: float = 120.0  # seconds for everything after the servers are up
    within: range = range(17000, 18000)


@dataclass(frozen=True)
class Figures:
    """What one drill measured. Every count but ``unconfirmed`` should be 0 with the wait
    on; ``unconfirmed`` counts the writes refused as unconfirmed (passes stopped)."""

    deployment: str
    wait: bool
    workflows: int
    passes: int
    steps_acknowledged: int
    tokens_issued_twice: int
    records_lost: int
    workflows_stuck: int
    effects_not_once: int
    unconfirmed: int
    promoted_after: float  # seconds from the kill until the store answered writes again
    finished_after: float  # seconds from the kill until every workflow was done

    @property
    def fence_held(self) -> bool:
        return not (
            self.tokens_issued_twice
            or self.records_lost
            or self.workflows_stuck
            or self.effects_not_once
        )

    def line(self) -> str:
        return (
            f"{self.deployment:8} wait={'on ' if self.wait else 'off'} "
            f"workflows={self.workflows} passes={self.passes} "
            f"acked_steps={self.steps_acknowledged} tokens_twice={self.tokens_issued_twice} "
            f"records_lost={self.records_lost} stuck={self.workflows_stuck} "
            f"effects_not_once={self.effects_not_once} unconfirmed={self.unconfirmed} "
            f"promoted_after={self.promoted_after:.1f}s finished_after={self.finished_after:.1f}s"
        )


# -- the worker process ---------------------------------------------------------------------


def _body(out: TextIO, steps: int, pause: float) -> Any:
    def note(**event: object) -> None:
        out.write(json.dumps(event) + "\n")
        out.flush()

    async def body(run: Run[Any]) -> str:
        workflow, token = run.workflow, run.holder.token
        note(e="pass", wf=workflow, token=token)
        checkpointer: Any = run.checkpointer
        for i in range(steps):
            value = await run.step(f"s{i}", lambda: f"{token}:{uuid.uuid4().hex}", exactly(str))
            note(e="step", wf=workflow, key=f"s{i}", value=value)
            if i % 5 == 4:
                effect = LuaEffect(
                    _COUNT_ONCE, (f"{checkpointer.hash_key(workflow)}:effects",), (f"t{i}",)
                )
                count = await run.transact(f"t{i}", effect, exactly(int))
                note(e="transact", wf=workflow, key=f"t{i}", value=count)
            await asyncio.sleep(pause)
        return await run.step("done", lambda: "done", exactly(str))

    return body


async def _serve(url: str, events: Path, steps: int, pause: float) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    with events.open("a", encoding="utf-8") as out:
        async with open_redis(url) as durable:
            await work(
                durable,
                _body(out, steps, pause),
                limit=8,
                liveness=timedelta(seconds=2),
                poll=timedelta(milliseconds=100),
                tick=timedelta(milliseconds=200),
                retry=timedelta(milliseconds=200),
                stop=stop,
                grace=timedelta(seconds=1),
            )


# -- the drill --------------------------------------------------------------------------------


def _url(base: str, drill: Drill) -> str:
    url = f"{base}{'&' if '?' in base else '?'}prefix={PREFIX}&delivery_lease=2"
    return url + ("&wait_replicas=1&wait_timeout=0.5" if drill.wait else "")


async def _clog(port: int) -> None:
    """Fill the primary's link to its (paused) replicas with a bulk write larger than the
    kernel's socket buffers, so that what the workers write next waits in the primary's
    own memory, as it does behind a replica that fell behind a bulk load or a slow
    network. Pausing a replica alone would not do: the kernel buffers what the primary
    sends, and the replica reads all of it once it runs again, primary dead or not."""
    from redis.asyncio import Redis
    from redis.exceptions import ResponseError

    client = Redis(host="127.0.0.1", port=port)
    try:
        ballast = b"x" * (1 << 20)
        for attempt in range(10_000):
            key = f"{PREFIX}:ballast:{attempt}"
            try:
                await client.set(key, ballast)
            except ResponseError:  # MOVED: on a cluster, find a key this node serves
                continue
            for _ in range(_BALLAST_MB - 1):
                await client.append(key, ballast)
            return
    finally:
        await client.aclose()


def _role(port: int) -> list[str]:
    done = subprocess.run(
        ["redis-cli", "-p", str(port), "ROLE"],
        capture_output=True,
        text=True,
        timeout=5,
        stdin=subprocess.DEVNULL,
    )
    return done.stdout.split()


@contextlib.contextmanager
def _deployment(drill: Drill) -> Iterator[ReplicatedSet | LocalCluster]:
    if drill.deployment == "sentinel":
        with start_replicated(replicas=2, sentinels=3, within=drill.within) as replicated:
            yield replicated
    elif drill.deployment == "cluster":
        with start_cluster(3, replicas=1, within=drill.within, node_timeout=1000) as cluster:
            yield cluster
    else:
        raise ValueError(f"deployment is 'sentinel' or 'cluster', not {drill.deployment!r}")


def _victim(servers: ReplicatedSet | LocalCluster) -> tuple[LocalServer, list[LocalServer]]:
    """The primary to kill and the replicas that follow it."""
    if isinstance(servers, ReplicatedSet):
        return servers.primary, servers.replicas
    primary = next(node for node in servers.nodes if _role(node.port)[:1] == ["master"])
    replicas = [
        node
        for node in servers.nodes
        if _role(node.port)[:3] == ["slave", "127.0.0.1", str(primary.port)]
    ]
    return primary, replicas


async def _bounded(seconds: float, what: str, check: Any) -> float:
    """Poll ``check()`` until true; the seconds it took. Raises TimeoutError naming ``what``."""
    started = time.monotonic()
    try:
        async with asyncio.timeout(seconds):
            while True:
                with contextlib.suppress(Exception):
                    if await check():
                        return time.monotonic() - started
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise TimeoutError(f"the failover drill waited {seconds:.0f}s for {what}") from None


def _events(paths: list[Path]) -> list[dict[str, Any]]:
    out = []
    for path in paths:
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
    return out


async def run_drill(drill: Drill) -> Figures:
    """Run one drill (see the module's docstring); the figures it measured."""
    workflows = [f"wf-{i:03d}" for i in range(drill.workflows)]
    with (
        tempfile.TemporaryDirectory(prefix="durable-failover-") as directory,
        _deployment(drill) as servers,
    ):
        url = _url(servers.url, drill)
        root = Path(directory)
        logs = [root / f"worker-{i}.jsonl" for i in range(drill.workers)]
        stderr = [root / f"worker-{i}.err" for i in range(drill.workers)]
        workers: list[subprocess.Popen[bytes]] = []
        try:
            async with asyncio.timeout(drill.deadline), open_redis(url) as store:
                for workflow in workflows:
                    await store.scheduler.make_ready(workflow)
                for events, errors in zip(logs, stderr, strict=True):
                    workers.append(_spawn(url, events, errors, drill))
                total = drill.workflows * drill.steps

                async def far_enough() -> bool:
                    done = sum(1 for e in _events(logs) if e["e"] == "step")
                    return done >= drill.kill_at * total

                await _bounded(drill.deadline / 2, "the workers to make progress", far_enough)
                primary, replicas = _victim(servers)
                for replica in replicas:
                    replica.pause()
                try:
                    await _clog(primary.port)
                    await asyncio.sleep(drill.lag)
                    primary.kill()
                finally:
                    for replica in replicas:
                        replica.resume()
                killed = time.monotonic()

                async def promoted() -> bool:
                    return any(_role(r.port)[:1] == ["master"] for r in replicas)

                promoted_after = await _bounded(drill.deadline / 2, "a promotion", promoted)
                if isinstance(servers, LocalCluster):
                    # An operator replaces the dead node: it rejoins as the replica of the
                    # one promoted in its place, without which that shard, replica-less,
                    # could confirm no write at all.
                    primary.start()
                probe = f"probe-{uuid.uuid4().hex}"

                async def writable() -> bool:
                    await store.checkpointer.supply(probe, "alive", 1)
                    return True

                await _bounded(drill.deadline / 2, "the store to take writes again", writable)

                async def finished() -> bool:
                    for workflow in workflows:
                        if "done" not in await store.checkpointer.load(workflow):
                            return False
                    return True

                with contextlib.suppress(TimeoutError):
                    await _bounded(drill.deadline / 2, "every workflow to finish", finished)
                finished_after = time.monotonic() - killed
                figures = await _count(store, drill, workflows, _events(logs), stderr)
                return Figures(
                    **{
                        **asdict(figures),
                        "promoted_after": promoted_after,
                        "finished_after": finished_after,
                    }
                )
        except BaseException:
            kept = Path(tempfile.gettempdir()) / "durable-failover-last"
            shutil.rmtree(kept, ignore_errors=True)
            shutil.copytree(root, kept)
            log.error("the workers' logs are kept in %s", kept)
            for path in stderr:
                if path.exists():
                    log.error(
                        "%s ends with:\n%s", path.name, path.read_text(errors="replace")[-3000:]
                    )
            raise
        finally:
            for worker in workers:
                _stop(worker)


async def _count(
    store: Any, drill: Drill, workflows: list[str], events: list[dict[str, Any]], stderr: list[Path]
) -> Figures:
    tokens: dict[str, Counter[int]] = {}
    acked: list[dict[str, Any]] = []
    for event in events:
        if event["e"] == "pass":
            tokens.setdefault(event["wf"], Counter())[event["token"]] += 1
        elif event["e"] in ("step", "transact"):
            acked.append(event)
    twice = sum(n - 1 for counter in tokens.values() for n in counter.values() if n > 1)
    records = {workflow: await store.checkpointer.load(workflow) for workflow in workflows}
    # A step's value is fresh on every run, so a lost record written again by a later pass
    # differs from what the first was told: a lost acknowledged record shows either way.
    lost = sum(1 for e in acked if records[e["wf"]].get(e["key"]) != e["value"])
    stuck = sum(1 for workflow in workflows if "done" not in records[workflow])
    not_once = 0
    client = store.checkpointer.client
    for workflow in workflows:
        raw = await client.hgetall(f"{store.checkpointer.hash_key(workflow)}:effects")
        applied = {str(k): int(v) for k, v in raw.items()}
        recorded = {k for k in records[workflow] if k.startswith("t")}
        not_once += sum(1 for k, n in applied.items() if n != 1 or k not in recorded)
        not_once += sum(1 for k in recorded if k not in applied)
    # One log line per refused write; a traceback under it repeats the message on a line
    # of its own, which is not counted again.
    unconfirmed = sum(
        1
        for path in stderr
        if path.exists()
        for line in path.read_text(errors="replace").splitlines()
        if "wait_replicas= asks for" in line and not line.startswith("durable_redis.errors.")
    )
    return Figures(
        drill.deployment,
        drill.wait,
        len(workflows),
        sum(sum(c.values()) for c in tokens.values()),
        len(acked),
        twice,
        lost,
        stuck,
        not_once,
        unconfirmed,
        0.0,
        0.0,
    )


def _spawn(url: str, events: Path, errors: Path, drill: Drill) -> subprocess.Popen[bytes]:
    """One worker process (``python -m durable_redis.failover worker ...``)."""
    command = [sys.executable, "-m", "durable_redis.failover", "worker", url, str(events)]
    command += [str(drill.steps), str(drill.pause)]
    with errors.open("wb") as err:
        return subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err
        )


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a worker by its PID: SIGTERM, then SIGKILL after ten seconds."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)


def drill(drill: Drill) -> Figures:
    """:func:`run_drill` from synchronous code."""
    return asyncio.run(run_drill(drill))


def main(argv: list[str] | None = None) -> int:
    """``python -m durable_redis.failover``: run the drills and print their figures."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["worker"]:
        url, events, steps, pause = arguments[1:5]
        logging.basicConfig(level=logging.WARNING)
        asyncio.run(_serve(url, Path(events), int(steps), float(pause)))
        return 0
    parser = argparse.ArgumentParser(prog="python -m durable_redis.failover")
    parser.add_argument("--deployment", choices=("sentinel", "cluster", "both"), default="both")
    parser.add_argument("--wait", choices=("on", "off", "both"), default="both")
    parser.add_argument("--workflows", type=int, default=Drill.workflows)
    parser.add_argument("--workers", type=int, default=Drill.workers)
    parser.add_argument("--lag", type=float, default=Drill.lag)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--ports", default="17000-17999", help="loopback port range, FIRST-LAST")
    parser.add_argument("--json", type=Path, help="also write every round's figures here")
    options = parser.parse_args(arguments)
    first, last = (int(p) for p in options.ports.split("-"))
    deployments = ("sentinel", "cluster") if options.deployment == "both" else (options.deployment,)
    waits = (True, False) if options.wait == "both" else (options.wait == "on",)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    results: list[Figures] = []
    broken = False
    for deployment in deployments:
        for wait in waits:
            for _ in range(options.rounds):
                figures = drill(
                    Drill(
                        deployment,
                        wait,
                        workflows=options.workflows,
                        workers=options.workers,
                        lag=options.lag,
                        within=range(first, last + 1),
                    )
                )
                results.append(figures)
                log.info("%s", figures.line())
                broken |= wait and not figures.fence_held
    if options.json is not None:
        options.json.write_text(json.dumps([asdict(f) for f in results], indent=2))
    if broken:
        log.error("a drill with wait_replicas= on lost something it must not")
    return 1 if broken else 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
