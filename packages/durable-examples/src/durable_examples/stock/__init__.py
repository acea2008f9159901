"""Stock, reserved exactly once: one ``transact`` effect per store, behind one small adapter.

``Run.transact`` hands the store an effect the store performs itself, in the commit that
records the step, so a reservation can neither happen without its record nor be recorded
without happening, however often a pass is repeated. What an effect *is* differs per store,
because each can only commit what lives in it:

* SQLite: a plain function of a ``sqlite3.Cursor``, run on the connection's thread inside
  the transaction (tables ``stock`` and ``stock_move`` in the store's own file);
* Postgres: an async function of a psycopg ``AsyncCursor`` inside the open transaction
  (the same tables, in the store's schema);
* Redis: a ``LuaEffect`` whose keys carry the workflow's hash tag (``hash_key``), so the
  reservation lives in the order's own slot;
* memory: a function over ``MemoryCheckpointer.data``.

The workflow never sees the difference: it asks its :class:`Stock` for ``reserve(...)`` and
passes what it gets to ``run.transact``. :func:`stock_for` picks the adapter by the type of
the store's checkpointer, importing a store package only when it is the one in use.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from durable.interfaces import Durable
from durable.memory import MemoryCheckpointer, MemoryEffect

from durable_examples.orders import Line

if TYPE_CHECKING:
    import aiosqlite
    from durable_postgres import PostgresEffect
    from durable_redis import LuaEffect, RedisCheckpointer
    from durable_sqlite import SqliteEffect
    from psycopg import AsyncCursor
    from psycopg_pool import AsyncConnectionPool

__all__ = [
    "MemoryStock",
    "PostgresStock",
    "RedisStock",
    "SqliteStock",
    "Stock",
    "StockLedger",
    "UnknownStore",
    "as_movement",
    "stock_for",
]

E_co = TypeVar("E_co", covariant=True)

Move = tuple[str, int]
"""One line moved: the sku and the quantity (positive reserves, negative releases)."""


@dataclass(frozen=True, slots=True)
class StockLedger:
    """What the stock says: each order's movements in order, and the units each sku holds
    reserved (the store's own counter, which the movements must add up to)."""

    moves: dict[str, list[Move]] = field(default_factory=dict)
    reserved: dict[str, int] = field(default_factory=dict)


class Stock(Protocol[E_co]):
    """Reserves and releases an order's lines, as effects of the store's own kind."""

    async def prepare(self) -> None:
        """Create the tables or keys the effects need (idempotent, safe to race)."""
        ...

    def reserve(self, workflow: str, lines: Sequence[Line]) -> E_co:
        """An effect reserving every line, returning ``{"lines": n, "units": u}``."""
        ...

    def release(self, workflow: str, lines: Sequence[Line]) -> E_co:
        """An effect releasing what ``reserve`` took (the saga's compensation)."""
        ...

    async def ledger(self, workflows: Sequence[str]) -> StockLedger:
        """The movements of ``workflows`` and the reserved counters they add up to."""
        ...


class UnknownStore(TypeError):
    """The example has no stock adapter for this store's checkpointer."""


def as_movement(value: object) -> dict[str, int]:
    """The parser for a reservation's record: ``{"lines": n, "units": u}``."""
    if not isinstance(value, dict):
        raise TypeError(f"a stock movement is a JSON object, got {value!r}")
    moved: dict[str, int] = {}
    for name in ("lines", "units"):
        number = value.get(name)
        if isinstance(number, bool) or not isinstance(number, int):
            raise TypeError(f"a stock movement's {name} must be a whole number, got {value!r}")
        moved[name] = number
    return moved


def _summary(moves: Sequence[Move]) -> dict[str, object]:
    return {"lines": len(moves), "units": sum(quantity for _, quantity in moves)}


def _signed(lines: Sequence[Line], sign: int) -> list[Move]:
    return [(line.sku, sign * line.quantity) for line in lines]


@cache
def _sections(resource: str) -> dict[str, str]:
    """The statements of ``resource`` by their ``-- name:`` line."""
    text = files("durable_examples.stock").joinpath(resource).read_text(encoding="utf-8")
    named: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("-- name:"):
            current = named.setdefault(line.removeprefix("-- name:").strip(), [])
        elif current is not None and line.strip() and not line.lstrip().startswith("--"):
            current.append(line)
    return {name: "\n".join(body).rstrip(";") for name, body in named.items()}


def _ledger(
    rows: Sequence[tuple[str, str, int]], workflows: Sequence[str]
) -> dict[str, list[Move]]:
    wanted = set(workflows)
    moves: dict[str, list[Move]] = {workflow: [] for workflow in workflows}
    for workflow, sku, quantity in rows:
        if workflow in wanted:
            moves[workflow].append((sku, int(quantity)))
    return moves


# -- memory ---------------------------------------------------------------------------------


class MemoryStock:
    """Stock in ``MemoryCheckpointer.data``: the in-memory analogue of the two tables.

    ``MemoryCheckpointer.transact`` restores ``data`` if the effect raises, so this has the
    same all-or-nothing shape as the SQL adapters.
    """

    def __init__(self, checkpointer: MemoryCheckpointer) -> None:
        self._checkpointer = checkpointer

    async def prepare(self) -> None:
        self._checkpointer.data.setdefault("stock", {})
        self._checkpointer.data.setdefault("stock_move", [])

    def _move(self, workflow: str, moves: list[Move]) -> MemoryEffect:
        def effect(data: dict[str, object]) -> object:
            stock = data.setdefault("stock", {})
            log = data.setdefault("stock_move", [])
            assert isinstance(stock, dict)
            assert isinstance(log, list)
            for sku, quantity in moves:
                stock[sku] = stock.get(sku, 0) + quantity
                log.append((workflow, sku, quantity))
            return _summary(moves)

        return effect

    def reserve(self, workflow: str, lines: Sequence[Line]) -> MemoryEffect:
        return self._move(workflow, _signed(lines, 1))

    def release(self, workflow: str, lines: Sequence[Line]) -> MemoryEffect:
        return self._move(workflow, _signed(lines, -1))

    async def ledger(self, workflows: Sequence[str]) -> StockLedger:
        data = self._checkpointer.data
        stock = data.get("stock", {})
        log = data.get("stock_move", [])
        assert isinstance(stock, dict)
        assert isinstance(log, list)
        return StockLedger(_ledger(log, workflows), dict(sorted(stock.items())))


# -- SQLite ---------------------------------------------------------------------------------


class SqliteStock:
    """Stock in two tables of the store's SQLite file, moved by a ``sqlite3.Cursor`` callback.

    The callback runs on the connection's thread inside the store's ``BEGIN IMMEDIATE``
    transaction, which is why it is a plain function: there is no event loop there to await
    on, and nothing else uses the connection until it returns.
    """

    def __init__(self, connection: aiosqlite.Connection) -> None:
        self._connection = connection
        self._sql = _sections("sqlite.sql")

    async def prepare(self) -> None:
        # Outside any store transaction: one statement at a time, in autocommit mode.
        for name in ("create_stock", "create_move"):
            await self._connection.execute(self._sql[name])

    def _move(self, workflow: str, moves: list[Move]) -> SqliteEffect:
        move, log = self._sql["move"], self._sql["log"]

        def effect(cursor: sqlite3.Cursor) -> object:
            for sku, quantity in moves:
                params = {"workflow": workflow, "sku": sku, "quantity": quantity}
                cursor.execute(move, params)
                cursor.execute(log, params)
            return _summary(moves)

        return effect

    def reserve(self, workflow: str, lines: Sequence[Line]) -> SqliteEffect:
        return self._move(workflow, _signed(lines, 1))

    def release(self, workflow: str, lines: Sequence[Line]) -> SqliteEffect:
        return self._move(workflow, _signed(lines, -1))

    async def ledger(self, workflows: Sequence[str]) -> StockLedger:
        async with self._connection.execute(self._sql["moves"]) as cursor:
            moves = [(str(r[0]), str(r[1]), int(r[2])) for r in await cursor.fetchall()]
        async with self._connection.execute(self._sql["reserved"]) as cursor:
            reserved = {str(r[0]): int(r[1]) for r in await cursor.fetchall()}
        return StockLedger(_ledger(moves, workflows), reserved)


# -- Postgres -------------------------------------------------------------------------------


class PostgresStock:
    """Stock in two tables of the store's schema, moved by an async psycopg cursor callback
    inside the transaction that also records the step."""

    def __init__(self, pool: AsyncConnectionPool[Any], schema: str) -> None:
        from psycopg import sql

        self._pool = pool
        self._sql: dict[str, sql.Composed] = {
            name: sql.SQL(text).format(schema=sql.Identifier(schema))
            for name, text in _sections("postgres.sql").items()
        }

    async def prepare(self) -> None:
        async with self._pool.connection() as conn, conn.transaction():
            for name in ("lock", "create_stock", "create_move"):
                await conn.execute(self._sql[name])

    def _move(self, workflow: str, moves: list[Move]) -> PostgresEffect:
        move, log = self._sql["move"], self._sql["log"]

        async def effect(cursor: AsyncCursor[Any]) -> object:
            for sku, quantity in moves:
                params = {"workflow": workflow, "sku": sku, "quantity": quantity}
                await cursor.execute(move, params)
                await cursor.execute(log, params)
            return _summary(moves)

        return effect

    def reserve(self, workflow: str, lines: Sequence[Line]) -> PostgresEffect:
        return self._move(workflow, _signed(lines, 1))

    def release(self, workflow: str, lines: Sequence[Line]) -> PostgresEffect:
        return self._move(workflow, _signed(lines, -1))

    async def ledger(self, workflows: Sequence[str]) -> StockLedger:
        async with self._pool.connection() as conn:
            cursor = await conn.execute(self._sql["moves"])
            moves = [(str(r[0]), str(r[1]), int(r[2])) for r in await cursor.fetchall()]
            cursor = await conn.execute(self._sql["reserved"])
            reserved = {str(r[0]): int(r[1]) for r in await cursor.fetchall()}
        return StockLedger(_ledger(moves, workflows), reserved)


# -- Redis ----------------------------------------------------------------------------------


class RedisStock:
    """Stock under each order's own hash tag, moved by a ``LuaEffect`` (``move.lua``).

    A Lua script may touch one cluster slot, and the step's record lives in the workflow's
    slot, so the reservation has to live there too: ``{prefix}:{order}:stock`` (units per
    sku) and ``...:stock-moves`` (the movements). There is no shared counter to keep in
    step; the totals are a read over the orders.
    """

    def __init__(self, checkpointer: RedisCheckpointer) -> None:
        self._checkpointer = checkpointer
        self._source = files("durable_examples.stock").joinpath("move.lua").read_text("utf-8")

    async def prepare(self) -> None:
        """Nothing to create: Redis makes a key on its first write."""

    def _keys(self, workflow: str) -> tuple[str, str]:
        base = self._checkpointer.hash_key(workflow)
        return f"{base}:stock", f"{base}:stock-moves"

    def _move(self, workflow: str, lines: Sequence[Line], sign: int) -> LuaEffect:
        from durable_redis import LuaEffect

        args: list[str | int] = [sign]
        for line in lines:
            args += [line.sku, line.quantity]
        return LuaEffect(source=self._source, keys=self._keys(workflow), args=tuple(args))

    def reserve(self, workflow: str, lines: Sequence[Line]) -> LuaEffect:
        return self._move(workflow, lines, 1)

    def release(self, workflow: str, lines: Sequence[Line]) -> LuaEffect:
        return self._move(workflow, lines, -1)

    async def ledger(self, workflows: Sequence[str]) -> StockLedger:
        client = self._checkpointer.client
        moves: dict[str, list[Move]] = {}
        reserved: dict[str, int] = {}
        for workflow in workflows:
            units_key, moves_key = self._keys(workflow)
            entries = await client.lrange(moves_key, 0, -1)
            moves[workflow] = [_decoded_move(entry) for entry in entries]
            held: Mapping[Any, Any] = await client.hgetall(units_key)
            for sku, units in held.items():
                name = sku.decode() if isinstance(sku, bytes) else str(sku)
                reserved[name] = reserved.get(name, 0) + int(units)
        return StockLedger(moves, dict(sorted(reserved.items())))


def _decoded_move(entry: object) -> Move:
    text = entry.decode() if isinstance(entry, bytes) else str(entry)
    sku, quantity = json.loads(text)
    return str(sku), int(quantity)


# -- choosing ---------------------------------------------------------------------------------


def stock_for(store: Durable[Any]) -> Stock[Any]:
    """The adapter for ``store``, by the type of its checkpointer.

    Each store package is imported only to ask whether it is the one in use, so the
    example runs with just the store it is pointed at installed.
    """
    checkpointer: object = store.checkpointer
    if isinstance(checkpointer, MemoryCheckpointer):
        return MemoryStock(checkpointer)
    try:
        from durable_sqlite import SqliteCheckpointer
    except ImportError:
        pass
    else:
        if isinstance(checkpointer, SqliteCheckpointer):
            return SqliteStock(checkpointer.connection)
    try:
        from durable_postgres import PostgresCheckpointer
    except ImportError:
        pass
    else:
        if isinstance(checkpointer, PostgresCheckpointer):
            return PostgresStock(checkpointer.pool, checkpointer.schema)
    try:
        from durable_redis import RedisCheckpointer
    except ImportError:
        pass
    else:
        if isinstance(checkpointer, RedisCheckpointer):
            return RedisStock(checkpointer)
    raise UnknownStore(
        f"the payout example has no stock adapter for {checkpointer!r}; it knows the "
        "memory, sqlite, postgres and redis stores"
    )
