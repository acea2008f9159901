"""Moving workflows between stores (export, import) and forgetting old ones (prune).

The dump is JSON Lines, one object a line, in UTF-8:

* the first line is the header: ``{"durable": "export", "format": 1, "exported_at": ISO,
  "workflows": N}`` (``N``, the number of workflow lines that follow, is only a hint for
  progress);
* then one line per workflow: ``{"workflow": ID, "records": [[KEY, VALUE, AT], ...],
  "status": STATUS or null}``, the records in the store's order (``history``), each with the
  store's clock at its winning write as an ISO string, and the status as
  ``durable.cli``'s ``status_json`` gives it (``null`` on a store without lifecycle, or for
  a workflow made by ``send`` or ``arrive`` that no pass has begun);
* the last line is the trailer ``{"end": true, "workflows": N}``, so a dump cut short is
  told from a whole one.

Values are the store's decoded values written as JSON, so a dump holds what a JSON codec can
encode. ``FORMAT`` is the version; an import refuses a dump whose format is newer than the
one it reads.

Import writes through the moves every store offers (``supply``, ``append``, ``admit``,
``begin`` and ``settle``), so it works on every store that offers lifecycle. On a store
whose checkpointer is also :class:`~durable.interfaces.Dated` (every store in this
project), it keeps the dump's times: each record is written at its ``at``, and the status's
``started_at`` and ``updated_at`` are set to the dump's afterwards, so a workflow that ended
a month ago has ended a month ago on the new store too (and ``prune --finished-before``
counts from then). On any other store the times are the target's clock when the import
wrote them, in the original order. Inbox entries are appended again, so their keys are the
target's (in the same order), and each ``receive`` reference is rewritten to the new key.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from durable.boundary import check_workflow
from durable.interfaces import (
    INBOX_PREFIX,
    Dated,
    Durable,
    Enumerable,
    Failure,
    Lifecycle,
    Prunable,
    Settlement,
    Status,
    WorkflowStatus,
)
from durable.run import RECEIVE_FIELD

__all__ = [
    "FORMAT",
    "DumpError",
    "Imported",
    "PrunePolicy",
    "export_lines",
    "import_lines",
    "parse_age",
    "prune",
    "workflow_ids",
]

FORMAT = 1
"""The version of the dump's line format this release writes and the newest it reads."""

IMPORT_OWNER = "durable import"
"""The owner an import's ``begin`` names (never seen: the import settles at once)."""

MESSAGE_ID_PREFIX = "durable.import:"
"""An imported inbox entry is appended with the message id ``durable.import:<its old key>``,
so a second import of the same dump appends nothing."""


class DumpError(ValueError):
    """A dump that cannot be read: malformed, cut short, or of a newer format."""


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).isoformat()


def _moment(text: object) -> datetime | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise DumpError(f"a time must be an ISO string, got {text!r}")
    return datetime.fromisoformat(text)


def _status_json(st: WorkflowStatus) -> dict[str, object]:
    failure = st.failure
    return {
        "status": st.status.value,
        "kind": st.kind,
        "input": st.input,
        "queue": st.queue,
        "attempts": st.attempts,
        "updated_at": _iso(st.updated_at),
        "started_at": _iso(st.started_at),
        "until": _iso(st.until) if st.status is Status.SLEEPING else None,
        "keys": list(st.keys),
        "value": st.value,
        "failure": None
        if failure is None
        else {
            "type": failure.type,
            "message": failure.message,
            "traceback": failure.traceback,
            "attempts": failure.attempts,
        },
    }


def _lifecycle(store: Durable[Any]) -> Lifecycle | None:
    checkpointer: object = store.checkpointer
    return checkpointer if isinstance(checkpointer, Lifecycle) else None


async def _paged(
    lifecycle: Lifecycle, status: Status | None, batch: int
) -> AsyncIterator[WorkflowStatus]:
    cursor: str | None = None
    while True:
        page = await lifecycle.statuses(status=status, limit=batch, cursor=cursor)
        for st in page.statuses:
            yield st
        if page.cursor is None:
            return
        cursor = page.cursor


