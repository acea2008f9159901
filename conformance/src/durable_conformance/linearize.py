"""A linearizability checker for histories of Checkpointer calls, and a shrinker for them.

A history is what several tasks on several handles did: each call's workflow, name and
arguments, when it started and ended (one monotonic clock), and what it returned or
raised. The store is linearizable when some total order of the calls, consistent with real
time (a call that ended before another started comes first), explains every result under
a small sequential model of what a store owes (:func:`step`). The search is Wing and
Gong's, with Lowe's memo on (calls placed, model state), as Knossos and Porcupine do it,
and it runs one workflow at a time: calls on different workflows touch disjoint state, so
a history is linearizable exactly when each workflow's part is (P-compositionality).

The model is written from ``durable.interfaces``, not from any store, and it is smaller
than the contract on purpose: liveness never runs out in the histories it is given (the
suite claims with a long liveness and frees only by ``release`` and ``discard``), so a
claim against a held workflow must return ``None``. Tokens are never compared to a
number a store should have picked, only to each other: a new pass's token is higher than
every token issued for that workflow before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

__all__ = [
    "Call",
    "Model",
    "Shrunk",
    "Verdict",
    "check",
    "describe",
    "shrink",
    "step",
]


@dataclass(frozen=True, slots=True)
class Call:
    """One call in a history.

    ``args`` are what identify the call to the model: ``(token,)`` for renew and release,
    ``(token, key, value)`` for record, ``(token, key)`` for transact, ``(key, value)`` for
    supply, ``(value, message_id)`` for append, ``()`` otherwise. ``result`` is normalised
    to plain values (see :func:`durable_conformance.suite.histories` for how): a pass is
    ``("pass", token)``, a ``Recorded`` ``("recorded", value, first)``, a dict the tuple of
    its items, and an exception ``("raised", type name)``.
    """

    task: str
    workflow: str
    name: str
    args: tuple[object, ...]
    start: int
    end: int
    result: object

    def __str__(self) -> str:
        args = ", ".join(repr(a) for a in self.args)
        return f"{self.task:>6} {self.name}({args}) -> {_shown(self.result)}"


def _shown(result: object) -> str:
    if isinstance(result, tuple) and result and result[0] == "raised":
        return f"raised {result[1]}"
    if isinstance(result, tuple) and result and result[0] == "pass":
        return f"Pass(token={result[1]})"
    if isinstance(result, tuple) and result and result[0] == "recorded":
        return f"Recorded({result[1]!r}, first={result[2]})"
    return repr(result)


FENCED = ("raised", "Fenced")


@dataclass(frozen=True, slots=True)
class Model:
    """One workflow as the contract sees it.

    ``holder`` is the token of the live pass (``None`` when free), ``issued`` the highest
    token issued, ``records`` the records in the order first written, ``last_inbox`` the
    highest inbox key since the last discard, ``sent`` the message ids append remembers and
    their keys, ``counter`` the transact probe's counter (application data, which discard
    does not touch).
    """

    holder: int | None = None
    issued: int | None = None
    records: tuple[tuple[str, object], ...] = ()
    last_inbox: str | None = None
    sent: tuple[tuple[str, str], ...] = ()
    counter: int = 0

    def value(self, key: str) -> tuple[bool, object]:
        for k, v in self.records:
            if k == key:
                return True, v
        return False, None


Step = tuple[Model | None, str]
"""The state after a call, or ``None`` and why the call cannot come next."""


def step(state: Model, call: Call) -> Step:
    """Apply ``call`` to ``state`` if the model can produce ``call.result`` from it."""
    name, args, result = call.name, call.args, call.result
    if name == "claim":
        if state.holder is not None:
            if result is None:
                return state, ""
            return None, f"claim returned {_shown(result)} while pass {state.holder} held it"
        if result is None:
            return None, "claim returned None while no pass held the workflow"
        if not (isinstance(result, tuple) and result[0] == "pass"):
            return None, f"claim returned {_shown(result)}"
        token = result[1]
        assert isinstance(token, int)
        if state.issued is not None and token <= state.issued:
            return None, f"claim returned token {token}, not above {state.issued} issued before"
        return replace(state, holder=token, issued=token), ""
    if name == "renew":
        token = args[0]
        if state.holder == token:
            if result == ("pass", token):
                return state, ""
            return None, f"renew by the live pass {token} returned {_shown(result)}"
        if result == FENCED:
            return state, ""
        return None, f"renew by pass {token} (live: {state.holder}) returned {_shown(result)}"
    if name == "release":
        token = args[0]
        if result is not None:
            return None, f"release returned {_shown(result)}"
        if state.holder == token:
            return replace(state, holder=None), ""
        return state, ""
    if name == "record":
        token, key, value = args
        assert isinstance(key, str)
        if state.holder != token:
            if result == FENCED:
                return state, ""
            return None, f"record by pass {token} (live: {state.holder}) returned {_shown(result)}"
        held, stored = state.value(key)
        if held:
            if result == ("recorded", stored, stored == value):
                return state, ""
            return None, f"record of {key!r} returned {_shown(result)}; it held {stored!r}"
        if result == ("recorded", value, True):
            return replace(state, records=(*state.records, (key, value))), ""
        return None, f"record of absent {key!r} returned {_shown(result)}"
    if name == "transact":
        token, key = args
        assert isinstance(key, str)
        if state.holder != token:
            if result == FENCED:
                return state, ""
            return None, (
                f"transact by pass {token} (live: {state.holder}) returned {_shown(result)}"
            )
        held, stored = state.value(key)
        if held:
            if result == ("recorded", stored, False):
                return state, ""
            return None, f"transact of {key!r} returned {_shown(result)}; it held {stored!r}"
        bumped = state.counter + 1
        if result == ("recorded", bumped, True):
            return replace(state, records=(*state.records, (key, bumped)), counter=bumped), ""
        return None, f"transact of absent {key!r} returned {_shown(result)}, not {bumped}"
    if name == "supply":
        key, value = args
        assert isinstance(key, str)
        held, stored = state.value(key)
        if held:
            if result == stored:
                return state, ""
            return None, f"supply of {key!r} returned {result!r}; it held {stored!r}"
        if result == value:
            return replace(state, records=(*state.records, (key, value))), ""
        return None, f"supply of absent {key!r} returned {result!r}, not {value!r}"
    if name == "append":
        value, message_id = args
        if message_id is not None:
            for sent_id, sent_key in state.sent:
                if sent_id == message_id:
                    if result == sent_key:
                        return state, ""
                    return None, (
                        f"append with id {message_id!r} returned {result!r}, not the "
                        f"{sent_key!r} that id already holds"
                    )
        if not isinstance(result, str):
            return None, f"append returned {result!r}"
        if state.value(result)[0]:
            return None, f"append returned {result!r}, a key already holding a record"
        if state.last_inbox is not None and result <= state.last_inbox:
            return None, f"append returned {result!r}, not after {state.last_inbox!r}"
        sent = state.sent if message_id is None else (*state.sent, (str(message_id), result))
        return replace(
            state, records=(*state.records, (result, value)), last_inbox=result, sent=sent
        ), ""
    if name == "discard":
        if result is not None:
            return None, f"discard returned {_shown(result)}"
        return replace(state, holder=None, records=(), last_inbox=None, sent=()), ""
    if name in ("load", "history"):
        if result == state.records:
            return state, ""
        return None, f"{name} returned {_shown(result)}; the records were {state.records!r}"
    if name == "count":
        if result == state.counter:
            return state, ""
        return None, f"the counter read {result!r}; transact had moved it to {state.counter}"
    return None, f"the model knows no call {name!r}"


@dataclass
class Verdict:
    """What :func:`check` decided about one workflow's calls."""

    workflow: str
    linearizable: bool
    calls: list[Call]
    placed: list[Call] = field(default_factory=list)
    """When not linearizable: the longest order the search placed before it was stuck."""
    stuck: list[tuple[Call, str]] = field(default_factory=list)
    """...and every call that could have come next there, with why the model refused it."""


