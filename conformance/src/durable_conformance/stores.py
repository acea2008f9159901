"""Which stores a run certifies: found through ``durable.plugins`` and nowhere else.

Stores are never imported by name. A store is what an installed distribution's ``durable``
entry point answers, so that a third party's store is certified exactly like ours, and a
plugin that fails to load or shares its name with another is an error said out loud rather
than a store silently missing from the table.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit

import pytest
from durable.plugins import StorePlugin, broken_stores, stores

__all__ = [
    "Selection",
    "core_version",
    "describe",
    "list_stores",
    "redact",
    "scrub",
    "select",
]

_SECRET_PARAMETERS = ("password", "passwd", "pwd", "secret", "token", "key", "auth")


@dataclass(frozen=True)
class Selection:
    """The stores a run certifies, the URL each is pointed at, and the broken plugins
    ``all`` had to leave out (each with its reason)."""

    plugins: tuple[StorePlugin, ...]
    urls: dict[str, str | None]
    broken: dict[str, str]


def core_version() -> str:
    try:
        return importlib.metadata.version("durable-core")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _installed_line() -> str:
    installed = stores()
    names = ", ".join(f"{p.name} ({describe(p)})" for p in installed.values()) or "none"
    broken = broken_stores()
    line = f"installed stores: {names}"
    if broken:
        line += "; broken: " + "; ".join(f"{n} ({why})" for n, why in sorted(broken.items()))
    return line


def describe(plugin: StorePlugin) -> str:
    """``durable-sqlite 0.1.0``, or what is known of it."""
    return (
        f"{plugin.distribution or 'unknown distribution'} {plugin.version or '(version unknown)'}"
    )


def select(spec: str, urls: Sequence[str]) -> Selection:
    """The stores ``--durable-store=spec`` names, each with its ``--durable-url``.

    Fails at once (a usage error, before anything is collected) on an unknown name, a
    broken plugin named explicitly, or a URL no selected store opens.
    """
    names = list(dict.fromkeys(n.strip() for n in spec.split(",") if n.strip()))
    if not names:
        raise pytest.UsageError(
            "--durable-store needs a store name, a comma-separated list, or all"
        )
    installed = stores()
    broken = broken_stores()
    if "all" in names:
        if names != ["all"]:
            raise pytest.UsageError(
                "--durable-store=all stands alone; it already names every store"
            )
        if not installed and not broken:
            raise pytest.UsageError(f"--durable-store=all found no store; {_installed_line()}")
        plugins = tuple(installed.values())
        left_out = dict(broken)
    else:
        for name in names:
            if name in broken:
                raise pytest.UsageError(
                    f"store {name!r} is installed but broken: {broken[name]}; {_installed_line()}"
                )
            if name not in installed:
                raise pytest.UsageError(f"no store is called {name!r}; {_installed_line()}")
        plugins = tuple(installed[name] for name in names)
        left_out = {}
    return Selection(plugins, _assign(plugins, urls), left_out)


def _assign(plugins: tuple[StorePlugin, ...], urls: Sequence[str]) -> dict[str, str | None]:
    assigned: dict[str, str | None] = {p.name: None for p in plugins}
    for url in urls:
        scheme = urlsplit(url).scheme
        if len(plugins) == 1 and not scheme:
            raise pytest.UsageError(f"--durable-url {redact(url)!r} has no scheme")
        takers = [p for p in plugins if scheme in p.schemes]
        if not takers:
            opened = ", ".join(f"{p.name}: {', '.join(p.schemes)}" for p in plugins)
            raise pytest.UsageError(
                f"--durable-url {redact(url)!r}: no selected store opens {scheme}:// URLs "
                f"(selected stores open {opened})"
            )
        for plugin in takers:
            if assigned[plugin.name] is not None:
                raise pytest.UsageError(f"two --durable-url options point store {plugin.name!r}")
            assigned[plugin.name] = url
    return assigned


def redact(url: str) -> str:
    """``url`` with its password and any secret-looking query parameter replaced by ***.

    Edited in place rather than rebuilt, because rebuilding changes what some URLs mean:
    ``sqlite:////var/app.db`` would come back with two slashes fewer.
    """
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    shown = url
    if "@" in parts.netloc:
        userinfo, host = parts.netloc.rsplit("@", 1)
        user, has_password, _ = userinfo.partition(":")
        if has_password:
            shown = shown.replace(parts.netloc, f"{user}:***@{host}", 1)
    if parts.query:
        pairs = [
            (k, "***" if any(s in k.lower() for s in _SECRET_PARAMETERS) else v)
            for k, v in parse_qsl(parts.query, keep_blank_values=True)
        ]
        if any(v == "***" for _, v in pairs):
            shown = shown.replace("?" + parts.query, "?" + urlencode(pairs, safe="*"), 1)
    return shown


def scrub(text: str, url: str | None) -> str:
    """``text`` (an error a driver raised about ``url``) with the URL's password and secret
    query values replaced by ***.

    A driver's message is its own: it may quote the URL it was given, or the password alone,
    and the suite cannot know which, so it hides every secret the URL holds wherever it shows.
    """
    if not url:
        return text
    try:
        parts = urlsplit(url)
        secrets = [parts.password or ""]
    except ValueError:
        return text
    secrets += [
        v
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
        if any(s in k.lower() for s in _SECRET_PARAMETERS)
    ]
    for secret in sorted({s for s in secrets if s}, key=len, reverse=True):
        for form in dict.fromkeys((secret, unquote(secret), quote(secret, safe=""))):
            text = text.replace(form, "***")
    return text


def list_stores(out: TextIO) -> int:
    """What ``--durable-list-stores`` prints; non-zero when any plugin is broken."""
    installed = stores()
    broken = broken_stores()
    out.write(f"durable stores (durable-core {core_version()}):\n")
    if not installed:
        out.write(
            "  none installed: add one with `pip install durable-sqlite` (until it is on "
            "PyPI, from the root of a clone of durable: `pip install ./packages/durable-core "
            "./packages/durable-sqlite`)\n"
        )
    width = max((len(name) for name in installed), default=0)
    for plugin in installed.values():
        schemes = ", ".join(f"{s}://" for s in plugin.schemes)
        capabilities = ", ".join(sorted(plugin.capabilities)) or "no capabilities"
        out.write(f"  {plugin.name:<{width}}  {describe(plugin)}  {schemes}  [{capabilities}]")
        out.write(f"  {plugin.description}\n" if plugin.description else "\n")
    for name, why in sorted(broken.items()):
        out.write(f"  {name}: BROKEN: {why}\n")
    return 1 if broken else 0
