"""Throwaway Redis servers and clusters on loopback ports, for tests and benchmarks.

A test that needs a server it may stop, restart or lock with a password starts its own
here rather than touching a shared one; a test that needs a real cluster starts three
``redis-server`` processes and joins them with ``redis-cli --cluster create``. Every
process is started by this module and stopped by its PID, never by name, and a failed
start stops whatever it had already started.

This needs the ``redis-server`` and ``redis-cli`` binaries on ``PATH`` (Debian's
``redis-server`` package, or a Redis build); :func:`binaries_available` tells.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "LocalCluster",
    "LocalServer",
    "ReplicatedSet",
    "ServerStartFailed",
    "answers_ping",
    "binaries_available",
    "free_port",
    "start_cluster",
    "start_replicated",
    "start_server",
]

_START_TIMEOUT = 15.0


class ServerStartFailed(RuntimeError):
    """A throwaway server or cluster did not come up; the message says what it printed."""


def binaries_available() -> bool:
    """Whether ``redis-server`` and ``redis-cli`` are on ``PATH``."""
    return shutil.which("redis-server") is not None and shutil.which("redis-cli") is not None


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(
    *, cluster_bus: bool = False, avoid: Sequence[int] = (), within: range | None = None
) -> int:
    """A loopback port nothing listens on. With ``cluster_bus``, port + 10000 is free too
    (a cluster node listens there for its peers). ``within`` keeps to a range of ports
    (a machine shared by several test runs gives each its own)."""
    if within is not None:
        for port in within:
            if port in avoid or not _port_is_free(port):
                continue
            if cluster_bus and (port + 10000 > 65535 or not _port_is_free(port + 10000)):
                continue
            return port
        raise ServerStartFailed(f"no free loopback port in {within}")
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        if port in avoid:
            continue
        if cluster_bus and (port + 10000 > 65535 or not _port_is_free(port + 10000)):
            continue
        return port
    raise ServerStartFailed("found no free loopback port in 200 tries")


def answers_ping(port: int, password: str | None = None) -> bool:
    """Whether a server on ``127.0.0.1:port`` answers a raw RESP PING (no client needed)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            if password is not None:
                conn.sendall(_resp("AUTH", password))
                if not conn.recv(64).startswith(b"+OK"):
                    return False
            conn.sendall(_resp("PING"))
            return conn.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def _resp(*parts: str) -> bytes:
    out = [f"*{len(parts)}\r\n".encode()]
    for part in parts:
        data = part.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


@dataclass
class LocalServer:
    """One ``redis-server`` process this module started, on ``127.0.0.1:port``."""

    port: int
    directory: Path
    arguments: tuple[str, ...]
    password: str | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    sentinel_config: Path | None = None
    """Set: this is a Sentinel (``redis-server CONFIG --sentinel``), which needs a config
    file it may rewrite."""

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password is not None else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def log(self) -> Path:
        return self.directory / f"redis-{self.port}.log"

    def start(self) -> None:
        """Start the process and wait until it answers PING."""
        if self.process is not None and self.process.poll() is None:
            return
        head = (
            ["redis-server", str(self.sentinel_config), "--sentinel"]
            if self.sentinel_config is not None
            else ["redis-server"]
        )
        command = [
            *head,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.directory),
            "--logfile",
            str(self.log),
            "--daemonize",
            "no",
            *self.arguments,
        ]
        if self.password is not None:
            command += ["--requirepass", self.password]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + _START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            if answers_ping(self.port, self.password):
                return
            time.sleep(0.02)
        tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
        self.stop()
        raise ServerStartFailed(f"redis-server on port {self.port} did not answer: {tail}")

    def stop(self) -> None:
        """Stop the process by its PID (SIGTERM, then SIGKILL after five seconds)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGCONT)  # a test may have paused it
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)

    def kill(self) -> None:
        """SIGKILL the process by its PID, as a crash would, and reap it."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.kill()
        process.wait(timeout=5)

    def pause(self) -> None:
        """SIGSTOP: the process stays, answers nothing and falls behind (a lagging replica)."""
        if self.process is not None:
            self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)

    def restart(self) -> None:
        """Stop and start again on the same port and directory (an AOF, if the arguments
        enable one, is replayed)."""
        self.stop()
        self.start()