async def workflow_ids(
    store: Durable[Any], statuses: Iterable[Status] | None = None, *, batch: int = 500
) -> list[str]:
    """The ids an export of ``store`` writes, sorted: with ``statuses``, those whose status is
    one of them (read from the lifecycle index); without, every workflow the store can name
    (the lifecycle index and ``Enumerable.workflows`` together, since a started workflow may
    have no records yet and a sent-to one no status). ``ValueError`` when the store can
    name none that way."""
    lifecycle = _lifecycle(store)
    checkpointer: object = store.checkpointer
    found: set[str] = set()
    if statuses is not None:
        if lifecycle is None:
            raise ValueError("this store does not offer lifecycle, so it cannot filter by status")
        for status in statuses:
            async for st in _paged(lifecycle, status, batch):
                found.add(st.workflow)
        return sorted(found)
    if lifecycle is None and not isinstance(checkpointer, Enumerable):
        raise ValueError("this store can neither list workflows nor their statuses; name the ids")
    if lifecycle is not None:
        async for st in _paged(lifecycle, None, batch):
            found.add(st.workflow)
    if isinstance(checkpointer, Enumerable):
        found.update(await checkpointer.workflows())
    return sorted(found)


async def export_lines(
    store: Durable[Any], ids: list[str], *, progress: Callable[[int], None] | None = None
) -> AsyncIterator[str]:
    """The dump of ``ids`` from ``store``, line by line (each ending in a newline), one
    workflow read at a time. An id with neither records nor status is left out."""
    lifecycle = _lifecycle(store)
    header = {
        "durable": "export",
        "format": FORMAT,
        "exported_at": _iso(datetime.now(UTC)),
        "workflows": len(ids),
    }
    yield json.dumps(header) + "\n"
    written = 0
    for done, workflow in enumerate(ids, 1):
        check_workflow(workflow)
        history = await store.checkpointer.history(workflow)
        st = await lifecycle.status(workflow) if lifecycle is not None else None
        if progress is not None:
            progress(done)
        if not history and st is None:
            continue
        line = {
            "workflow": workflow,
            "records": [[e.key, e.value, _iso(e.at)] for e in history],
            "status": None if st is None else _status_json(st),
        }
        try:
            yield json.dumps(line, ensure_ascii=False) + "\n"
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"workflow {workflow!r} holds a value JSON cannot write ({error}); "
                "a dump holds what a JSON codec can encode"
            ) from None
        written += 1
    yield json.dumps({"end": True, "workflows": written}) + "\n"


@dataclass
class Imported:
    """What an import did: workflows written, and workflows the target already had."""

    written: int = 0
    kept: int = 0


def _header(line: str) -> dict[str, Any]:
    try:
        header = json.loads(line)
    except json.JSONDecodeError:
        header = None
    if not isinstance(header, dict) or header.get("durable") != "export":
        raise DumpError("not a durable dump: the first line is not its header")
    version = header.get("format")
    if not isinstance(version, int):
        raise DumpError(f"the dump's header has no format version: {line.strip()[:200]}")
    if version > FORMAT:
        raise DumpError(
            f"the dump is of format {version}, newer than this release reads ({FORMAT}); "
            "import it with the release that wrote it, or a newer one"
        )
    return header


def _failure(data: object) -> Failure | None:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise DumpError(f"a failure must be an object, got {data!r}")
    return Failure(
        type=str(data["type"]),
        message=str(data["message"]),
        traceback=str(data["traceback"]),
        attempts=int(data["attempts"]),
    )


