"""append: the inbox, under keys only the store can pick.

append is supply under a key the store picks, and owes three things no caller can
arrange: concurrent appends get distinct keys and none is lost; the keys sort into append
order within the workflow; and the entry is an ordinary record, sitting in load at its
append position, so that key order and load order are one order. A counter read and then
written is the classic way to lose the second: two appends draw one number, and the loser
vanishes into first-writer-wins without an error.
"""

from __future__ import annotations

import asyncio

from durable.interfaces import INBOX_PREFIX

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._support import claimed

CONCURRENT = 200


def _inbox(loaded: dict[str, object]) -> list[str]:
    return [key for key in loaded if key.startswith(INBOX_PREFIX)]


@requirement("append.concurrent-appends-all-land")
async def test_append_every_concurrent_append_lands_under_its_own_key(
    store: StoreUnderTest,
) -> None:
    """Hundreds of concurrent appends to one workflow, from several handles, get distinct
    keys under the inbox prefix, and every value is in load exactly once."""
    wf = store.workflow()
    async with store.handles(4) as handles:
        keys = await asyncio.gather(
            *(
                handles[i % len(handles)].checkpointer.append(wf, {"message": i})
                for i in range(CONCURRENT)
            )
        )
    assert len(set(keys)) == CONCURRENT, f"{CONCURRENT - len(set(keys))} appends shared a key"
    assert all(key.startswith(INBOX_PREFIX) for key in keys), keys[:3]
    loaded = await store.checkpointer.load(wf)
    messages = [v.get("message") if isinstance(v, dict) else v for v in loaded.values()]
    assert sorted(messages) == list(range(CONCURRENT)), (  # type: ignore[type-var]
        f"{CONCURRENT - len(loaded)} of {CONCURRENT} concurrent appends were lost"
    )
    for i, key in enumerate(keys):
        assert loaded[key] == {"message": i}, f"the key append returned holds {loaded[key]!r}"


@requirement("append.keys-sort-in-append-order")
async def test_append_keys_sort_in_the_order_of_the_appends(store: StoreUnderTest) -> None:
    """Successive appends return keys that sort in the order they were appended, and
    equal values still get distinct keys (nothing is deduplicated or consumed)."""
    cp = store.checkpointer
    wf = store.workflow()
    keys = [await cp.append(wf, "same message") for _ in range(30)]
    assert keys == sorted(keys), "inbox keys do not sort in append order"
    assert len(set(keys)) == len(keys)
    assert list(await cp.load(wf)) == keys
    assert list(await cp.load(wf)) == keys, "loading the inbox consumed something"


@requirement("append.entry-sits-at-its-position")
async def test_append_an_entry_sits_in_load_where_it_was_appended(store: StoreUnderTest) -> None:
    """An inbox entry is an ordinary record: load holds it between the records written
    before and after it."""
    cp = store.checkpointer
    wf = store.workflow()
    holder = await claimed(cp, wf)
    await cp.record(holder, "started", True)
    first = await cp.append(wf, "first message")
    await cp.supply(wf, "approval", "yes")
    second = await cp.append(wf, "second message")
    await cp.record(holder, "finished", True)
    loaded = await cp.load(wf)
    assert list(loaded) == ["started", first, "approval", second, "finished"]
    assert (loaded[first], loaded[second]) == ("first message", "second message")


@requirement("append.key-order-is-load-order")
async def test_append_under_concurrency_key_order_and_load_order_agree(
    store: StoreUnderTest,
) -> None:
    """Appends racing each other and records racing them, from several handles: the inbox
    keys in load order are the inbox keys sorted."""
    wf = store.workflow()
    async with store.handles(3) as handles:
        holder = await claimed(handles[0].checkpointer, wf)

        async def write(i: int) -> None:
            cp = handles[i % len(handles)].checkpointer
            if i % 4 == 0:
                await cp.record(holder, f"step-{i}", i)
            else:
                await cp.append(wf, i)

        await asyncio.gather(*(write(i) for i in range(160)))
    loaded = await store.checkpointer.load(wf)
    inbox = _inbox(loaded)
    assert len(inbox) == 120
    assert inbox == sorted(inbox), "load order and inbox key order are two orders"
    assert len(loaded) == 160
