"""Guard rails on writes from outside a pass, and the messages a workflow never read.

A value supplied from outside is the one write here that cannot be taken back: the first
writer wins, and a workflow that refuses what it was given refuses it at every pass after.
``Durable.arrive`` and ``Durable.send`` write whatever they are handed, to whatever id they
are handed; the functions here are the careful way in, which ``durable arrive`` and
``durable send`` use:

* :func:`arrive` says whether this write won (a :class:`~durable.interfaces.Recorded`,
  as ``record`` answers), so a value that lost to an earlier, different one is not
  mistaken for one delivered;
* :func:`arrive` and :func:`send` refuse an id the store has never seen unless told
  ``create=True``, so a mistyped id does not quietly become a workflow that waits forever;
* given the registry of kinds (``workflows=``), they check the value with the parser the
  workflow's kind declares for the key (``Kind.signals``) or for its inbox
  (``Kind.messages``) before anything is written, and refuse what the workflow would;
* :func:`discard` refuses an unknown id rather than reporting it forgotten;
* :func:`dead_letters` lists the inbox messages a finished, failed or cancelled workflow
  never read.

The existence check and the write are two steps, not one commit: two callers creating one
id at once both may. The guard is against a mistaken id, not a race, and either way the
write itself keeps every guarantee the store gives it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from durable.boundary import check_key, check_message_id, check_workflow, shown
from durable.interfaces import (
    INBOX_PREFIX,
    Durable,
    Entry,
    Inspectable,
    Lifecycle,
    Observable,
    Recorded,
    UnknownWorkflow,
    WorkflowStatus,
)
from durable.run import RECEIVE_FIELD
from durable.workflows import Kind, Workflows

__all__ = [
    "SignalRefused",
    "arrive",
    "check_message",
    "check_signal",
    "dead_letters",
    "discard",
    "exists",
    "missing_sqlite_file",
    "send",
    "unread",
]


class SignalRefused(ValueError):
    """A value the workflow's kind would refuse; nothing was written."""

    def __init__(self, workflow: str, kind: str, key: str, value: object, why: str) -> None:
        self.workflow, self.kind, self.key, self.value = workflow, kind, key, value
        super().__init__(
            f"workflow {workflow!r} (kind {kind!r}) refuses {shown(value)} under {key!r}: "
            f"{why} (nothing was written)"
        )


def _status_of(store: Durable[Any]) -> Lifecycle | None:
    checkpointer: object = store.checkpointer
    return checkpointer if isinstance(checkpointer, Lifecycle) else None


async def _status(store: Durable[Any], workflow: str) -> WorkflowStatus | None:
    lifecycle = _status_of(store)
    return None if lifecycle is None else await lifecycle.status(workflow)


async def exists(store: Durable[Any], workflow: str) -> bool:
    """Whether the store has seen ``workflow``: it holds a record, a status, a claim or a
    scheduled run of it. A discarded workflow has none of them, so it is unknown again."""
    check_workflow(workflow)
    if await store.checkpointer.history(workflow):
        return True
    if await _status(store, workflow) is not None:
        return True
    checkpointer: object = store.checkpointer
    if isinstance(checkpointer, Inspectable) and await checkpointer.claimed(workflow):
        return True
    scheduler: object = store.scheduler
    return isinstance(scheduler, Observable) and await scheduler.scheduled(workflow) is not None


async def _must_exist(store: Durable[Any], workflow: str, create: bool, doing: str) -> None:
    if not create and not await exists(store, workflow):
        raise UnknownWorkflow(
            f"no workflow {workflow!r} in this store, so nothing was {doing}; check the id, "
            "or pass create=True (--create) to make a new workflow"
        )


async def _kind(store: Durable[Any], workflow: str, workflows: Workflows | None) -> Kind[Any, Any]:
    """The kind ``workflow`` runs as under ``workflows``: its recorded kind, else the
    registry's default; ``ValueError`` when the registry does not serve it."""
    assert workflows is not None
    st = await _status(store, workflow)
    recorded = None if st is None else st.kind
    kind = workflows.resolve(recorded)
    if kind is None:
        which = f"kind {recorded!r}" if recorded is not None else "a default kind"
        known = ", ".join(repr(k.name) for k in workflows) or "none"
        raise ValueError(
            f"workflow {workflow!r}: the registry has no {which} to check the value against "
            f"(it has {known}); nothing was written"
        )
    return kind


