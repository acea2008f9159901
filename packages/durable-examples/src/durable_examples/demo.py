"""``hatch run demo``: the payout service, driven by two real worker processes, one killed.

What it does, in order:

1. starts three orders with ``start`` (a small one, a large one that needs approval, and
   one whose card declines a line, so the saga compensates), each order its workflow's
   input; ``start`` is idempotent, so a second run finds them started and asks again
   harmlessly;
2. starts two worker processes (``python -m durable_examples.worker``) on the store;
3. arms a gate in the large order's capture of line L2, so the worker running it stops
   there (the gateway has answered, the record has not landed), and kills that worker with
   SIGKILL; the other worker reclaims the order once the dead one's claim lapses, finds
   the capture begun and never recorded, and asks the gateway's "look up by idempotency
   key" (the step's reconcile probe) instead of charging again: "reconciled: the gateway
   already holds charge ch_…";
4. approves the large order when its status says it is blocked on ``approval``, with
   ``durable arrive``, as an operator would;
5. stops the surviving worker with SIGTERM, replays every order once more in this process
   (nothing may run again), prints each workflow's status line (what ``durable show``
   begins with), the ledger (gateway and stock) and each workflow's timeline with the
   store's times, and checks the books: exit 0 only if every check holds.

The store is SQLite in ``.durable-demo/`` under the working directory by default, so a
second run resumes from that file: finished orders are reported as finished, and the
replay and the books show nothing charged or reserved twice. ``--store URL`` picks another
store (``postgresql://...``, ``redis://...``); the demo adds ``delivery_lease=2`` to its URL
unless it names one, so a killed worker's deliveries come back in seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Any, TextIO
from urllib.parse import parse_qsl, urlsplit

import durable
from durable.cli import status_line
from durable.interfaces import Durable, Entry, Interruption, Lifecycle, Status
from durable.plugins import for_url
from durable.run import STEP_PREFIX, Finished, resume
from durable.workflows import LifecycleDurable

from durable_examples.fulfilment import fulfilment_workflow
from durable_examples.gate import Gate
from durable_examples.gateway import Gateway, card_limit
from durable_examples.ledger import Books, audit, render
from durable_examples.orders import Line, Order, as_mapping, as_order
from durable_examples.service import APPROVAL_THRESHOLD, KIND, payout_workflows
from durable_examples.stock import Stock, StockLedger, stock_for

__all__ = ["EXPECTED", "GATED", "ORDERS", "main", "run_demo"]

ORDERS = (
    Order(
        "order-1001",
        "tok_visa",
        (Line("L1", "lamp", 2, 45), Line("L2", "chair", 4, 60)),
    ),
    Order(
        "order-1002",
        "tok_visa",
        (Line("L1", "desk", 1, 900), Line("L2", "chair", 6, 60), Line("L3", "lamp", 1, 45)),
    ),
    Order(
        "order-1003",
        "tok_limit_500",
        (Line("L1", "lamp", 1, 45), Line("L2", "piano", 1, 3200)),
    ),
)
EXPECTED = {"order-1001": "paid", "order-1002": "paid", "order-1003": "compensated"}
GATED = ("order-1002", "capture:L2")
"""Where the demo holds a pass to kill its worker: the large order's second capture."""

LEASE = "2"  # seconds; the store URL's delivery_lease unless it names one
WORKERS = 2


def default_store(data: Path) -> str:
    return f"sqlite:///{data / 'payout.db'}"


def with_lease(url: str) -> str:
    """``url`` with a short delivery lease (the scheduler's), unless it names one (or names
    it by its old name, ``lease=``)."""
    # Appended as text: urlunsplit would fold sqlite:/// (no host) into sqlite:/.
    named = {name for name, _ in parse_qsl(urlsplit(url).query)}
    if named & {"delivery_lease", "lease"}:
        return url
    return f"{url}{'&' if '?' in url else '?'}delivery_lease={LEASE}"


def _digest(url: str) -> str:
    return hashlib.sha1(url.encode()).hexdigest()[:8]


