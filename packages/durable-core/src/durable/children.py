"""Child workflows: a workflow that starts others of any kind and awaits their outcomes.

A parent starts a child from its body (``run.start_child``, ``run.child``), under an id
derived from its own and a key (``<parent>/<key>``) unless one is given, and awaits its
outcome (``run.outcome``, ``run.gather``). While the child runs the parent is ``blocked``
on the key ``durable.outcome:<key>`` and holds no claim. When the child ends (finished,
failed or cancelled), whoever ended it ``arrive``s the outcome into the parent under that
key, which records it and makes the parent ready: no loop polls for it.

The link is kept as ordinary records, on both sides, written by existing moves:

* the child holds ``durable.parent`` = ``{"workflow": <parent>, "key": <key>}``, supplied
  (first writer wins) before the child is started, so its first pass already knows where
  its outcome goes;
* the parent holds ``durable.child:<key>`` = ``{"workflow": <child>, "kind": <name>,
  "cancel_with_parent": bool}``, recorded with the pass's token after the child is started,
  and ``durable.outcome:<key>`` once the outcome has arrived.

The order of the writes is what makes it safe where they cannot be one commit (two
workflows on a Redis Cluster live in two slots):

* starting: the parent link on the child, then the start, then the link on the parent. A
  replayed parent that finds its link skips both; one that does not (it died in between)
  does both again, and both are idempotent.
* ending: the child's outcome (its ``settle``) first, then the arrival in the parent, then
  the child's delivery is answered. A worker killed between the first two leaves the
  child's delivery outstanding; the next worker to take it finds the child terminal and
  arrives the outcome again (:func:`report_terminal`). And a parent's pass that awaits a
  child whose outcome has not arrived reads the child's status, and records a terminal
  outcome itself (:func:`outcome`), so any pass of the parent repairs it too.
* cancelling: the child's cancel, then the arrival in its parent; a crash between is
  repaired by cancelling again, or by any pass of the parent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from durable.boundary import check_kind, check_workflow
from durable.interfaces import Durable, Failure, Status, WorkflowStatus
from durable.run import CHILD_PREFIX, OUTCOME_PREFIX, PARENT_KEY, DuplicateKey, Run

if TYPE_CHECKING:
    from durable.workflows import Kind

__all__ = [
    "CHILD_PREFIX",
    "OUTCOME_PREFIX",
    "PARENT_KEY",
    "ChildCancelled",
    "ChildFailed",
    "ChildHandle",
    "child_id",
    "children_of",
    "parent_of",
]

log = logging.getLogger("durable.children")

T = TypeVar("T")


def child_id(parent: str, key: str) -> str:
    """The id a child started under ``key`` by ``parent`` gets unless one is given."""
    return f"{parent}/{key}"


@dataclass(frozen=True, slots=True)
class ChildHandle:
    """A child as its parent's body holds it: its id, the parent's key for it, its kind."""

    workflow: str
    key: str
    kind: str


class ChildFailed(Exception):
    """A child workflow failed: ``.child``, ``.key`` and ``.failure`` (the child's own
    recorded failure) say which and why. The same on every replay of the parent: it is
    built from the outcome recorded in the parent, never from a live object."""

    def __init__(self, workflow: str, child: str, key: str, failure: Failure) -> None:
        self.workflow, self.child, self.key, self.failure = workflow, child, key, failure
        super().__init__(
            f"workflow {workflow!r}: child {child!r} (key {key!r}) failed after "
            f"{failure.attempts} attempt{'' if failure.attempts == 1 else 's'}: {failure}"
        )


class ChildCancelled(Exception):
    """A child workflow was cancelled before it finished."""

    def __init__(self, workflow: str, child: str, key: str) -> None:
        self.workflow, self.child, self.key = workflow, child, key
        super().__init__(f"workflow {workflow!r}: child {child!r} (key {key!r}) was cancelled")


# --- the outcome, as recorded in the parent ------------------------------------------------


def outcome_of(status: WorkflowStatus) -> dict[str, object] | None:
    """The outcome record of a terminal status; None while the workflow has not ended."""
    if status.status is Status.FINISHED:
        return {"status": "finished", "value": status.value}
    if status.status is Status.FAILED:
        failure = status.failure or Failure("?", "", "", status.attempts)
        return {
            "status": "failed",
            "failure": {
                "type": failure.type,
                "message": failure.message,
                "traceback": failure.traceback,
                "attempts": failure.attempts,
            },
        }
    if status.status is Status.CANCELLED:
        return {"status": "cancelled"}
    return None


def _settled(run: Run[Any], handle: ChildHandle, value: object, parse: Callable[[object], T]) -> T:
    details = value if isinstance(value, dict) else {}
    said = details.get("status")
    if said == "finished":
        return run._parse(OUTCOME_PREFIX + handle.key, details.get("value"), parse)
    if said == "failed":
        raw = details.get("failure")
        f = raw if isinstance(raw, dict) else {}
        attempts = f.get("attempts")
        failure = Failure(
            str(f.get("type", "?")),
            str(f.get("message", "")),
            str(f.get("traceback", "")),
            attempts if isinstance(attempts, int) else 0,
        )
        raise ChildFailed(run.workflow, handle.workflow, handle.key, failure)
    if said == "cancelled":
        raise ChildCancelled(run.workflow, handle.workflow, handle.key)
    raise ValueError(
        f"workflow {run.workflow!r}: the outcome recorded for child {handle.workflow!r} "
        f"is not one: {value!r}"
    )


# --- the parent's side (``Run``'s methods delegate here) -------------------------------------


def _durable(run: Run[Any]) -> Any:
    found = run.durable
    if found is None:
        raise RuntimeError(
            f"workflow {run.workflow!r}: starting a child needs a pass run by a worker "
            "(durable.worker.work) on a store that offers lifecycle"
        )
    return found


async def start_child(
    run: Run[Any],
    kind: Kind[Any, Any] | str,
    key: str,
    input: object = None,
    *,
    workflow: str | None = None,
    cancel_with_parent: bool = True,
) -> ChildHandle:
    run._use(key, "child")
    link_key = CHILD_PREFIX + key
    if link_key in run._records:
        return _handle_of(run, key, run._records[link_key])
    durable = _durable(run)
    name = check_kind(kind if isinstance(kind, str) else kind.name)
    child = check_workflow(workflow if workflow is not None else child_id(run.workflow, key))
    if child == run.workflow:
        raise ValueError(f"workflow {run.workflow!r} cannot be its own child (key {key!r})")
    if not isinstance(kind, str):
        # The kind's parser, before anything is written (start would refuse it too, but
        # only after the child's link to this parent was supplied).
        from durable.workflows import InputRefused

        try:
            kind.parse(input)
        except Exception as error:
            raise InputRefused(
                f"workflow {run.workflow!r}: child {child!r} of kind {name!r} refused the "
                f"input {input!r}: {error} (nothing was written)"
            ) from error
    run._begin(link_key)
    try:
        # 1. The child's link to its parent, before it can run (first writer wins).
        link = {"workflow": run.workflow, "key": key}
        stored = await durable.checkpointer.supply(child, PARENT_KEY, link)
        if stored != link:
            raise ValueError(
                f"workflow {run.workflow!r}: cannot start {child!r} as its child under key "
                f"{key!r}: it is already the child of {stored!r}"
            )
        # 2. The start (idempotent: a replay that died before 3 starts it again, harmlessly).
        await durable.start(kind, child, input)
        # 3. The parent's link to the child, with this pass's token.
        recorded = await run._write(
            link_key,
            {"workflow": child, "kind": name, "cancel_with_parent": bool(cancel_with_parent)},
            "child",
        )
    finally:
        run._finish(link_key)
    return _handle_of(run, key, recorded.value)


def _handle_of(run: Run[Any], key: str, value: object) -> ChildHandle:
    details = value if isinstance(value, dict) else {}
    child, kind = details.get("workflow"), details.get("kind")
    if not isinstance(child, str) or not isinstance(kind, str):
        raise ValueError(
            f"workflow {run.workflow!r}: the record {CHILD_PREFIX + key!r} is not a child "
            f"link: {value!r}"
        )
    return ChildHandle(child, key, kind)


async def _look(run: Run[Any], handle: ChildHandle) -> bool:
    """Whether the outcome of ``handle`` is in the parent's records, repairing a lost
    arrival: a terminal child whose outcome never arrived is recorded here and now."""
    key = OUTCOME_PREFIX + handle.key
    if key in run._records:
        return True
    durable = run.durable
    if durable is None:
        return False
    status = await durable.status(handle.workflow)
    found = None if status is None else outcome_of(status)
    if found is None:
        return False
    run._begin(key)
    try:
        await run._write(key, found)
    finally:
        run._finish(key)
    log.info(
        "workflow %r: the outcome of child %r had not arrived; recorded it from its status",
        run.workflow,
        handle.workflow,
    )
    return True


def _claim_wait(run: Run[Any], handle: ChildHandle) -> str:
    key = OUTCOME_PREFIX + handle.key
    if key in run._used:
        raise DuplicateKey(
            f"workflow {run.workflow!r}: the outcome of child {handle.key!r} is awaited twice "
            "in one pass"
        )
    run._used.add(key)
    return key


async def outcome(run: Run[Any], handle: ChildHandle, parse: Callable[[object], T]) -> T:
    key = _claim_wait(run, handle)
    if not await _look(run, handle):
        run._suspend(key, f"awaits child {handle.workflow!r} at")
    return _settled(run, handle, run._records[key], parse)


async def gather(
    run: Run[Any], handles: Sequence[ChildHandle], parse: Callable[[object], T]
) -> list[T]:
    keys = [_claim_wait(run, handle) for handle in handles]
    missing = [
        key for key, handle in zip(keys, handles, strict=True) if not await _look(run, handle)
    ]
    if missing:
        run._waits.extend(missing[:-1])
        run._suspend(missing[-1], f"awaits {len(missing)} child workflow(s), the last at")
    return [_settled(run, h, run._records[k], parse) for k, h in zip(keys, handles, strict=True)]


# --- the child's side: delivering the outcome ----------------------------------------------


def parent_of(records: Mapping[str, object]) -> tuple[str, str] | None:
    """``(parent, key)`` from a child's records, or None for a workflow that is no child."""
    link = records.get(PARENT_KEY)
    if isinstance(link, dict):
        parent, key = link.get("workflow"), link.get("key")
        if isinstance(parent, str) and isinstance(key, str):
            return parent, key
    return None


