"""Enqueueing and reading a task on the application's aiosqlite connection, with the
statements and helpers of the sync store: aiosqlite runs them on its own thread, so the
event loop never waits on the file."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from ...task import Task, TaskInfo
from ..records import Inserted
from .connection import QUERIES, Clock, errors
from .connection import clock as default_clock
from .enqueue import inserted, task_row
from .manage import task_info

_savepoints = itertools.count()


class Aiosqlite:
    def __init__(self, conn: Any) -> None:
        self.raw = conn

    async def fetch(self, query: str, params: Any) -> list[Sequence[Any]]:
        async with self.raw.execute(query, params) as cursor:
            return list(await cursor.fetchall())

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        """As the store's ``transaction``: a savepoint, committed when the block ends if
        no transaction was open."""
        name = f"txqueue_{next(_savepoints)}"
        await self.raw.execute(f"SAVEPOINT {name}")
        try:
            yield
        except BaseException:
            await self.raw.execute(f"ROLLBACK TO {name}")
            await self.raw.execute(f"RELEASE {name}")
            raise
        await self.raw.execute(f"RELEASE {name}")

    def in_transaction(self) -> bool:
        return bool(self.raw.in_transaction)


class AiosqliteStore:
    """``SqliteStore``'s enqueue and look-up, awaited on an ``Aiosqlite`` adapter."""

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = default_clock if clock is None else clock

    async def insert_task(self, conn: Aiosqlite, task: Task, trace: str | None = None) -> Inserted:
        with errors("enqueue"):
            row = task_row(task, trace, self.clock.now())
            new = await conn.fetch(QUERIES["insert_task"], row)
            holder = (
                None if new else await conn.fetch(QUERIES["live_by_unique_key"], (task.unique_key,))
            )
        return inserted(task, new[0] if new else None, holder[0] if holder else None)

    async def insert_tasks(
        self, conn: Aiosqlite, tasks: Sequence[Task], trace: str | None = None
    ) -> list[Inserted]:
        """Many tasks in the caller's transaction, one statement each (in process, cheap)."""
        return [await self.insert_task(conn, task, trace) for task in tasks]

    async def get_task(self, conn: Aiosqlite, task_id: uuid.UUID) -> TaskInfo | None:
        with errors("show"):
            rows = await conn.fetch(QUERIES["get_task"], (str(task_id),))
        return task_info(rows[0]) if rows else None


if TYPE_CHECKING:
    from ..protocols import AsyncEnqueue

    _check: AsyncEnqueue[Aiosqlite] = AiosqliteStore()
