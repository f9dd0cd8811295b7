"""Writing tasks in the caller's transaction."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Sequence
from typing import Any

from ...core.ids import uuid7
from ...core.task import Task
from ...errors import StoreError
from ..columns import TASK, maker
from ..records import Inserted, check_keys
from .connection import QUERIES, Clock, errors

_ROW = maker(("obj", TASK), into="tuple", seconds=True, extra=["now"])


def task_row(task: Task, trace: str | None, now: float) -> tuple[Any, ...]:
    """The parameters of ``insert_task`` for ``task``, enqueued at ``now`` in the trace
    ``trace``."""
    row: tuple[Any, ...] = _ROW(task, str(uuid7()), trace, now)
    return row


def inserted(task: Task, new: Sequence[Any] | None, holder: Sequence[Any] | None) -> Inserted:
    """What became of ``task``: its row (``new``), or the live holder of its unique key."""
    if new is not None:
        return Inserted(uuid.UUID(new[0]), True)
    if holder is None:
        raise StoreError(f"enqueue: unique_key {task.unique_key!r} changed hands; try again")
    return Inserted.held(task, uuid.UUID(holder[0]), holder[1])


class Enqueue:
    clock: Clock
    notifies = False  # a worker is woken in its own process (wakeup.LocalDelivery), or polls

    def notify_wakeups(self, conn: sqlite3.Connection, notes: Sequence[str]) -> None:
        return None

    def listen_wakeups(self, conn: sqlite3.Connection) -> None:
        return None

    def database_name(self, conn: sqlite3.Connection) -> str | None:
        return None  # one file, never one of several (config.databases)

    def insert_task(
        self, conn: sqlite3.Connection, task: Task, trace: str | None = None, notify: bool = False
    ) -> Inserted:
        """Insert one task in the caller's transaction; with its unique key live, the holder's
        id.

        SQLite has one writer, so no other transaction can take or free the key meanwhile.
        """
        with errors("enqueue"):
            row = task_row(task, trace, self.clock.now())
            new = conn.execute(QUERIES["insert_task"], row).fetchone()
            holder = None
            if new is None:
                holder = conn.execute(QUERIES["live_by_unique_key"], (task.unique_key,)).fetchone()
        return inserted(task, new, holder)

    def insert_tasks(
        self,
        conn: sqlite3.Connection,
        tasks: Sequence[Task],
        trace: str | None = None,
        notify: bool = False,
    ) -> list[Inserted]:
        """Insert many tasks in the caller's transaction (in process, so one by one is cheap)."""
        with errors("enqueue_many"):
            holders = {}
            for key in {t.unique_key for t in tasks if t.unique_key is not None}:
                row = conn.execute(QUERIES["live_by_unique_key"], (key,)).fetchone()
                if row is not None:
                    holders[key] = (uuid.UUID(row[0]), row[1])
        check_keys(tasks, holders)
        return [self.insert_task(conn, task, trace) for task in tasks]
