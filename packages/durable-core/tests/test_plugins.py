"""Store discovery: pluggy over the ``durable`` entry-point group.

The memory store is found through the real entry point durable-core declares. Extra
plugins are installed for one test by adding entry points to what
``importlib.metadata`` reports, which is the path a real distribution takes; the loaded
state is forgotten before and after, so no other test sees them.
"""

from __future__ import annotations

import importlib.metadata
import logging
import sys
import types
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import durable
import pytest
from durable import plugins
from durable.clock import ManualClock
from durable.interfaces import Durable
from durable.memory import MemoryDurable, open_memory
from durable.plugins import BrokenStore, StorePlugin, UnknownStore, hookimpl

Install = Callable[[str, object], None]
"""Install a plugin for one test: an entry-point name, and what its module's hook
answers (``None`` installs an entry point whose module does not exist)."""


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch) -> Iterator[Install]:
    real_entry_points = importlib.metadata.entry_points
    extra: list[importlib.metadata.EntryPoint] = []

    def entry_points(**params: Any) -> Any:
        found = real_entry_points(**params)
        return [*found, *extra] if params.get("group") == plugins.PROJECT else found

    def installer(name: str, answer: object) -> None:
        module_name = f"durable_test_plugin_{name.replace('-', '_')}"
        if answer is not None:

            @hookimpl
            def durable_store() -> object:
                return answer

            module = types.ModuleType(module_name)
            vars(module)["durable_store"] = durable_store
            monkeypatch.setitem(sys.modules, module_name, module)
        extra.append(importlib.metadata.EntryPoint(name, module_name, plugins.PROJECT))
        plugins._reset_for_tests()

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
    plugins._reset_for_tests()
    yield installer
    plugins._reset_for_tests()


def plugin(name: str, *schemes: str, distribution: str = "durable-test") -> StorePlugin:
    @asynccontextmanager
    async def open_store(url: str, **options: Any) -> AsyncIterator[Durable[Any]]:
        yield MemoryDurable(**options)

    return StorePlugin(
        name=name, schemes=schemes or (name,), open=open_store, distribution=distribution
    )


def test_the_memory_store_is_found_through_the_real_entry_point() -> None:
    declared = {ep.name: ep.value for ep in importlib.metadata.entry_points(group="durable")}
    assert declared.get("memory") == "durable.memory"
    memory = durable.stores()["memory"]
    assert memory.schemes == ("memory",)
    assert memory.open is open_memory
    assert memory.distribution == "durable-core"
    assert memory.version == importlib.metadata.version("durable-core")
    assert {"transact", "atomic-arrive"} <= memory.capabilities
    assert memory.testing is not None
    assert plugins.store("memory") is memory


async def test_open_memory_url_yields_a_working_durable() -> None:
    async with durable.open("memory://") as store:
        assert isinstance(store, Durable)
        await store.arrive("order-1", "approved", True)
        assert await store.checkpointer.load("order-1") == {"approved": True}
        delivery = await store.scheduler.next_ready(timedelta(milliseconds=30))
        assert delivery is not None
        assert delivery.workflow == "order-1"


async def test_open_hands_its_options_to_the_store() -> None:
    clock = ManualClock(datetime(2030, 5, 6, tzinfo=UTC))
    async with durable.open("memory://", clock=clock) as store:
        await store.arrive("order-1", "approved", True)
        [entry] = await store.checkpointer.history("order-1")
        assert entry.at == clock.now()


async def test_each_open_of_memory_is_a_fresh_store() -> None:
    async with durable.open("memory://") as first:
        await first.arrive("order-1", "approved", True)
    async with durable.open("memory://") as second:
        assert await second.checkpointer.load("order-1") == {}


async def test_an_unknown_scheme_lists_the_installed_stores_and_how_to_add_one() -> None:
    with pytest.raises(UnknownStore) as refused:
        async with durable.open("mongodb://localhost/orders"):
            pass
    message = str(refused.value)
    assert "mongodb://" in message
    assert "memory (memory://)" in message
    assert "pip install durable-sqlite" in message
    assert isinstance(refused.value, LookupError)
    assert isinstance(refused.value, durable.StoreError)


@pytest.mark.parametrize("url", ["orders.db", "", "//host/path"])
def test_a_url_with_no_scheme_is_refused_clearly(url: str) -> None:
    with pytest.raises(UnknownStore, match="has no scheme") as refused:
        plugins.for_url(url)
    assert "memory (memory://)" in str(refused.value)


def test_an_unknown_store_name_is_refused_with_the_installed_ones() -> None:
    with pytest.raises(UnknownStore, match=r"no store is called 'cassandra'.*memory"):
        plugins.store("cassandra")


def test_an_installed_plugin_is_found_and_picked_by_scheme(install: Install) -> None:
    extra = plugin("extra", "extra", "extra+tls")
    install("extra", extra)
    assert plugins.stores()["extra"] is extra
    assert "memory" in plugins.stores()
    assert plugins.for_url("extra+tls://host:1/db") is extra
    assert plugins.for_url("memory://").name == "memory"
    assert list(plugins.stores()) == sorted(plugins.stores())


async def test_open_reaches_an_installed_plugin(install: Install) -> None:
    install("extra", plugin("extra"))
    async with durable.open("extra://anywhere") as store:
        assert isinstance(store, MemoryDurable)


