"""Store discovery: the one place a store learns what it may provide.

The shape is pytest's and pluggy's. This module holds the hook specifications; a store
distribution declares an entry point in the ``durable`` group naming a module of
``@hookimpl`` functions, and ``durable.open(url)`` picks the store whose ``schemes``
include the URL's scheme. Nothing in ``durable`` imports a store.

A third-party store answers one hook::

    # mystore/plugin.py
    from durable.plugins import StorePlugin, hookimpl

    @hookimpl
    def durable_store() -> StorePlugin:
        return StorePlugin(name="mystore", schemes=("mystore",), open=open_store, ...)

and declares it in its ``pyproject.toml``::

    [project.entry-points.durable]
    mystore = "mystore.plugin"

Every ``durable`` command, and ``durable.open``, imports every installed store's entry
point to learn the stores' names and schemes. So an entry point module should import
its store's driver only when the store is opened (:func:`lazy_exports` keeps a package's
``__init__`` from importing it either), or every command pays for every driver.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.metadata
import logging
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol
from urllib.parse import urlsplit

import pluggy
from typing_extensions import TypeVar

from durable.interfaces import Durable, StoreError

__all__ = [
    "CAPABILITIES",
    "GAP_MOVES",
    "BrokenStore",
    "Gap",
    "Probe",
    "StorePlugin",
    "Testbed",
    "UnknownStore",
    "at_gap",
    "broken_stores",
    "for_url",
    "hookimpl",
    "hookspec",
    "lazy_exports",
    "open",
    "plugin_manager",
    "store",
    "stores",
]

log = logging.getLogger("durable.plugins")

PROJECT = "durable"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

CAPABILITIES: Mapping[str, str] = {
    "transact": "co-commits an effect with its record (Checkpointer.transact)",
    "atomic-arrive": "arrive, send and discard are each one commit (Durable.atomic)",
    "cluster": "runs on a sharded deployment",
    "enumerate": "can list the workflows it holds",
    "lifecycle": "kinds, start, outcome and status (Lifecycle)",
    "queues": "hands a worker only the workflows of the queues it serves (Routed)",
    "limits": "per-queue concurrency, rate and priority, counted in the store (Limited)",
    "operations": "keeps the operation that wrote each record, refuses its reuse (Operational)",
}
"""The capability names the core knows. A third party may declare more."""

E = TypeVar("E", default=Any)
E_co = TypeVar("E_co", covariant=True, default=Any)


class Probe(Protocol[E_co]):
    """Effects the conformance suite hands to ``transact``, in the store's own language.

    Each moves a counter that lives in the store, which is the only kind of effect a
    store can co-commit. ``workflow`` is passed so that a store whose effects must share
    the workflow's shard (a Redis Cluster hash slot) can place the counter there.
    """

    def bump(self, workflow: str, counter: str) -> E_co:
        """An effect adding one to ``counter`` and returning its new value (an int)."""
        ...

    def bump_then_fail(self, workflow: str, counter: str) -> E_co:
        """An effect that adds one to ``counter`` and then fails, so that a store which
        really commits both halves together leaves the counter where it was."""
        ...

    async def count(self, workflow: str, counter: str) -> int:
        """The counter's committed value, read independently of any transaction (0 when
        it was never moved)."""
        ...


Gap = Callable[[str, str], Awaitable[None]]
"""``await gap(move, workflow)``: a point inside one of a store's moves where the
conformance suite may hold the move in flight, or make it fail.

