"""Writing tasks in the caller's transaction."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Sequence
from typing import Any

from ...errors import StoreError
from ...task import Task, uuid7
from ..base import (
    Inserted,
)
from .connection import clock, errors

INSERT = """
INSERT INTO txqueue_tasks (id, queue, name, payload, priority, run_at, max_attempts,
                           timeout, unique_key, created_at, updated_at, trace_context)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (unique_key) WHERE state IN ('pending', 'running') DO NOTHING
RETURNING id
"""
LIVE_BY_UNIQUE_KEY = """
SELECT id FROM txqueue_tasks WHERE unique_key = ? AND state IN ('pending', 'running')
"""


def task_row(task: Task, trace: str | None) -> tuple[Any, ...]:
    """The parameters of INSERT for ``task``, enqueued in the trace ``trace``."""
    now = clock.now()
    if task.run_at is not None:
        run_at = task.run_at.timestamp()
    else:
        run_at = now + (task.delay_seconds or 0.0)
    return (
        str(uuid7()),
        task.queue,
        task.name,
        task.payload_json,
        task.priority,
        run_at,
        task.max_attempts,
        task.timeout,
        task.unique_key,
        now,
        now,
        trace,
    )


def inserted(task: Task, new: Sequence[Any] | None, holder: Sequence[Any] | None) -> Inserted:
    """What became of ``task``: its row (``new``), or the live holder of its unique key."""
    if new is not None:
        return Inserted(uuid.UUID(new[0]), True)
    if holder is None:
        raise StoreError(f"enqueue: unique_key {task.unique_key!r} changed hands; try again")
    return Inserted(uuid.UUID(holder[0]), False)


def insert_task(conn: sqlite3.Connection, task: Task, trace: str | None = None) -> Inserted:
    """Insert one task in the caller's transaction; with its unique key live, the holder's id.

    SQLite has one writer, so no other transaction can take or free the key meanwhile.
    """
    with errors("enqueue"):
        new = conn.execute(INSERT, task_row(task, trace)).fetchone()
        holder = None
        if new is None:
            holder = conn.execute(LIVE_BY_UNIQUE_KEY, (task.unique_key,)).fetchone()
    return inserted(task, new, holder)


def insert_tasks(
    conn: sqlite3.Connection, tasks: Sequence[Task], trace: str | None = None
) -> list[Inserted]:
    """Insert many tasks in the caller's transaction (in process, so one by one is cheap)."""
    return [insert_task(conn, task, trace) for task in tasks]
