"""Kinds of workflow, the registry a worker serves, and the handle a caller holds.

A *kind* names a body together with the parser of its input and the policy for its
failures. ``start(kind, workflow, input)`` records all three facts a worker needs before any
pass runs (which body, on what input, how hard to try), so the caller can ask afterwards
what became of it: ``status``, ``result``, ``cancel``, ``retry``, ``list``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Generic, Protocol, TypeVar, overload, runtime_checkable

from durable.boundary import KIND_NAME, check_kind
from durable.interfaces import (
    Admitted,
    Durable,
    Effect,
    Failure,
    Lifecycle,
    LifecycleNotOffered,
    Page,
    Status,
    WorkflowStatus,
)
from durable.parsers import as_is
from durable.policy import RetryPolicy
from durable.run import Run

__all__ = [
    "KIND_NAME",
    "InputRefused",
    "Kind",
    "LifecycleDurable",
    "Lifecycled",
    "WorkflowCancelled",
    "WorkflowFailed",
    "WorkflowHandle",
    "Workflows",
    "as_is",
    "lifecycle_of",
]

In = TypeVar("In")
T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Kind(Generic[In, T]):
    """A body, the parser of its input, its retry policy and its queue, under one name."""

    name: str
    body: Callable[[Run[Any], In], Awaitable[T]]
    parse: Callable[[object], In]
    policy: RetryPolicy = field(default_factory=RetryPolicy)
    queue: str = "default"


class Workflows:
    """The kinds one worker serves, by name.

    A worker is handed one of these and runs each delivered workflow as the kind its
    lifecycle row records. A workflow with no recorded kind (written by the previous
    release, or made by ``send``/``arrive`` without ``start``) runs as ``default``: the one
    named, or the only kind when there is exactly one.
    """

    def __init__(self, *kinds: Kind[Any, Any], default: str | None = None) -> None:
        self._kinds: dict[str, Kind[Any, Any]] = {}
        for kind in kinds:
            self.add(kind)
        if default is not None:
            check_kind(default)
        self._default = default

    def __repr__(self) -> str:
        names = ", ".join(self._kinds)
        return (
            f"Workflows({names})"
            if self._default is None
            else (f"Workflows({names}; default {self._default})")
        )

    def kind(
        self,
        name: str,
        *,
        input: Callable[[object], In] = as_is,  # type: ignore[assignment]
        policy: RetryPolicy | None = None,
        queue: str = "default",
    ) -> Callable[[Callable[[Run[Any], In], Awaitable[T]]], Kind[In, T]]:
        """Register the decorated body as kind ``name``; the decorator returns the ``Kind``."""
        check_kind(name)

        def register(body: Callable[[Run[Any], In], Awaitable[T]]) -> Kind[In, T]:
            made: Kind[In, T] = Kind(
                name, body, input, RetryPolicy() if policy is None else policy, queue
            )
            return self.add(made)

        return register

    def add(self, kind: Kind[In, T]) -> Kind[In, T]:
        """Register ``kind``; ``ValueError`` if a kind of that name is already here."""
        if not isinstance(kind, Kind):
            raise TypeError(f"Workflows.add takes a Kind, got {kind!r}")
        check_kind(kind.name)
        if kind.name in self._kinds:
            raise ValueError(f"a kind named {kind.name!r} is already registered")
        self._kinds[kind.name] = kind
        return kind

    def __getitem__(self, name: str) -> Kind[Any, Any]:
        try:
            return self._kinds[name]
        except KeyError:
            known = ", ".join(repr(n) for n in self._kinds) or "none"
            raise KeyError(f"no kind named {name!r}; known kinds: {known}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._kinds

    def __iter__(self) -> Iterator[Kind[Any, Any]]:
        return iter(self._kinds.values())

    def __len__(self) -> int:
        return len(self._kinds)

    @property
    def default(self) -> Kind[Any, Any] | None:
        """The kind a workflow with no recorded kind runs as: explicit, or the only kind."""
        if self._default is not None:
            return self._kinds.get(self._default)
        if len(self._kinds) == 1:
            return next(iter(self._kinds.values()))
        return None

    def resolve(self, recorded: str | None) -> Kind[Any, Any] | None:
        """The kind to run a workflow recorded as ``recorded`` (None: the default), or None
        when this registry does not serve it (the worker defers it, never fails it)."""
        if recorded is None:
            return self.default
        return self._kinds.get(recorded)

    @classmethod
    def of(
        cls, target: Workflows | Kind[Any, Any] | Callable[[Run[Any]], Awaitable[object]]
    ) -> Workflows:
        """A registry from what a worker was handed: itself, one kind, or a bare body.

        A bare body becomes a one-kind registry named after the function, taking no input
        (its ``input`` is ignored), with the default policy; so a body written for the
        previous release keeps running, now with bounded retries.
        """
        if isinstance(target, Workflows):
            return target
        if isinstance(target, Kind):
            return cls(target)
        if not callable(target):
            raise TypeError(
                f"a worker serves a Workflows, a Kind or a workflow body, got {target!r}"
            )
        body = target
        name = getattr(body, "__name__", "workflow")
        if KIND_NAME.fullmatch(name) is None:
            name = "workflow"

        async def adapted(run: Run[Any], _: object) -> object:
            return await body(run)

        adapted.__name__ = adapted.__qualname__ = name
        return cls(Kind(name, adapted, as_is))


class WorkflowFailed(Exception):
    """``result()`` of a workflow that failed: ``.workflow`` and ``.failure`` say why."""

    def __init__(self, workflow: str, failure: Failure | None) -> None:
        self.workflow, self.failure = workflow, failure
        attempts = failure.attempts if failure is not None else 0
        why = f": {failure}" if failure is not None else ""
        plural = "" if attempts == 1 else "s"
        super().__init__(f"workflow {workflow!r} failed after {attempts} attempt{plural}{why}")


class WorkflowCancelled(Exception):
    """``result()`` of a workflow that was cancelled."""

    def __init__(self, workflow: str, status: WorkflowStatus) -> None:
        self.workflow, self.status = workflow, status
        super().__init__(f"workflow {workflow!r} was cancelled at {status.updated_at.isoformat()}")


class InputRefused(ValueError):
    """The kind's parser refused start's input; nothing was written."""


class WorkflowHandle(Generic[T]):
    """One workflow, from outside: its status, its result, its cancellation."""

    def __init__(self, durable: LifecycleDurable[Any], workflow: str) -> None:
        self.durable = durable
        self.workflow = workflow

    async def status(self) -> WorkflowStatus:
        raise NotImplementedError("lifecycle: written in the next commit")

    @overload
    async def result(self, timeout: timedelta | float | None = None) -> object: ...  # noqa: ASYNC109

    @overload
    async def result(
        self,
        timeout: timedelta | float | None = None,  # noqa: ASYNC109
        *,
        parse: Callable[[object], R],
    ) -> R: ...

    async def result(
        self,
        timeout: timedelta | float | None = None,  # noqa: ASYNC109
        *,
        parse: Callable[[object], Any] = as_is,
    ) -> Any:
        raise NotImplementedError("lifecycle: written in the next commit")

    async def cancel(self) -> WorkflowStatus:
        raise NotImplementedError("lifecycle: written in the next commit")


@runtime_checkable
class LifecycleDurable(Durable[Effect], Protocol[Effect]):
    """A ``Durable`` whose workflows are started by kind and asked about afterwards."""

    async def start(
        self, kind: Kind[Any, T] | str, workflow: str, input: object = None
    ) -> WorkflowHandle[T]: ...

    async def cancel(self, workflow: str) -> WorkflowStatus: ...

    async def retry(self, workflow: str) -> WorkflowStatus: ...

    async def status(self, workflow: str) -> WorkflowStatus | None: ...

    async def list(
        self,
        *,
        status: Status | str | None = None,
        kind: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page: ...

    def handle(self, workflow: str) -> WorkflowHandle[object]: ...


class Lifecycled:
    """The six methods above for any Durable, from its checkpointer's Lifecycle. The three
    moves that cross both halves are hooks whose defaults record, then queue; an atomic
    Durable overrides them as one commit."""

    async def _admit_and_queue(
        self, workflow: str, kind: str, input: object, queue: str
    ) -> Admitted:
        raise NotImplementedError("lifecycle: written in the next commit")

    async def _withdraw_and_cancel(self, workflow: str) -> WorkflowStatus:
        raise NotImplementedError("lifecycle: written in the next commit")

    async def _readmit_and_queue(self, workflow: str) -> WorkflowStatus:
        raise NotImplementedError("lifecycle: written in the next commit")

    async def start(
        self, kind: Kind[Any, T] | str, workflow: str, input: object = None
    ) -> WorkflowHandle[T]:
        raise NotImplementedError("lifecycle: written in the next commit")

    async def cancel(self, workflow: str) -> WorkflowStatus:
        raise NotImplementedError("lifecycle: written in the next commit")

    async def retry(self, workflow: str) -> WorkflowStatus:
        raise NotImplementedError("lifecycle: written in the next commit")

    async def status(self, workflow: str) -> WorkflowStatus | None:
        raise NotImplementedError("lifecycle: written in the next commit")

    async def list(
        self,
        *,
        status: Status | str | None = None,
        kind: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page:
        raise NotImplementedError("lifecycle: written in the next commit")

    def handle(self, workflow: str) -> WorkflowHandle[object]:
        raise NotImplementedError("lifecycle: written in the next commit")


def lifecycle_of(checkpointer: object) -> Lifecycle:
    """``checkpointer`` as a ``Lifecycle``, or ``LifecycleNotOffered`` naming the store."""
    if isinstance(checkpointer, Lifecycle):
        return checkpointer
    raise LifecycleNotOffered(
        f"the store {checkpointer!r} does not offer lifecycle (kinds, start, status and "
        "outcome): it keeps records and schedules passes, but no workflow's status"
    )
