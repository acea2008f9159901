"""What a store declares about itself, held to what it does.

A capability is a promise the suite gates on, so it must be true both ways round. A store
that declares one and does not provide it is failed, not excused (declared but
unimplemented). A store that provides one without declaring it is warned: nothing is
wrong yet, but nobody may rely on what it does not promise, and the suite cannot test it.
"""

from __future__ import annotations

import asyncio
import inspect

from durable.interfaces import Lifecycle
from durable.plugins import CAPABILITIES
from durable.workflows import LifecycleDurable

from durable_conformance import requirement
from durable_conformance.subject import DeclaredButUnimplemented, StoreUnderTest
from durable_conformance.suite._support import claimed


@requirement("capabilities.plugin-describes-itself")
async def test_capabilities_the_store_plugin_describes_itself(store: StoreUnderTest) -> None:
    """The plugin has a name, the URL schemes it opens, its capabilities as a frozenset of
    names, and an installed distribution whose version the report can name."""
    plugin = store.plugin
    assert isinstance(plugin.name, str), f"the store's name is {plugin.name!r}"
    assert plugin.name, "the store's name is empty"
    assert isinstance(plugin.schemes, tuple), f"schemes is {plugin.schemes!r}, not a tuple"
    assert plugin.schemes, "the store names no schemes"
    assert all(isinstance(s, str) and s for s in plugin.schemes), plugin.schemes
    assert isinstance(plugin.capabilities, frozenset), "capabilities must be a frozenset"
    assert all(isinstance(c, str) and c for c in plugin.capabilities), plugin.capabilities
    assert plugin.distribution, "the plugin does not name the distribution that ships it"
    assert plugin.version is not None, (
        f"the distribution {plugin.distribution!r} is not installed, so no version can be named"
    )


@requirement("capabilities.transact-as-declared")
async def test_capabilities_transact_is_declared_exactly_when_it_is_implemented(
    store: StoreUnderTest,
) -> None:
    """A store declaring transact gives a probe and co-commits its effect; one that does
    not declare it but whose probe's effect it co-commits anyway is warned."""
    cp = store.checkpointer
    wf = store.workflow()
    if store.offers("transact"):
        probe = store.probe
        holder = await claimed(cp, wf)
        try:
            written = await cp.transact(holder, "reserved", probe.bump(wf, "stock"))
        except NotImplementedError as error:
            raise DeclaredButUnimplemented(
                f"store {store.name!r} declares 'transact' but transact raised "
                f"NotImplementedError: {error}"
            ) from error
        assert (written.value, written.first) == (1, True)
        assert await probe.count(wf, "stock") == 1
        return
    unpromised = store.testbed.probe
    if unpromised is None:
        return
    holder = await claimed(cp, wf)
    try:
        written = await cp.transact(holder, "reserved", unpromised.bump(wf, "stock"))
    except (NotImplementedError, TypeError, AttributeError):
        return
    if written.first and await unpromised.count(wf, "stock") == 1:
        store.warn(
            "implements transact (it co-committed its probe's effect) but does not declare "
            "the 'transact' capability, so the suite reports transact as not offered"
        )


@requirement("capabilities.atomic-arrive-as-declared")
async def test_capabilities_atomic_arrive_is_declared_exactly_when_moves_are_atomic(
    store: StoreUnderTest,
) -> None:
    """A store declaring atomic-arrive has a Durable whose atomic is True; one whose moves
    are atomic without declaring it is warned."""
    atomic = store.durable.atomic
    if store.offers("atomic-arrive"):
        if atomic is not True:
            raise DeclaredButUnimplemented(
                f"store {store.name!r} declares 'atomic-arrive' but its Durable says "
                f"atomic={atomic!r}"
            )
    elif atomic is True:
        store.warn(
            "its Durable is atomic but the store does not declare 'atomic-arrive', so "
            "nobody may rely on its moves being one commit"
        )


@requirement("capabilities.declared-names-are-known")
async def test_capabilities_every_declared_capability_is_one_the_suite_knows(
    store: StoreUnderTest,
) -> None:
    """Every declared capability is one the core names; a third party's own is allowed,
    and warned about, because the suite proves nothing about it."""
    unknown = sorted(store.capabilities - set(CAPABILITIES))
    if unknown:
        store.warn(
            f"declares {unknown}, which durable-core does not define; the suite proves nothing "
            "about them"
        )


@requirement("enumerate.lists-workflows-with-records", capability="enumerate")
async def test_enumerate_lists_the_workflows_holding_records(store: StoreUnderTest) -> None:
    """A store declaring enumerate lists every workflow holding records, and none that was
    discarded."""
    cp = store.checkpointer
    kept, gone = store.workflow("kept"), store.workflow("gone")
    await cp.supply(kept, "k", 1)
    await cp.supply(gone, "k", 1)
    await cp.discard(gone)
    lister = getattr(cp, "workflows", None)
    if lister is None:
        raise DeclaredButUnimplemented(
            f"store {store.name!r} declares 'enumerate' but its checkpointer has no workflows()"
        )
    listed = lister()
    if inspect.isawaitable(listed):
        listed = await listed
    listed = set(listed)
    assert kept in listed, f"{kept!r} holds a record but is not listed"
    assert gone not in listed, f"the discarded {gone!r} is still listed"


@requirement("cluster.workflows-on-every-shard", capability="cluster")
async def test_cluster_workflows_spread_across_shards_each_keep_every_guarantee(
    store: StoreUnderTest,
) -> None:
    """On a sharded deployment, workflows whose ids land on different shards each claim,
    record, supply, append and (where offered) transact, concurrently."""
    cp = store.checkpointer
    tag = store.workflow("shard")
    workflows = [f"{tag}-{i}" for i in range(64)]

    async def exercise(wf: str) -> None:
        holder = await claimed(cp, wf)
        assert (await cp.record(holder, "step", wf)).first
        assert await cp.supply(wf, "supplied", wf) == wf
        await cp.append(wf, wf)
        if store.offers("transact"):
            written = await cp.transact(holder, "moved", store.probe.bump(wf, "counter"))
            assert written.value == 1
        assert len(await cp.load(wf)) == (4 if store.offers("transact") else 3)

    await asyncio.gather(*(exercise(wf) for wf in workflows))


@requirement("capabilities.lifecycle-as-declared")
async def test_capabilities_lifecycle_is_declared_exactly_when_it_is_implemented(
    store: StoreUnderTest,
) -> None:
    """A store declaring lifecycle has a checkpointer that is a Lifecycle and a Durable that
    is a LifecycleDurable; one whose checkpointer implements Lifecycle without declaring it
    is warned."""
    checkpointer = store.checkpointer
    if store.offers("lifecycle"):
        if not isinstance(checkpointer, Lifecycle):
            raise DeclaredButUnimplemented(
                f"store {store.name!r} declares 'lifecycle' but its checkpointer "
                f"{type(checkpointer).__name__} does not implement Lifecycle"
            )
        if not isinstance(store.durable, LifecycleDurable):
            raise DeclaredButUnimplemented(
                f"store {store.name!r} declares 'lifecycle' but its Durable "
                f"{type(store.durable).__name__} is not a LifecycleDurable (start, cancel, "
                "retry, status, list, handle)"
            )
    elif isinstance(checkpointer, Lifecycle):
        store.warn(
            "its checkpointer implements Lifecycle but the store does not declare the "
            "'lifecycle' capability, so the suite reports lifecycle as not offered and "
            "nobody may rely on it"
        )
