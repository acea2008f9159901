"""The Redis store's raw round trip: one ``EVALSHA`` of a trivial script through redis-py.

The floor a recorded step is measured against: the least a caller can ask of redis-py to
make one value durable in a script, on the testbed's own client (the same server, pool,
parser and response decoding as the store), by the same ``Script`` object the store
calls its scripts with. What a recorded step adds over it is the work inside the script
(the fence check, the position, the server's clock) and the codec, never another round
trip. The hash it writes lives under the testbed's key prefix, so the testbed cleans it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any

from durable.plugins import Testbed


@asynccontextmanager
async def raw_op(testbed: Testbed[Any]) -> AsyncIterator[Callable[[int], Awaitable[None]]]:
    checkpointer = testbed.durable.checkpointer
    client = getattr(checkpointer, "client", None)
    hash_key = getattr(checkpointer, "hash_key", None)
    if client is None or hash_key is None:
        raise TypeError(f"the redis raw op needs a RedisDurable, got {testbed.durable!r}")
    source = (resources.files("durable_bench.raw") / "redis.lua").read_text("utf-8")
    script = client.register_script(source)
    key = f"{hash_key('bench-raw')}:raw"
    await client.script_load(source)

    async def op(i: int) -> None:
        await script(keys=(key,), args=(f"k{i}", i))

    yield op