@contextlib.contextmanager
def start_server(
    *, password: str | None = None, persistent: bool = False, port: int | None = None
) -> Iterator[LocalServer]:
    """A throwaway ``redis-server`` in a temporary directory, stopped on exit.

    ``persistent`` turns on an append-only file synced on every write, so that a
    :meth:`LocalServer.restart` keeps the data (a restart test needs something to find).
    """
    with tempfile.TemporaryDirectory(prefix="durable-redis-") as directory:
        arguments = (
            ("--appendonly", "yes", "--appendfsync", "always", "--save", "")
            if persistent
            else ("--appendonly", "no", "--save", "")
        )
        server = LocalServer(port or free_port(), Path(directory), arguments, password)
        try:
            server.start()
            yield server
        finally:
            server.stop()


@dataclass
class LocalCluster:
    """A Redis Cluster of primaries this module started, all on loopback."""

    nodes: list[LocalServer]

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    @property
    def url(self) -> str:
        """A ``redis+cluster://`` URL naming one node (the client discovers the rest)."""
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    @property
    def pids(self) -> list[int]:
        return [pid for node in self.nodes if (pid := node.pid) is not None]

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def _cluster_ok(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(_resp("CLUSTER", "INFO"))
            reply = b""
            while b"cluster_state" not in reply or not reply.endswith(b"\r\n"):
                chunk = conn.recv(4096)
                if not chunk:
                    break
                reply += chunk
            return b"cluster_state:ok" in reply
    except OSError:
        return False


@contextlib.contextmanager
def start_cluster(
    primaries: int = 3,
    *,
    replicas: int = 0,
    within: range | None = None,
    node_timeout: int = 5000,
) -> Iterator[LocalCluster]:
    """A real Redis Cluster of ``primaries`` nodes, each with ``replicas`` replicas,
    stopped on exit. ``ports`` keeps the nodes to a range; ``node_timeout`` (ms) is how
    long a silent primary has before its replica takes over.

    Each node is a ``redis-server --cluster-enabled yes`` with its own config file in a
    temporary directory and nothing on disk; ``redis-cli --cluster create`` assigns the
    slots, and this waits until every node reports ``cluster_state:ok``.
    """
    if primaries < 3:
        raise ValueError(f"redis-cli --cluster create needs at least 3 primaries, got {primaries}")
    with tempfile.TemporaryDirectory(prefix="durable-redis-cluster-") as directory:
        cluster = LocalCluster([])
        try:
            ports: list[int] = []
            for _ in range(primaries * (1 + replicas)):
                ports.append(
                    free_port(
                        cluster_bus=True, avoid=ports + [p + 10000 for p in ports], within=within
                    )
                )
            for port in ports:
                node_dir = Path(directory) / str(port)
                node_dir.mkdir()
                node = LocalServer(
                    port,
                    node_dir,
                    (
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        str(node_dir / "nodes.conf"),
                        "--cluster-node-timeout",
                        str(node_timeout),
                        "--save",
                        "",
                        "--appendonly",
                        "no",
                    ),
                )
                cluster.nodes.append(node)
                node.start()
            created = subprocess.run(
                [
                    "redis-cli",
                    "--cluster",
                    "create",
                    *(f"127.0.0.1:{port}" for port in ports),
                    "--cluster-replicas",
                    str(replicas),
                    "--cluster-yes",
                ],
                capture_output=True,
                text=True,
                timeout=60,
                stdin=subprocess.DEVNULL,
            )
            if created.returncode != 0:
                raise ServerStartFailed(
                    f"redis-cli --cluster create failed ({created.returncode}): "
                    f"{created.stdout[-2000:]}{created.stderr[-2000:]}"
                )
            deadline = time.monotonic() + _START_TIMEOUT * 2
            while not all(_cluster_ok(port) for port in ports):
                if time.monotonic() > deadline:
                    raise ServerStartFailed(
                        f"the cluster on ports {ports} never reported cluster_state:ok"
                    )
                time.sleep(0.05)
            while replicas and sum(_in_sync(port) for port in ports) < primaries * replicas:
                if time.monotonic() > deadline:
                    raise ServerStartFailed(f"the replicas on ports {ports} never synced")
                time.sleep(0.05)
            yield cluster
        finally:
            cluster.stop()


@dataclass
class ReplicatedSet:
    """A primary, its replicas and the Sentinels watching them, all this module started."""

    primary: LocalServer
    replicas: list[LocalServer]
    sentinels: list[LocalServer]
    service: str = "durable"

    @property
    def url(self) -> str:
        """A ``redis+sentinel://`` URL naming every Sentinel and the service."""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}"

    @property
    def servers(self) -> list[LocalServer]:
        return [self.primary, *self.replicas]

    def serving(self) -> LocalServer | None:
        """The server that is a primary now (``ROLE`` says ``master``), if one answers."""
        for server in self.servers:
            if server.process is not None and _role(server.port) == b"master":
                return server
        return None

    def stop(self) -> None:
        for server in (*self.sentinels, *self.replicas, self.primary):
            server.stop()


