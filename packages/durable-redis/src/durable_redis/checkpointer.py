"""``RedisCheckpointer``: every guarantee of the Checkpointer as one Lua script.

Each workflow is three hashes under its own hash tag, so on a cluster all live in the
workflow's slot and every script touches one slot:

* ``<prefix>:{<tag>}:records`` maps each record key to ``<position>:<µs>:<encoding>``;
* ``<prefix>:{<tag>}:claim`` holds the fencing token and the two deadlines;
* ``<prefix>:{<tag>}:life`` holds its lifecycle (kind, input, status, attempts, outcome).

The lifecycle's status index is the one structure outside the workflow's slot; see "the
lifecycle" below for the order of writes that keeps every listing exact regardless.

Each write is one script because each guarantee is only correct as one step: checking
a workflow is free and taking it (``claim``), checking a token and applying the write it
guards (``record``, ``transact``), testing whether a key is recorded and reading back the
winner (``record``, ``supply``), counting the records and naming the next inbox entry
from the count (``append``). Reads are one command (``HGETALL``), so ``load`` of any
workflow is one round trip. Every lease is measured by the server's ``TIME``, and every
record is stamped with it at its winning write.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import secrets
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from durable.boundary import (
    check_duration,
    check_ended,
    check_key,
    check_kind,
    check_message_id,
    check_moment,
    check_operation,
    check_settlement,
    check_workflow,
)
from durable.codec import CheckpointCodec, JsonCodec, UnencodableValue, encode_value
from durable.interfaces import (
    INBOX_PREFIX,
    SENT_PREFIX,
    Admitted,
    Began,
    Claimed,
    Entry,
    Failure,
    Fenced,
    KeyReused,
    NotRetryable,
    Page,
    Pass,
    Recorded,
    Settlement,
    StartConflict,
    Status,
    StoreUnavailable,
    UnknownWorkflow,
    WorkflowStatus,
    inbox_key,
)
from durable.plugins import Gap
from redis.commands.core import AsyncScript
from redis.exceptions import ResponseError

from durable_redis.effect import LuaEffect
from durable_redis.errors import LuaEffectFailed, UntaggedKey
from durable_redis.group import GroupCommit
from durable_redis.keys import (
    STATUSES,
    check_prefix,
    glob_escape,
    hash_tag_of,
    kind_index,
    life_key,
    member_of,
    split_member,
    status_index,
    tag_for,
    workflow_of_tag,
)
from durable_redis.scripts import (
    CHECKPOINT_SCRIPTS,
    DRIVER_ERRORS,
    EPOCH,
    INDEX_SCRIPTS,
    Client,
    ScriptBook,
    as_text,
    checkpoint_source,
    describe,
    index_source,
    milliseconds,
    translate,
)

log = logging.getLogger(__name__)

__all__ = ["RedisCheckpointer"]

# For operators only (durable show), so sent as source rather than kept with the hot-path
# scripts; no-writes lets it run on a replica too.
_CLAIMED = """#!lua flags=no-writes
local claim = redis.call('HMGET', KEYS[1], 'token', 'live', 'budget')
local now = redis.call('TIME')
return {claim[1], claim[2], claim[3], now[1], now[2]}
"""

_INBOX_DIGITS = str(len(inbox_key(0)) - len(INBOX_PREFIX))


class RedisCheckpointer:
    """A :class:`~durable.interfaces.Checkpointer` over Redis or Redis Cluster.

    ``client`` is a ``redis.asyncio.Redis`` or ``redis.asyncio.cluster.RedisCluster``
    (responses decoded or not). ``prefix`` starts every key, so deployments can share a
    server; it may not contain braces. ``ttl``, when given, is refreshed on every write to
    a workflow, so a workflow nobody writes to for that long is forgotten whole (records
    and claim alike; a held claim never expires before its budget). ``codec`` must
    encode to text. ``gap`` is for tests only (a :data:`durable.plugins.Gap`, from the
    testing hook): each move awaits it just before sending its script, which is the whole
    of the move's decision and its write.
    """

    def __init__(
        self,
        client: Client,
        *,
        prefix: str = "durable",
        codec: CheckpointCodec[Any] | None = None,
        ttl: timedelta | None = None,
        gap: Gap | None = None,
        group_commit: bool = True,
    ) -> None:
        self.client = client
        self._gap = gap
        self.prefix = check_prefix(prefix)
        self.codec: CheckpointCodec[Any] = codec if codec is not None else JsonCodec()
        self.ttl = check_duration("ttl", ttl) if ttl is not None else None
        self._ttl = str(milliseconds(ttl)) if ttl is not None else "0"
        self._json = "1" if isinstance(self.codec, JsonCodec) else "0"
        self._scripts = ScriptBook(client, CHECKPOINT_SCRIPTS, checkpoint_source)
        self._index_scripts = ScriptBook(client, INDEX_SCRIPTS, index_source)
        self._where = describe(client)
        # On a cluster too: one pipeline per node, built from the slots (group.py).
        grouping = group_commit and gap is None
        self._group = GroupCommit(client, self._send) if grouping else None
        # The kind each pass began under, so settle indexes under it without a read; a
        # pass settled by another handle reads it (see _kind_of).
        self._kinds: dict[tuple[str, int], str | None] = {}

    def __repr__(self) -> str:
        return f"RedisCheckpointer({self._where}, prefix={self.prefix!r}, codec={self.codec!r})"

    # -- keys ------------------------------------------------------------------

    def hash_key(self, workflow: str) -> str:
        """The start of every key of ``workflow``, carrying its hash tag: ``prefix:{tag}``.

        Build a ``LuaEffect``'s keys from it (``f"{hash_key(wf)}:ledger"``) so they land in
        the workflow's slot. The tag is the id with ``%``, ``{`` and ``}`` escaped, so an
        id containing braces still gets exactly one slot of its own.
        """
        check_workflow(workflow)
        return f"{self.prefix}:{{{tag_for(workflow)}}}"

    def _keys(self, workflow: str) -> tuple[str, str]:
        base = self.hash_key(workflow)
        return f"{base}:records", f"{base}:claim"

    def _life_keys(self, workflow: str) -> tuple[str, str, str]:
        base = self.hash_key(workflow)
        return f"{base}:records", f"{base}:claim", life_key(self.prefix, workflow)

    async def load_scripts(self) -> None:
        """Load every script into the server now (into every primary, on a cluster)."""
        try:
            await self._scripts.preload()
            await self._index_scripts.preload()
        except DRIVER_ERRORS as error:
            raise self._translated(error, "loading the checkpoint scripts", ()) from error

    def _translated(self, error: Exception, doing: str, keys: tuple[str, ...]) -> Exception:
        return translate(error, where=self._where, doing=doing, keys=keys) or error

    async def _call(
        self, name: str, keys: tuple[str, ...], args: tuple[Any, ...], doing: str
    ) -> Any:
        try:
            return await self._scripts[name](keys=keys, args=args)
        except DRIVER_ERRORS as error:
            raise self._translated(error, doing, keys) from error

    async def _grouped(
        self, name: str, keys: tuple[str, ...], args: tuple[Any, ...], doing: str
    ) -> Any:
        """A record or renewal's script, sent with the others that arrive while one is on
        its way (:mod:`durable_redis.group`); alone when group commit is off."""
        if self._group is None:
            return await self._call(name, keys, args, doing)
        try:
            return await self._group.call(self._scripts[name], keys, args)
        except DRIVER_ERRORS as error:
            raise self._translated(error, doing, keys) from error

    @staticmethod
    async def _send(script: AsyncScript, keys: tuple[str, ...], args: tuple[Any, ...]) -> Any:
        return await script(keys=keys, args=args)

    def _encode(self, workflow: str, key: str, value: object) -> str:
        encoded = encode_value(self.codec, value, workflow=workflow, key=key)
        if not isinstance(encoded, str):
            raise UnencodableValue(
                workflow,
                key,
                value,
                TypeError(f"the Redis store holds text and the codec returned {type(encoded)}"),
            )
        return encoded

    # -- reads -----------------------------------------------------------------

    async def _rows(self, workflow: str) -> list[tuple[int, str, str, str]]:
        records, _ = self._keys(workflow)
        try:
            raw = await self.client.hgetall(records)
        except DRIVER_ERRORS as error:
            raise self._translated(error, f"reading workflow {workflow!r}", (records,)) from error
        rows = []
        for field, packed in raw.items():
            key = as_text(field)
            if key.startswith(SENT_PREFIX):
                continue  # a message id append remembers: bookkeeping, not a record
            position, at, encoding = as_text(packed).split(":", 2)
            rows.append((int(position), key, at, encoding))  # at: "<us>" or "<us>,<operation>"
        rows.sort()
        return rows

    async def load(self, workflow: str) -> dict[str, object]:
        decode = self.codec.decode
        return {key: decode(encoding) for _, key, _, encoding in await self._rows(workflow)}

    async def history(self, workflow: str) -> list[Entry]:
        decode = self.codec.decode
        entries = []
        for _, key, at, encoding in await self._rows(workflow):
            micros, _, operation = at.partition(",")
            moment = EPOCH + timedelta(microseconds=int(micros))
            entries.append(Entry(key, decode(encoding), moment, operation or None))
        return entries

    async def workflows(self, limit: int | None = None) -> list[str]:
        """The ids of workflows holding records under this prefix, sorted, at most ``limit``.

        A ``SCAN`` restricted to this deployment's records keys; on a cluster, every
        primary is scanned. It walks the whole of this prefix's keys before sorting, so it
        is for operators and tools, not for a hot path.
        """
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be a positive number of workflows, got {limit!r}")
        pattern = f"{glob_escape(self.prefix)}:{{*}}:records"
        found: list[str] = []
        try:
            async for raw in self.client.scan_iter(match=pattern, count=1000, _type="HASH"):
                key = as_text(raw)
                tag = hash_tag_of(key)
                if tag is None or key != f"{self.prefix}:{{{tag}}}:records":
                    continue  # an effect's key that happens to end in :records
                found.append(workflow_of_tag(tag))
        except DRIVER_ERRORS as error:
            raise self._translated(error, "listing workflows", ()) from error
        found.sort()
        return found if limit is None else found[:limit]

    async def claimed(self, workflow: str) -> Claimed | None:
        """The live claim on ``workflow``, or ``None``: for operators (``durable show``).

        Read together with the server's ``TIME`` by the node that owns the claim, so
        "live" is judged by the clock the leases are measured by.
        """
        _, claim = self._keys(workflow)
        try:
            token, live, budget, seconds, micros = await self.client.eval(_CLAIMED, 1, claim)
        except DRIVER_ERRORS as error:
            raise self._translated(error, f"reading the claim of {workflow!r}", (claim,)) from error
        if token is None or live is None or budget is None:
            return None
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        live_ms, budget_ms = int(live), int(budget)
        if not (now_ms < live_ms and now_ms < budget_ms):
            return None
        return Claimed(
            int(token),
            EPOCH + timedelta(milliseconds=live_ms),
            EPOCH + timedelta(milliseconds=budget_ms),
        )

    # -- the claim ---------------------------------------------------------------

    async def claim(self, workflow: str, *, liveness: timedelta, budget: timedelta) -> Pass | None:
        check_workflow(workflow)
        check_duration("liveness", liveness, workflow=workflow)
        check_duration("budget", budget, workflow=workflow)
        records, claim = self._keys(workflow)
        if self._gap is not None:
            await self._gap("Checkpointer.claim", workflow)
        token = await self._call(
            "claim",
            (claim, records),
            (milliseconds(liveness), milliseconds(budget), self._ttl),
            f"claim of {workflow!r}",
        )
        return None if token is None else Pass(workflow, int(token))

    async def renew(self, holder: Pass) -> Pass:
        _, claim = self._keys(holder.workflow)
        if self._gap is not None:
            await self._gap("Checkpointer.renew", holder.workflow)
        reply = await self._grouped("renew", (claim,), (str(holder.token),), f"renew of {holder}")
        if reply == 1:
            return holder
        status, detail = reply
        if status == -2:
            raise Fenced(f"{holder} has spent its budget; stop this pass")
        raise self._fenced(holder, detail, "renew")

    async def release(self, holder: Pass) -> None:
        _, claim = self._keys(holder.workflow)
        if self._gap is not None:
            await self._gap("Checkpointer.release", holder.workflow)
        await self._call("release", (claim,), (str(holder.token),), f"release of {holder}")

    @staticmethod
    def _fenced(holder: Pass, current: str | bytes, doing: str) -> Fenced:
        shown = as_text(current) or "none"
        return Fenced(
            f"{holder} was superseded (the highest token issued is {shown}); "
            f"{doing} refused, stop this pass"
        )

    # -- writes ------------------------------------------------------------------

    def _settle(
        self, holder: Pass, key: str, reply: list[Any], doing: str, operation: str = ""
    ) -> Recorded:
        status, payload = reply
        if status == 0:
            return Recorded(self.codec.decode(as_text(payload)), False)
        if status == -3:
            raise KeyReused(holder.workflow, key, as_text(payload), operation)
        raise self._fenced(holder, payload, f"{doing} of {key!r}")

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        return await self._record(holder, key, value, "")

    async def record_as(self, holder: Pass, key: str, value: object, operation: str) -> Recorded:
        """``record``, keeping ``operation`` in the packed field beside the record's time; a
        key whose field names another operation is refused (``KeyReused``) by the same
        script that would have written it."""
        check_operation(holder.workflow, key, operation)
        return await self._record(holder, key, value, operation)

    async def _record(self, holder: Pass, key: str, value: object, operation: str) -> Recorded:
        check_key(holder.workflow, key)
        encoded = self._encode(holder.workflow, key, value)
        records, claim = self._keys(holder.workflow)
        if self._gap is not None:
            await self._gap("Checkpointer.record", holder.workflow)
        reply = await self._grouped(
            "record",
            (records, claim),
            (str(holder.token), key, encoded, self._ttl, operation),
            f"record of {key!r} by {holder}",
        )
        if reply == 1:
            return Recorded(self.codec.decode(encoded), True)
        return self._settle(holder, key, reply, "record", operation)

    def _check_effect_keys(self, workflow: str, effect: LuaEffect) -> None:
        base = self.hash_key(workflow)
        tag = tag_for(workflow)
        own = (f"{base}:records", f"{base}:claim", life_key(self.prefix, workflow))
        for key in effect.keys:
            found = hash_tag_of(key)
            if found != tag:
                why = "has no hash tag" if found is None else f"carries the hash tag {{{found}}}"
                raise UntaggedKey(workflow, key, f"{{{tag}}}", f"{base}:ledger", why)
            if key in own:
                raise ValueError(
                    f"workflow {workflow!r}: the LuaEffect key {key!r} is one of the store's "
                    f"own keys for the workflow; an effect keeps its data in keys of its own "
                    f"(such as {base + ':ledger'!r})"
                )

    async def transact(self, holder: Pass, key: str, effect: LuaEffect) -> Recorded:
        check_key(holder.workflow, key)
        if not isinstance(effect, LuaEffect):
            raise TypeError(
                f"workflow {holder.workflow!r}, key {key!r}: RedisCheckpointer.transact takes "
                f"a durable_redis.LuaEffect, got {effect!r}"
            )
        self._check_effect_keys(holder.workflow, effect)
        records, claim = self._keys(holder.workflow)
        keys = (records, claim, *effect.keys)
        doing = f"transact of {key!r} by {holder}"
        if self._gap is not None:
            await self._gap("Checkpointer.transact", holder.workflow)
        try:
            reply = await self._scripts.effect(effect.source)(
                keys=keys,
                args=(str(holder.token), key, self._ttl, self._json, *effect.args),
            )
        except DRIVER_ERRORS as error:
            translated = translate(error, where=self._where, doing=doing, keys=keys)
            if translated is not None:
                raise translated from error
            text = str(error)
            if isinstance(error, ResponseError) and text.startswith("EFFECT "):
                raise LuaEffectFailed(holder.workflow, key, text[len("EFFECT ") :]) from error
            if isinstance(error, ResponseError) and "Error compiling script" in text:
                raise LuaEffectFailed(
                    holder.workflow, key, f"its source does not compile: {text}"
                ) from error
            raise
        status, payload = reply
        if status == 1:
            return Recorded(self.codec.decode(as_text(payload)), True)
        return self._settle(holder, key, reply, "transact", "transact")

    async def supply(self, workflow: str, key: str, value: object) -> object:
        check_workflow(workflow)
        check_key(workflow, key)
        encoded = self._encode(workflow, key, value)
        keys = self._life_keys(workflow)
        doing = f"supply of {key!r} to {workflow!r}"
        if self._gap is not None:
            await self._gap("Checkpointer.supply", workflow)
        reply = await self._call("supply", keys, (key, encoded, self._ttl), doing)
        if reply == 1:
            return self.codec.decode(encoded)
        return self.codec.decode(as_text(reply[1]))

    async def append(self, workflow: str, value: object, *, message_id: str | None = None) -> str:
        """One script, always with a message id: the caller's, or one of this call's own.

        redis-py sends a command again when its connection drops before the answer (the
        client :func:`~durable_redis.plugin.connect` builds does, three times), and a
        script that ran before the drop would then run twice. Giving every call an id
        makes that resend find the first run's marker and answer its key, so one call
        appends once; a second call without an id has an id of its own and appends again,
        as ``append`` without an id must. The cost is a marker beside every entry.
        """
        check_workflow(workflow)
        check_message_id(workflow, message_id)
        encoded = self._encode(workflow, "<inbox>", value)
        keys = self._life_keys(workflow)
        if message_id is None:
            marker, doing = f"{SENT_PREFIX}call:{uuid.uuid4().hex}", f"append to {workflow!r}"
        else:
            marker = SENT_PREFIX + message_id
            doing = f"append to {workflow!r} with message id {message_id!r}"
        if self._gap is not None:
            await self._gap("Checkpointer.append", workflow)
        key = await self._call(
            "append",
            keys,
            (encoded, INBOX_PREFIX, _INBOX_DIGITS, self._ttl, marker),
            doing,
        )
        return as_text(key)

    # -- writes with a given time (durable.interfaces.Dated, for durable import) -------

    async def supply_at(self, workflow: str, key: str, value: object, at: datetime) -> object:
        check_workflow(workflow)
        check_key(workflow, key)
        check_moment("at", at, workflow=workflow)
        encoded = self._encode(workflow, key, value)
        doing = f"supply of {key!r} to {workflow!r} at {at.isoformat()}"
        args = (key, encoded, self._ttl, _epoch_us(at))
        reply = await self._call("supply", self._life_keys(workflow), args, doing)
        if reply == 1:
            return self.codec.decode(encoded)
        return self.codec.decode(as_text(reply[1]))

    async def append_at(
        self, workflow: str, value: object, at: datetime, *, message_id: str | None = None
    ) -> str:
        """As ``append`` (always with a marker, for the same reason), the entry at ``at``."""
        check_workflow(workflow)
        check_message_id(workflow, message_id)
        check_moment("at", at, workflow=workflow)
        encoded = self._encode(workflow, "<inbox>", value)
        if message_id is None:
            marker = f"{SENT_PREFIX}call:{uuid.uuid4().hex}"
        else:
            marker = SENT_PREFIX + message_id
        args = (encoded, INBOX_PREFIX, _INBOX_DIGITS, self._ttl, marker, _epoch_us(at))
        doing = f"append to {workflow!r} at {at.isoformat()}"
        key = await self._call("append", self._life_keys(workflow), args, doing)
        return as_text(key)

    async def backdate(
        self, workflow: str, *, started_at: datetime | None, updated_at: datetime
    ) -> None:
        check_workflow(workflow)
        check_moment("updated_at", updated_at, workflow=workflow)
        if started_at is not None:
            check_moment("started_at", started_at, workflow=workflow)
        life = life_key(self.prefix, workflow)
        started = "" if started_at is None else _epoch_ms(started_at)
        args = (_epoch_ms(updated_at), started)
        found = await self._call("backdate", (life,), args, f"backdate of {workflow!r}")
        if found[0] != 1:
            raise UnknownWorkflow(f"no workflow {workflow!r} has a status: nothing to backdate")
        _, tx, status, kind = found
        if tx is None or status is None:
            return
        # The listing reads newest updated first from the index, so its member moves to
        # the time given too (best effort, as a drop is: the truth has already moved).
        zsets = self._zsets(as_text(status), _text(kind))
        member = member_of(as_text(tx), workflow)
        try:
            await self._index_scripts["index_score"](
                keys=zsets, args=(member, _epoch_us(updated_at))
            )
        except DRIVER_ERRORS as error:
            log.info("left %r at its old place in the status index: %s", workflow, error)

    async def discard(self, workflow: str) -> None:
        """Forget the records and the life, raise the fence, then drop the life's member
        from the status index (a crash between leaves a member every listing filters)."""
        check_workflow(workflow)
        doing = f"discard of {workflow!r}"
        if self._gap is not None:
            await self._gap("Checkpointer.discard", workflow)
        tx, status, kind = await self._call(
            "discard", self._life_keys(workflow), (self._ttl,), doing
        )
        if tx is not None and status is not None:
            await self._drop(workflow, as_text(tx), as_text(status), _text(kind))

    async def discard_ended(
        self, workflow: str, *, statuses: frozenset[Status], before: datetime
    ) -> bool:
        """discard_ended.lua: the check and the discard in one script; then, as discard
        does, the life's member dropped from the status index."""
        check_workflow(workflow)
        check_ended(workflow, statuses, before)
        wanted = ",".join(sorted(s.value for s in statuses))
        args = (self._ttl, wanted, _epoch_ms(before))
        reply = await self._call(
            "discard_ended", self._life_keys(workflow), args, f"prune of {workflow!r}"
        )
        if reply[0] != 1:
            return False
        _, tx, status, kind = reply
        if tx is not None and status is not None:
            await self._drop(workflow, as_text(tx), as_text(status), _text(kind))
        return True

    # -- the lifecycle -------------------------------------------------------------
    #
    # Truth is the life hash, in the workflow's slot, moved by one script per transition
    # together with the claim when the claim is involved. The status index is a family of
    # zsets in a slot of their own. A transition is therefore three steps, always in this
    # order (_transition): (1) add this transition's member, <tx>|<workflow>, to the zsets
    # of the status it moves to; (2) the truth script, which records tx and answers the
    # member it superseded; (3) remove exactly that member, or this transition's own when
    # the script changed nothing. The invariant "the truth's (status, tx) has its member in
    # that status's zsets" holds at every moment in between, so a crash leaves only stale
    # members, which every listing drops by comparing each member with the truth.

    def _zsets(self, status: str, kind: str | None) -> tuple[str, ...]:
        if kind is None or status == Status.RUNNING:
            return (status_index(self.prefix, status),)
        return (status_index(self.prefix, status), kind_index(self.prefix, kind, status))

    async def _index(self, name: str, zsets: tuple[str, ...], member: str, doing: str) -> Any:
        try:
            return await self._index_scripts[name](keys=zsets, args=(member,))
        except DRIVER_ERRORS as error:
            raise self._translated(error, doing, zsets) from error

    async def _drop(self, workflow: str, tx: str, status: str, kind: str | None) -> None:
        """Step 3: remove a member nobody can make current again. Best effort: the truth has
        already moved, so an outage here must not report the move as failed; the member left
        behind is debris that every listing filters."""
        zsets = self._zsets(status, kind)
        try:
            await self._index("index_drop", zsets, member_of(tx, workflow), "index drop")
        except StoreUnavailable as error:
            log.info("left a stale status index member of %r behind: %s", workflow, error)

    async def _transition(
        self,
        workflow: str,
        status: str,
        kind: str | None,
        script: str,
        keys: tuple[str, ...],
        args: Callable[[str], tuple[Any, ...]],
        doing: str,
        superseded: Callable[[list[Any]], _Superseded],
        move: str | None = None,
    ) -> list[Any]:
        """One move of the status: index add, truth script, index drop (see above).

        ``superseded`` reads the script's reply: the (tx, status, kind) it replaced, to
        drop; ``_OWN`` when it changed nothing, to drop this move's own member; ``_KEEP``
        when this move's member is now current and there is nothing older to drop (a new
        life, or a resend of a call that already ran). If the script raises, nothing is
        dropped: it may have run, and a member too many is only ever filtered.
        """
        tx = secrets.token_hex(8)
        member = member_of(tx, workflow)
        zsets = self._zsets(status, kind)
        await self._index("index_add", zsets, member, f"indexing the {doing}")
        if self._gap is not None and move is not None:
            await self._gap(move, workflow)
        reply: list[Any] = await self._call(script, keys, args(tx), doing)
        old = superseded(reply)
        if old is _OWN:
            try:
                await self._index("index_drop", zsets, member, "index drop")
            except StoreUnavailable as error:
                log.info("left a stale status index member of %r behind: %s", workflow, error)
        elif isinstance(old, tuple):
            await self._drop(workflow, *old)
        return reply

    async def _kind_of(self, workflow: str) -> str | None:
        life = life_key(self.prefix, workflow)
        try:
            kind = await self.client.hget(life, "kind")
        except DRIVER_ERRORS as error:
            raise self._translated(error, f"reading the kind of {workflow!r}", (life,)) from error
        return _text(kind)

    def _decode(self, encoding: str | bytes | None) -> object:
        return None if encoding is None else self.codec.decode(as_text(encoding))

    async def admit(
        self, workflow: str, kind: str, input: object, *, queue: str = "default"
    ) -> Admitted:
        check_workflow(workflow)
        check_kind(kind)
        try:
            check_kind(queue)
        except ValueError:
            raise ValueError(
                f"workflow {workflow!r}: queue {queue!r} is not allowed: a queue is named as a "
                "kind is (1 to 100 of letters, digits, '_', '.' and '-')"
            ) from None
        encoded = self._encode(workflow, "<input>", input)
        reply = await self._transition(
            workflow,
            Status.READY,
            kind,
            "admit",
            self._life_keys(workflow),
            lambda tx: (kind, encoded, queue, tx, self._ttl),
            f"start of {workflow!r} as {kind!r}",
            _moved,
            "Lifecycle.admit",
        )
        code = reply[0]
        if code == -1:
            raise StartConflict(workflow, kind, input, _text(reply[1]), self._decode(reply[2]))
        status = await self.status(workflow)
        if status is None:  # discarded between the two calls
            raise UnknownWorkflow(f"workflow {workflow!r} was discarded while it was started")
        created = code in (1, 2)
        return Admitted(status, created, created or status.status is Status.READY)

    async def begin(
        self, workflow: str, *, liveness: timedelta, budget: timedelta, owner: str
    ) -> Began | None:
        check_workflow(workflow)
        check_duration("liveness", liveness, workflow=workflow)
        check_duration("budget", budget, workflow=workflow)
        if not isinstance(owner, str) or not owner:
            raise ValueError(f"workflow {workflow!r}: owner must be a non-empty str, got {owner!r}")

        def superseded(reply: list[Any]) -> _Superseded:
            token, _, kind, _, _, _, old_tx = reply[:7]
            if token is None:
                return _OWN
            if old_tx is None:
                return _KEEP
            return as_text(old_tx), as_text(reply[1]), _text(kind)

        reply = await self._transition(
            workflow,
            Status.RUNNING,
            None,
            "begin",
            self._life_keys(workflow),
            lambda tx: (milliseconds(liveness), milliseconds(budget), self._ttl, owner, tx),
            f"begin of {workflow!r}",
            superseded,
            "Lifecycle.begin",
        )
        token, before, kind, input, attempts, lost, _ = reply[:7]
        previous = Status(as_text(before)) if before is not None else Status.READY
        if token is None:
            if not previous.terminal:
                return None  # contended: a live pass holds it
            return Began(None, previous, _text(kind), self._decode(input), int(attempts), None)
        holder = Pass(workflow, int(token))
        if len(self._kinds) >= 4096:  # passes that never settled: forget the oldest
            del self._kinds[next(iter(self._kinds))]
        self._kinds[(workflow, holder.token)] = _text(kind)
        return Began(holder, previous, _text(kind), self._decode(input), int(attempts), _text(lost))

    async def beat(self, holder: Pass, step: str | None) -> Pass:
        if step is not None and not isinstance(step, str):
            raise TypeError(f"{holder}: beat takes a step key (str) or None, got {step!r}")
        _, claim, life = self._life_keys(holder.workflow)
        if self._gap is not None:
            await self._gap("Lifecycle.beat", holder.workflow)
        reply = await self._call(
            "beat", (claim, life), (str(holder.token), step or ""), f"beat of {holder}"
        )
        if reply == 1:
            return holder
        status, detail = reply
        if status == -2:
            raise Fenced(f"{holder} has spent its budget; stop this pass")
        raise self._fenced(holder, detail, "beat")

    async def settle(self, holder: Pass, settlement: Settlement) -> None:
        check_settlement(holder, settlement)
        workflow = holder.workflow
        value = ""
        if settlement.status is Status.FINISHED:
            value = self._encode(workflow, "<value>", settlement.value)
        failure = settlement.failure
        until = "" if settlement.until is None else str(_epoch_ms(settlement.until))
        waits = json.dumps(list(settlement.keys)) if settlement.keys else ""
        known = (workflow, holder.token) in self._kinds
        kind = self._kinds.pop((workflow, holder.token), None)
        if not known:  # begun through another handle: read the kind it runs under
            kind = await self._kind_of(workflow)

        def args(tx: str) -> tuple[Any, ...]:
            return (
                str(holder.token),
                tx,
                kind or "",
                str(settlement.status),
                str(settlement.attempts),
                value,
                "1" if settlement.status is Status.FINISHED else "0",
                failure.type if failure else "",
                failure.message if failure else "",
                failure.traceback if failure else "",
                str(failure.attempts) if failure else "",
                "1" if failure else "0",
                until,
                waits,
                self._ttl,
            )

        while True:
            reply = await self._transition(
                workflow,
                settlement.status,
                kind,
                "settle",
                self._life_keys(workflow),
                args,
                f"settle of {holder} as {settlement.status}",
                _moved,
                "Lifecycle.settle",
            )
            code = reply[0]
            if code in (1, 2):
                return
            if code == -1:
                raise self._fenced(holder, reply[1], f"settle as {settlement.status}")
            kind = _text(reply[1])  # a start adopted it mid-pass: index under its kind

    async def _from_outside(self, workflow: str, status: Status, script: str) -> list[Any]:
        """withdraw and readmit: read the kind, index under it, move; start over with a new
        tx when the kind changed in between (the script answers -3 and wrote nothing)."""
        check_workflow(workflow)
        while True:
            kind = await self._kind_of(workflow)
            reply = await self._transition(
                workflow,
                status,
                kind,
                script,
                self._life_keys(workflow),
                lambda tx, kind=kind: (kind or "", tx, self._ttl),  # type: ignore[misc]
                f"{script} of {workflow!r}",
                _moved,
                "Lifecycle.withdraw" if script == "withdraw" else "Lifecycle.readmit",
            )
            if reply[0] != -3:
                return reply

    async def withdraw(self, workflow: str) -> WorkflowStatus:
        reply = await self._from_outside(workflow, Status.CANCELLED, "withdraw")
        if reply[0] == -2:
            raise UnknownWorkflow(f"no workflow {workflow!r}: nothing was started or recorded")
        return await self._must_status(workflow)

    async def readmit(self, workflow: str) -> WorkflowStatus:
        reply = await self._from_outside(workflow, Status.READY, "readmit")
        if reply[0] == -2:
            raise UnknownWorkflow(f"no workflow {workflow!r}: it has no recorded status")
        if reply[0] == -1:
            raise NotRetryable(workflow, Status(as_text(reply[1])))
        return await self._must_status(workflow)

    async def _must_status(self, workflow: str) -> WorkflowStatus:
        status = await self.status(workflow)
        if status is None:
            raise UnknownWorkflow(f"workflow {workflow!r} was discarded meanwhile")
        return status

    async def status(self, workflow: str) -> WorkflowStatus | None:
        check_workflow(workflow)
        _, claim, life = self._life_keys(workflow)
        doing = f"reading the status of {workflow!r}"
        flat, token, live, _ = await self._call("status", (claim, life), (), doing)
        if not flat:
            return None
        return self._status_of(workflow, _pairs(flat), token, live)

    def _status_of(
        self, workflow: str, life: dict[str, str], token: Any, live: Any
    ) -> WorkflowStatus:
        status = Status(life["status"])
        running = status is Status.RUNNING and live is not None and token is not None
        if running:
            until: datetime | None = _moment(as_text(live))
        else:
            until = _moment(life.get("until_at")) if status is Status.SLEEPING else None
        failure = None
        if "failure_type" in life:
            failure = Failure(
                life["failure_type"],
                life.get("failure_message", ""),
                life.get("failure_traceback", ""),
                int(life.get("failure_attempts") or 0),
            )
        return WorkflowStatus(
            workflow=workflow,
            status=status,
            kind=life.get("kind") or None,
            attempts=int(life.get("attempts") or 0),
            updated_at=_moment(life.get("updated_at")) or EPOCH,
            started_at=_moment(life.get("started_at")),
            input=self._decode(life.get("input")),
            queue=life.get("queue") or "default",
            token=int(token) if running else None,
            owner=life.get("owner") if status is Status.RUNNING else None,
            since=_moment(life.get("since")) if status is Status.RUNNING else None,
            step=life.get("step") or None if status is Status.RUNNING else None,
            until=until,
            keys=tuple(json.loads(life["waits"])) if life.get("waits") else (),
            value=self._decode(life.get("value")) if status is Status.FINISHED else None,
            failure=failure,
        )

    async def adopt(self, workflow: str, status: Status, until: datetime | None = None) -> bool:
        """Give ``workflow``, written before lifecycle, a life: ``status`` (what its queue
        entry implies), attempts 0, no kind. Only if it has none, so running it twice, or
        beside a start, changes nothing. True when this call created it."""
        check_workflow(workflow)
        status = Status(status)
        until_ms = "" if until is None else str(_epoch_ms(until))
        reply = await self._transition(
            workflow,
            status,
            None,
            "adopt",
            self._life_keys(workflow),
            lambda tx: (str(status), until_ms, tx, self._ttl),
            f"migration of {workflow!r}",
            lambda created: _KEEP if created == 1 else _OWN,  # type: ignore[comparison-overlap]
        )
        created: object = reply
        return created == 1

    async def statuses(
        self,
        *,
        status: Status | None = None,
        kind: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
    ) -> Page:
        """Newest first, from the index: each source zset is read downwards from the cursor
        in batches, the sources are merged by (score, member), and each candidate is kept
        only if its workflow's truth still holds that member's tx and status (and kind).

        The cursor is the last row's ``<score>:<member>``; a page costs its rows plus the
        stale members (crash debris) in its range, never the store's size.
        """
        if status is not None:
            status = Status(status)
        if kind is not None:
            check_kind(kind)
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"limit must be an int of at least 1, got {limit!r}")
        bound = _parse_cursor(cursor)
        sources = [
            _Source(
                kind_index(self.prefix, kind, s)
                if kind is not None and s != Status.RUNNING
                else status_index(self.prefix, s),
                s,
                kind,
                bound,
            )
            for s in ((status,) if status is not None else tuple(Status(s) for s in STATUSES))
        ]
        batch = min(max(limit + 1, 16), 1000)
        found: list[tuple[tuple[int, str], WorkflowStatus]] = []
        while len(found) <= limit:
            candidates: list[tuple[tuple[int, str], _Source]] = []
            while len(candidates) < limit + 1 - len(found):
                for source in sources:
                    if not source.rows and not source.exhausted:
                        await self._fill(source, batch)
                heads = [source for source in sources if source.rows]
                if not heads:
                    break
                best = max(heads, key=lambda source: source.rows[0])
                candidates.append((best.rows.popleft(), best))
            if not candidates:
                break
            found.extend(await self._keep_current(candidates))
        page = found[:limit]
        more = len(found) > limit
        next_cursor = f"{page[-1][0][0]}:{page[-1][0][1]}" if more and page else None
        return Page(tuple(row for _, row in page), next_cursor)

    async def _fill(self, source: _Source, batch: int) -> None:
        """The next rows of ``source`` strictly below its bound, newest first."""
        top = "+inf" if source.bound is None else str(source.bound[0])
        count = batch
        while True:
            try:
                raw = await self.client.zrange(
                    source.key,
                    top,
                    "-inf",
                    desc=True,
                    byscore=True,
                    offset=0,
                    num=count,
                    withscores=True,
                )
            except DRIVER_ERRORS as error:
                raise self._translated(error, "listing statuses", (source.key,)) from error
            pairs: list[Any] = raw
            rows = [(int(score), as_text(member)) for member, score in pairs]
            below = [row for row in rows if source.bound is None or row < source.bound]
            if below or len(rows) < count:
                break
            count *= 2  # every row read sits at the bound's score, above it: read further
        source.rows.extend(below)
        source.exhausted = len(rows) < count
        if below:
            source.bound = below[-1]

    async def _keep_current(
        self, candidates: list[tuple[tuple[int, str], _Source]]
    ) -> list[tuple[tuple[int, str], WorkflowStatus]]:
        """The candidates whose member is their workflow's current one, read in one
        pipeline (split by node on a cluster)."""
        workflows = [split_member(member)[1] for (_, member), _ in candidates]
        try:
            pipe = self.client.pipeline(transaction=False)
            for workflow in workflows:
                _, claim, life = self._life_keys(workflow)
                pipe.hgetall(life)
                pipe.hmget(claim, ["token", "live"])
            replies = await pipe.execute()
        except DRIVER_ERRORS as error:
            raise self._translated(error, "reading statuses", ()) from error
        kept = []
        stale: list[tuple[str, str]] = []
        for index, ((score, member), source) in enumerate(candidates):
            raw, (token, live) = replies[2 * index], replies[2 * index + 1]
            truth = {as_text(k): as_text(v) for k, v in raw.items()}
            tx, workflow = split_member(member)
            if not truth:
                if self.ttl is not None and score < (_now_ms() - milliseconds(self.ttl)) * 1000:
                    stale.append((source.key, member))  # expired with its workflow
                continue
            if truth.get("tx") != tx or truth.get("status") != source.status:
                continue
            if source.kind is not None and (truth.get("kind") or None) != source.kind:
                continue
            kept.append(((score, member), self._status_of(workflow, truth, token, live)))
        for key, member in stale:
            with contextlib.suppress(*DRIVER_ERRORS):  # else left for the next reader
                await self.client.zrem(key, member)
        return kept