async def _import_one(store: Durable[Any], line: dict[str, Any]) -> bool:
    workflow = line.get("workflow")
    records = line.get("records")
    status = line.get("status")
    if not isinstance(workflow, str) or not isinstance(records, list):
        raise DumpError(f"a workflow line needs 'workflow' and 'records': {str(line)[:200]}")
    lifecycle = _lifecycle(store)
    if status is not None and lifecycle is None:
        raise ValueError(
            f"workflow {workflow!r} has a status, and this store does not offer lifecycle"
        )
    if lifecycle is not None and await lifecycle.status(workflow) is not None:
        return False  # first writer wins: the target's workflow stays as it is
    checkpointer = store.checkpointer
    dated: object = checkpointer
    renamed: dict[str, str] = {}
    for record in records:
        if not isinstance(record, list) or len(record) != 3 or not isinstance(record[0], str):
            raise DumpError(f"workflow {workflow!r}: a record is [key, value, at], got {record!r}")
        key, value, text = record
        at = _moment(text)
        if key.startswith(INBOX_PREFIX):
            message_id = MESSAGE_ID_PREFIX + key
            if isinstance(dated, Dated) and at is not None:
                renamed[key] = await dated.append_at(workflow, value, at, message_id=message_id)
            else:
                renamed[key] = await checkpointer.append(workflow, value, message_id=message_id)
            continue
        if isinstance(value, dict) and len(value) == 1 and value.get(RECEIVE_FIELD) in renamed:
            value = {RECEIVE_FIELD: renamed[value[RECEIVE_FIELD]]}
        if isinstance(dated, Dated) and at is not None:
            await dated.supply_at(workflow, key, value, at)
        else:
            await checkpointer.supply(workflow, key, value)
    if status is None:
        return True
    assert lifecycle is not None
    await _restore_status(store, lifecycle, workflow, status)
    updated = _moment(status.get("updated_at"))
    if (
        isinstance(dated, Dated)
        and updated is not None
        and await lifecycle.status(workflow) is not None
    ):
        # Last, after every transition the restore made stamped its own clock.
        await dated.backdate(
            workflow, started_at=_moment(status.get("started_at")), updated_at=updated
        )
    return True


async def _restore_status(
    store: Durable[Any], lifecycle: Lifecycle, workflow: str, data: dict[str, Any]
) -> None:
    status = Status(data["status"])
    kind = data.get("kind")
    if kind is not None:
        await lifecycle.admit(workflow, kind, data.get("input"), queue=data.get("queue", "default"))
    if status in (Status.READY, Status.RUNNING):
        # A pass in flight on the old store is no pass here: the workflow is ready to run.
        await store.scheduler.make_ready(workflow)
        return
    attempts = int(data.get("attempts", 0))
    failure = _failure(data.get("failure"))
    keys = tuple(data.get("keys") or ())
    if status is Status.CANCELLED:
        # Settled first (as though it had waited), so that the attempts, the keys and the
        # last error it was cancelled with are kept; then withdrawn.
        await _settle(
            lifecycle, workflow, Settlement(Status.BLOCKED, attempts, None, failure, None, keys)
        )
        await lifecycle.withdraw(workflow)
        await store.scheduler.cancel(workflow)
        return
    until = _moment(data.get("until"))
    settlement = Settlement(
        status=status,
        attempts=attempts,
        value=data.get("value"),
        failure=failure,
        until=until,
        keys=keys,
    )
    await _settle(lifecycle, workflow, settlement)
    if status in (Status.SLEEPING, Status.BLOCKED):
        # A worker's pass replays it and waits again: until the recorded deadline, or for a
        # value that has not arrived (or runs on, if it has).
        await store.scheduler.make_ready(workflow)


async def _settle(lifecycle: Lifecycle, workflow: str, settlement: Settlement) -> None:
    window = timedelta(minutes=1)
    began = await lifecycle.begin(workflow, liveness=window, budget=window, owner=IMPORT_OWNER)
    if began is None or began.holder is None:
        raise RuntimeError(f"workflow {workflow!r} was taken while it was being imported")
    await lifecycle.settle(began.holder, settlement)


def _lines(source: Iterable[str]) -> Iterator[tuple[int, str]]:
    for number, line in enumerate(source, 1):
        if line.strip():
            yield number, line