def _shown(value: object, width: int = 64) -> str:
    text = json.dumps(value, separators=(",", ":"))
    return text if len(text) <= width else text[: width - 1] + "…"


@dataclass
class Worker:
    """One worker subprocess, and where its log goes."""

    number: int
    process: asyncio.subprocess.Process
    log: Path

    @property
    def name(self) -> str:
        return f"worker {self.number} (pid {self.process.pid})"


@dataclass
class Report:
    """What the demo prints as it goes, with the seconds since it started."""

    out: TextIO
    started: float
    checks: list[tuple[bool, str]] = field(default_factory=list)
    reconciled: str | None = None  # the charge the reclaiming pass reconciled to, once seen

    def line(self, text: str = "") -> None:
        print(text, file=self.out, flush=True)

    def event(self, text: str) -> None:
        elapsed = asyncio.get_running_loop().time() - self.started
        self.line(f"  +{elapsed:5.1f}s  {text}")

    def check(self, ok: bool, text: str) -> None:
        self.checks.append((ok, text))


def _open_log(path: Path) -> IO[bytes]:
    return path.open("ab")


async def _start_worker(number: int, command: list[str], log: Path) -> Worker:
    # A session of its own, so that Ctrl-C in the terminal reaches the demo alone: the
    # demo stops its workers itself (SIGTERM, as a supervisor would), and a worker that is
    # still importing when the key is pressed is not interrupted mid-import.
    sink = _open_log(log)
    try:
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=sink,
            stderr=sink,
            start_new_session=True,
        )
    finally:
        sink.close()
    return Worker(number, process, log)


async def _stop(workers: Sequence[Worker], report: Report) -> None:
    """SIGTERM every live worker, then wait for each (SIGKILL after 20 s, reported)."""
    for worker in workers:
        if worker.process.returncode is None:
            worker.process.send_signal(signal.SIGTERM)
    for worker in workers:
        try:
            await asyncio.wait_for(worker.process.wait(), timeout=20)
        except TimeoutError:
            worker.process.kill()
            await worker.process.wait()
            report.line(f"  {worker.name} did not stop on SIGTERM; killed")


async def _arrive(url: str, workflow: str, report: Report) -> bool:
    """Approve ``workflow`` the way an operator would: with the ``durable`` command."""
    report.event(f"{workflow} asks for approval; an operator runs:")
    report.line(f"             durable arrive '{url}' {workflow} approval true")
    command = [sys.executable, "-m", "durable.cli", "arrive", url, workflow, "approval", "true"]
    process = await asyncio.create_subprocess_exec(
        *command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,  # as the workers: Ctrl-C is the demo's to handle
    )
    try:
        stdout, stderr = await process.communicate()
    except asyncio.CancelledError:
        process.terminate()
        await process.wait()
        raise
    if process.returncode != 0:
        report.line(f"             failed ({process.returncode}): {stderr.decode().strip()}")
        return False
    report.line(f"             -> {stdout.decode().strip()}")
    return True


async def _outcome(store: LifecycleDurable[Any], workflow: str) -> dict[str, object] | None:
    """The value a finished order recorded (its ``outcome`` step's), or ``None``."""
    st = await store.status(workflow)
    if st is None or st.status is not Status.FINISHED:
        return None
    return as_mapping(st.value)


