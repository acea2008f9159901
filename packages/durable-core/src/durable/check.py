"""A deploy check: would the code about to be deployed still read the records in the store?

:func:`check` replays every unfinished workflow (every status row that is ready, running,
sleeping or blocked, paged through ``Lifecycle.statuses``) against a registry in a dry run,
and reports each one:

- ``fine``: the new code reads every record it reaches, and reaches every key recorded;
- ``refused``: a parser of the new code refuses a stored value (the key, the value and the
  error are reported); the workflow's input counts, under the key ``<input>``;
- ``diverged``: the new code never reaches a key the store holds, while it reaches a key the
  store does not hold: a step renamed or reordered, whose effect would run again (both keys
  are reported);
- ``reused``: the new code uses a recorded key as another kind of operation than the one
  that recorded it (a step that is now an ``awaiting``, a ``transact`` that is now a
  ``step``): the pass would be refused with ``KeyReused``, and the key and both operations
  are reported. Only on a store that keeps operations (``Operational``); elsewhere such a
  key reads as whatever the new operation makes of the old value;
- ``unknown kind``: the registry serves no kind of the recorded name;
- ``error``: the body raised something else on its way through the records.

The dry run is read-only. No claim is taken (the run holds a pass of token 0 the store never
minted), and the run's store refuses every write: a step, ``transact``, sleep, receive or
child the records do not answer stops the run there, before its effect, and is reported as
reached. What a pass reads is only ``load`` and ``statuses``; so the cost is one ``load``
per unfinished workflow, plus one page of statuses per ``page`` of them.

A value that arrived (``Durable.arrive``) for a key the body has not reached yet looks, in
the records, like the result of a step the body no longer reaches: declare the keys a kind
awaits (``signals=`` on the kind) and they are never counted as unreached.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Never, TypeVar

from durable.boundary import shown
from durable.interfaces import (
    Checkpointer,
    Durable,
    KeyReused,
    Pass,
    Status,
    Suspended,
    WorkflowStatus,
    _a,
)
from durable.run import (
    CHILD_PREFIX,
    RESERVED_PREFIX,
    STEP_PREFIX,
    ParseFailed,
    Run,
    checkpointer_of,
    recall,
)
from durable.workflows import Kind, Workflows, lifecycle_of

__all__ = ["DryRunWrite", "Finding", "Report", "Verdict", "check", "render"]

T = TypeVar("T")

UNFINISHED = (Status.READY, Status.RUNNING, Status.SLEEPING, Status.BLOCKED)
PAGE = 500

_WRITES = frozenset(
    {
        "record",
        "record_as",
        "transact",
        "claim",
        "release",
        "renew",
        "supply",
        "send",
        "discard",
        "admit",
        "begin",
        "beat",
        "settle",
        "withdraw",
        "readmit",
    }
)


class Verdict(StrEnum):
    """What the dry run found for one workflow."""

    FINE = "fine"
    REFUSED = "refused"
    DIVERGED = "diverged"
    REUSED = "reused"
    UNKNOWN_KIND = "unknown kind"
    ERROR = "error"

    @property
    def breaks(self) -> bool:
        """Whether deploying the new code would break the workflow."""
        return self is not Verdict.FINE


@dataclass(frozen=True, slots=True)
class Finding:
    """One workflow's verdict. ``key``, ``value`` and ``error``: what was refused (or the
    error raised); ``unreached``: recorded keys the new code never reached; ``reached``:
    keys it reached that the store does not hold (where the dry run stopped)."""

    workflow: str
    kind: str | None
    status: Status
    verdict: Verdict
    key: str | None = None
    value: object = None
    error: str | None = None
    unreached: tuple[str, ...] = ()
    reached: tuple[str, ...] = ()

    def as_json(self) -> dict[str, object]:
        found: dict[str, object] = {
            "workflow": self.workflow,
            "kind": self.kind,
            "status": self.status.value,
            "verdict": self.verdict.value,
        }
        if self.verdict is Verdict.REFUSED:
            found.update(key=self.key, value=self.value, error=self.error)
        elif self.verdict is Verdict.REUSED:
            found.update(key=self.key, error=self.error)
        elif self.verdict is Verdict.ERROR:
            found["error"] = self.error
        if self.unreached or self.reached:
            found.update(unreached=list(self.unreached), reached=list(self.reached))
        return found

    def why(self) -> str:
        """The finding in one line."""
        if self.verdict is Verdict.REFUSED:
            return f"{self.key!r} holds {shown(self.value)}: {self.error}"
        if self.verdict is Verdict.DIVERGED:
            return (
                f"never reaches {', '.join(map(repr, self.unreached))}; "
                f"reaches {', '.join(map(repr, self.reached))} instead (its effect would run)"
            )
        if self.verdict is Verdict.REUSED:
            return self.error or "?"
        if self.verdict is Verdict.UNKNOWN_KIND:
            return f"the registry serves no kind {self.kind!r}"
        if self.verdict is Verdict.ERROR:
            return self.error or "?"
        return ""


@dataclass(slots=True)
class Report:
    """Every unfinished workflow's finding, in the order read."""

    findings: list[Finding] = field(default_factory=list)

    @property
    def broken(self) -> list[Finding]:
        """The findings that would break on deploy."""
        return [f for f in self.findings if f.verdict.breaks]

    def counts(self) -> dict[str, int]:
        """How many workflows got each verdict (every verdict named, zeros included)."""
        return {v.value: sum(1 for f in self.findings if f.verdict is v) for v in Verdict}

    def as_json(self) -> dict[str, object]:
        return {
            "checked": len(self.findings),
            "counts": self.counts(),
            "broken": [f.as_json() for f in self.broken],
        }


