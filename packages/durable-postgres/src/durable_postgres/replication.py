"""Whether this primary's replication protects the fence, for ``durable doctor``.

Every guarantee of the store rests on the server remembering what it acknowledged, above
all the highest fencing token it has handed out. A standby promoted after the primary dies
remembers only what reached it. A commit reaches a standby before it is acknowledged only
when that standby is synchronous (``sync_state`` ``sync``, or ``quorum`` under ``ANY n``)
and the committing session's ``synchronous_commit`` waits for it (``on``, ``remote_write``
or ``remote_apply``; ``off`` and ``local`` do not). Promote any other standby and the
acknowledged tail is gone: a token can be handed out twice, an acknowledged step can vanish
while the pass that wrote it carries on as though it had not, and an effect committed with
its record can be lost with it. ``docs/failover.md`` measures this.

So the doctor names every standby that streams from this server and would lose that tail if
promoted. A server with no standbys at all is not warned about: without a replica there is
no failover to lose writes in (a crash and restart keeps every commit).
"""

from __future__ import annotations

from typing import Any

from durable.doctor import Finding
from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from durable_postgres.connections import Connections
from durable_postgres.statements import render_sections

__all__ = ["replication_finding"]

PROTECTED = frozenset({"sync", "quorum"})
"""The ``sync_state`` of a standby every acknowledged commit has reached (``quorum``: one of
the ``ANY n`` that the commit waited for, which failover tooling must pick among)."""

NOT_WAITING = frozenset({"off", "local"})
"""The ``synchronous_commit`` values under which a commit does not wait for any standby."""


async def replication_finding(
    pool: AsyncConnectionPool[Any], schema: str, *, limit: int
) -> Finding | None:
    """The ``replication`` finding for the server ``pool`` connects to; ``None`` on a
    standby (the store cannot write there, so there is nothing of its own to protect)."""
    statement = render_sections("replication.sql", schema)["standbys"]

    async def work(conn: AsyncConnection[TupleRow]) -> tuple[Any, ...] | None:
        return await (await conn.execute(statement)).fetchone()

    row = await Connections(pool, schema).run(
        "reading the server's replication state", work, repeatable=True
    )
    assert row is not None
    standby, synchronous_commit, names, streaming = row
    if standby:
        return None
    states: list[tuple[str, str | None]] = [(str(n), s) for n, s in streaming]
    if not states:
        return Finding(
            "replication",
            0,
            (),
            "no standby streams from this server: a crash and restart keeps every commit; "
            "before adding one for failover, read docs/failover.md",
            attention=False,
        )
    if synchronous_commit in NOT_WAITING:
        exposed = [f"{name} ({state or 'state unreadable'})" for name, state in states]
        advice = (
            f"synchronous_commit is {synchronous_commit} for the store's connections, so no "
            "commit waits for a standby: promoting any of these after the primary dies can "
            "lose acknowledged records and reissue a fencing token. Set synchronous_commit = "
            "on (or remote_apply) for the store's role or database, with the standby named in "
            "synchronous_standby_names (docs/failover.md)"
        )
    else:
        exposed = [
            f"{name} ({state or 'state unreadable: grant pg_monitor to the store role'})"
            for name, state in states
            if state not in PROTECTED
        ]
        advice = (
            "these standbys are not synchronous "
            f"(synchronous_standby_names = {names!r}): the primary acknowledges commits "
            "they have not received, so promoting one after the primary dies can lose "
            "acknowledged records and hand out a fencing token twice. Name the standby you "
            "would promote in synchronous_standby_names, or promote only a synchronous one "
            "(docs/failover.md)"
        )
    if not exposed:
        return Finding(
            "replication",
            0,
            (),
            f"every standby is synchronous and synchronous_commit is {synchronous_commit}: "
            "a promoted standby holds every acknowledged commit",
            attention=False,
        )
    return Finding("replication", len(exposed), tuple(exposed[:limit]), advice)