_OWN = "own"
_KEEP = "keep"
_Superseded = tuple[str, str, str | None] | str


def _moved(reply: list[Any]) -> _Superseded:
    """The common reply: {1, old tx, old status, old kind} moved; {2} a resend that already
    ran; anything else changed nothing."""
    if reply[0] == 1:
        if reply[1] is None or reply[2] is None:
            return _KEEP  # a new life: nothing older to drop
        return as_text(reply[1]), as_text(reply[2]), _text(reply[3])
    if reply[0] == 2:
        return _KEEP
    return _OWN


@dataclass
class _Source:
    """One zset a listing reads, with the truth its members must match."""

    key: str
    status: str
    kind: str | None
    bound: tuple[int, str] | None
    rows: deque[tuple[int, str]] = dataclasses.field(default_factory=deque)
    exhausted: bool = False


def _parse_cursor(cursor: str | None) -> tuple[int, str] | None:
    if cursor is None:
        return None
    score, sep, member = cursor.partition(":") if isinstance(cursor, str) else ("", "", "")
    if not sep or not score.isdigit() or "|" not in member:
        raise ValueError(f"not a cursor this store issued: {cursor!r}")
    return int(score), member


def _text(value: str | bytes | None) -> str | None:
    """A reply as text, with nil and the empty string (no kind) read as None."""
    if value is None:
        return None
    return as_text(value) or None


def _pairs(flat: Sequence[Any]) -> dict[str, str]:
    return {as_text(flat[i]): as_text(flat[i + 1]) for i in range(0, len(flat), 2)}


def _moment(ms: str | None) -> datetime | None:
    return None if not ms else EPOCH + timedelta(milliseconds=int(ms))


def _epoch_ms(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(milliseconds=1)


def _epoch_us(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(microseconds=1)


def _now_ms() -> int:
    return _epoch_ms(datetime.now(EPOCH.tzinfo))
