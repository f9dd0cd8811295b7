"""Enqueueing and reading a task on the application's aiosqlite connection, with the
statements of ``enqueue`` and ``manage``: aiosqlite runs them on its own thread, so the
event loop never waits on the file."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from ...task import Task, TaskInfo
from ..base import Inserted
from .connection import errors
from .enqueue import INSERT, LIVE_BY_UNIQUE_KEY, inserted, task_row
from .manage import GET_TASK, task_info

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


async def insert_task(conn: Aiosqlite, task: Task, trace: str | None = None) -> Inserted:
    with errors("enqueue"):
        new = await conn.fetch(INSERT, task_row(task, trace))
        holder = None if new else await conn.fetch(LIVE_BY_UNIQUE_KEY, (task.unique_key,))
    return inserted(task, new[0] if new else None, holder[0] if holder else None)


async def insert_tasks(
    conn: Aiosqlite, tasks: Sequence[Task], trace: str | None = None
) -> list[Inserted]:
    """Many tasks in the caller's transaction, one statement each (in process, cheap)."""
    return [await insert_task(conn, task, trace) for task in tasks]


async def get_task(conn: Aiosqlite, task_id: uuid.UUID) -> TaskInfo | None:
    with errors("show"):
        rows = await conn.fetch(GET_TASK, (str(task_id),))
    return task_info(rows[0]) if rows else None
