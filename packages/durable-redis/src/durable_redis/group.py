"""Group commit for the Redis store: scripts that arrive together, sent in one pipeline.

Every write here is one script, atomic on the server, that checks the fence and writes (or
refuses) by itself. When several passes of one process write at once, each script paid its
own round trip. Here a script that arrives while one of the same store's is on its way
waits for it, and then the waiting ones go together in one pipeline (not a ``MULTI``: each
script stays its own atomic decision, and each gets its own reply). On a cluster, whose
client's pipeline refuses ``EVALSHA``, the waiting scripts are split by the node that owns
their slot, and each node's share goes as one pipeline on a connection to that node, all
nodes at once; a script that meets a redirection (``MOVED``, ``ASK``) goes again alone.

A script that finds nothing on its way goes at once, alone: a lone write never waits for
company. A reply that is an error (``NOSCRIPT`` after a server restart, an outage) is not
answered from the pipeline: that script is sent again alone, through the ordinary call,
which reloads a missing script and turns a driver error into the store's own. Only writes
whose repetition is harmless come here (a first-writer-wins record, a renewal). A caller is
answered only once its script's reply is in, as without the pipeline.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import durable.group
from durable.group import Waiting
from redis.asyncio.cluster import ClusterNode, PipelineCommand, RedisCluster
from redis.commands.core import AsyncScript

from durable_redis.scripts import Client

__all__ = ["GroupCommit"]

log = logging.getLogger("durable_redis")

_AGAIN: Any = object()
"""A pipeline's mark for a script it did not answer: that script goes again alone."""

Call = Callable[[AsyncScript, tuple[str, ...], tuple[Any, ...]], Awaitable[Any]]


class _Script(Waiting):
    __slots__ = ("args", "keys", "script")

    def __init__(self, script: AsyncScript, keys: tuple[str, ...], args: tuple[Any, ...]) -> None:
        super().__init__()
        self.script = script
        self.keys = keys
        self.args = args


class GroupCommit(durable.group.GroupCommit[_Script]):
    """The scripts of one store handle waiting to go together; see the module."""

    __slots__ = ("call_alone", "client")

    def __init__(self, client: Client, alone: Call) -> None:
        super().__init__()
        self.client = client
        self.call_alone = alone
        """The ordinary call of one script (reloads, translates errors)."""

    async def call(self, script: AsyncScript, keys: tuple[str, ...], args: tuple[Any, ...]) -> Any:
        """``script``'s reply, sent alone or in the next pipeline."""
        return await self.submit(_Script(script, keys, args))

    async def alone(self, write: _Script) -> Any:
        return await self.call_alone(write.script, write.keys, write.args)

    async def together(self, batch: list[_Script]) -> None:
        replies = await self._pipelined(batch)
        again = []
        for item, reply in zip(batch, replies, strict=True):
            if reply is _AGAIN or isinstance(reply, BaseException):
                again.append(item)
            else:
                item.answer(reply)
        if again:
            await asyncio.gather(*(self.answer_alone(item) for item in again))

    async def _pipelined(self, batch: list[_Script]) -> list[Any]:
        """Each script's reply, in order: a value, an error reply, or ``_AGAIN`` for one
        the pipeline did not answer (it then goes again alone)."""
        if isinstance(self.client, RedisCluster):
            return await self._per_node(self.client, batch)
        try:
            pipe = self.client.pipeline(transaction=False)
            for item in batch:
                pipe.evalsha(item.script.sha, len(item.keys), *item.keys, *item.args)
            return list(await pipe.execute(raise_on_error=False))
        except Exception as error:
            log.debug("a pipeline of %d scripts failed (%s); each goes alone", len(batch), error)
            return [_AGAIN] * len(batch)

    async def _per_node(self, cluster: RedisCluster, batch: list[_Script]) -> list[Any]:
        """On a cluster: one pipeline per primary, each on a connection of that node's own,
        all at once.

        Every script's keys share one hash-tagged slot, so the node holding its first key
        runs it. The client's slot map can be stale (a resharding, a failover): the node
        then answers ``MOVED`` or ``ASK`` as an error reply, and that script goes again
        alone through the cluster client, which follows the redirection and refreshes the
        map. So does a script whose slot has no node, and every script of a pipeline whose
        connection failed or which found the node's connections all busy.
        """
        replies: list[Any] = [_AGAIN] * len(batch)
        nodes: dict[str, tuple[ClusterNode, list[int]]] = {}
        for index, item in enumerate(batch):
            if not item.keys:
                continue
            try:
                node = cluster.nodes_manager.get_node_from_slot(cluster.keyslot(item.keys[0]))
            except Exception:  # no node for the slot: the ordinary call says why
                continue
            nodes.setdefault(node.name, (node, []))[1].append(index)

        async def send(node: ClusterNode, indexes: list[int]) -> None:
            if len(indexes) == 1:
                return  # alone costs the same round trip and follows redirections itself
            commands = []
            for position, index in enumerate(indexes):
                item = batch[index]
                commands.append(
                    PipelineCommand(
                        position,
                        "EVALSHA",
                        item.script.sha,
                        len(item.keys),
                        *item.keys,
                        *item.args,
                    )
                )
            try:
                await node.execute_pipeline(commands)
            except Exception as error:
                log.debug(
                    "a pipeline of %d scripts to %s failed (%s); each goes alone",
                    len(indexes),
                    node.name,
                    error,
                )
                return
            for index, command in zip(indexes, commands, strict=True):
                replies[index] = command.result

        await asyncio.gather(*(send(node, indexes) for node, indexes in nodes.values()))
        return replies
