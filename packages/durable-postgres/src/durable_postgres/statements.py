"""The SQL the stores send, read from ``statements.sql`` and rendered once per schema.

The SQL lives in a commented file rather than in f-strings, so a reader checking a guarantee
reads the statement and the argument for it side by side. A schema name is only ever placed
by :mod:`psycopg.sql` as a quoted identifier, after :func:`check_schema_name` has accepted it.
Each statement is rendered to bytes once, so psycopg's prepared-statement cache sees one
query per statement and nothing is composed on the hot path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

from durable.interfaces import INBOX_PREFIX, SENT_PREFIX
from psycopg import sql

from durable_postgres.errors import InvalidSchemaName

__all__ = [
    "DEFAULT_SCHEMA",
    "Statements",
    "StatusStatements",
    "check_schema_name",
    "render_sections",
    "schema_ddl",
    "statements",
    "status_statements",
]

DEFAULT_SCHEMA = "durable"

_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")
_MAX_IDENTIFIER = 63  # NAMEDATALEN - 1: Postgres silently truncates anything longer


def check_schema_name(schema: object) -> str:
    """Accept ``schema`` as a plain lowercase identifier, or say what to change.

    Lowercase only, so that the quoted name the stores use and the unquoted name an operator
    types into ``psql`` are the same name. Nothing longer than Postgres keeps (it would truncate
    the name silently, so two deployments could share a schema without knowing), and no
    ``pg_`` prefix, which Postgres reserves for its own schemas.
    """
    if not isinstance(schema, str):
        raise InvalidSchemaName(f"the schema name must be a string, got {schema!r}")
    if not _IDENTIFIER.fullmatch(schema):
        raise InvalidSchemaName(
            f"the schema name {schema!r} is not a plain SQL identifier: use lowercase letters, "
            "digits and underscores, starting with a letter or an underscore "
            "(for example schema=orders_durable)"
        )
    if len(schema) > _MAX_IDENTIFIER:
        raise InvalidSchemaName(
            f"the schema name {schema!r} is {len(schema)} characters long; Postgres keeps at "
            f"most {_MAX_IDENTIFIER}, so choose a shorter one"
        )
    if schema.startswith("pg_"):
        raise InvalidSchemaName(
            f"the schema name {schema!r} starts with 'pg_', which Postgres reserves for system "
            "schemas; choose another name"
        )
    return schema


def _placeholders(schema: str) -> dict[str, sql.Composable]:
    ident = sql.Identifier(schema)
    quoted = ident.as_string()
    return {
        "schema": ident,
        "checkpoint_seq": sql.Literal(f"{quoted}.workflow_checkpoint_seq"),
        "queue_receipt": sql.Literal(f"{quoted}.workflow_queue_receipt"),
        "inbox_prefix": sql.Literal(INBOX_PREFIX),
        "sent_prefix": sql.Literal(SENT_PREFIX),
        "schema_name": sql.Literal(schema),
        "version_table": sql.Literal(f"{quoted}.workflow_schema_version"),
    }


def _render(text: str, schema: str) -> bytes:
    return sql.SQL(text).format(**_placeholders(schema)).as_bytes()


def _read(name: str) -> str:
    return files("durable_postgres").joinpath(name).read_text(encoding="utf-8")


_SECTION = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)
_COMMENT_LINE = re.compile(r"^\s*--.*\n?", re.MULTILINE)


def _sections(text: str) -> dict[str, str]:
    parts = _SECTION.split(text)
    # parts[0] is the file's header comment; then name, body, name, body, ...
    # The comments are for the reader of the file; the server is sent the statement alone.
    return {
        name: _COMMENT_LINE.sub("", body).strip()
        for name, body in zip(parts[1::2], parts[2::2], strict=True)
    }


@dataclass(frozen=True, slots=True)
class Statements:
    """Every statement for one schema, ready to send."""

    schema: str
    load: bytes
    history: bytes
    workflows: bytes
    claimed: bytes
    claim: bytes
    renew: bytes
    release: bytes
    fence: bytes
    record: bytes
    supply: bytes
    supply_at: bytes
    append: bytes
    append_at: bytes
    append_once_at: bytes
    append_once: bytes
    sent: bytes
    raise_fence: bytes
    order_writes: bytes
    forget: bytes
    transact_check: bytes
    transact_record: bytes
    make_ready: bytes
    take: bytes
    take_in: bytes
    take_candidate: bytes
    lock_limit: bytes
    limit_room: bytes
    take_row: bytes
    take_slot: bytes
    count_handout: bytes
    prune_handouts: bytes
    hold: bytes
    held: bytes
    set_limit: bytes
    clear_limit: bytes
    limits: bytes
    prioritize: bytes
    unprioritize: bytes
    wake_at: bytes
    done: bytes
    cancel: bytes
    scheduled: bytes
    migrate_lock: bytes
    migrate_present: bytes
    migrate_applied: bytes
    migrate_mark: bytes


@dataclass(frozen=True, slots=True)
class StatusStatements:
    """The lifecycle's statements (``statuses.sql``) for one schema, ready to send."""

    schema: str
    ended: bytes
    backdate: bytes
    status: bytes
    admit_write: bytes
    admit_queue: bytes
    begin: bytes
    beat: bytes
    settle: bytes
    withdraw_fence: bytes
    withdraw_mark: bytes
    readmit: bytes
    readmit_queue: bytes
    forget_status: bytes
    list_all: bytes
    list_status: bytes
    list_kind: bytes
    list_kind_status: bytes
    migrate_backfill_2: bytes
    has_records: bytes


def render_sections(filename: str, schema: str) -> dict[str, bytes]:
    """Each ``-- name:`` section of the package's SQL file ``filename``, for ``schema``."""
    check_schema_name(schema)
    return {name: _render(body, schema) for name, body in _sections(_read(filename)).items()}


@cache
def statements(schema: str) -> Statements:
    """The statements for ``schema`` (validated), rendered once per process."""
    return Statements(schema=schema, **render_sections("statements.sql", schema))


@cache
def status_statements(schema: str) -> StatusStatements:
    """The lifecycle's statements for ``schema`` (validated), rendered once per process."""
    return StatusStatements(schema=schema, **render_sections("statuses.sql", schema))


@cache
def schema_ddl(schema: str) -> bytes:
    """``schema.sql`` for ``schema`` (validated): idempotent DDL, several statements."""
    check_schema_name(schema)
    return _render(_read("schema.sql"), schema)
