"""``exactly``: a parser that checks the stored value's type instead of converting it."""

from __future__ import annotations

import pytest
from durable.memory import MemoryDurable
from durable.parsers import exactly
from durable.run import Blocked, Finished, ParseFailed, Run, resume


def test_exactly_accepts_the_type_and_refuses_others() -> None:
    assert exactly(bool)(True) is True
    assert exactly(dict)({"a": 1}) == {"a": 1}
    with pytest.raises(TypeError, match="expected bool, got str 'no'"):
        exactly(bool)("no")
    with pytest.raises(TypeError, match="expected int, got bool"):
        exactly(int)(True)


async def test_an_approval_of_the_wrong_type_is_refused_naming_workflow_and_key() -> None:
    store = MemoryDurable()

    async def body(run: Run) -> bool:
        return await run.awaiting("approval", exactly(bool))

    assert await resume(store, "wf-approve", body) == Blocked(("approval",))
    await store.arrive("wf-approve", "approval", "no")
    with pytest.raises(ParseFailed, match="workflow 'wf-approve', key 'approval'"):
        await resume(store, "wf-approve", body)

    await store.arrive("wf-approve-2", "approval", False)
    assert await resume(store, "wf-approve-2", body) == Finished(False)
