"""What is stuck in a store and why, and the repairs that are safe to make (``durable doctor``).

:func:`examine` walks every workflow the store holds (by its records, ``Enumerable``, and
by its status rows, ``Lifecycle.statuses``) and reports, each as a :class:`Finding` with a
count, the ids (at most ``limit`` of them) and what to do:

``orphans``
    not finished, failed or cancelled, not blocked on a value, not held by a live pass, and
    neither queued nor sleeping: nothing will ever run it again (a crash between a record
    and its queue entry, a queue entry lost). Safe to repair: ``make_ready`` puts it back
    in the queue, which a worker would do itself if it had the chance.
``lapsed_claims``
    status running, but no live pass holds it: the worker that began the pass died. It is
    run again once the scheduler's delivery lease lapses; many of them mean workers are
    being killed.
``stale_ready``
    runnable for longer than ``stale`` and not taken: no worker serves its kind or queue,
    or the workers are too few.
``failing``
    failed, or not yet failed with ``attempts`` at or above ``attempts``: look at its last
    failure (``durable show``), fix the cause, then ``durable retry``.
``dead_letters``
    inbox messages a finished, failed or cancelled workflow never read
    (:func:`durable.guards.dead_letters`).
``schema``
    the store's schema version against this release's, where the store keeps one.

Two optional, duck-typed methods on a store's ``Durable`` add what only the store knows;
a store without them is reported without them:

``async def schema_versions(self) -> tuple[int | None, int]``
    the version the store's data is at (``None``: not created) and the version this
    release of the store package expects. Below expected: migrations are pending.
``async def doctor_findings(self, *, repair: bool, limit: int, stale: timedelta) -> list[Finding]``
    store-specific findings (durable-redis: consumers of the worker group that are gone),
    repairing what is safe when ``repair`` is true and saying so in ``Finding.repaired``;
    ``stale`` is how long idle counts as gone.

With ``repair=True`` orphans are requeued and whatever a store's hook repairs is repaired;
nothing else is touched: every other finding needs a person's judgement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from durable.guards import dead_letters
from durable.interfaces import (
    Durable,
    Enumerable,
    Inspectable,
    Lifecycle,
    Observable,
    Status,
    WorkflowStatus,
)

__all__ = ["ATTEMPTS", "LIMIT", "STALE", "Finding", "Report", "examine"]

STALE = timedelta(minutes=5)
"""How long a runnable workflow may wait untaken before ``stale_ready`` reports it."""

ATTEMPTS = 3
"""The attempts at which a workflow not yet failed counts as failing repeatedly."""

LIMIT = 20
"""How many ids a finding lists (its count is always the whole number)."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One kind of trouble: how many workflows (or consumers) have it, which, what to do."""

    name: str
    count: int
    ids: tuple[str, ...]  # at most the limit asked for
    advice: str
    repaired: tuple[str, ...] = ()  # what --repair did, one sentence each
    attention: bool = True  # False: informational, nothing needs doing

    def as_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "count": self.count,
            "ids": list(self.ids),
            "advice": self.advice,
            "repaired": list(self.repaired),
            "attention": self.attention,
        }


@dataclass(slots=True)
class Report:
    """What :func:`examine` found: every finding (those with a count of 0 included)."""

    findings: list[Finding] = field(default_factory=list)
    examined: int = 0  # workflows looked at
    unreported: list[str] = field(default_factory=list)  # checks this store cannot make

    @property
    def attention(self) -> bool:
        """Whether anything needs a person (or was repaired just now)."""
        return any(f.attention and f.count for f in self.findings)

    def finding(self, name: str) -> Finding | None:
        return next((f for f in self.findings if f.name == name), None)

    def as_json(self) -> dict[str, object]:
        return {
            "attention": self.attention,
            "examined": self.examined,
            "findings": [f.as_json() for f in self.findings],
            "unreported": list(self.unreported),
        }


async def _all_statuses(lifecycle: Lifecycle) -> dict[str, WorkflowStatus]:
    found: dict[str, WorkflowStatus] = {}
    cursor: str | None = None
    while True:
        page = await lifecycle.statuses(limit=500, cursor=cursor)
        for st in page.statuses:
            found.setdefault(st.workflow, st)
        cursor = page.cursor
        if cursor is None:
            return found


def _finding(
    name: str, ids: list[str], limit: int, advice: str, repaired: tuple[str, ...] = ()
) -> Finding:
    # A finding repaired whole needs no one: the repair is said, and the exit status is 0.
    return Finding(name, len(ids), tuple(ids[:limit]), advice, repaired, attention=not repaired)