async def _drive(
    store: LifecycleDurable[Any],
    url: str,
    workers: list[Worker],
    gate: Gate | None,
    pending: list[str],
    report: Report,
) -> bool:
    """Watch the orders to the end: kill at the gate, approve when asked. True if all ended."""
    approved: set[str] = set()
    killed = gate is None
    watching = gate is not None  # for the reclaiming pass's reconcile, once the kill is done
    while pending:
        if not killed and gate is not None and (held := gate.held()) is not None:
            victim = next((w for w in workers if w.process.pid == held.pid), None)
            report.event(
                f"pid {held.pid} is inside {held.key} of {held.workflow}: the gateway has "
                "answered, the record has not landed"
            )
            if victim is None:
                report.line(f"             pid {held.pid} is not one of this demo's workers")
                return False
            victim.process.send_signal(signal.SIGKILL)
            await victim.process.wait()
            report.event(f"SIGKILL {victim.name}; the other worker must reclaim {held.workflow}")
            gate.open()
            killed = True
        if killed and watching:
            reference = await _reconciled(store, *GATED)
            if reference is not None:
                watching = False
                report.reconciled = reference
                report.event(f"reconciled: the gateway already holds charge {reference}")
        for workflow in list(pending):
            st = await store.status(workflow)
            if st is None:
                report.event(f"{workflow} has no status: it was never started")
                return False
            if st.status is Status.FINISHED:
                outcome = as_mapping(st.value)
                report.event(f"{workflow} {outcome.get('status')}")
                pending.remove(workflow)
            elif st.status.terminal:
                report.event(f"{workflow} {status_line(st)}")
                return False
            elif st.status is Status.BLOCKED and "approval" in st.keys and workflow not in approved:
                approved.add(workflow)
                if not await _arrive(url, workflow, report):
                    return False
        if not pending:
            return True
        if all(w.process.returncode is not None for w in workers):
            report.event("every worker has exited; see their logs")
            return False
        await asyncio.sleep(0.1)
    return True


async def _reconciled(store: LifecycleDurable[Any], workflow: str, key: str) -> str | None:
    """The charge a pass reconciled step ``key`` of ``workflow`` to (its probe found it at
    the gateway, so it was recorded instead of charged again), or ``None`` as yet."""
    records = await store.checkpointer.load(workflow)
    marker = f"{STEP_PREFIX}{key}:reconciled:"
    if key not in records or not any(name.startswith(marker) for name in records):
        return None
    return str(as_mapping(records[key]).get("reference"))


@dataclass(frozen=True)
class _Snapshot:
    calls: int
    stock: StockLedger


async def _snapshot(gateway: Gateway, stock: Stock[Any]) -> _Snapshot:
    calls = await asyncio.to_thread(gateway.calls)
    return _Snapshot(calls, await stock.ledger([order.id for order in ORDERS]))


async def _replay(store: Durable[Any], process: Any, report: Report) -> bool:
    """One more pass of every order, in this process: each must finish from its records.

    A pass through ``resume``, which writes no status: the orders stay finished."""
    finished = 0
    for order in ORDERS:

        async def body(run: Any, order: Order = order) -> object:
            return await process(run, order)

        try:
            outcome = await resume(store, order.id, body)
        except Interruption as error:
            report.line(f"  {order.id}: could not replay: {error}")
            continue
        if isinstance(outcome, Finished):
            finished += 1
        else:
            report.line(f"  {order.id}: replay did not finish: {outcome}")
    return finished == len(ORDERS)


def _timeline(workflow: str, history: Sequence[Entry], report: Report) -> None:
    report.line(f"  {workflow}")
    if not history:
        report.line("    (no records)")
        return
    first: datetime = history[0].at
    width = max(len(entry.key) for entry in history)
    for entry in history:
        offset = (entry.at - first).total_seconds()
        clock = entry.at.strftime("%H:%M:%S.%f")[:-3]
        report.line(f"    {clock} +{offset:6.3f}s  {entry.key:<{width}}  {_shown(entry.value)}")


