"""A gate in one step of one workflow, so the demo can kill a worker at a moment it chose.

A worker killed "at some point" proves little: it may die between passes, where nothing
is at stake. The interesting death is inside an effect that has left the process and not
yet been recorded, because that is the crash ``Run.step`` cannot make atomic and the
idempotency key has to make harmless. So the demo arms a gate on one capture step; the
worker whose pass reaches it, after the gateway has answered and before the record lands,
writes ``entered`` (naming its pid) and waits for ``open``. The demo kills that pid with
SIGKILL, then opens the gate so the pass that reclaims the order goes straight through.

Files in one directory, because the two sides are different processes and a file is the
one thing both can see without either trusting the other's clock.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Gate", "Held"]

_POLL = 0.05  # seconds between looks for the open marker


@dataclass(frozen=True, slots=True)
class Held:
    """A pass waiting at the gate: which process, in which workflow and step."""

    pid: int
    workflow: str
    key: str


def _write(path: Path, value: object) -> None:
    # Written aside and renamed, so the other side never reads half a file.
    aside = path.with_name(f".{path.name}.{os.getpid()}")
    aside.write_text(json.dumps(value), encoding="utf-8")
    aside.replace(path)


class Gate:
    """The gate in ``directory`` (``hold.json`` says where it stands, if it is armed)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        hold = self.directory / "hold.json"
        self._at: tuple[str, str] | None = None
        if hold.exists():
            spec = json.loads(hold.read_text(encoding="utf-8"))
            self._at = (str(spec["workflow"]), str(spec["key"]))

    def __repr__(self) -> str:
        return f"Gate({str(self.directory)!r}, at={self._at!r})"

    @classmethod
    def arm(cls, directory: str | os.PathLike[str], workflow: str, key: str) -> Gate:
        """Arm a fresh gate at ``workflow``'s step ``key`` (clearing any earlier one)."""
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("entered", "open"):
            (folder / name).unlink(missing_ok=True)
        _write(folder / "hold.json", {"workflow": workflow, "key": key})
        return cls(folder)

    @property
    def is_open(self) -> bool:
        return (self.directory / "open").exists()

    async def passing(self, workflow: str, key: str) -> None:
        """Return at once, unless this is the armed step and the gate is still shut: then
        say so in ``entered`` and wait until the demo opens it."""
        if self._at != (workflow, key) or self.is_open:
            return
        _write(self.directory / "entered", {"pid": os.getpid(), "workflow": workflow, "key": key})
        # Polled: the news comes from another process, as a file, so no Event can carry it.
        while not self.is_open:  # noqa: ASYNC110
            await asyncio.sleep(_POLL)

    def held(self) -> Held | None:
        """The pass waiting at the gate, once one has reached it."""
        entered = self.directory / "entered"
        if not entered.exists():
            return None
        found = json.loads(entered.read_text(encoding="utf-8"))
        return Held(int(found["pid"]), str(found["workflow"]), str(found["key"]))

    def open(self) -> None:
        """Let every pass through from now on."""
        _write(self.directory / "open", {"by": os.getpid()})
