"""A transaction on an asyncio connection whose wake-ups leave once it has committed (the
enqueue calls themselves, sync and asyncio, are ``calls``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from ..store.connections import bind_async, managed
from .client import deferring


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