async def examine(
    store: Durable[Any],
    *,
    repair: bool = False,
    stale: timedelta = STALE,
    attempts: int = ATTEMPTS,
    limit: int = LIMIT,
    now: datetime | None = None,
) -> Report:
    """Look at every workflow in ``store`` and report what needs attention (module doc);
    with ``repair``, requeue the orphans and run the store's own safe repairs."""
    moment = now or datetime.now(UTC)
    report = Report()
    checkpointer: object = store.checkpointer
    scheduler: object = store.scheduler
    lifecycle = checkpointer if isinstance(checkpointer, Lifecycle) else None
    inspectable = isinstance(checkpointer, Inspectable)
    observable = isinstance(scheduler, Observable)
    ids: set[str] = set()
    if isinstance(checkpointer, Enumerable):
        ids.update(await checkpointer.workflows())
    else:
        report.unreported.append("records (the store cannot list its workflows)")
    statuses = await _all_statuses(lifecycle) if lifecycle is not None else {}
    if lifecycle is None:
        report.unreported.append("status (the store keeps none)")
    if not inspectable:
        report.unreported.append("claims")
    if not observable:
        report.unreported.append("schedule")
    ids.update(statuses)
    orphans: list[str] = []
    lapsed: list[str] = []
    stale_ready: list[str] = []
    failing: list[str] = []
    dead: list[str] = []
    letters = 0
    for workflow in sorted(ids):
        report.examined += 1
        st = statuses.get(workflow)
        if lifecycle is None:
            continue  # without a status, an ended workflow cannot be told from a stuck one
        status = None if st is None else st.status
        claim = await checkpointer.claimed(workflow) if inspectable else None  # type: ignore[attr-defined]
        when = await scheduler.scheduled(workflow) if observable else None  # type: ignore[attr-defined]
        if status is not None and status.terminal:
            if status is Status.FAILED:
                failing.append(workflow)
            unread = await dead_letters(store, workflow)
            if unread:
                dead.append(workflow)
                letters += len(unread)
            continue
        if st is not None and st.attempts >= attempts:
            failing.append(workflow)
        if status is Status.RUNNING and claim is None and inspectable:
            lapsed.append(workflow)
        if status is Status.BLOCKED or claim is not None:
            continue
        if observable and when is None:
            orphans.append(workflow)
        elif when is not None and when <= moment - stale:
            stale_ready.append(workflow)
    repaired: tuple[str, ...] = ()
    if repair and orphans:
        make_ready: Any = store.scheduler.make_ready
        for workflow in orphans:
            await make_ready(workflow)
        repaired = (f"requeued {len(orphans)} orphaned workflow(s): {', '.join(orphans[:limit])}",)
    report.findings += [
        _finding(
            "orphans",
            orphans,
            limit,
            "not ended, not blocked, not held and neither queued nor sleeping: nothing will "
            "run them again; `durable doctor URL --repair` requeues them",
            repaired,
        ),
        _finding(
            "lapsed_claims",
            lapsed,
            limit,
            "running, but the pass that began them died; they run again once the delivery "
            "lease lapses. Many of them: find out why workers die (OOM, kills, deploys)",
        ),
        _finding(
            "stale_ready",
            stale_ready,
            limit,
            f"runnable for over {int(stale.total_seconds())}s and not taken: start a worker "
            "that serves their kind and queue (`durable show URL ID` names both), or more workers",
        ),
        _finding(
            "failing",
            failing,
            limit,
            f"failed, or at {attempts}+ attempts: read the failure (`durable show URL ID`), fix "
            "the cause, then `durable retry URL ID` (a failed one)",
        ),
        _finding(
            "dead_letters",
            dead,
            limit,
            f"{letters} inbox message(s) their workflows ended without reading; `durable show "
            "URL ID` lists them: deliver them elsewhere by hand, or discard the workflow",
        ),
    ]
    hook: Any = getattr(store, "doctor_findings", None)
    if callable(hook):
        report.findings += list(await hook(repair=repair, limit=limit, stale=stale))
    versions: Any = getattr(store, "schema_versions", None)
    if callable(versions):
        found, expected = await versions()
        pending = found is not None and found < expected
        report.findings.append(
            Finding(
                "schema",
                1 if pending else 0,
                (),
                f"schema version {found} of {expected}"
                + (": migrations are pending; run the store's migrate" if pending else ""),
                attention=pending,
            )
        )
    else:
        report.unreported.append("schema version (the store keeps none)")
    return report


def render(report: Report) -> str:
    """The report as an operator reads it."""
    lines = [f"examined {report.examined} workflow(s)"]
    for f in report.findings:
        if f.name == "schema":
            lines.append(f"schema: {f.advice}")
            continue
        if not f.count:
            lines.append(f"{f.name}: 0")
            continue
        more = f" (+{f.count - len(f.ids)} more)" if f.count > len(f.ids) else ""
        lines.append(f"{f.name}: {f.count}: {', '.join(f.ids)}{more}")
        lines.append(f"  what to do: {f.advice}")
        lines.extend(f"  repaired: {done}" for done in f.repaired)
    if report.unreported:
        lines.append(f"not checked (this store cannot say): {'; '.join(report.unreported)}")
    lines.append("needs attention" if report.attention else "nothing needs attention")
    return "\n".join(lines) + "\n"