def test_a_plugin_that_fails_to_import_is_reported_and_breaks_nothing_else(
    install: Install, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="durable.plugins"):
        install("ghost", None)
        broken = plugins.broken_stores()
    assert "ModuleNotFoundError" in broken["ghost"]
    assert "durable_test_plugin_ghost" in broken["ghost"]
    assert "ghost" in caplog.text
    assert "ghost" not in plugins.stores()
    assert "memory" in plugins.stores()
    with pytest.raises(BrokenStore, match="'ghost' is installed but broken"):
        plugins.store("ghost")


def test_two_plugins_with_one_name_are_an_error(install: Install) -> None:
    install("twin-a", plugin("twin", distribution="durable-twin-a"))
    install("twin-b", plugin("twin", distribution="durable-twin-b"))
    broken = plugins.broken_stores()
    assert "two plugins name themselves 'twin'" in broken["twin"]
    assert "durable-twin-a" in broken["twin"]
    assert "durable-twin-b" in broken["twin"]
    assert "twin" not in plugins.stores()
    with pytest.raises(BrokenStore):
        plugins.store("twin")
    with pytest.raises(UnknownStore):
        plugins.for_url("twin://")


def test_two_plugins_opening_one_scheme_are_an_error(install: Install) -> None:
    install("left", plugin("left", "left", "shared", distribution="durable-left"))
    install("right", plugin("right", "shared", "right", distribution="durable-right"))
    broken = plugins.broken_stores()
    for name in ("left", "right"):
        assert "two plugins open shared:// URLs" in broken[name]
        assert "'left' (durable-left)" in broken[name]
        assert "'right' (durable-right)" in broken[name]
        assert name not in plugins.stores()
    with pytest.raises(BrokenStore, match=r"'shared://db'.*'left'.*'right'"):
        plugins.for_url("shared://db")
    # Neither is picked through its own scheme either: which store a URL reaches must not
    # depend on which plugins happen to be installed beside it.
    with pytest.raises(UnknownStore):
        plugins.for_url("left://db")
    assert "memory" in plugins.stores()


def test_a_hook_that_answers_something_else_is_reported(install: Install) -> None:
    install("confused", "not a StorePlugin")
    assert any("not a StorePlugin" in reason for reason in plugins.broken_stores().values())
    assert "memory" in plugins.stores()


def test_a_hook_that_raises_is_reported_and_breaks_no_other_store(install: Install) -> None:
    install("fine", plugin("fine"))
    explodes = types.ModuleType("durable_test_plugin_explodes")

    @hookimpl
    def durable_store() -> StorePlugin:
        raise RuntimeError("the server config is missing")

    vars(explodes)["durable_store"] = durable_store
    plugins.plugin_manager().register(explodes, name="explodes")
    assert "the server config is missing" in plugins.broken_stores()["explodes"]
    assert {"memory", "fine"} <= set(plugins.stores())
    assert "explodes" not in plugins.stores()


def test_a_plugin_registered_after_the_first_look_is_found(install: Install) -> None:
    assert "late" not in plugins.stores()
    late = types.ModuleType("durable_test_plugin_late")

    @hookimpl
    def durable_store() -> StorePlugin:
        return plugin("late")

    vars(late)["durable_store"] = durable_store
    plugins.plugin_manager().register(late, name="late")
    assert plugins.store("late").name == "late"
    assert plugins.for_url("late://x").name == "late"


def test_a_module_without_the_hookimpl_marker_offers_nothing(install: Install) -> None:
    unmarked = types.ModuleType("durable_test_plugin_unmarked")
    vars(unmarked)["durable_store"] = lambda: plugin("unmarked")
    plugins.plugin_manager().register(unmarked, name="unmarked")
    assert "unmarked" not in plugins.stores()


def test_two_distributions_declaring_one_entry_point_name_are_reported(
    install: Install,
) -> None:
    install("twin-ep", plugin("twin-a"))
    install("twin-ep", plugin("twin-b"))
    assert (
        "two distributions declare the entry point 'twin-ep'"
        in (plugins.broken_stores()["twin-ep"])
    )
    assert "twin-a" not in plugins.stores()
    assert "twin-b" not in plugins.stores()


def test_a_bad_answer_is_reported_under_the_plugins_name(install: Install) -> None:
    install("confused-two", 42)
    assert "not a StorePlugin" in plugins.broken_stores()["confused-two"]


def test_the_loaded_state_is_the_real_one_again_after_an_install_test() -> None:
    names = {ep.name for ep in importlib.metadata.entry_points(group="durable")}
    assert set(plugins.stores()) | set(plugins.broken_stores()) <= names
    assert not any(name.startswith("durable_test_plugin") for name in sys.modules)


def test_stores_returns_a_copy() -> None:
    durable.stores().clear()
    plugins.broken_stores().clear()
    assert "memory" in durable.stores()


def test_lazy_exports_import_each_name_when_first_asked_and_keep_it() -> None:
    package = types.ModuleType("lazy_example")
    getattr_, dir_ = durable.plugins.lazy_exports(
        "lazy_example", {"dumps": "json", "missing": "json"}
    )
    vars(package).update(__getattr__=getattr_, __dir__=dir_)
    sys.modules["lazy_example"] = package
    try:
        import json

        assert {"dumps", "missing"} <= set(dir(package))  # listed before anything is imported
        assert "dumps" not in vars(package)
        assert package.dumps is json.dumps
        assert vars(package)["dumps"] is json.dumps  # kept: the next lookup is a plain one
        with pytest.raises(AttributeError, match="'lazy_example' has no attribute 'loads'"):
            _ = package.loads
        with pytest.raises(AttributeError, match="missing"):
            _ = package.missing  # named, but the module it names has no such attribute
    finally:
        del sys.modules["lazy_example"]