def render(report: Report) -> str:
    """The report as a summary table, then one line per workflow that would break."""
    lines = [f"{'verdict':<14}{'workflows':>9}"]
    lines += [f"{verdict:<14}{n:>9}" for verdict, n in report.counts().items()]
    lines.append(f"{'checked':<14}{len(report.findings):>9}")
    for finding in report.broken:
        lines.append(
            f"{finding.workflow}  {finding.kind or '-'}  {finding.verdict.value}: {finding.why()}"
        )
    if not report.broken:
        lines.append("every unfinished workflow reads its records under the new code")
    return "\n".join(lines) + "\n"


class DryRunWrite(RuntimeError):
    """The deploy check's store was asked to write: it never does."""


class _ReadOnly:
    """A checkpointer that forwards reads (``load``, ``hash_key``, ...) and refuses every
    write, a last guard behind the dry run's own stops."""

    def __init__(self, inner: object) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in _WRITES:

            def refused(*args: object, **kwargs: object) -> Never:
                raise DryRunWrite(f"the deploy check never writes (asked to {name})")

            return refused
        return getattr(self._inner, name)


class _Reached(Suspended):
    """The dry run reached an operation the records do not answer: it stops there."""


class _DryRun(Run[Any]):
    """A ``Run`` over loaded records that returns what they hold and stops, before any
    effect, at the first operation they do not answer."""

    def __init__(
        self,
        checkpointer: Checkpointer[Any],
        holder: Pass,
        records: Mapping[str, object],
        operations: Mapping[str, str | None],
    ) -> None:
        super().__init__(checkpointer, holder, records, operations=operations)
        self.reached: list[str] = []

    def _begin(self, key: str) -> None:
        # Every path to an effect or a write begins here, before it does anything.
        if key.startswith(CHILD_PREFIX):
            key = key[len(CHILD_PREFIX) :]
        if key not in self.reached:
            self.reached.append(key)
        raise _Reached(f"workflow {self.workflow!r}: the dry run stops at {key!r}")

    async def _write(self, key: str, value: object, operation: str | None = None) -> Never:
        raise DryRunWrite(f"the deploy check never writes (asked to record {key!r})")


def _recorded_keys(records: Mapping[str, object]) -> list[str]:
    """The body's keys the records hold: its own, a child's (from its link), and a step's
    whose attempts were recorded and whose result was not."""
    keys: dict[str, None] = {}
    for key in records:
        if not key.startswith(RESERVED_PREFIX):
            keys[key] = None
        elif key.startswith(CHILD_PREFIX):
            keys[key[len(CHILD_PREFIX) :]] = None
        elif key.startswith(STEP_PREFIX):
            parts = key[len(STEP_PREFIX) :].rsplit(":", 2)
            if len(parts) == 3 and parts[0]:
                keys[parts[0]] = None
    return list(keys)


def _only_suspended(group: BaseExceptionGroup[BaseException]) -> bool:
    rest = group.subgroup(lambda e: not isinstance(e, Suspended | BaseExceptionGroup))
    return rest is None


