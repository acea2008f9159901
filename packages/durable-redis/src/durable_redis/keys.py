"""Where a workflow's keys live: the hash tag, and the rule a cluster applies to it.

Redis Cluster places a key by its hash tag: the text between the first ``{`` and the
first ``}`` after it, when that text is not empty; otherwise by the whole key. Every key
a script touches must land in one slot, so every key of a workflow carries the same tag,
and the tag is built from the workflow id so that each workflow gets a slot of its own.

A workflow id may contain braces itself, and pasting it between braces would let the
user's ``}`` end the tag early (``order}{7`` would tag as ``order``) and so put two
workflows' keys under one tag, or an effect's keys under another workflow's. So the tag
is the id with ``%``, ``{`` and ``}`` percent-escaped: it never contains a brace, the
first ``}`` after ours is always ours, and the escape is reversible, so a key names its
workflow and ``workflows()`` can read ids back from a scan.
"""

from __future__ import annotations

import re

__all__ = [
    "STATUSES",
    "check_prefix",
    "glob_escape",
    "hash_tag_of",
    "index_base",
    "kind_index",
    "life_key",
    "member_of",
    "queue_base",
    "ready_stream",
    "schema_key",
    "split_member",
    "status_index",
    "tag_for",
    "workflow_of_tag",
]

STATUSES = ("ready", "running", "sleeping", "blocked", "finished", "failed", "cancelled")
"""Every status a life hash may hold (``durable.interfaces.Status``'s values), in the
order the status index lists its zsets."""

_ESCAPES = {"%": "%25", "{": "%7B", "}": "%7D"}
_UNESCAPES = {escaped: raw for raw, escaped in _ESCAPES.items()}
_UNESCAPE = re.compile("|".join(_UNESCAPES))
_GLOB_SPECIAL = re.compile(r"([\\*?\[\]])")


def tag_for(workflow: str) -> str:
    """The hash tag's text for ``workflow`` (without the braces)."""
    if "%" in workflow or "{" in workflow or "}" in workflow:
        return "".join(_ESCAPES.get(ch, ch) for ch in workflow)
    return workflow


def workflow_of_tag(tag: str) -> str:
    """The workflow id a tag was built from; the inverse of :func:`tag_for`."""
    if "%" not in tag:
        return tag
    return _UNESCAPE.sub(lambda match: _UNESCAPES[match.group(0)], tag)


def hash_tag_of(key: str) -> str | None:
    """The hash tag Redis Cluster reads from ``key``, or ``None`` when the whole key is
    hashed (no braces, or nothing between the first pair)."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    if end <= start + 1:
        return None
    return key[start + 1 : end]


def check_prefix(prefix: object) -> str:
    """A key prefix is a non-empty string without braces: a brace in it would become the
    hash tag of every key and put the whole deployment in one slot."""
    if not isinstance(prefix, str) or not prefix:
        raise ValueError(f"a Redis key prefix must be a non-empty string, got {prefix!r}")
    if "{" in prefix or "}" in prefix:
        raise ValueError(
            f"the Redis key prefix {prefix!r} contains a brace; Redis Cluster would hash "
            "every key by it instead of by the workflow, so pick a prefix without { or }"
        )
    return prefix


def glob_escape(text: str) -> str:
    """``text`` with the characters SCAN MATCH treats specially escaped."""
    return _GLOB_SPECIAL.sub(r"\\\1", text)


# -- the lifecycle's keys -------------------------------------------------------------------
#
# A workflow's life (kind, input, status, attempts, outcome) is a hash in the workflow's own
# slot, beside its records and claim, so each transition of it is one script with the claim.
# The status index is a family of sorted sets in one slot of their own (tagged
# ``{<prefix>.index}``): a listing reads one or a few keys however many workflows exist, and
# the price is that a transition writes two slots, which the checkpointer orders so that
# every list stays exact (see RedisCheckpointer and docs/stores/redis.md).


def life_key(prefix: str, workflow: str) -> str:
    """The hash of ``workflow``'s life: ``prefix:{tag}:life``."""
    return f"{prefix}:{{{tag_for(workflow)}}}:life"


def index_base(prefix: str) -> str:
    """The start of every status index key; its tag puts them all in one slot."""
    return f"{prefix}:index:{{{prefix}.index}}"


def status_index(prefix: str, status: str) -> str:
    """The zset of every workflow in ``status``: member ``<tx>|<workflow>``, score the
    index node's clock (µs) when the transition into it began."""
    return f"{index_base(prefix)}:s:{status}"


def kind_index(prefix: str, kind: str, status: str) -> str:
    """The zset of the workflows of ``kind`` in ``status`` (never ``running``: a pass learns
    the kind only from its own begin, after its index entry must already be written).
    Kind names match ``durable.workflows.KIND_NAME``: no braces or colons to escape."""
    return f"{index_base(prefix)}:k:{kind}:s:{status}"


def schema_key(prefix: str) -> str:
    """The key holding the version of this prefix's layout (``2`` since lifecycle, ``3``
    since queue routing)."""
    return f"{prefix}:schema"


# -- the queue's keys ---------------------------------------------------------------------
#
# Every key of the scheduler shares one tag, ``{<prefix>}``, so that each of its scripts
# (make_ready, take, answer, wake_due, cancel) moves a workflow between the deadlines, its
# current entry, its route and the stream of its queue in one step. One stream per queue:
# a taker reads only the streams of the queues it serves, so a workflow of another queue is
# never even looked at. The default queue keeps the stream it had before routing (``:ready``),
# so a worker of the previous release still serves it during an upgrade.


def queue_base(prefix: str) -> str:
    """The start of every scheduler key: ``prefix:queue:{prefix}``."""
    return f"{prefix}:queue:{{{prefix}}}"


def ready_stream(prefix: str, queue: str) -> str:
    """The stream of ``queue``'s runnable workflows (queue names, as kind names, hold no
    ``:``, so ``:ready:<queue>`` never meets another key). Mirrors ``stream_of`` in
    ``scripts/queue_prelude.lua``."""
    base = f"{queue_base(prefix)}:ready"
    return base if queue == "default" else f"{base}:{queue}"


def member_of(tx: str, workflow: str) -> str:
    """An index member: unique to one transition, so removing it can never remove another."""
    return f"{tx}|{workflow}"


def split_member(member: str) -> tuple[str, str]:
    """``(tx, workflow)`` of an index member (the tx never contains ``|``)."""
    tx, _, workflow = member.partition("|")
    return tx, workflow