async def import_lines(
    store: Durable[Any],
    source: Iterable[str],
    *,
    progress: Callable[[int, int | None], None] | None = None,
) -> Imported:
    """Write the dump read from ``source`` (lines) into ``store``, one workflow at a time.

    First writer wins: a workflow the target already has a status for is left as it is
    (``kept``), records are supplied first-writer-wins and inbox entries appended with a
    message id, so importing a dump twice writes nothing the second time. ``DumpError`` for
    a dump of a newer format (before anything is written), a malformed line, or a dump cut
    short (after writing what came before it)."""
    lines = _lines(source)
    first = next(lines, None)
    if first is None:
        raise DumpError("the dump is empty: no header line")
    header = _header(first[1])
    total = header.get("workflows")
    expected = total if isinstance(total, int) else None
    done = Imported()
    ended = False
    for number, text in lines:
        if ended:
            raise DumpError(f"line {number}: more after the dump's end line")
        try:
            line = json.loads(text)
        except json.JSONDecodeError as error:
            raise DumpError(f"line {number} is not JSON: {error}") from None
        if not isinstance(line, dict):
            raise DumpError(f"line {number} is not an object")
        if line.get("end") is True:
            ended = True
            continue
        if await _import_one(store, line):
            done.written += 1
        else:
            done.kept += 1
        if progress is not None:
            progress(done.written + done.kept, expected)
    if not ended:
        raise DumpError(
            f"the dump was cut short: no end line after {done.written + done.kept} workflows "
            "(those were imported; import the whole dump again to finish, nothing is doubled)"
        )
    return done


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_age(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` (a whole number and one unit), as a
    ``timedelta``. ``ValueError`` otherwise."""
    number, unit = text[:-1], text[-1:]
    if unit not in _UNITS or not number.isdigit():
        raise ValueError(
            f"{text!r} is not an age: write a whole number and one of s, m, h, d, w (like 30d)"
        )
    return timedelta(seconds=int(number) * _UNITS[unit])


TERMINAL = (Status.FINISHED, Status.FAILED, Status.CANCELLED)


@dataclass(frozen=True, slots=True)
class PrunePolicy:
    """A worker's standing prune (``work(..., prune=PrunePolicy(...))``, ``durable worker
    --prune-finished-before 30d``): every ``every``, :func:`prune` the workflows whose
    status is one of ``statuses`` and that were last updated longer than
    ``finished_before`` ago (by the worker's clock), ``batch`` rows a page."""

    finished_before: timedelta
    every: timedelta = timedelta(hours=1)
    statuses: tuple[Status, ...] = TERMINAL
    batch: int = 100

    def __post_init__(self) -> None:
        for name in ("finished_before", "every"):
            value = getattr(self, name)
            if not isinstance(value, timedelta) or value <= timedelta(0):
                raise ValueError(f"a prune policy's {name} is a positive timedelta, got {value!r}")
        if not self.statuses:
            raise ValueError("a prune policy names at least one status")
        for status in self.statuses:
            if not isinstance(status, Status) or not status.terminal:
                raise ValueError(
                    f"prune removes finished, failed or cancelled workflows, not {status}"
                )
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch < 1:
            raise ValueError(f"a prune policy's batch is a positive int, got {self.batch!r}")


async def prune(
    store: Durable[Any],
    before: datetime,
    statuses: Iterable[Status] = TERMINAL,
    *,
    batch: int = 100,
    progress: Callable[[int], None] | None = None,
) -> int:
    """Discard every workflow whose status is one of ``statuses`` (terminal ones only) and
    whose ``updated_at`` (the store's clock at its last transition) is before ``before``.
    Returns how many were discarded.

    Pages through the lifecycle index ``batch`` rows at a time and discards one workflow per
    commit, raising its fence, so an id started again gets tokens above any it had. On a
    store whose checkpointer is :class:`~durable.interfaces.Prunable` (every store here),
    each discard is ``discard_ended``: the store checks that the workflow has still ended,
    and is still older than ``before``, in the same step as it discards, so a retry racing
    the prune either lands first and the workflow is kept, or finds it gone; never a retry
    that worked on a workflow then forgotten. On another store the status is read again
    just before ``Durable.discard``, which leaves that race open for the moment between
    the two. ``LifecycleNotOffered`` on a store without lifecycle, ``ValueError`` for a
    status that is not terminal."""
    from durable.workflows import lifecycle_of

    lifecycle = lifecycle_of(store.checkpointer)
    wanted = tuple(statuses)
    for status in wanted:
        if not status.terminal:
            raise ValueError(f"prune removes finished, failed or cancelled workflows, not {status}")
    pruned = 0
    checkpointer: object = store.checkpointer
    ended = frozenset(wanted)
    for status in wanted:
        async for st in _paged(lifecycle, status, batch):
            if st.updated_at >= before:
                continue
            if isinstance(checkpointer, Prunable):
                if await checkpointer.discard_ended(st.workflow, statuses=ended, before=before):
                    pruned += 1
                    if progress is not None:
                        progress(pruned)
                continue
            now = await lifecycle.status(st.workflow)
            if now is None or now.status not in wanted or now.updated_at >= before:
                continue
            await store.discard(st.workflow)
            pruned += 1
            if progress is not None:
                progress(pruned)
    return pruned
