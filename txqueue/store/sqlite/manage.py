"""Task management: retry, cancel, look up, list, delete a queue's tasks, and the status counts."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from ...task import TaskInfo
from ..base import (
    Moved,
    StatusRow,
)
from .connection import _ids, _moved, _time, clock, errors

_RETRY_SET = """
UPDATE txqueue_tasks
SET state = 'pending', run_at = :now, finished_at = NULL, expires_at = NULL,
    cancel_requested = 0, notified_at = NULL,
    max_attempts = CASE WHEN max_attempts IS NOT NULL
                        THEN max(max_attempts, attempts + 1) END,
    updated_at = :now
"""
RETRY_IDS = (
    _RETRY_SET
    + """WHERE id IN (SELECT value FROM json_each(:ids)) AND state IN ('failed', 'cancelled')
RETURNING id, queue
"""
)
RETRY_FAILED = (
    _RETRY_SET
    + """WHERE id IN (
    SELECT id FROM txqueue_tasks AS f
    WHERE state = 'failed' AND queue = coalesce(:queue, queue) AND id > :after
      AND (unique_key IS NULL OR NOT EXISTS (
          SELECT 1 FROM txqueue_tasks AS live
          WHERE live.unique_key = f.unique_key AND live.state IN ('pending', 'running')))
    ORDER BY id
    LIMIT :limit
)
RETURNING id, queue
"""
)


def retry_ids(conn: sqlite3.Connection, ids: Sequence[uuid.UUID]) -> list[Moved]:
    """Failed or cancelled tasks back to pending now; returns those moved."""
    params = {"now": clock.now(), "ids": _ids(ids)}
    with errors("retry"):
        return _moved(conn.execute(RETRY_IDS, params).fetchall())


def retry_failed(
    conn: sqlite3.Connection, queue: str | None, after: uuid.UUID, limit: int
) -> list[Moved]:
    """Up to ``limit`` failed tasks (of ``queue``, or all) with ids above ``after`` back to
    pending now, in id order."""
    params = {"now": clock.now(), "queue": queue, "after": str(after), "limit": limit}
    with errors("retry"):
        return _moved(conn.execute(RETRY_FAILED, params).fetchall())


CANCEL = """
UPDATE txqueue_tasks
SET state = CASE WHEN state = 'pending' THEN 'cancelled' ELSE state END,
    finished_at = CASE WHEN state = 'pending' THEN :now ELSE finished_at END,
    cancel_requested = (state = 'running'),
    updated_at = :now
WHERE id = :id AND state IN ('pending', 'running')
RETURNING state
"""


def cancel(conn: sqlite3.Connection, task_id: uuid.UUID) -> str | None:
    """Pending: cancelled now. Running: flagged for its handler. Returns the state after,
    or None when the task is not pending or running."""
    with errors("cancel"):
        row = conn.execute(CANCEL, {"now": clock.now(), "id": str(task_id)}).fetchone()
    return None if row is None else str(row[0])


_INFO_COLUMNS = ", ".join(f.name for f in fields(TaskInfo))
_INFO_TIMES = {"run_at", "start_time", "expires_at", "finished_at", "created_at", "updated_at"}
_INFO_JSON = {"payload", "result", "errors"}


def task_info(row: Sequence[Any]) -> TaskInfo:
    values = []
    for f, value in zip(fields(TaskInfo), row, strict=True):
        if f.name == "id":
            value = uuid.UUID(value)
        elif f.name in _INFO_TIMES:
            value = _time(value)
        elif f.name in _INFO_JSON:
            value = None if value is None else json.loads(value)
        elif f.name == "cancel_requested":
            value = bool(value)
        values.append(value)
    return TaskInfo(*values)


GET_TASK = f"SELECT {_INFO_COLUMNS} FROM txqueue_tasks WHERE id = ?"


def get_task(conn: sqlite3.Connection, task_id: uuid.UUID) -> TaskInfo | None:
    with errors("show"):
        row = conn.execute(GET_TASK, (str(task_id),)).fetchone()
    return None if row is None else task_info(row)


def listen_finished(conn: sqlite3.Connection) -> None:
    """SQLite sends no notifications: a waiter polls."""
    return None


LIST_TASKS = f"""
SELECT {_INFO_COLUMNS} FROM txqueue_tasks
WHERE state = coalesce(:state, state)
  AND queue = coalesce(:queue, queue)
  AND name = coalesce(:name, name)
ORDER BY id DESC
LIMIT :limit
"""


def list_tasks(
    conn: sqlite3.Connection,
    *,
    state: str | None,
    queue: str | None,
    name: str | None,
    limit: int,
) -> list[TaskInfo]:
    """The newest tasks matching every filter given."""
    params = {"state": state, "queue": queue, "name": name, "limit": limit}
    with errors("list"):
        return [task_info(r) for r in conn.execute(LIST_TASKS, params).fetchall()]


def delete_queue(conn: sqlite3.Connection, queue: str) -> int:
    """Delete every task of ``queue``, whatever its state (the demo's, when it is done)."""
    with errors("delete queue"):
        return conn.execute("DELETE FROM txqueue_tasks WHERE queue = ?", (queue,)).rowcount


# --- inspection ------------------------------------------------------------------------

STATUS = """
SELECT queue, state, count(*),
       :now - min(CASE WHEN state = 'pending' AND run_at <= :now THEN run_at END)
FROM txqueue_tasks
GROUP BY queue, state
ORDER BY queue, state
"""


def status(conn: sqlite3.Connection) -> list[StatusRow]:
    """(queue, state, count, age in seconds of the oldest ripe pending task) per group."""
    with errors("status"):
        rows = conn.execute(STATUS, {"now": clock.now()}).fetchall()
    return [(r[0], r[1], r[2], r[3]) for r in rows]
