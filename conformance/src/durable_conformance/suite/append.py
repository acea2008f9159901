"""append: the inbox, under keys only the store can pick.

append is supply under a key the store picks, and owes three things no caller can
arrange: concurrent appends get distinct keys and none is lost; the keys sort into append
order within the workflow; and the entry is an ordinary record, sitting in load at its
append position, so that key order and load order are one order. A counter read and then
written is the classic way to lose the second: two appends draw one number, and the loser
vanishes into first-writer-wins without an error.

An append with a message id is safe to repeat: the id names the message, so a second
append with it (a retry after a lost answer, or a racing duplicate) writes nothing and
returns the first one's key. Checking for the id and then appending is the same classic
mistake one level up: two appends both find the id absent, and the message lands twice.
"""

from __future__ import annotations

import asyncio

from durable.interfaces import INBOX_PREFIX

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._support import claimed

CONCURRENT = 200
SAME_ID = 16


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


@requirement("append.message-id-once")
async def test_append_with_a_message_id_the_workflow_holds_writes_nothing(
    store: StoreUnderTest,
) -> None:
    """An append whose message id the workflow already holds writes nothing and returns the
    first append's key, whatever its value; other ids, id-less appends and other workflows
    append as usual; discard forgets the ids with the records."""
    cp = store.checkpointer
    wf, other = store.workflow(), store.workflow()
    first = await cp.append(wf, {"order": 1}, message_id="order-1")
    assert first.startswith(INBOX_PREFIX), first
    again = await cp.append(wf, {"order": 1}, message_id="order-1")
    assert again == first, f"a repeated message id appended again under {again!r}"
    changed = await cp.append(wf, {"order": "changed"}, message_id="order-1")
    assert changed == first, "a repeated message id with another value appended again"
    assert await cp.load(wf) == {first: {"order": 1}}, "load is not the one entry appended"
    assert [e.key for e in await cp.history(wf)] == [first]

    second = await cp.append(wf, {"order": 2}, message_id="order-2")
    plain = [await cp.append(wf, "no id"), await cp.append(wf, "no id")]
    assert len({first, second, *plain}) == 4, "distinct messages shared a key"
    assert list(await cp.load(wf)) == [first, second, *plain]

    elsewhere = await cp.append(other, "same id, other workflow", message_id="order-1")
    assert await cp.load(other) == {elsewhere: "same id, other workflow"}, (
        "a message id held by one workflow stopped an append to another"
    )

    await cp.discard(wf)
    assert await cp.load(wf) == {}
    anew = await cp.append(wf, {"order": 1, "after": "discard"}, message_id="order-1")
    assert await cp.load(wf) == {anew: {"order": 1, "after": "discard"}}, (
        "discard did not forget the message id: the append after it wrote nothing"
    )


@requirement("append.message-id-once-under-concurrency")
async def test_append_concurrent_appends_with_one_message_id_write_one_entry(
    store: StoreUnderTest,
) -> None:
    """Concurrent appends with one message id, from several handles, write exactly one entry
    and all return its key, while id-less appends racing them all land."""
    wf = store.workflow()
    async with store.handles(4) as handles:

        async def append(i: int) -> str:
            cp = handles[i % len(handles)].checkpointer
            if i % 2:
                return await cp.append(wf, {"copy": i}, message_id="the-message")
            return await cp.append(wf, {"plain": i})

        keys = await asyncio.gather(*(append(i) for i in range(2 * SAME_ID)))
    same = {keys[i] for i in range(1, 2 * SAME_ID, 2)}
    assert len(same) == 1, f"{SAME_ID} appends with one message id got {len(same)} keys"
    loaded = await store.checkpointer.load(wf)
    copies = [v for v in loaded.values() if isinstance(v, dict) and "copy" in v]
    assert len(copies) == 1, f"{SAME_ID} appends with one message id wrote {len(copies)} entries"
    assert loaded[same.pop()] == copies[0]
    assert len(loaded) == SAME_ID + 1, f"load holds {len(loaded)} entries, not {SAME_ID + 1}"
    assert _inbox(loaded) == sorted(_inbox(loaded))