async def run_demo(
    url: str, data: Path, out: TextIO, *, patience: timedelta = timedelta(seconds=60)
) -> int:
    """Drive the demo against ``url``, keeping the gateway ledger and logs in ``data`` (a
    directory that exists). ``patience`` bounds how long the workers may take.

    Returns the exit code: 0 when every check passed, 1 when one failed, 2 when the store
    cannot host the demo.
    """
    loop = asyncio.get_running_loop()
    report = Report(out, loop.time())
    plugin = for_url(url)
    if plugin.name == "memory":
        report.line(
            "the demo runs its workers as separate processes, and a memory:// store lives in "
            "one process; use sqlite:///path.db (the default), postgresql://... or redis://..."
        )
        return 2
    url = with_lease(url)
    tag = _digest(url)
    gateway_path = data / f"gateway-{tag}.db"
    gateway = Gateway(gateway_path)
    report.line(f"durable demo: the order-payout service on {url}")
    report.line(f"  gateway ledger {gateway_path}, worker logs {data}/worker-{tag}-N.log")

    async with durable.open(url) as store:
        if not isinstance(store, LifecycleDurable) or not isinstance(store.checkpointer, Lifecycle):
            report.line(f"the store at {url} does not offer lifecycle (start, status)")
            return 2
        stock = stock_for(store)
        await stock.prepare()
        kinds = payout_workflows(stock, gateway, store.checkpointer)

        report.line()
        report.line("orders")
        fresh: list[str] = []
        pending: list[str] = []
        for order in ORDERS:
            earlier = await store.status(order.id)
            about = f"{len(order.lines)} lines, total {order.total} on {order.card}"
            limit = card_limit(order.card)
            if limit is not None:
                about += f" (the card declines any charge over {limit})"
            elif order.total > APPROVAL_THRESHOLD:
                about += f" (over {APPROVAL_THRESHOLD}: needs approval)"
            # Idempotent: the same order again under its id is the same workflow, and
            # start parses it (as_order) before anything is written.
            await store.start(kinds[KIND], order.id, order.message())
            if earlier is None:
                fresh.append(order.id)
                pending.append(order.id)
                report.line(f"  {order.id}  started: {about}")
            elif earlier.status is Status.FINISHED:
                status = as_mapping(earlier.value).get("status")
                report.line(f"  {order.id}  already finished ({status}) in this store")
            else:
                # Started by an earlier run and not finished; waking it is harmless.
                await store.scheduler.make_ready(order.id)
                pending.append(order.id)
                report.line(f"  {order.id}  started by an earlier run, {status_line(earlier)}")

        gate: Gate | None = None
        workers: list[Worker] = []
        if pending:
            report.line()
            report.line("workers")
            command = [
                sys.executable,
                "-m",
                "durable_examples.worker",
                url,
                "--gateway",
                str(gateway_path),
                "--with-parent",
            ]
            if GATED[0] in fresh:
                gate = Gate.arm(data / f"gate-{tag}", *GATED)
                command += ["--gate", str(gate.directory)]
            for number in range(1, WORKERS + 1):
                log = data / f"worker-{tag}-{number}.log"
                workers.append(await _start_worker(number, command, log))
            shown = " ".join(command[1:])
            for worker in workers:
                report.line(f"  {worker.name}: python {shown}")
            report.line()
            report.line("events")
            try:
                async with asyncio.timeout(patience.total_seconds()):
                    ended = await _drive(store, url, workers, gate, pending, report)
            except TimeoutError:
                ended = False
                waited = patience.total_seconds()
                report.event(f"gave up after {waited:g}s waiting for {', '.join(pending)}")
            except asyncio.CancelledError:
                report.event("interrupted: stopping the workers (a pass in flight may finish)")
                raise
            finally:
                await _stop(workers, report)
            report.check(ended, "every order reached its outcome")
            codes = ", ".join(f"{w.name} exited {w.process.returncode}" for w in workers)
            report.line(f"  {codes}")
            if gate is not None:
                survivors = [w for w in workers if w.process.returncode != -signal.SIGKILL]
                report.check(
                    len(survivors) == WORKERS - 1,
                    f"one worker was killed mid-pass in {GATED[1]} of {GATED[0]}",
                )
                report.check(
                    all(w.process.returncode == 0 for w in survivors),
                    "the surviving worker finished the work and exited 0 on SIGTERM",
                )
            else:
                report.check(
                    all(w.process.returncode == 0 for w in workers),
                    "every worker exited 0 on SIGTERM",
                )
        else:
            report.line()
            report.line("every order is already finished; no worker is needed")

        report.line()
        report.line("replay: one more pass of every order, in this process")
        process = kinds[KIND].body
        before = await _snapshot(gateway, stock)
        replayed = await _replay(store, process, report)
        after = await _snapshot(gateway, stock)
        report.line(
            f"  {len(ORDERS)} passes; gateway requests {after.calls - before.calls:+d}, "
            f"stock movements {_count(after.stock) - _count(before.stock):+d}"
        )
        report.check(replayed, "every order finishes again from its records alone")
        report.check(before == after, "the replay charged nothing and moved no stock")

        report.line()
        report.line("status (the first line of durable show, for each workflow)")
        statuses = {order.id: await store.status(order.id) for order in ORDERS}
        width = max(len(order.id) for order in ORDERS)
        for workflow, st in statuses.items():
            shown = "not started" if st is None else f"{st.kind}: {status_line(st)}"
            report.line(f"  {workflow:<{width}}  {shown}")
        report.check(
            all(st is not None and st.status is Status.FINISHED for st in statuses.values()),
            "every order is listed finished, its outcome its value",
        )
        report.check(
            all(
                st is not None and as_order(st.input) == order
                for order, st in zip(ORDERS, statuses.values(), strict=True)
            ),
            "each order's input is the order it was started with",
        )

        outcomes = {order.id: await _outcome(store, order.id) for order in ORDERS}
        operations = await asyncio.to_thread(gateway.operations)
        books = Books(ORDERS, outcomes, after.stock, operations)
        report.line()
        report.line("ledger (what the gateway and the stock hold)")
        for text in render(books):
            report.line(f"  {text}")
        failures = audit(books, EXPECTED)
        for failure in failures:
            report.check(False, failure)
        report.check(
            not failures,
            "stock moved exactly once per order; every idempotency key decided once; "
            "paid orders paid out once, the declined one refunded what it captured",
        )
        if gate is not None:
            held = next((op for op in operations if op.key == f"{GATED[0]}:{GATED[1]}"), None)
            report.check(
                held is not None and held.calls == 1 and report.reconciled == held.reference,
                "the killed capture was reconciled, not charged again "
                f"({held and held.calls} request, reconciled to {report.reconciled})",
            )

        report.line()
        report.line("timelines (the store's own clock at each record's winning write)")
        for order in ORDERS:
            for workflow in (order.id, fulfilment_workflow(order.id)):
                history = await store.checkpointer.history(workflow)
                if history or workflow == order.id:
                    _timeline(workflow, history, report)

    report.line()
    report.line("checks")
    for ok, text in report.checks:
        report.line(f"  {'ok  ' if ok else 'FAIL'}  {text}")
    passed = all(ok for ok, _ in report.checks)
    report.line()
    report.line("every check passed" if passed else "SOME CHECKS FAILED")
    return 0 if passed else 1