def _parse_failed(error: BaseException) -> ParseFailed | None:
    if isinstance(error, ParseFailed):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = _parse_failed(inner)
            if found is not None:
                return found
    return None


def _reused(error: BaseException) -> KeyReused | None:
    if isinstance(error, KeyReused):
        return error
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            found = _reused(inner)
            if found is not None:
                return found
    return None


def _reuse(status: WorkflowStatus, error: KeyReused) -> Finding:
    return Finding(
        status.workflow,
        status.kind,
        status.status,
        Verdict.REUSED,
        key=error.key,
        error=f"recorded by {_a(error.recorded)}, used as {_a(error.asked)}",
    )


def _refused(status: WorkflowStatus, error: ParseFailed) -> Finding:
    cause = error.__cause__
    why = f"{type(cause).__name__}: {cause}" if cause is not None else str(error)
    return Finding(
        status.workflow, status.kind, status.status, Verdict.REFUSED, error.key, error.value, why
    )


async def _one(
    checkpointer: Checkpointer[Any], registry: Workflows, status: WorkflowStatus
) -> Finding:
    workflow = status.workflow
    kind = registry.resolve(status.kind)
    if kind is None:
        return Finding(workflow, status.kind, status.status, Verdict.UNKNOWN_KIND)
    try:
        parsed = kind.parse(status.input)
    except Exception as error:
        refusal = ParseFailed(workflow, "<input>", status.input, error)
        refusal.__cause__ = error
        return _refused(status, refusal)
    records, operations = await recall(checkpointer, workflow)
    try:
        run = _DryRun(checkpointer, Pass(workflow, 0), records, operations)
    except ParseFailed as error:  # the recorded deadline
        return _refused(status, error)
    try:
        await kind.body(run, parsed)
    except Suspended:
        pass
    except BaseExceptionGroup as group:
        reused = _reused(group)
        if reused is not None:
            return _reuse(status, reused)
        refused = _parse_failed(group)
        if refused is not None:
            return _refused(status, refused)
        if not _only_suspended(group):
            return _error(status, group)
    except ParseFailed as error:
        return _refused(status, error)
    except KeyReused as error:
        return _reuse(status, error)
    except Exception as error:
        return _error(status, error)
    declared = kind.signals or {}
    unreached = tuple(
        k for k in _recorded_keys(records) if k not in run._used and k not in declared
    )
    reached = tuple(run.reached) + tuple(
        k for k in run.waits if k not in records and k not in run.reached
    )
    if unreached and reached:
        return Finding(
            workflow,
            status.kind,
            status.status,
            Verdict.DIVERGED,
            unreached=unreached,
            reached=reached,
        )
    return Finding(
        workflow, status.kind, status.status, Verdict.FINE, unreached=unreached, reached=reached
    )


def _error(status: WorkflowStatus, error: BaseException) -> Finding:
    return Finding(
        status.workflow,
        status.kind,
        status.status,
        Verdict.ERROR,
        error=f"{type(error).__name__}: {error}",
    )


async def check(
    store: Durable[Any] | Checkpointer[Any],
    workflows: Workflows | Kind[Any, Any] | Callable[[Run[Any]], Awaitable[object]],
    *,
    page: int = PAGE,
    progress: Callable[[int], None] | None = None,
) -> Report:
    """Replay every unfinished workflow in ``store`` against ``workflows`` in a read-only
    dry run and report each (module doc). ``progress`` is called with the number checked
    so far after each workflow. Needs a store that offers lifecycle (``LifecycleNotOffered``
    otherwise): its status rows are what says which workflows are unfinished, and of what
    kind."""
    registry = Workflows.of(workflows)
    inner = checkpointer_of(store)
    lifecycle = lifecycle_of(inner)
    checkpointer: Any = _ReadOnly(inner)
    report = Report()
    seen: set[str] = set()
    for wanted in UNFINISHED:
        cursor: str | None = None
        while True:
            found = await lifecycle.statuses(status=wanted, limit=page, cursor=cursor)
            for status in found.statuses:
                if status.workflow in seen:  # it moved between statuses while we paged
                    continue
                seen.add(status.workflow)
                report.findings.append(await _one(checkpointer, registry, status))
                if progress is not None:
                    progress(len(report.findings))
            cursor = found.cursor
            if cursor is None:
                break
    return report
