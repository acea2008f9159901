"""``RedisCheckpointer``: every guarantee of the Checkpointer as one Lua script.

Each workflow is two hashes under its own hash tag, so on a cluster both live in the
workflow's slot and every script touches one slot:

* ``<prefix>:{<tag>}:records`` maps each record key to ``<position>:<µs>:<encoding>``;
* ``<prefix>:{<tag>}:claim`` holds the fencing token and the two deadlines.

Each write is one script because each guarantee is only correct as one step: checking
a workflow is free and taking it (``claim``), checking a token and applying the write it
guards (``record``, ``transact``), testing whether a key is recorded and reading back the
winner (``record``, ``supply``), counting the records and naming the next inbox entry
from the count (``append``). Reads are one command (``HGETALL``), so ``load`` of any
workflow is one round trip. Every lease is measured by the server's ``TIME``, and every
record is stamped with it at its winning write.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from durable.boundary import check_duration, check_key, check_message_id, check_workflow
from durable.codec import CheckpointCodec, JsonCodec, UnencodableValue, encode_value
from durable.interfaces import (
    INBOX_PREFIX,
    SENT_PREFIX,
    Claimed,
    Entry,
    Fenced,
    Pass,
    Recorded,
    inbox_key,
)
from redis.exceptions import ResponseError

from durable_redis.effect import LuaEffect
from durable_redis.errors import LuaEffectFailed, UntaggedKey
from durable_redis.keys import check_prefix, glob_escape, hash_tag_of, tag_for, workflow_of_tag
from durable_redis.scripts import (
    CHECKPOINT_SCRIPTS,
    DRIVER_ERRORS,
    EPOCH,
    Client,
    ScriptBook,
    as_text,
    checkpoint_source,
    describe,
    milliseconds,
    translate,
)

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
    encode to text.
    """

    def __init__(
        self,
        client: Client,
        *,
        prefix: str = "durable",
        codec: CheckpointCodec[Any] | None = None,
        ttl: timedelta | None = None,
    ) -> None:
        self.client = client
        self.prefix = check_prefix(prefix)
        self.codec: CheckpointCodec[Any] = codec if codec is not None else JsonCodec()
        self.ttl = check_duration("ttl", ttl) if ttl is not None else None
        self._ttl = str(milliseconds(ttl)) if ttl is not None else "0"
        self._json = "1" if isinstance(self.codec, JsonCodec) else "0"
        self._scripts = ScriptBook(client, CHECKPOINT_SCRIPTS, checkpoint_source)
        self._where = describe(client)

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

    async def load_scripts(self) -> None:
        """Load every script into the server now (into every primary, on a cluster)."""
        try:
            await self._scripts.preload()
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
            rows.append((int(position), key, at, encoding))
        rows.sort()
        return rows

    async def load(self, workflow: str) -> dict[str, object]:
        decode = self.codec.decode
        return {key: decode(encoding) for _, key, _, encoding in await self._rows(workflow)}

    async def history(self, workflow: str) -> list[Entry]:
        decode = self.codec.decode
        return [
            Entry(key, decode(encoding), EPOCH + timedelta(microseconds=int(at)))
            for _, key, at, encoding in await self._rows(workflow)
        ]

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
        token = await self._call(
            "claim",
            (claim, records),
            (milliseconds(liveness), milliseconds(budget), self._ttl),
            f"claim of {workflow!r}",
        )
        return None if token is None else Pass(workflow, int(token))

    async def renew(self, holder: Pass) -> Pass:
        _, claim = self._keys(holder.workflow)
        reply = await self._call("renew", (claim,), (str(holder.token),), f"renew of {holder}")
        if reply == 1:
            return holder
        status, detail = reply
        if status == -2:
            raise Fenced(f"{holder} has spent its budget; stop this pass")
        raise self._fenced(holder, detail, "renew")

    async def release(self, holder: Pass) -> None:
        _, claim = self._keys(holder.workflow)
        await self._call("release", (claim,), (str(holder.token),), f"release of {holder}")

    @staticmethod
    def _fenced(holder: Pass, current: str | bytes, doing: str) -> Fenced:
        shown = as_text(current) or "none"
        return Fenced(
            f"{holder} was superseded (the highest token issued is {shown}); "
            f"{doing} refused, stop this pass"
        )

    # -- writes ------------------------------------------------------------------

    def _settle(self, holder: Pass, key: str, reply: list[Any], doing: str) -> Recorded:
        status, payload = reply
        if status == 0:
            return Recorded(self.codec.decode(as_text(payload)), False)
        raise self._fenced(holder, payload, f"{doing} of {key!r}")

    async def record(self, holder: Pass, key: str, value: object) -> Recorded:
        check_key(holder.workflow, key)
        encoded = self._encode(holder.workflow, key, value)
        records, claim = self._keys(holder.workflow)
        reply = await self._call(
            "record",
            (records, claim),
            (str(holder.token), key, encoded, self._ttl),
            f"record of {key!r} by {holder}",
        )
        if reply == 1:
            return Recorded(self.codec.decode(encoded), True)
        return self._settle(holder, key, reply, "record")

    def _check_effect_keys(self, workflow: str, effect: LuaEffect) -> None:
        base = self.hash_key(workflow)
        tag = tag_for(workflow)
        own = (f"{base}:records", f"{base}:claim")
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
        return self._settle(holder, key, reply, "transact")

    async def supply(self, workflow: str, key: str, value: object) -> object:
        check_workflow(workflow)
        check_key(workflow, key)
        encoded = self._encode(workflow, key, value)
        records, claim = self._keys(workflow)
        doing = f"supply of {key!r} to {workflow!r}"
        reply = await self._call("supply", (records, claim), (key, encoded, self._ttl), doing)
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
        records, claim = self._keys(workflow)
        if message_id is None:
            marker, doing = f"{SENT_PREFIX}call:{uuid.uuid4().hex}", f"append to {workflow!r}"
        else:
            marker = SENT_PREFIX + message_id
            doing = f"append to {workflow!r} with message id {message_id!r}"
        key = await self._call(
            "append",
            (records, claim),
            (encoded, INBOX_PREFIX, _INBOX_DIGITS, self._ttl, marker),
            doing,
        )
        return as_text(key)

    async def discard(self, workflow: str) -> None:
        check_workflow(workflow)
        records, claim = self._keys(workflow)
        await self._call("discard", (records, claim), (self._ttl,), f"discard of {workflow!r}")