def _role(port: int) -> bytes | None:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(_resp("ROLE"))
            reply = conn.recv(256)
    except OSError:
        return None
    for role in (b"master", b"slave", b"sentinel"):
        if role in reply:
            return role
    return None


def _in_sync(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
            conn.sendall(_resp("INFO", "replication"))
            reply = conn.recv(4096)
    except OSError:
        return False
    return b"master_link_status:up" in reply


@contextlib.contextmanager
def start_replicated(
    replicas: int = 2,
    sentinels: int = 3,
    *,
    within: range | None = None,
    down_after: int = 1000,
    service: str = "durable",
) -> Iterator[ReplicatedSet]:
    """A primary with ``replicas`` replicas and ``sentinels`` Sentinels (quorum: a
    majority), in a temporary directory, everything stopped by PID on exit.

    Nothing is persisted (a killed primary stays dead in these tests; its data lives on
    only in the replicas, which is the point). ``down_after`` (ms) is how long the
    Sentinels wait before they call a silent primary down and promote a replica.
    """
    with tempfile.TemporaryDirectory(prefix="durable-redis-replicated-") as directory:
        root = Path(directory)
        taken: list[int] = []

        def port() -> int:
            taken.append(free_port(avoid=taken, within=within))
            return taken[-1]

        volatile = ("--appendonly", "no", "--save", "")
        primary = LocalServer(port(), root / "primary", volatile)
        replica_servers = []
        for index in range(replicas):
            replica_servers.append(
                LocalServer(
                    port(),
                    root / f"replica-{index}",
                    (*volatile, "--replicaof", "127.0.0.1", str(primary.port)),
                )
            )
        watchers = []
        for index in range(sentinels):
            home = root / f"sentinel-{index}"
            home.mkdir()
            config = home / "sentinel.conf"
            config.write_text(
                f"sentinel monitor {service} 127.0.0.1 {primary.port} {sentinels // 2 + 1}\n"
                f"sentinel down-after-milliseconds {service} {down_after}\n"
                f"sentinel failover-timeout {service} {max(down_after * 3, 3000)}\n"
                f"sentinel parallel-syncs {service} 1\n"
            )
            watchers.append(LocalServer(port(), home, (), sentinel_config=config))
        replicated = ReplicatedSet(primary, replica_servers, watchers, service)
        try:
            primary.directory.mkdir()
            primary.start()
            for replica in replica_servers:
                replica.directory.mkdir()
                replica.start()
            deadline = time.monotonic() + _START_TIMEOUT
            while not all(_in_sync(r.port) for r in replica_servers):
                if time.monotonic() > deadline:
                    raise ServerStartFailed(f"replicas of port {primary.port} never synced")
                time.sleep(0.05)
            for watcher in watchers:
                watcher.start()
            yield replicated
        finally:
            replicated.stop()
