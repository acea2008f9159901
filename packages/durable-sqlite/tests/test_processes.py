"""Separate OS processes on one file: what the store promises when the writers do not share
an event loop, a thread or a life.

These tests are synchronous on purpose: each drives child processes through pipes, and
reads the file afterwards through a store of its own opened with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from durable.interfaces import INBOX_PREFIX
from durable_sqlite import SqliteDurable, connect

pytestmark = pytest.mark.timeout(120)

ROUNDS = 400

PRELUDE = """
import asyncio, sys, time
from datetime import timedelta
from durable import Fenced
from durable_sqlite import SqliteDurable, connect

PATH = sys.argv[1]
NAME = sys.argv[2] if len(sys.argv) > 2 else ""

def say(*words):
    print(*words, flush=True)
"""


def spawn(body: str, *args: object) -> subprocess.Popen[str]:
    """A Python process running ``body`` after the prelude, with ``args`` as its argv."""
    source = PRELUDE + textwrap.dedent(body)
    return subprocess.Popen(
        [sys.executable, "-c", source, *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def expect(child: subprocess.Popen[str], *words: str) -> list[str]:
    """The next line the child prints, which must start with ``words``."""
    assert child.stdout is not None
    line = child.stdout.readline().split()
    if line[: len(words)] != list(words):
        child.kill()
        _, errors = child.communicate()
        raise AssertionError(f"expected {words}, the child said {line}; stderr:\n{errors}")
    return line


def tell(child: subprocess.Popen[str], line: str) -> None:
    assert child.stdin is not None
    child.stdin.write(line + "\n")
    child.stdin.flush()


def finish(child: subprocess.Popen[str]) -> None:
    if child.stdin is not None and child.stdin.closed:
        child.stdin = None
    _, errors = child.communicate(timeout=60)
    assert child.returncode == 0, errors


def intact(path: Path) -> bool:
    raw = sqlite3.connect(path)
    try:
        return bool(raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)])
    finally:
        raw.close()


def load(path: Path, workflow: str) -> dict[str, object]:
    async def read() -> dict[str, object]:
        async with connect(path) as connection:
            return await SqliteDurable.over(connection).checkpointer.load(workflow)

    return asyncio.run(read())


def test_two_processes_claiming_one_workflow_one_is_fenced_and_nothing_is_corrupt(
    path: Path,
) -> None:
    worker = """
    async def main():
        async with connect(PATH) as connection:
            cp = SqliteDurable.over(connection).checkpointer
            holder = None
            while holder is None:
                holder = await cp.claim(
                    "wf", liveness=timedelta(milliseconds=300), budget=timedelta(minutes=1)
                )
                if holder is None:
                    await asyncio.sleep(0.01)
            await cp.record(holder, NAME + "-first", holder.token)
            say("claimed", holder.token)
            sys.stdin.readline()
            try:
                await cp.record(holder, NAME + "-second", holder.token)
            except Fenced:
                say("fenced")
            else:
                say("recorded")

    asyncio.run(main())
    """
    stalled = spawn(worker, path, "a")
    assert expect(stalled, "claimed") == ["claimed", "1"]
    time.sleep(0.4)  # the first process stalls past its liveness
    newer = spawn(worker, path, "b")
    assert expect(newer, "claimed") == ["claimed", "2"]
    tell(newer, "go")
    expect(newer, "recorded")
    tell(stalled, "go")
    expect(stalled, "fenced")
    finish(newer)
    finish(stalled)
    assert intact(path)
    assert load(path, "wf") == {"a-first": 1, "b-first": 2, "b-second": 2}


def test_two_processes_writing_one_file_at_once_lose_nothing(path: Path) -> None:
    writer = """
    async def main():
        async with connect(PATH) as connection:
            store = SqliteDurable.over(connection)
            cp = store.checkpointer
            keys = []
            won = 0
            say("ready")
            sys.stdin.readline()
            for i in range(ROUNDS):
                keys.append(await store.send("shared", NAME + str(i)))
                await cp.supply("shared", NAME + "-supplied-" + str(i), i)
                await cp.supply("shared", "contested-" + str(i), NAME)
                holder = await cp.claim(
                    "claimed", liveness=timedelta(seconds=5), budget=timedelta(seconds=30)
                )
                if holder is not None:
                    won += 1
                    await cp.record(holder, NAME + "-" + str(i), i)
                    await cp.release(holder)
            say("keys", *keys)
            say("won", won)

    asyncio.run(main())
    """.replace("ROUNDS", str(ROUNDS))
    # Both open the fresh file at once, so they also race to create it; then both start
    # writing at once, so their writes overlap for as long as they run.
    first, second = spawn(writer, path, "p"), spawn(writer, path, "q")
    expect(first, "ready")
    expect(second, "ready")
    tell(first, "go")
    tell(second, "go")
    keys = expect(first, "keys")[1:] + expect(second, "keys")[1:]
    won = int(expect(first, "won")[1]) + int(expect(second, "won")[1])
    finish(first)
    finish(second)
    assert intact(path)
    shared = load(path, "shared")
    inbox = [k for k in shared if k.startswith(INBOX_PREFIX)]
    assert sorted(keys) == inbox  # distinct, none lost, and key order is load order
    assert len(set(keys)) == 2 * ROUNDS
    assert {v for k, v in shared.items() if k.startswith("contested-")} <= {"p", "q"}
    assert len([k for k in shared if "-supplied-" in k]) == 2 * ROUNDS
    assert len(load(path, "claimed")) == won


def test_sigkill_inside_transact_leaves_neither_the_effect_nor_the_record(path: Path) -> None:
    raw = sqlite3.connect(path)
    with raw:
        raw.execute("CREATE TABLE stock (sku TEXT PRIMARY KEY, reserved INTEGER NOT NULL)")
        raw.execute("INSERT INTO stock VALUES ('piano', 0)")
    raw.close()
    victim = spawn(
        """
        def reserve(cursor):
            cursor.execute("UPDATE stock SET reserved = reserved + 1 WHERE sku = 'piano'")
            say("inside")
            time.sleep(600)
            return 1

        async def main():
            async with connect(PATH) as connection:
                cp = SqliteDurable.over(connection).checkpointer
                holder = await cp.claim(
                    "wf", liveness=timedelta(milliseconds=300), budget=timedelta(minutes=1)
                )
                await cp.transact(holder, "reserved", reserve)
                say("returned")

        asyncio.run(main())
        """,
        path,
    )
    expect(victim, "inside")
    os.kill(victim.pid, signal.SIGKILL)
    victim.communicate(timeout=30)
    assert victim.returncode == -signal.SIGKILL

    async def afterwards() -> tuple[Any, ...]:
        async with connect(path, busy_timeout=timedelta(seconds=1)) as connection:
            store = SqliteDurable.over(connection)
            started = time.monotonic()
            await store.checkpointer.supply("other", "k", 1)  # the write lock died with it
            unlocked = time.monotonic() - started
            loaded = await store.checkpointer.load("wf")
            await asyncio.sleep(0.35)  # the dead pass's liveness runs out
            holder = await store.checkpointer.claim(
                "wf", liveness=timedelta(seconds=5), budget=timedelta(minutes=1)
            )
            assert holder is not None

            def reserve(cursor: sqlite3.Cursor) -> object:
                cursor.execute("UPDATE stock SET reserved = reserved + 1 WHERE sku = 'piano'")
                return cursor.execute("SELECT reserved FROM stock").fetchone()[0]

            recorded = await store.checkpointer.transact(holder, "reserved", reserve)
            return unlocked, loaded, holder.token, recorded

    stock_before = _reserved(path)
    unlocked, loaded, token, recorded = asyncio.run(afterwards())
    assert stock_before == 0
    assert loaded == {}
    assert unlocked < 0.5
    assert token == 2
    assert (recorded.value, recorded.first) == (1, True)
    assert _reserved(path) == 1
    assert intact(path)


def _reserved(path: Path) -> int:
    raw = sqlite3.connect(path)
    try:
        return int(raw.execute("SELECT reserved FROM stock").fetchone()[0])
    finally:
        raw.close()


@pytest.mark.parametrize("synchronous", ["full", "normal"])
def test_a_second_process_sees_every_write_that_returned_even_after_a_sigkill(
    path: Path, synchronous: str
) -> None:
    writer = spawn(
        """
        async def main():
            async with connect(PATH, synchronous=NAME) as connection:
                store = SqliteDurable.over(connection)
                holder = await store.checkpointer.claim(
                    "wf", liveness=timedelta(minutes=1), budget=timedelta(minutes=5)
                )
                for i in range(100_000):
                    await store.checkpointer.record(holder, "k" + str(i), i)
                    say("returned", i)

        asyncio.run(main())
        """,
        path,
        synchronous,
    )
    returned: list[int] = []
    while len(returned) < 300:
        returned.append(int(expect(writer, "returned")[1]))
    os.kill(writer.pid, signal.SIGKILL)
    writer.communicate(timeout=30)
    assert intact(path)
    loaded = load(path, "wf")
    assert all(loaded[f"k{i}"] == i for i in returned)
    assert list(loaded)[: len(returned)] == [f"k{i}" for i in returned]


def test_a_reader_in_another_process_sees_writes_as_they_return(path: Path) -> None:
    reader = spawn(
        """
        async def main():
            async with connect(PATH) as connection:
                cp = SqliteDurable.over(connection).checkpointer
                for line in sys.stdin:
                    say("loaded", *sorted((await cp.load("wf")).keys()))

        asyncio.run(main())
        """,
        path,
    )

    async def write_and_ask() -> list[list[str]]:
        seen = []
        async with connect(path) as connection:
            cp = SqliteDurable.over(connection).checkpointer
            for i in range(5):
                await cp.supply("wf", f"k{i}", i)
                tell(reader, "load")
                seen.append(await asyncio.to_thread(expect, reader, "loaded"))
        return seen

    seen = asyncio.run(write_and_ask())
    assert reader.stdin is not None
    reader.stdin.close()
    finish(reader)
    assert [line[1:] for line in seen] == [[f"k{j}" for j in range(i + 1)] for i in range(5)]