def _search(
    calls: Sequence[Call],
    model: Callable[[Model, Call], Step],
    start: Model | None = None,
    ends: set[Model] | None = None,
) -> Verdict | None:
    """Wing and Gong's search with Lowe's memo, from ``start``; ``None`` when some order
    explains every call, else the deepest point it reached. Given ``ends``, it searches
    every order and collects the states they end in there."""
    start = Model() if start is None else start
    ordered = sorted(calls, key=lambda c: (c.start, c.end))
    n = len(ordered)
    by_end = sorted(range(n), key=lambda i: ordered[i].end)
    full = (1 << n) - 1
    seen: set[tuple[int, Model]] = set()
    deepest: tuple[int, int, Model, list[int]] = (-1, 0, start, [])

    def candidates(mask: int) -> list[int]:
        # A call may come next unless another call not yet placed ended before it began.
        # Calls ending and starting at one clock reading count as overlapping, which can
        # only accept more histories, never refuse a good one.
        first_end = next(ordered[i].end for i in by_end if not mask >> i & 1)
        found = []
        for i in range(n):
            if mask >> i & 1:
                continue
            if ordered[i].start > first_end:
                break
            found.append(i)
        return found

    stack: list[tuple[int, Model, list[int]]] = [(0, start, [])]
    while stack:
        mask, state, path = stack.pop()
        if mask == full:
            if ends is None:
                return None
            ends.add(state)
            continue
        if (mask, state) in seen:
            continue
        seen.add((mask, state))
        if len(path) > deepest[0]:
            deepest = (len(path), mask, state, path)
        for i in reversed(candidates(mask)):
            after, _ = model(state, ordered[i])
            if after is not None and (mask | 1 << i, after) not in seen:
                stack.append((mask | 1 << i, after, [*path, i]))
    if ends:
        return None
    _, mask, state, path = deepest
    stuck = [(ordered[i], model(state, ordered[i])[1]) for i in candidates(mask)]
    return Verdict(
        ordered[0].workflow if ordered else "",
        False,
        list(ordered),
        [ordered[i] for i in path],
        stuck,
    )


