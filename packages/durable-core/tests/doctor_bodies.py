"""Workflow bodies for the ``durable worker`` that test_doctor.py kills (SIGKILL) mid-pass."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from durable.run import Run

log = logging.getLogger("doctor_bodies")


async def hang(run: Run[Any]) -> None:
    """Say it began, then hold the claim until the process is killed."""
    log.warning("began %s", run.workflow)
    await asyncio.sleep(3600)


async def quick(run: Run[Any]) -> str:
    """Finish at once, saying so: the worker then holds nothing."""
    log.warning("finished %s", run.workflow)
    return "done"