def _count(ledger: StockLedger) -> int:
    return sum(len(moves) for moves in ledger.moves.values())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="hatch run demo",
        description="The order-payout service, driven by two worker processes, one killed.",
    )
    parser.add_argument(
        "--store", metavar="URL", help="store URL (default: SQLite in the --data directory)"
    )
    parser.add_argument(
        "--data",
        type=Path,
        default=Path(".durable-demo"),
        metavar="DIR",
        help="where the gateway ledger, logs and default store live (.durable-demo)",
    )
    parser.add_argument(
        "--patience", type=float, default=60.0, metavar="S", help="give up after S seconds (60)"
    )
    args = parser.parse_args(argv)
    url = args.store or default_store(args.data)
    args.data.mkdir(parents=True, exist_ok=True)
    patience = timedelta(seconds=args.patience)
    try:
        return asyncio.run(run_demo(url, args.data, sys.stdout, patience=patience))
    except durable.StoreError as error:
        print(f"demo: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # asyncio.run has cancelled run_demo, whose cleanup stopped the workers; what was
        # done is in the store, so the next run resumes rather than starts over.
        print(
            f"demo: interrupted; the workers were stopped, and running it again resumes "
            f"from the store ({url})",
            file=sys.stderr,
        )
        return 130


if __name__ == "__main__":
    sys.exit(main())