def check(calls: Iterable[Call], model: Callable[[Model, Call], Step] = step) -> list[Verdict]:
    """Every workflow's verdict that is not linearizable (empty when the history is)."""
    parts: dict[str, list[Call]] = {}
    for call in calls:
        parts.setdefault(call.workflow, []).append(call)
    failed = []
    for workflow, part in parts.items():
        verdict = _search(part, model)
        if verdict is not None:
            verdict.workflow = workflow
            failed.append(verdict)
    return failed


# -- shrinking ----------------------------------------------------------------------


_INERT = {"load", "history", "count", "renew"}


def _inert(call: Call) -> bool:
    """A call whose result shows it changed nothing: dropping it from a linearizable
    history leaves one, so dropping it from a failing one cannot invent the failure."""
    if call.name in _INERT:
        return True
    if call.result == FENCED:
        return True
    if call.name == "claim" and call.result is None:
        return True
    if call.name in ("record", "transact") and isinstance(call.result, tuple):
        return call.result[0] == "recorded" and call.result[2] is False
    return False


def _writes_key(call: Call) -> str | None:
    if call.name in ("record", "transact") and call.result != FENCED:
        return str(call.args[1])
    if call.name == "supply":
        return str(call.args[0])
    if call.name == "append" and isinstance(call.result, str):
        return call.result
    return None


def _with_its_readers(calls: list[Call], write: Call) -> set[int]:
    """``write`` and every call its absence could change the answer of: the other writes
    of its key (and theirs, for appends that remember an id), every read that may have seen
    any of them, and for a transact every later transact and counter read (their numbers
    count it). Dropping these together from a linearizable history leaves one."""
    keys = {_writes_key(write)}
    with_ids = write.name == "append" and write.args[1] is not None
    writes: set[int] = set()
    while True:
        found = {
            i
            for i, call in enumerate(calls)
            if call is write
            or _writes_key(call) in keys
            or (with_ids and call.name == "append" and call.args[1] is not None)
        }
        more = {_writes_key(calls[i]) for i in found} - keys
        with_ids = with_ids or any(
            calls[i].name == "append" and calls[i].args[1] is not None for i in found
        )
        if not more and found == writes:
            break
        keys |= more
        writes = found
    earliest = min(calls[i].start for i in writes)
    counted = [calls[i].start for i in writes if calls[i].name == "transact"]
    dropped = set(writes)
    seen = (("load", "history"), earliest)
    recounted = (("transact", "count"), min(counted) if counted else None)
    for i, call in enumerate(calls):
        for names, since in (seen, recounted):
            if since is not None and call.name in names and call.end >= since:
                dropped.add(i)
    return dropped


def _with_its_pass(calls: list[Call], claim: Call) -> set[int]:
    """A successful ``claim`` and everything that leans on it: every call made with its
    token (and each write's readers), and every claim refused since it began (each
    changed nothing, and without the pass some would have found the workflow free)."""
    token = claim.result[1] if isinstance(claim.result, tuple) else None
    dropped = set()
    for i, call in enumerate(calls):
        if call is claim or (
            call.name == "claim" and call.result is None and call.end >= claim.start
        ):
            dropped.add(i)
        elif call.name in ("renew", "release", "record", "transact") and call.args[0] == token:
            dropped.add(i)
            if _writes_key(call) is not None:
                dropped |= _with_its_readers(calls, call)
    return dropped


def _quiet_cuts(calls: list[Call]) -> list[int]:
    """Lengths of prefixes (by start) after which nothing is in flight: every order of the
    whole history places such a prefix first, so cutting the rest off is safe."""
    ordered = sorted(calls, key=lambda c: c.start)
    cuts = []
    latest_end = -1
    for i, call in enumerate(ordered):
        if i and call.start > latest_end:
            cuts.append(i)
        latest_end = max(latest_end, call.end)
    return cuts


@dataclass
class Shrunk:
    """A failing sub-history, and the states the calls cut off before it may leave."""

    calls: list[Call]
    starts: tuple[Model, ...] = (Model(),)
    """The calls fail from every one of these: each order of ``earlier`` ends in one."""
    earlier: list[Call] = field(default_factory=list)
    """The calls cut off before ``calls``: each ended before any of these began."""


