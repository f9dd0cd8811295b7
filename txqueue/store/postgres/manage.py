"""Task management: retry, cancel, look up, list, delete a queue's tasks, and the status counts."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from typing import Any

import psycopg

from ...errors import StoreError
from ...task import TaskInfo
from ..base import (
    Moved,
    StatusRow,
)
from .connection import Caller, errors
from .waiting import notify_finished

_RETRY_SET = """
UPDATE txqueue_tasks AS t
SET state = 'pending', run_at = now(), finished_at = NULL, expires_at = NULL,
    cancel_requested = false, notified_at = NULL,
    max_attempts = CASE WHEN t.max_attempts IS NOT NULL
                        THEN greatest(t.max_attempts, t.attempts + 1) END,
    updated_at = now()
"""
RETRY_IDS = (
    _RETRY_SET
    + """WHERE t.id = ANY(%s::uuid[]) AND t.state IN ('failed', 'cancelled')
RETURNING t.id, t.queue, pg_current_xact_id()::text
"""
)
# Pages through failed tasks by id, so tasks that fail again during a long run are not
# retried twice; a task whose unique key a live task holds is left failed.
RETRY_FAILED = (
    _RETRY_SET
    + """FROM (
    SELECT id FROM txqueue_tasks AS f
    WHERE state = 'failed' AND queue = coalesce(%(queue)s::text, queue) AND id > %(after)s
      AND (unique_key IS NULL OR NOT EXISTS (
          SELECT 1 FROM txqueue_tasks AS live
          WHERE live.unique_key = f.unique_key AND live.state IN ('pending', 'running')))
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) AS f
WHERE t.id = f.id
RETURNING t.id, t.queue, pg_current_xact_id()::text
"""
)


@contextmanager
def _key_taken(action: str) -> Iterator[None]:
    try:
        yield
    except psycopg.errors.UniqueViolation:
        raise StoreError(
            f"{action}: a pending or running task holds the same unique_key; nothing was retried"
        ) from None


def retry_ids(conn: Caller, ids: Sequence[uuid.UUID]) -> list[Moved]:
    """Failed or cancelled tasks back to pending now; returns (id, queue, xid) of those moved."""
    with errors("retry"), _key_taken("retry"):
        rows = conn.execute(RETRY_IDS, (list(ids),)).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def retry_failed(conn: Caller, queue: str | None, after: uuid.UUID, limit: int) -> list[Moved]:
    """Up to ``limit`` failed tasks (of ``queue``, or all) with ids above ``after`` back to
    pending now, in id order."""
    params = {"queue": queue, "after": after, "limit": limit}
    with errors("retry"), _key_taken("retry"):
        rows = conn.execute(RETRY_FAILED, params).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


CANCEL = """
UPDATE txqueue_tasks
SET state = CASE WHEN state = 'pending' THEN 'cancelled' ELSE state END,
    finished_at = CASE WHEN state = 'pending' THEN now() ELSE finished_at END,
    cancel_requested = (state = 'running'),
    updated_at = now()
WHERE id = %s AND state IN ('pending', 'running')
RETURNING state
"""


def cancel(conn: Caller, task_id: uuid.UUID) -> str | None:
    """Pending: cancelled now. Running: flagged for its handler. Returns the state after,
    or None when the task is not pending or running."""
    with errors("cancel"):
        row = conn.execute(CANCEL, (task_id,)).fetchone()
    if row is not None and row[0] == "cancelled":
        notify_finished(conn, [task_id])
    return None if row is None else str(row[0])


# Ids and JSON as text, decoded here: an application's connection may load them its own
# way (Django's loads jsonb as str), and these reads must not depend on it.
_AS_TEXT = {"id", "payload", "result", "errors"}
_INFO_COLUMNS = ", ".join(
    f"{f.name}::text" if f.name in _AS_TEXT else f.name for f in fields(TaskInfo)
)
_JSON = [i for i, f in enumerate(fields(TaskInfo)) if f.name in _AS_TEXT - {"id"}]


def task_info(row: Sequence[Any]) -> TaskInfo:
    values = list(row)
    values[0] = uuid.UUID(values[0])
    for i in _JSON:
        values[i] = None if values[i] is None else json.loads(values[i])
    return TaskInfo(*values)


GET_TASK = f"SELECT {_INFO_COLUMNS} FROM txqueue_tasks WHERE id = %s"


def get_task(conn: Caller, task_id: uuid.UUID) -> TaskInfo | None:
    with errors("show"):
        row = conn.execute(GET_TASK, (task_id,)).fetchone()
    return None if row is None else task_info(row)


LIST_TASKS = f"""
SELECT {_INFO_COLUMNS} FROM txqueue_tasks
WHERE state = coalesce(%(state)s::text, state)
  AND queue = coalesce(%(queue)s::text, queue)
  AND name = coalesce(%(name)s::text, name)
ORDER BY id DESC
LIMIT %(limit)s
"""


def list_tasks(
    conn: Caller,
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


def delete_queue(conn: psycopg.Connection[Any], queue: str) -> int:
    """Delete every task of ``queue``, whatever its state (the demo's, when it is done)."""
    with errors("delete queue"):
        return conn.execute("DELETE FROM txqueue_tasks WHERE queue = %s", (queue,)).rowcount


# --- inspection ------------------------------------------------------------------------

STATUS = """
SELECT queue, state, count(*)::int,
       extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'pending'
                                                     AND run_at <= now()))::float8
FROM txqueue_tasks
GROUP BY queue, state
ORDER BY queue, state
"""


def status(conn: psycopg.Connection[Any]) -> list[StatusRow]:
    """(queue, state, count, age in seconds of the oldest ripe pending task) per group."""
    with errors("status"):
        return [(r[0], r[1], r[2], r[3]) for r in conn.execute(STATUS).fetchall()]
