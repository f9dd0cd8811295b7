"""The application's asyncio connections to PostgreSQL, psycopg's ``AsyncConnection`` and
asyncpg's (also one from a pool), as ``aio.AsyncCaller``: a ``fetch`` of tuple rows, the
caller's transaction and a savepoint in it.

asyncpg takes ``$1`` placeholders where psycopg takes ``%(name)s``: each statement is
rewritten once, and its parameters passed in that order; its errors are raised as
psycopg's, which the store reports.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import psycopg
import psycopg.rows

from .connection import QUERIES


class PsycopgAsync:
    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.raw = conn

    async def fetch(self, query: str, params: Any) -> list[Sequence[Any]]:
        # A tuple cursor whatever the caller's row factory: rows are read by position.
        cursor = self.raw.cursor(row_factory=psycopg.rows.tuple_row)
        await cursor.execute(query, params, prepare=True)
        return [] if cursor.description is None else list(await cursor.fetchall())

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        return self.raw.transaction()

    @asynccontextmanager
    async def savepoint(self) -> AsyncIterator[None]:
        """A block whose failure the caller's transaction survives (as the sync store's
        ``savepoint``): psycopg's own block would commit a transaction it began."""
        if self.raw.autocommit:
            async with self.raw.transaction():
                yield
            return
        await self.raw.execute(QUERIES["savepoint"])
        try:
            yield
        except BaseException:
            await self.raw.execute(QUERIES["rollback_to_savepoint"])
            raise
        await self.raw.execute(QUERIES["release_savepoint"])

    def in_transaction(self) -> bool:
        return not self.raw.autocommit or (
            self.raw.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
        )


_NAMED = re.compile(r"%\((\w+)\)s|%s")


@functools.cache
def _dollars(query: str) -> tuple[str, tuple[str | int, ...]]:
    """``query`` with ``$n`` placeholders, and for each ``n`` the parameter it takes (a name,
    or a position)."""
    order: list[str | int] = []

    def number(match: re.Match[str]) -> str:
        key: str | int = match.group(1) or sum(1 for k in order if isinstance(k, int))
        if key not in order:
            order.append(key)
        return f"${order.index(key) + 1}"

    return _NAMED.sub(number, query), tuple(order)


class Asyncpg:
    def __init__(self, conn: Any) -> None:
        self.raw = conn

    async def fetch(self, query: str, params: Any) -> list[Sequence[Any]]:
        sql, order = _dollars(query)
        args = [params[k] for k in order]
        try:
            return list(await self.raw.fetch(sql, *args))
        except (OSError, TimeoutError) as exc:  # the connection, lost
            raise psycopg.OperationalError(str(exc)) from exc
        except Exception as exc:  # asyncpg's, raised as psycopg's: the store reports those
            if not type(exc).__module__.startswith("asyncpg"):
                raise
            kind: type[psycopg.Error] = psycopg.DatabaseError
            with contextlib.suppress(KeyError):  # a SQLSTATE newer than this psycopg
                kind = psycopg.errors.lookup(str(getattr(exc, "sqlstate", None) or ""))
            raise kind(str(exc)) from exc

    def transaction(self) -> AbstractAsyncContextManager[Any]:
        return self.raw.transaction()  # type: ignore[no-any-return]

    def savepoint(self) -> AbstractAsyncContextManager[Any]:
        # asyncpg's block is a savepoint inside a transaction, and one of its own outside.
        return self.transaction()

    def in_transaction(self) -> bool:
        return bool(self.raw.is_in_transaction())