STARTS_KEPT = 8
"""Cut off a prefix only when its orders end in at most this many states."""


def shrink(calls: Sequence[Call], model: Callable[[Model, Call], Step] = step) -> Shrunk:
    """A small sub-history that still fails, from one that does.

    Only removals that cannot turn a linearizable history into a failing one are tried
    (so the small history is a real violation, not one the shrinking made): another
    workflow's calls; everything after a point where nothing was in flight; everything
    before such a point, when the rest fails from every state an order of it ends in; a
    call whose result shows it changed nothing; a write with every call that might have
    seen it; a pass with every call made with it. Each is kept only if the rest still
    fails.
    """
    verdicts = check(calls, model)
    if not verdicts:
        raise ValueError("the history is linearizable; there is nothing to shrink")
    current = sorted(verdicts[0].calls, key=lambda c: c.start)
    starts: tuple[Model, ...] = (Model(),)
    earlier: list[Call] = []

    def fails(candidate: list[Call], froms: tuple[Model, ...]) -> bool:
        return bool(candidate) and all(
            _search(candidate, model, start) is not None for start in froms
        )

    changed = True
    while changed:
        changed = False
        ordered = sorted(current, key=lambda c: c.start)
        cuts = _quiet_cuts(ordered)
        for cut in cuts:
            if fails(ordered[:cut], starts):
                current, changed = ordered[:cut], True
                break
        for cut in reversed(cuts if not changed else []):
            ends: set[Model] = set()
            for start in starts:
                _search(ordered[:cut], model, start, ends)
            after = tuple(sorted(ends, key=repr))
            if 0 < len(after) <= STARTS_KEPT and fails(ordered[cut:], after):
                current, starts, changed = ordered[cut:], after, True
                earlier += ordered[:cut]
                break
        i = len(current) - 1
        while i >= 0:
            call = current[i]
            drop = {i} if _inert(call) else None
            if drop is None and _writes_key(call) is not None:
                drop = _with_its_readers(current, call)
            if drop is None and call.name == "claim":
                drop = _with_its_pass(current, call)
            if drop is not None:
                candidate = [c for j, c in enumerate(current) if j not in drop]
                if fails(candidate, starts):
                    current, changed = candidate, True
                    i = min(i, len(current))
            i -= 1
    return Shrunk(sorted(current, key=lambda c: c.start), starts, earlier)


def describe(calls: Sequence[Call] | Shrunk, model: Callable[[Model, Call], Step] = step) -> str:
    """A failing history as a person reads it: the state it starts from (when calls were
    cut off before it), each call on a line in start order with its interval, then the
    longest order the search found and why no call could follow it."""
    shrunk = calls if isinstance(calls, Shrunk) else Shrunk(list(calls))
    if not shrunk.calls:
        return "no calls"
    parts: dict[str, list[Call]] = {}
    for call in shrunk.calls:
        parts.setdefault(call.workflow, []).append(call)
    verdict = None
    start = shrunk.starts[0]
    for part in parts.values():
        for start in shrunk.starts:
            verdict = _search(part, model, start)
            if verdict is not None:
                break
        if verdict is not None:
            break
    if verdict is None:
        return "linearizable"
    origin = min(c.start for c in verdict.calls)
    lines = [f"workflow {verdict.calls[0].workflow!r}:"]
    if shrunk.earlier:
        others = len(shrunk.starts) - 1
        lines.append(
            f"{len(shrunk.earlier)} earlier calls, which leave it {_state(start)}"
            + (
                f" (or one of {others} other states, from each of which it fails too)"
                if others
                else ""
            )
            + ":"
        )
        lines.extend(f"  {call}" for call in shrunk.earlier[:EARLIER_SHOWN])
        if len(shrunk.earlier) > EARLIER_SHOWN:
            lines.append(f"  ... and {len(shrunk.earlier) - EARLIER_SHOWN} more")
        lines.append("then, all begun after those ended (times in µs):")
    else:
        lines.append(f"{len(verdict.calls)} calls (times in µs):")
    for call in verdict.calls:
        begun, ended = (call.start - origin) // 1000, (call.end - origin) // 1000
        lines.append(f"  [{begun:>7} .. {ended:>7}] {call}")
    lines.append("the longest order the model explains:")
    lines.extend([f"  {call}" for call in verdict.placed] or ["  (none)"])
    lines.append("and no call can come next:")
    lines.extend(f"  {call}\n      {why}" for call, why in verdict.stuck)
    return "\n".join(lines)


EARLIER_SHOWN = 12


def _state(state: Model) -> str:
    held = "free" if state.holder is None else f"held by pass {state.holder}"
    issued = "" if state.issued is None else f", tokens up to {state.issued} issued"
    return f"{held}{issued}, records {dict(state.records)!r}, counter {state.counter}"
