"""durable: workflows whose effects are named steps, on the store you already have.

A workflow is an ordinary async function. Resuming it means calling it again: each step
already recorded hands back its value instead of running. The guarantees (one writer at
a time, fenced; first writer wins; exactly-once for effects that live in the store) are
stated by the protocols in :mod:`durable.interfaces` and met by each store.
"""

from durable.children import ChildCancelled, ChildFailed, ChildHandle
from durable.clock import Clock, ManualClock, SystemClock
from durable.codec import CheckpointCodec, JsonCodec, UnencodableValue
from durable.interfaces import (
    INBOX_PREFIX,
    SENT_PREFIX,
    Checkpointer,
    Contended,
    Delivery,
    Durable,
    Entry,
    Failure,
    Fenced,
    Interruption,
    LifecycleNotOffered,
    LimitsNotOffered,
    NotRetryable,
    Page,
    Pass,
    QueueLimit,
    QueuesNotOffered,
    Recorded,
    Scheduler,
    StartConflict,
    Status,
    StoreError,
    StoreUnavailable,
    Suspended,
    Swallowed,
    UnknownWorkflow,
    WorkflowStatus,
)
from durable.plugins import StorePlugin, open, stores
from durable.policy import RetryPolicy
from durable.run import DeadlineExceeded, StepContext, StepFailed
from durable.workflows import (
    InputRefused,
    Kind,
    WorkflowCancelled,
    WorkflowFailed,
    WorkflowHandle,
    Workflows,
)

__all__ = [
    "INBOX_PREFIX",
    "SENT_PREFIX",
    "CheckpointCodec",
    "Checkpointer",
    "ChildCancelled",
    "ChildFailed",
    "ChildHandle",
    "Clock",
    "Contended",
    "DeadlineExceeded",
    "Delivery",
    "Durable",
    "Entry",
    "Failure",
    "Fenced",
    "InputRefused",
    "Interruption",
    "JsonCodec",
    "Kind",
    "LifecycleNotOffered",
    "LimitsNotOffered",
    "ManualClock",
    "NotRetryable",
    "Page",
    "Pass",
    "QueueLimit",
    "QueuesNotOffered",
    "Recorded",
    "RetryPolicy",
    "Scheduler",
    "StartConflict",
    "Status",
    "StepContext",
    "StepFailed",
    "StoreError",
    "StorePlugin",
    "StoreUnavailable",
    "Suspended",
    "Swallowed",
    "SystemClock",
    "UnencodableValue",
    "UnknownWorkflow",
    "WorkflowCancelled",
    "WorkflowFailed",
    "WorkflowHandle",
    "WorkflowStatus",
    "Workflows",
    "open",
    "stores",
]
