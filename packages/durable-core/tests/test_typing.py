"""What the types promise, proved by running mypy over small programs.

``Effect`` is contravariant and defaults to ``Never``: code that never transacts writes
the bare ``Checkpointer`` and accepts every store, while ``transact`` on a bare
``Checkpointer`` is a type error rather than a call that fails at run time. A program
that should check clean must; each line of a program that should not carries an
``# error: CODE`` comment naming the error mypy must report there, and no other line
may have one.
"""

from __future__ import annotations

import re
from pathlib import Path

import mypy.api

ACCEPTED = """
from datetime import timedelta

from durable.codec import CheckpointCodec, JsonCodec
from durable.durable import SplitDurable
from durable.interfaces import Checkpointer, Durable, Pass, Recorded, Scheduler
from durable.memory import MemoryCheckpointer, MemoryDurable, MemoryEffect, MemoryScheduler


def any_store(store: Checkpointer) -> Checkpointer:
    return store


def any_pair(durable: Durable) -> Durable:
    return durable


def any_scheduler(scheduler: Scheduler) -> Scheduler:
    return scheduler


any_store(MemoryCheckpointer())
any_store(MemoryDurable().checkpointer)
any_pair(MemoryDurable())
any_pair(SplitDurable(MemoryCheckpointer(), MemoryScheduler()))
any_scheduler(MemoryScheduler())
codec: CheckpointCodec[str] = JsonCodec()


def widen(store: Checkpointer[MemoryEffect], durable: Durable[MemoryEffect]) -> None:
    any_store(store)
    any_pair(durable)


async def reserve(store: Checkpointer[MemoryEffect], holder: Pass) -> Recorded:
    return await store.transact(holder, "reserved", lambda data: data.setdefault("n", 1))


async def reserve_on_a_split(holder: Pass) -> Recorded:
    split = SplitDurable(MemoryCheckpointer(), MemoryScheduler())
    return await split.checkpointer.transact(holder, "reserved", lambda data: 1)


async def record_anywhere(store: Checkpointer, holder: Pass) -> Recorded:
    await store.claim("wf", liveness=timedelta(seconds=1), budget=timedelta(seconds=2))
    return await store.record(holder, "step", 1)
"""

REFUSED = """
from durable.interfaces import Checkpointer, Durable, Pass, Recorded
from durable.memory import MemoryCheckpointer, MemoryEffect


async def transact_on_any_store(store: Checkpointer, holder: Pass) -> Recorded:
    return await store.transact(holder, "k", lambda data: 1)  # error: arg-type


async def transact_on_any_pair(durable: Durable, holder: Pass) -> Recorded:
    return await durable.checkpointer.transact(holder, "k", "x")  # error: arg-type


async def the_wrong_kind_of_effect(store: Checkpointer[MemoryEffect], holder: Pass) -> Recorded:
    return await store.transact(holder, "k", "return 1")  # error: arg-type


lua_store: Checkpointer[str] = MemoryCheckpointer()  # error: assignment
"""


def mypy_errors(tmp_path: Path, name: str, source: str) -> set[tuple[int, str]]:
    program = tmp_path / f"{name}.py"
    program.write_text(source)
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\n")
    report, failure, status = mypy.api.run(
        [
            "--strict",
            "--config-file",
            str(config),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--show-error-codes",
            "--no-pretty",
            str(program),
        ]
    )
    assert failure == "", failure
    found = {
        (int(line), code)
        for line, code in re.findall(
            rf"^{re.escape(str(program))}:(\d+): error: .*\[([\w-]+)\]$", report, re.MULTILINE
        )
    }
    errors = sum(1 for line in report.splitlines() if ": error:" in line)
    assert errors == len(found), report
    assert status == (1 if found else 0), report
    return found


def expected_errors(source: str) -> set[tuple[int, str]]:
    return {
        (number, match.group(1))
        for number, line in enumerate(source.splitlines(), start=1)
        if (match := re.search(r"# error: ([\w-]+)$", line))
    }


def test_a_bare_checkpointer_accepts_every_store(tmp_path: Path) -> None:
    assert mypy_errors(tmp_path, "accepted", ACCEPTED) == set()


def test_transact_on_a_bare_checkpointer_is_a_type_error(tmp_path: Path) -> None:
    expected = expected_errors(REFUSED)
    assert len(expected) == 4
    assert mypy_errors(tmp_path, "refused", REFUSED) == expected
