"""Writes confirmed on replicas before they are acknowledged (``wait_replicas=``).

Redis replicates asynchronously: a primary answers a script as soon as it has run it, and
ships the write to its replicas a moment later. When the primary dies in that moment and
a replica is promoted (by Sentinel, or by the cluster's own failover), the write is gone
although the caller was told it was done. For most writes that costs a step run twice;
for a claim it costs the fence: the promoted primary has not seen the token it handed
out, mints the same token again for the next claimer, and two passes hold one workflow
with one token.

``WAIT numreplicas timeout`` closes that window for what it confirms: it blocks until
every write made so far *on the same connection* has reached ``numreplicas`` replicas,
or the timeout passes, and answers how many did. Redis does not allow ``WAIT`` inside a
script, and a ``WAIT`` on any other connection proves nothing about this one's writes, so
the confirmation lives in the connection: a write command is sent together with a
``WAIT`` in one packet, both replies are read in order, and a count short of the number
asked for raises :class:`~durable_redis.errors.ReplicationUnconfirmed` instead of
returning the write's reply. Putting it in the connection class reaches every path a
command takes (a single node, a Sentinel-managed primary, every node of a cluster, and
the redirections redis-py follows there), where a wrapper around ``execute_command``
would miss the retries and redirections redis-py makes inside it.

``WAITAOF`` (Redis 7.2) would also wait for the replicas' append-only files to reach the
disk. It protects against every replica losing power at once, which a failover does not
need: the promoted replica holds the write in memory. So this uses ``WAIT`` on every
version; a deployment that needs the disk too runs its replicas with ``appendfsync
always``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ResponseError

from durable_redis.errors import ReplicationUnconfirmed

__all__ = ["WRITES", "ReplicaWait", "confirming"]

WRITES = frozenset(
    {
        # the store's scripts (every move but a few reads is one of these)
        "EVALSHA",
        "EVAL",
        # the commands it sends outside scripts (schema version, consumer group, cleanup)
        "SET",
        "DEL",
        "UNLINK",
        "ZREM",
        "XGROUP",
        # a group read writes the pending list: who holds which delivery
        "XREADGROUP",
        "XAUTOCLAIM",
        "XACK",
    }
)
"""The commands that are confirmed. A read is not: it acknowledges nothing."""


@dataclass(frozen=True)
class ReplicaWait:
    """How many replicas must confirm each write, and for how long to wait for them."""

    replicas: int
    timeout: timedelta

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise ValueError(f"wait_replicas= must be 1 or more, got {self.replicas}")
        if self.timeout <= timedelta(0):
            raise ValueError(f"wait_timeout= must be positive, got {self.timeout}")

    @property
    def timeout_ms(self) -> int:
        """``WAIT``'s timeout, at least 1 ms (0 would mean forever)."""
        return max(1, round(self.timeout.total_seconds() * 1000))


def _name(args: tuple[Any, ...]) -> str:
    first = args[0] if args else b""
    text = first.decode() if isinstance(first, bytes) else str(first)
    return text.split(" ", 1)[0].upper()


class _Confirming(AbstractConnection):
    """The mixin: ``pack_command`` appends the ``WAIT``, ``send_packed_command`` notes
    that one is on the wire, ``read_response`` reads it.

    The note is taken only once the packet is sent: a connection that opens lazily (a
    cluster node's) sends and reads its handshake inside ``send_packed_command``, and
    those replies must be read as they are.
    """

    replica_wait: ReplicaWait
    _packed: tuple[list[bytes], str] | None = None
    _awaiting: str | None = None

    def pack_command(self, *args: Any) -> list[bytes]:
        packed = super().pack_command(*args)
        name = _name(args)
        if name not in WRITES:
            return packed
        wait = self.replica_wait
        packed = packed + super().pack_command("WAIT", wait.replicas, wait.timeout_ms)
        self._packed = (packed, name)
        return packed

    async def send_packed_command(self, command: Any, *args: Any, **kwargs: Any) -> None:
        packed, self._packed = self._packed, None
        await super().send_packed_command(command, *args, **kwargs)
        if packed is not None and packed[0] is command:
            self._awaiting = packed[1]

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        command, self._awaiting = self._awaiting, None
        if command is None:
            return await super().read_response(*args, **kwargs)
        refused: ResponseError | None = None
        try:
            reply = await super().read_response(*args, **kwargs)
        except ResponseError as error:
            # The WAIT's reply still follows on the wire: read it before raising, so
            # the connection goes back to its pool in step.
            refused, reply = error, None
        confirmed = int(await super().read_response())
        if refused is not None:
            raise refused
        wait = self.replica_wait
        if confirmed < wait.replicas:
            where = f"Redis at {getattr(self, 'host', '?')}:{getattr(self, 'port', '?')}"
            raise ReplicationUnconfirmed(where, command, confirmed, wait.replicas, wait.timeout_ms)
        return reply

    async def disconnect(self, *args: Any, **kwargs: Any) -> None:
        self._packed = self._awaiting = None
        await super().disconnect(*args, **kwargs)


def confirming(base: type[AbstractConnection], wait: ReplicaWait) -> type[AbstractConnection]:
    """A connection class like ``base`` whose writes wait for ``wait.replicas`` replicas."""
    return type(
        f"Confirming{base.__name__}",
        (_Confirming, base),
        {"replica_wait": wait, "__module__": __name__},
    )