def children_of(records: Mapping[str, object]) -> list[tuple[str, str, bool]]:
    """``(key, child, cancel_with_parent)`` for each child a parent's records link to."""
    found = []
    for name, value in records.items():
        if name.startswith(CHILD_PREFIX) and isinstance(value, dict):
            child = value.get("workflow")
            if isinstance(child, str):
                cascade = value.get("cancel_with_parent", True)
                found.append((name[len(CHILD_PREFIX) :], child, cascade is not False))
    return found


async def deliver(durable: Durable[Any], parent: str, key: str, value: object) -> None:
    """Arrive a child's outcome in its parent: record it (first writer wins) and make the
    parent ready. The second of the two writes; the child's own outcome is the first."""
    await durable.arrive(parent, OUTCOME_PREFIX + key, value)


async def report(
    durable: Durable[Any],
    workflow: str,
    found: Mapping[str, object] | None,
    value: dict[str, object],
) -> None:
    """Deliver ``workflow``'s outcome ``value`` to its parent, if it has one. ``found`` is
    its records when the caller has them (the pass's own), else they are loaded."""
    records = found if found is not None else await durable.checkpointer.load(workflow)
    link = parent_of(records)
    if link is None:
        return
    # ``deliver`` is looked up at call time: a test replaces it to die between the writes.
    await deliver(durable, link[0], link[1], value)


async def report_terminal(durable: Any, workflow: str) -> None:
    """A delivery came back for a terminal workflow: deliver its outcome again, repairing
    a worker that died after the settle and before the arrival."""
    status = await durable.status(workflow)
    found = None if status is None else outcome_of(status)
    if found is not None:
        await report(durable, workflow, None, found)


async def cancelled(durable: Any, workflow: str, status: WorkflowStatus) -> None:
    """After ``cancel(workflow)``: cancel its unfinished children that go with it, then tell
    its parent (unless the parent has ended). Idempotent: a cancel repeated after a crash
    does what the first left undone."""
    if status.status is not Status.CANCELLED:
        return
    records = await durable.checkpointer.load(workflow)
    for _key, child, cascade in children_of(records):
        if not cascade:
            continue
        found = await durable.status(child)
        if found is not None and not found.status.terminal:
            await durable.cancel(child)
    link = parent_of(records)
    if link is None:
        return
    parent = await durable.status(link[0])
    if parent is not None and parent.status.terminal:
        return
    told = outcome_of(status)
    if told is not None:
        await report(durable, workflow, records, told)
