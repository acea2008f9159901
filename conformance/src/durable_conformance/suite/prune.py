"""Pruning: a workflow is discarded as ended only while it has ended, checked in the same step.

``durable prune`` forgets workflows that ended long ago, while operators go on retrying
failed ones. A store that reads a status and then discards, in two steps, forgets a
workflow a retry made ready in between: the retry said it worked, and the workflow is
gone. ``Prunable`` has no capability name: a store whose checkpointer implements it is held
to it, one that does not is reported not offered.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from durable.interfaces import (
    Lifecycle,
    Prunable,
    Status,
    UnknownWorkflow,
    WorkflowStatus,
)

from durable_conformance import requirement
from durable_conformance.subject import NotOffered, StoreUnderTest
from durable_conformance.suite._support import PATIENCE, now, raised

TRIALS = 40
"""Races per run: each a fresh cancelled workflow, pruned and retried at once."""

ENDED = frozenset({Status.FINISHED, Status.FAILED, Status.CANCELLED})


@requirement("prune.never-an-unfinished-workflow")
async def test_prune_never_discards_a_workflow_a_retry_made_ready(store: StoreUnderTest) -> None:
    """discard_ended racing readmit on another handle: either the discard won (the retry
    finds no workflow) or the retry did (the workflow is ready, with its records, and
    nothing was discarded); never a retry that returned and a discard. Without a race it
    discards only what ended before the moment given, in the statuses given."""
    cp = store.checkpointer
    if not isinstance(cp, Prunable) or not isinstance(cp, Lifecycle):
        raise NotOffered(f"store {store.name!r}'s checkpointer does not implement Prunable")
    later = now() + timedelta(minutes=5)
    # Without a race: a ready workflow, one ended after the moment, one of another status.
    ready = store.workflow("ready")
    await cp.admit(ready, "pay", 1)
    assert not await cp.discard_ended(ready, statuses=ENDED, before=later)
    ended = store.workflow("ended")
    await cp.admit(ended, "pay", 1)
    await cp.withdraw(ended)
    assert not await cp.discard_ended(ended, statuses=ENDED, before=now() - timedelta(hours=1))
    finished = frozenset({Status.FINISHED})
    assert not await cp.discard_ended(ended, statuses=finished, before=later)
    assert await cp.status(ended) is not None, "a workflow not eligible was discarded"
    await raised(
        lambda: cp.discard_ended(ended, statuses=frozenset({Status.READY}), before=later),
        "discard_ended asked to discard ready workflows",
    )
    assert await cp.discard_ended(ended, statuses=ENDED, before=later)
    assert await cp.status(ended) is None
    # The race, on two handles.
    won = {"discard": 0, "retry": 0}
    async with store.handles(2) as handles:
        pruner, retrier = handles[0].checkpointer, handles[-1].checkpointer
        assert isinstance(pruner, Prunable)
        assert isinstance(retrier, Lifecycle)
        for trial in range(TRIALS):
            wf = store.workflow(f"race-{trial}")
            await cp.admit(wf, "pay", trial)
            await cp.supply(wf, "note", "kept if retried")
            await cp.withdraw(wf)
            async with asyncio.timeout(PATIENCE):
                discarded, retried = await asyncio.gather(
                    pruner.discard_ended(wf, statuses=ENDED, before=later),
                    retrier.readmit(wf),
                    return_exceptions=True,
                )
            shown = await cp.status(wf)
            if discarded is True:
                assert isinstance(retried, UnknownWorkflow), (
                    f"{wf!r} was discarded as ended, and the retry racing it returned "
                    f"{retried!r}: a retry that worked was lost"
                )
                assert shown is None, f"{wf!r} was discarded and still shows {shown}"
                won["discard"] += 1
            else:
                assert discarded is False, f"discard_ended raised {discarded!r}"
                assert isinstance(retried, WorkflowStatus), f"the retry raised {retried!r}"
                assert shown is not None, f"{wf!r} was retried, and then discarded"
                assert shown.status is Status.READY, f"{wf!r} was retried, and shows {shown}"
                assert await cp.load(wf) == {"note": "kept if retried"}
                won["retry"] += 1
    assert sum(won.values()) == TRIALS, won
