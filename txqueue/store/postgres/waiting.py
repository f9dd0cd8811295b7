"""Notifications: what ``txqueue.wait`` listens for, the ids of finished tasks, sent on
one channel by the statements that finish tasks, when they commit; and the wake-ups that
workers listen for without RabbitMQ (``notes.note``), on another.

A waiter listens on a connection of its own: notifications reach a session only between
its transactions, and behind a transaction pooler (PgBouncer) not at all; the waiter's
polling covers both.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import psycopg

from .connection import QUERIES, Caller, PgConnection, connect_args, errors


def wait_finished(conn: PgConnection, task_id: uuid.UUID, timeout: float) -> None:
    """Return when a notification names ``task_id``, or after ``timeout`` seconds."""
    wanted = str(task_id)
    deadline = time.monotonic() + timeout
    with errors("wait"):
        while (left := deadline - time.monotonic()) > 0:
            for note in conn.notifies(timeout=left, stop_after=1):
                if wanted in note.payload.split(","):
                    return


async def connect_async(url: str) -> psycopg.AsyncConnection[Any]:
    """A connection of the waiter's own, as ``connect`` opens them."""
    with errors("cannot connect to PostgreSQL", url):
        conninfo, args = connect_args(url, "txqueue-wait")
        return await psycopg.AsyncConnection.connect(conninfo, **args)


async def listen_finished_async(conn: psycopg.AsyncConnection[Any]) -> None:
    with errors("listen"):
        await conn.execute(QUERIES["listen_finished"])


async def wait_finished_async(
    conn: psycopg.AsyncConnection[Any], task_id: uuid.UUID, timeout: float
) -> None:
    wanted = str(task_id)
    deadline = time.monotonic() + timeout
    with errors("wait"):
        while (left := deadline - time.monotonic()) > 0:
            async for note in conn.notifies(timeout=left, stop_after=1):
                if wanted in note.payload.split(","):
                    return


def received(conn: PgConnection, timeout: float) -> list[str]:
    """The wake-up that came within ``timeout`` seconds, at once (those read with it wait
    in the connection, for the next call to return without a wait)."""
    with errors("listen"):
        return [n.payload for n in conn.notifies(timeout=timeout, stop_after=1)]


class Waiting:
    """Telling ``txqueue.wait`` callers that tasks finished; wake-ups by NOTIFY."""

    notifies = True

    def notify_wakeups(self, conn: Caller, notes: Sequence[str]) -> None:
        """Send the wake-ups ``notes`` when the caller's transaction commits."""
        with errors("notify"):
            conn.execute(QUERIES["notify_wakeups"], {"notes": list(notes)})

    def listen_wakeups(self, conn: PgConnection) -> Callable[[float], list[str]]:
        """Listen for wake-ups on ``conn``; returns ``received`` on it."""
        with errors("listen"):
            conn.execute(QUERIES["listen_wakeups"])
        return functools.partial(received, conn)

    def notify_finished(self, conn: Caller, ids: Sequence[uuid.UUID]) -> None:
        """Tell waiters, once the caller's transaction commits, that these tasks finished."""
        with errors("notify"):
            conn.execute(QUERIES["notify_finished"], (",".join(str(i) for i in ids),))

    def listen_finished(self, conn: PgConnection) -> Callable[[uuid.UUID, float], None]:
        """Listen on ``conn``; returns ``wait_finished`` on it."""
        with errors("listen"):
            conn.execute(QUERIES["listen_finished"])
        return functools.partial(wait_finished, conn)
