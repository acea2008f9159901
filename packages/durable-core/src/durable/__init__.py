"""durable: workflows whose effects are named steps, on the store you already have.

A workflow is an ordinary async function. Resuming it means calling it again: each step
already recorded hands back its value instead of running. The guarantees (one writer at
a time, fenced; first writer wins; exactly-once for effects that live in the store) are
stated by the protocols in :mod:`durable.interfaces` and met by each store.
"""

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
    Fenced,
    Interruption,
    Pass,
    Recorded,
    Scheduler,
    StoreError,
    StoreUnavailable,
    Suspended,
    Swallowed,
)
from durable.plugins import StorePlugin, open, stores

__all__ = [
    "INBOX_PREFIX",
    "SENT_PREFIX",
    "CheckpointCodec",
    "Checkpointer",
    "Clock",
    "Contended",
    "Delivery",
    "Durable",
    "Entry",
    "Fenced",
    "Interruption",
    "JsonCodec",
    "ManualClock",
    "Pass",
    "Recorded",
    "Scheduler",
    "StoreError",
    "StorePlugin",
    "StoreUnavailable",
    "Suspended",
    "Swallowed",
    "SystemClock",
    "UnencodableValue",
    "open",
    "stores",
]