def check_signal(kind: Kind[Any, Any], workflow: str, key: str, value: object) -> None:
    """``SignalRefused`` unless ``kind`` accepts ``value`` under ``key``: a kind that
    declares its signals accepts only the keys it names, each through its parser."""
    if kind.signals is None:
        return
    parse = kind.signals.get(key)
    if parse is None:
        declared = ", ".join(repr(k) for k in kind.signals) or "none"
        raise SignalRefused(
            workflow, kind.name, key, value, f"the kind awaits no such key (it awaits {declared})"
        )
    try:
        parse(value)
    except Exception as error:
        name = getattr(parse, "__name__", repr(parse))
        raise SignalRefused(
            workflow, kind.name, key, value, f"its parser {name} says {error}"
        ) from error


def check_message(kind: Kind[Any, Any], workflow: str, value: object) -> None:
    """``SignalRefused`` unless ``kind``'s message parser (if it declares one) accepts it."""
    if kind.messages is None:
        return
    try:
        kind.messages(value)
    except Exception as error:
        name = getattr(kind.messages, "__name__", repr(kind.messages))
        raise SignalRefused(
            workflow, kind.name, "<inbox>", value, f"its message parser {name} says {error}"
        ) from error


def _won(store: Durable[Any], given: object, stored: object) -> bool:
    """Whether the value stored is the one given, by the store's own codec: the store
    decides a race by encodings, so equal encodings are the write that won (or one no
    reader can tell from it), as ``Recorded.first`` counts them."""
    codec: Any = getattr(store.checkpointer, "codec", None)
    if codec is None:
        return given == stored
    try:
        return bool(codec.encode(given) == codec.encode(stored))
    except Exception:  # a codec that cannot re-encode what it decoded: compare values
        return given == stored


async def arrive(
    store: Durable[Any],
    workflow: str,
    key: str,
    value: object,
    *,
    create: bool = False,
    workflows: Workflows | None = None,
) -> Recorded:
    """``store.arrive`` with the guard rails: the value the key holds and whether this
    write is the one that put it there (``first``; false when an earlier, different value
    won and this one was dropped).

    ``UnknownWorkflow`` for an id the store has never seen, unless ``create``;
    ``SignalRefused`` when ``workflows`` is given and the workflow's kind refuses the
    value under ``key``. Either way nothing is written.
    """
    check_workflow(workflow)
    check_key(workflow, key)
    await _must_exist(store, workflow, create, "supplied")
    if workflows is not None:
        check_signal(await _kind(store, workflow, workflows), workflow, key, value)
    stored = await store.arrive(workflow, key, value)
    return Recorded(stored, _won(store, value, stored))


async def send(
    store: Durable[Any],
    workflow: str,
    value: object,
    *,
    message_id: str | None = None,
    create: bool = False,
    workflows: Workflows | None = None,
) -> str:
    """``store.send`` with the guard rails of :func:`arrive`: an unknown id needs
    ``create``, and with ``workflows`` the kind's message parser checks the value first."""
    check_workflow(workflow)
    check_message_id(workflow, message_id)
    await _must_exist(store, workflow, create, "sent")
    if workflows is not None:
        check_message(await _kind(store, workflow, workflows), workflow, value)
    return await store.send(workflow, value, message_id=message_id)


async def discard(store: Durable[Any], workflow: str) -> None:
    """``store.discard``, but ``UnknownWorkflow`` for an id the store has never seen."""
    await _must_exist(store, workflow, False, "discarded")
    await store.discard(workflow)


def _reference(value: object) -> str | None:
    if isinstance(value, dict) and set(value) == {RECEIVE_FIELD}:
        target = value[RECEIVE_FIELD]
        if isinstance(target, str) and target.startswith(INBOX_PREFIX):
            return target
    return None


def unread(history: Sequence[Entry]) -> list[Entry]:
    """The inbox entries of ``history`` that no ``receive`` took, in append order.

    A ``receive`` records a reference to the entry it took (``run.RECEIVE_FIELD``), so an
    entry no record refers to was never read."""
    taken = {_reference(entry.value) for entry in history}
    return [e for e in history if e.key.startswith(INBOX_PREFIX) and e.key not in taken]


async def dead_letters(store: Durable[Any], workflow: str) -> list[Entry]:
    """The inbox messages ``workflow`` ended without reading: its unread entries once it
    is finished, failed or cancelled (none while it may still read them, and none on a
    store that keeps no status, which cannot say it has ended)."""
    check_workflow(workflow)
    st = await _status(store, workflow)
    if st is None or not st.status.terminal:
        return []
    return unread(await store.checkpointer.history(workflow))


def missing_sqlite_file(url: str) -> Path | None:
    """The file an ``sqlite:`` URL names when it does not exist (opening it would create
    it), else None: for commands that only read, or write to a workflow that must exist."""
    parts = urlsplit(url)
    if parts.scheme != "sqlite" or parts.netloc:
        return None
    path = unquote(parts.path)
    path = path[1:] if path.startswith("/") else path
    if not path or path == ":memory:" or path.startswith(":memory:"):
        return None
    found = Path(path)
    return None if found.exists() else found
