"""Enqueueing from asyncio: the row in the caller's transaction on its async connection,
awaited; the wake-up handed to the background publisher, which never blocks the loop."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

from ..core.task import Task
from ..store.connections import bind_async, managed
from ..store.plans import run_async
from ..store.protocols import InTransaction
from .client import Delivery, check_tasks, deferring, inserting


async def enqueue_async(conn: object, task: Task) -> uuid.UUID:
    """``enqueue`` on an asyncio connection: psycopg's ``AsyncConnection``, asyncpg's (a
    pool's too), aiosqlite's, or SQLAlchemy's ``AsyncConnection`` / ``AsyncSession`` on any
    of them. The
    wake-up goes after the commit for an ``AsyncSession`` or inside
    ``txqueue.transaction_async``, at once otherwise (the worker waits for the commit).

    Example:

    ```python
    task_id = await txqueue.enqueue_async(conn, send_receipt.task(order=42))
    ```
    """
    return await enqueue_async_by(conn, task)


async def enqueue_many_async(conn: object, tasks: Iterable[Task]) -> list[uuid.UUID]:
    """``enqueue_many`` on an asyncio connection; the ids, in order.

    Example:

    ```python
    ids = await txqueue.enqueue_many_async(conn, [send_receipt.task(order=n) for n in range(10)])
    ```
    """
    return await enqueue_many_async_by(conn, tasks)


async def enqueue_async_by(
    conn: object,
    task: Task,
    store: InTransaction[Any] | None = None,
    delivery: Delivery | None = None,
) -> uuid.UUID:
    """``enqueue_async`` with a configuration's own store and Delivery (None: the defaults)."""
    check_tasks([task])
    bound = await bind_async(conn, store)
    return (await run_async(inserting(bound, [task], delivery, one=True), bound))[0]


async def enqueue_many_async_by(
    conn: object,
    tasks: Iterable[Task],
    store: InTransaction[Any] | None = None,
    delivery: Delivery | None = None,
) -> list[uuid.UUID]:
    """``enqueue_many_async`` with a configuration's own store and Delivery."""
    tasks = list(tasks)
    check_tasks(tasks)
    bound = await bind_async(conn, store)
    return await run_async(inserting(bound, tasks, delivery, one=False), bound)


@asynccontextmanager
async def transaction_async(conn: object) -> AsyncIterator[Any]:
    """``transaction`` on an asyncio connection: the driver's own transaction block (on
    aiosqlite ``BEGIN IMMEDIATE``; a savepoint inside one), and the wake-ups of its tasks
    sent once it has committed.

    Example:

    ```python
    async with txqueue.transaction_async(conn):  # the wake-ups leave once it commits
        await conn.execute("CREATE TABLE orders (id int PRIMARY KEY)")
        await conn.execute("INSERT INTO orders VALUES (42)")
        await send_receipt.enqueue_async(conn, order=42)
    ```
    """
    bound = await bind_async(conn)
    if bound.managed:  # its block would commit alone, whatever the framework's does
        raise managed("transaction_async")
    with deferring(bound.key) as send:
        async with bound.conn.transaction() as tx:
            yield tx
        send()
