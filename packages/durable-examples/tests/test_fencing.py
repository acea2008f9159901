"""The fencing token handed outside, enforced by the example gateway, with a real stall.

A worker subprocess starts a pass, builds its capture and is frozen with SIGSTOP before
sending it. Its claim lapses; this process takes the workflow over (a higher token),
captures and records. Then the frozen worker is woken with SIGCONT and sends its capture,
carrying its old token: the gateway refuses it, and the books show one charge. The store
alone could not have stopped that request, only the record after it.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import durable
import pytest
from durable.interfaces import Contended
from durable.parsers import as_is
from durable.run import Finished, Run, StepContext, resume
from durable_examples.gateway import Gateway, StaleToken

CHILD = Path(__file__).resolve().parent / "fencing_child.py"
PATIENCE = 30.0  # seconds for any one thing to happen


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return str(request.getfixturevalue(f"{request.param}_url"))


async def wait_for(path: Path, process: asyncio.subprocess.Process) -> None:
    deadline = time.monotonic() + PATIENCE
    while not path.exists():  # noqa: ASYNC240 (a stat, polled)
        assert process.returncode is None, f"the worker exited {process.returncode} early"
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        await asyncio.sleep(0.02)


async def test_a_stalled_pass_is_refused_by_the_gateway_after_a_takeover(
    url: str, tmp_path: Path
) -> None:
    gateway = Gateway(tmp_path / "gateway.db")
    workflow = "order-stalled"
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(CHILD),
        url,
        str(gateway.path),
        workflow,
        str(tmp_path),
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        await wait_for(tmp_path / "entered", child)
        child.send_signal(signal.SIGSTOP)  # frozen with its request built, not sent
        stalled = json.loads((tmp_path / "entered").read_text(encoding="utf-8"))["token"]

        tokens: list[int] = []

        async def capture(context: StepContext) -> object:
            tokens.append(context.fencing_token)
            return await gateway.capture(
                context.idempotency_key, 100, "tok_visa", fence=(workflow, context.fencing_token)
            )

        async def body(run: Run[Any]) -> object:
            return await run.step("capture", capture, as_is, context=True)

        async with durable.open(url) as store:
            deadline = time.monotonic() + PATIENCE
            while True:  # until the frozen pass's claim lapses (a second's liveness)
                try:
                    outcome = await resume(store, workflow, body)
                    break
                except Contended:
                    assert time.monotonic() < deadline, "the stalled pass's claim never lapsed"
                    await asyncio.sleep(0.1)
            assert isinstance(outcome, Finished)
            assert tokens
            assert tokens[0] > stalled
            assert outcome.value == {
                "status": "captured",
                "amount": 100,
                "reference": f"ch_{durable.run.idempotency_key(workflow, 'capture')}",
            }

            (tmp_path / "go").write_text("", encoding="utf-8")
            child.send_signal(signal.SIGCONT)
            _, errors = await asyncio.wait_for(child.communicate(), PATIENCE)
            assert child.returncode != 0, "the stalled pass finished as if it held the workflow"

            refusals = gateway.refusals()
            assert [(r.resource, r.token, r.highest, r.pid) for r in refusals] == [
                (workflow, stalled, tokens[0], child.pid)
            ], errors.decode()
            operations = gateway.operations()
            assert [(op.kind, op.status, op.amount, op.calls) for op in operations] == [
                ("capture", "captured", 100, 1)
            ], "the books do not show exactly one charge"
            assert (await store.checkpointer.load(workflow))["capture"] == outcome.value
    finally:
        if child.returncode is None:
            child.send_signal(signal.SIGCONT)
            child.kill()
            await child.wait()


async def test_the_gateway_remembers_the_highest_token_per_resource(tmp_path: Path) -> None:
    gateway = Gateway(tmp_path / "gateway.db")
    await gateway.capture("k1", 10, "tok_visa", fence=("order-a", 5))
    await gateway.capture("k2", 10, "tok_visa", fence=("order-a", 5))  # the same pass again
    await gateway.capture("k3", 10, "tok_visa", fence=("order-b", 1))  # another resource
    with pytest.raises(StaleToken, match="token 4 for 'order-a' is stale: the gateway has seen 5"):
        await gateway.capture("k4", 10, "tok_visa", fence=("order-a", 4))
    await gateway.capture("k5", 10, "tok_visa", fence=("order-a", 6))
    with pytest.raises(StaleToken):
        await gateway.capture("k1", 10, "tok_visa", fence=("order-a", 5))
    assert [op.key for op in gateway.operations()] == ["k1", "k2", "k3", "k5"]
    assert await gateway.look_up("k4") is None
    assert await gateway.look_up("k5") == {
        "status": "captured",
        "amount": 10,
        "reference": "ch_k5",
    }
    assert gateway.calls() == 4
