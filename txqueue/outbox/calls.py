"""The enqueue calls on the application's connection, sync and asyncio, through one
configuration's store and wake-ups: an App's (an App is one), or the process's defaults
(``txqueue.enqueue`` and its kin are the methods of ``txqueue.app.DEFAULTS``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from ..core.task import Task
from ..store.connections import bind, bind_async
from ..store.plans import run, run_async
from ..store.roles import InTransaction
from .client import Delivery, check_tasks, inserting


class Enqueuing:
    """The enqueue calls, through ``_store`` and ``_delivery`` (None: the store of the
    connection's kind and ``configure``'s broker)."""

    _store: InTransaction[Any] | None = None
    _delivery: Delivery | None = None

    def enqueue(self, conn: object, task: Task) -> uuid.UUID:
        """Insert ``task`` in the caller's transaction on ``conn`` and return its id (a UUID).

        The task exists if and only if that transaction commits: until then no worker can
        see it, and a rollback removes it. txqueue never commits for the caller. ``conn`` is
        a psycopg Connection (in a transaction, or autocommit), or a SQLAlchemy Connection or
        Session on the psycopg driver. With a unique_key held by a pending or running task,
        the holder's id is returned and nothing is inserted.

        The wake-up message goes to the background publisher and costs the caller no wait:
        after the commit for a Session or inside ``txqueue.transaction(conn)``, at once
        otherwise (the worker then waits for the commit it can see coming).

        Example:

        ```python
        task_id = txqueue.enqueue(conn, txqueue.Task("send_receipt", {"order": 42}, queue="emails"))
        ```
        """
        check_tasks([task])
        bound = bind(conn, self._store)
        return run(inserting(bound, [task], self._delivery, one=True), bound)[0]

    def enqueue_many(self, conn: object, tasks: Iterable[Task]) -> list[uuid.UUID]:
        """Insert many tasks in one statement, in the caller's transaction; their ids, in order.

        Example:

        ```python
        ids = txqueue.enqueue_many(conn, [send_receipt.task(order=n) for n in range(1000)])
        ```
        """
        tasks = list(tasks)
        check_tasks(tasks)
        bound = bind(conn, self._store)
        return run(inserting(bound, tasks, self._delivery, one=False), bound)

    async def enqueue_async(self, conn: object, task: Task) -> uuid.UUID:
        """``enqueue`` on an asyncio connection: psycopg's ``AsyncConnection``, asyncpg's (a
        pool's too), aiosqlite's, or SQLAlchemy's ``AsyncConnection`` / ``AsyncSession`` on
        any of them. The wake-up goes after the commit for an ``AsyncSession`` or inside
        ``txqueue.transaction_async``, at once otherwise (the worker waits for the commit).

        Example:

        ```python
        task_id = await txqueue.enqueue_async(conn, send_receipt.task(order=42))
        ```
        """
        check_tasks([task])
        bound = await bind_async(conn, self._store)
        return (await run_async(inserting(bound, [task], self._delivery, one=True), bound))[0]

    async def enqueue_many_async(self, conn: object, tasks: Iterable[Task]) -> list[uuid.UUID]:
        """``enqueue_many`` on an asyncio connection; the ids, in order.

        Example:

        ```python
        ids = await txqueue.enqueue_many_async(conn, [send_receipt.task(order=n) for n in range(3)])
        ```
        """
        tasks = list(tasks)
        check_tasks(tasks)
        bound = await bind_async(conn, self._store)
        return await run_async(inserting(bound, tasks, self._delivery, one=False), bound)
