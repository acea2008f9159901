"""``durable dashboard URL``: the command ``durable.cli`` registers when this package is installed.

``durable.cli`` imports this module by name (``durable_dashboard.command``) while it builds its
parser, and calls :func:`add_command`; without the package it registers a stand-in that says
``pip install durable-dashboard``. Importing this module imports neither Starlette nor uvicorn:
only running the command does.
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import socket
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "add_command", "is_loopback", "run"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8470

log = logging.getLogger("durable.dashboard")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def add_command(
    commands: Any, url_argument: Callable[[argparse.ArgumentParser], None]
) -> argparse.ArgumentParser:
    """Add ``dashboard`` to the ``durable`` command's subparsers."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "dashboard",
        help="serve a web dashboard of the store's workflows (read-only unless --allow-writes)",
        description="Serve a web page of the store's workflows on 127.0.0.1. It has no "
        "authentication: bind it elsewhere (--host) only behind something that has.",
    )
    url_argument(parser)
    parser.add_argument(
        "--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST})"
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0: any)"
    )
    parser.add_argument(
        "--allow-writes",
        action="store_true",
        help="show cancel and retry buttons (else nothing on the page writes)",
    )
    parser.add_argument(
        "--refresh",
        type=float,
        default=2.0,
        metavar="S",
        help="seconds between refreshes of a live page (default 2; 0: never)",
    )
    parser.set_defaults(run=run)
    return parser


async def run(args: argparse.Namespace, out: TextIO) -> int:
    import uvicorn

    from durable_dashboard.app import create_app

    url: str | None = args.url or os.environ.get("DURABLE_STORE") or None
    if url is None:
        from durable.cli import Exit

        raise Exit(2, "no store URL: durable dashboard sqlite:///orders.db (or set DURABLE_STORE)")
    if not is_loopback(args.host):
        log.warning(
            "dashboard: bound to %s, not loopback: it has NO authentication; anyone who can "
            "reach this port can read every workflow%s",
            args.host,
            " and cancel or retry them" if args.allow_writes else "",
        )
    app = create_app(url, allow_writes=args.allow_writes, refresh=args.refresh)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    # Bound here, so that the line below names the port (--port 0 lets the OS pick one).
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    listening = socket.create_server((args.host, args.port), family=family)
    port = listening.getsockname()[1]
    shown = f"[{args.host}]" if family == socket.AF_INET6 else args.host
    out.write(
        f"durable dashboard on http://{shown}:{port}/ "
        f"({'cancel and retry allowed' if args.allow_writes else 'read-only'}); Ctrl-C stops it\n"
    )
    out.flush()
    with listening:
        await server.serve(sockets=[listening])
    return 0