A race between two moves is only certain to be caught if the suite can stop one of them
half way: a store that checks a fence in one round trip and writes in the next is correct
on almost every schedule, and wrong only when a takeover lands in between. So a store's
``testing`` hook may accept ``gap=``. When it does, every handle of that testbed
(``reopen``'s included) awaits ``gap(move, workflow)`` once in each call of each move it
offers a gap for, where ``move`` is one of :data:`GAP_MOVES`, at the point between what the
move reads to decide and what it commits:

- a move that is one script or one statement awaits the gap just before sending it;
- a move that is one transaction awaits it inside the transaction, after its reads (and
  the locks they take) and before its writes, so that the suite's racing move must wait
  for the lock, which is the proof that the lock is held;
- a move of ``Durable`` that writes to the checkpointer and the scheduler awaits it between
  the two writes.

The gap may sleep (the suite holds the move while a rival move runs) or raise (the suite
injects a failure). A raise must propagate out of the move as it is, and leave the store as
a failure at that point leaves it: nothing of an atomic move, the first half of a split one.
A store need not offer a gap for every move, nor at all: the suite observes which moves
call it, and races the others by timing alone, over more trials. Outside a testbed built
with ``gap=``, a store awaits nothing extra and pays nothing.
"""

GAP_MOVES: frozenset[str] = frozenset(
    {
        "Checkpointer.claim",
        "Checkpointer.renew",
        "Checkpointer.release",
        "Checkpointer.record",
        "Checkpointer.transact",
        "Checkpointer.supply",
        "Checkpointer.append",
        "Checkpointer.discard",
        "Scheduler.make_ready",
        "Scheduler.next_ready",
        "Scheduler.reclaim",
        "Scheduler.wake_at",
        "Scheduler.done",
        "Scheduler.cancel",
        "Durable.arrive",
        "Durable.send",
        "Durable.discard",
        "Durable.start",
        "Durable.cancel",
        "Durable.retry",
        "Lifecycle.admit",
        "Lifecycle.begin",
        "Lifecycle.beat",
        "Lifecycle.settle",
        "Lifecycle.withdraw",
        "Lifecycle.readmit",
    }
)
"""The moves a :data:`Gap` is named by: the protocol and the method. ``Durable.start``,
``Durable.cancel`` and ``Durable.retry`` are the lifecycle's moves that also queue or
cancel a run (``Workflows.start``, ``WorkflowHandle.cancel``, ``retry``)."""


async def at_gap(gap: Gap | None, move: str, workflow: str) -> None:
    """Await ``gap`` at ``move`` when a test installed one; otherwise yield to the loop once.

    A helper for stores: the yield keeps a move's behaviour the same with and without a
    gap (every move gives other tasks a turn), and it costs one loop iteration.
    """
    if gap is None:
        await asyncio.sleep(0)
    else:
        await gap(move, workflow)


@dataclass
class Testbed(Generic[E]):
    """One test's fresh, isolated store, as a store's ``testing`` hook provides it.

    ``durable`` is ready to use (tables created, scripts loaded) and shares nothing with any
    other testbed. ``reopen`` opens a second, independent handle on the same backing store
    (another connection or client), which is how durability and cross-connection fencing are
    proven; ``url`` is a URL that ``durable.open`` in another process reaches the same
    store with (``None`` where the store lives in one process). ``probe`` is required of a
    store that declares ``transact``.
    """

    __test__ = False  # a name starting with "Test" that pytest must not collect

    durable: Durable[E]
    reopen: Callable[[], AbstractAsyncContextManager[Durable[E]]] | None = None
    url: str | None = None
    probe: Probe[E] | None = None
    server: str | None = None
    """What the store runs against, for the report header (credentials redacted)."""
    extras: dict[str, object] = field(default_factory=dict)


Opener = Callable[..., AbstractAsyncContextManager[Durable[Any]]]
TestingHook = Callable[..., AbstractAsyncContextManager[Testbed[Any]]]
"""``testing(url, **options)``: ``url`` is a server to use (or ``None`` for the store's own
default); ``options`` such as ``codec=`` and ``lease=`` open the testbed's store with them,
where the store accepts them. ``gap=`` (a :data:`Gap`) is the one option that exists only
for testing: a hook that accepts it lets the suite hold a move in flight."""


@dataclass(frozen=True)
class StorePlugin:
    """What a store distribution tells the core about itself.

    ``open(url, **options)`` is an async context manager yielding a ready ``Durable``.
    ``testing(url)`` is an async context manager yielding a fresh :class:`Testbed` per call,
    against ``url`` when given (a server the user points the suite at) and otherwise the
    store's own default (a temporary file, a loopback server, a container).
    ``probe_effects`` is not a field: it lives on the testbed, because a probe needs the
    testbed's own connection.
    """

    name: str
    schemes: tuple[str, ...]
    open: Opener
    capabilities: frozenset[str] = frozenset()
    testing: TestingHook | None = None
    distribution: str | None = None
    """The distribution that ships the store, for ``durable stores`` and report headers."""
    description: str = ""

    @property
    def version(self) -> str | None:
        if self.distribution is None:
            return None
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return None


class DurableHooks:
    """The hook specifications: everything a store plugin may answer."""

    @hookspec
    def durable_store(self) -> StorePlugin:  # type: ignore[empty-body]
        """Describe the store this plugin provides."""


class UnknownStore(StoreError, LookupError):
    """No installed store answers for a name or URL scheme."""


class BrokenStore(StoreError):
    """A store plugin is installed but could not be loaded, or two share one name or one
    URL scheme."""


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """A module ``__getattr__`` and ``__dir__`` for ``package``'s ``__init__``: each name in
    ``exports`` is imported from the module it maps to the first time it is asked for, then
    kept, and ``dir()`` lists them all before then too.

    A store package whose ``__init__`` re-exported its classes directly would import its
    driver whenever anything imported the package, the entry point included (redis-py alone
    takes about a third of a second). Assign them under ``if not TYPE_CHECKING:``, with the
    same names imported under ``if TYPE_CHECKING:``, so that type checkers see real imports
    and still reject a misspelt name::

        import typing as _typing

        from durable.plugins import lazy_exports as _lazy_exports

        if _typing.TYPE_CHECKING:
            from mystore.durable import MyDurable
        else:
            __getattr__, __dir__ = _lazy_exports(__name__, {"MyDurable": "mystore.durable"})

    Name no export after a submodule of the package: importing the submodule sets an
    attribute of that name on the package, which then hides the export.
    """

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__


@dataclass(frozen=True)
class _Loaded:
    stores: dict[str, StorePlugin]
    broken: dict[str, str]
    shared_schemes: dict[str, str] = field(default_factory=dict)
    """Each URL scheme two or more stores claim, with why it opens nothing."""


_manager: pluggy.PluginManager | None = None
_unloadable: dict[str, str] = {}


def plugin_manager() -> pluggy.PluginManager:
    """The process's plugin manager, with every ``durable`` entry point loaded.

    Entry points are loaded once and kept: they do not change while a process runs. A
    plugin that fails to import is remembered with its error rather than silently dropped,
    and so is a second distribution claiming an entry-point name already taken, so that
    ``durable stores`` and the conformance suite can say why a store is missing. Plugins
    registered on the manager later (``plugin_manager().register(module)``) are seen by
    the next :func:`stores` call.
    """
    global _manager
    if _manager is None:
        manager = pluggy.PluginManager(PROJECT)
        manager.add_hookspecs(DurableHooks)
        unloadable: dict[str, str] = {}
        for ep in importlib.metadata.entry_points(group=PROJECT):
            if manager.get_plugin(ep.name) is not None or ep.name in unloadable:
                taken = manager.get_plugin(ep.name)
                where = getattr(taken, "__name__", repr(taken))
                unloadable[ep.name] = (
                    f"two distributions declare the entry point {ep.name!r} "
                    f"({where} and {ep.value}); uninstall one"
                )
                continue
            try:
                module = ep.load()
            except Exception as error:  # a broken third-party plugin must not break ours
                log.warning("store plugin %r (%s) failed to load: %s", ep.name, ep.value, error)
                unloadable[ep.name] = f"{type(error).__name__}: {error}"
                continue
            manager.register(module, name=ep.name)
        for name in unloadable:
            if manager.get_plugin(name) is not None:
                manager.unregister(name=name)
        _unloadable.clear()
        _unloadable.update(unloadable)
        _manager = manager
    return _manager


def _answers(manager: pluggy.PluginManager, broken: dict[str, str]) -> list[tuple[str, object]]:
    """Call each ``@hookimpl`` on its own, so that one that raises is reported as broken
    instead of taking every other store down with it (a single hook call would stop at the
    first exception)."""
    answers: list[tuple[str, object]] = []
    for impl in manager.hook.durable_store.get_hookimpls():
        try:
            answers.append((impl.plugin_name, impl.function()))
        except Exception as error:
            log.warning("store plugin %r raised in durable_store(): %s", impl.plugin_name, error)
            broken[impl.plugin_name] = f"durable_store() raised {type(error).__name__}: {error}"
    return answers


def _collect(manager: pluggy.PluginManager) -> _Loaded:
    broken = dict(_unloadable)
    found: dict[str, StorePlugin] = {}
    for plugin_name, answer in _answers(manager, broken):
        if not isinstance(answer, StorePlugin):
            broken[plugin_name] = f"durable_store() returned {answer!r}, not a StorePlugin"
            continue
        if answer.name in found:
            broken[answer.name] = (
                f"two plugins name themselves {answer.name!r} "
                f"({found[answer.name].distribution} and {answer.distribution})"
            )
            continue
        found[answer.name] = answer
    for name in list(broken):
        found.pop(name, None)
    # A scheme two stores claim opens neither: picking one (the first by name, say) would
    # quietly run a URL meant for one store against the other, which is worse than refusing.
    claims: dict[str, list[StorePlugin]] = {}
    for answer in sorted(found.values(), key=lambda p: p.name):
        for scheme in dict.fromkeys(answer.schemes):
            claims.setdefault(scheme, []).append(answer)
    shared: dict[str, str] = {}
    for scheme, claimants in claims.items():
        if len(claimants) < 2:
            continue
        who = " and ".join(f"{p.name!r} ({p.distribution})" for p in claimants)
        shared[scheme] = f"two plugins open {scheme}:// URLs: {who}; uninstall one"
        for claimant in claimants:
            broken[claimant.name] = shared[scheme]
    for name in list(broken):
        found.pop(name, None)
    return _Loaded(dict(sorted(found.items())), broken, shared)


_answered: tuple[frozenset[int], _Loaded] | None = None


def _state() -> _Loaded:
    # Asked again whenever the registered plugins change, which is what lets a plugin
    # registered after the first look be found, and kept otherwise, so that every lookup
    # hands back the same StorePlugin objects.
    global _answered
    manager = plugin_manager()
    registered = frozenset(map(id, manager.get_plugins()))
    if _answered is None or _answered[0] != registered:
        _answered = (registered, _collect(manager))
    return _answered[1]


def stores() -> dict[str, StorePlugin]:
    """The installed stores by name."""
    return dict(_state().stores)


def broken_stores() -> dict[str, str]:
    """Store plugins that are installed but unusable, with the reason for each."""
    return dict(_state().broken)


OPENED_BY: Mapping[str, str] = {
    "sqlite": "durable-sqlite",
    "postgresql": "durable-postgres",
    "postgres": "durable-postgres",
    "redis": "durable-redis",
    "rediss": "durable-redis",
    "redis+cluster": "durable-redis",
    "rediss+cluster": "durable-redis",
    "redis+sentinel": "durable-redis",
    "rediss+sentinel": "durable-redis",
}
"""The distribution that opens each scheme of this project's stores, so that a URL whose
store is not installed is answered with the one install that adds it."""


def _install_hint() -> str:
    installed = ", ".join(
        f"{p.name} ({', '.join(s + '://' for s in p.schemes)})" for p in stores().values()
    )
    return (
        f"installed stores: {installed or 'none'}; add one with "
        "`pip install durable-sqlite`, `durable-postgres` or `durable-redis`"
        f" ({_FROM_A_CLONE.format(distribution='durable-sqlite')})"
    )


_FROM_A_CLONE = (
    "until it is on PyPI, from the root of a clone of durable: "
    "`pip install ./packages/durable-core ./packages/{distribution}`"
)
"""How to install a store before the distributions are published, which every message
naming a `pip install` adds, so that the line a reader copies works today."""


def store(name: str) -> StorePlugin:
    """The installed store called ``name``."""
    state = _state()
    if name in state.broken:
        raise BrokenStore(f"store {name!r} is installed but broken: {state.broken[name]}")
    try:
        return state.stores[name]
    except KeyError:
        raise UnknownStore(f"no store is called {name!r}; {_install_hint()}") from None


def for_url(url: str) -> StorePlugin:
    """The installed store that opens URLs like ``url``."""
    scheme = urlsplit(url).scheme
    if not scheme:
        raise UnknownStore(f"{url!r} has no scheme (like sqlite:///path.db); {_install_hint()}")
    shared = _state().shared_schemes.get(scheme)
    if shared is not None:
        raise BrokenStore(f"no store opens {url!r}: {shared}")
    for plugin in stores().values():
        if scheme in plugin.schemes:
            return plugin
    distribution = OPENED_BY.get(scheme)
    if distribution is not None:
        installed = ", ".join(stores()) or "none"
        broken = "".join(
            f"; {name} is installed but broken: {why}" for name, why in broken_stores().items()
        )
        raise UnknownStore(
            f"no installed store opens {scheme}:// URLs: `pip install {distribution}` adds "
            f"the one that does ({_FROM_A_CLONE.format(distribution=distribution)}; "
            f"installed stores: {installed}){broken}"
        )
    raise UnknownStore(f"no installed store opens {scheme}:// URLs; {_install_hint()}")


@asynccontextmanager
async def open(url: str, **options: Any) -> AsyncIterator[Durable[Any]]:
    """Open the store ``url`` names, ready to use, and close it on exit::

    async with durable.open("sqlite:///orders.db") as store:
        await store.scheduler.make_ready("order-1")
    """
    plugin = for_url(url)
    async with plugin.open(url, **options) as opened:
        yield opened


def _reset_for_tests() -> None:
    """Forget what was loaded, so a test that installs a plugin sees it."""
    global _manager, _answered
    _manager = None
    _answered = None
    _unloadable.clear()
