"""The dashboard's reads, each bounded by a LIMIT on an index scan (see the PostgreSQL
store's module of the same name)."""

from __future__ import annotations

import json
import sqlite3
import uuid
from datetime import UTC, datetime

from ...task import CANCELLED, FAILED, SUCCEEDED, TaskInfo
from ..base import WORKER_ALIVE_WITHIN, CountRow, Page, RateRow, WorkerRow
from .connection import clock, errors
from .manage import _INFO_COLUMNS, task_info

# SQLite has no LATERAL: one branch per state, each through the finished index.
_NEWEST_FINISHED = """
SELECT queue, '{state}', count(*), 0, NULL
FROM (SELECT queue FROM txqueue_tasks
      WHERE state = '{state}' AND finished_at IS NOT NULL
      ORDER BY finished_at DESC LIMIT :cap)
GROUP BY queue
"""
QUEUE_COUNTS = """
SELECT queue, 'pending', count(*), count(CASE WHEN run_at <= :now THEN 1 END),
       :now - min(CASE WHEN run_at <= :now THEN run_at END)
FROM (SELECT queue, run_at FROM txqueue_tasks WHERE state = 'pending' LIMIT :cap)
GROUP BY queue
UNION ALL
SELECT queue, 'running', count(*), 0, NULL
FROM (SELECT queue FROM txqueue_tasks WHERE state = 'running' LIMIT :cap)
GROUP BY queue
UNION ALL""" + "UNION ALL".join(
    _NEWEST_FINISHED.format(state=state) for state in (SUCCEEDED, FAILED, CANCELLED)
)

_PER_MINUTE = """
SELECT '{state}', CAST((:now - finished_at) / 60 AS INTEGER), count(*)
FROM (SELECT finished_at FROM txqueue_tasks
      WHERE state = '{state}' AND finished_at > :now - 3600
      ORDER BY finished_at DESC LIMIT :cap)
GROUP BY 2
"""
FINISHED_PER_MINUTE = "UNION ALL".join(
    _PER_MINUTE.format(state=state) for state in (SUCCEEDED, FAILED)
)

FAILING_NAMES = """
SELECT name, count(*)
FROM (SELECT name FROM txqueue_tasks
      WHERE state = 'failed' AND finished_at > :now - 86400
      ORDER BY finished_at DESC LIMIT :cap)
GROUP BY name
ORDER BY 2 DESC, 1
LIMIT :limit
"""

BROWSE = f"""
SELECT {_INFO_COLUMNS}
FROM (SELECT * FROM txqueue_tasks WHERE id < :before ORDER BY id DESC LIMIT :window)
WHERE state = coalesce(:state, state)
  AND queue = coalesce(:queue, queue)
  AND name = coalesce(:name, name)
ORDER BY id DESC
LIMIT :limit
"""
WINDOW_END = """
SELECT id FROM txqueue_tasks WHERE id < :before ORDER BY id DESC
LIMIT 1 OFFSET :window - 1
"""

RUNNING = f"""
SELECT {_INFO_COLUMNS} FROM txqueue_tasks WHERE state = 'running'
ORDER BY expires_at LIMIT :limit
"""

WORKERS = """
SELECT worker_id, queues, started_at, seen_at FROM txqueue_workers
WHERE seen_at > :now - :alive
ORDER BY worker_id LIMIT 1000
"""

_TOP = str(uuid.UUID(int=(1 << 128) - 1))


def queue_counts(conn: sqlite3.Connection, cap: int) -> list[CountRow]:
    with errors("dashboard"):
        rows = conn.execute(QUEUE_COUNTS, {"cap": cap, "now": clock.now()}).fetchall()
    return [(r[0], r[1], r[2], r[3], r[4]) for r in rows]


def finished_per_minute(conn: sqlite3.Connection, cap: int) -> list[RateRow]:
    with errors("dashboard"):
        rows = conn.execute(FINISHED_PER_MINUTE, {"cap": cap, "now": clock.now()}).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def failing_names(conn: sqlite3.Connection, cap: int, limit: int) -> list[tuple[str, int]]:
    params = {"cap": cap, "limit": limit, "now": clock.now()}
    with errors("dashboard"):
        return [(r[0], r[1]) for r in conn.execute(FAILING_NAMES, params).fetchall()]


def browse(
    conn: sqlite3.Connection,
    *,
    state: str | None,
    queue: str | None,
    name: str | None,
    before: uuid.UUID | None,
    window: int,
    limit: int,
) -> Page:
    params = {
        "before": _TOP if before is None else str(before),
        "window": window,
        "state": state,
        "queue": queue,
        "name": name,
        "limit": limit,
    }
    with errors("dashboard"):
        tasks = [task_info(r) for r in conn.execute(BROWSE, params).fetchall()]
        if len(tasks) == limit:
            return Page(tasks, tasks[-1].id)
        row = conn.execute(WINDOW_END, params).fetchone()
    return Page(tasks, None if row is None else uuid.UUID(row[0]))


def running_tasks(conn: sqlite3.Connection, limit: int) -> list[TaskInfo]:
    with errors("dashboard"):
        return [task_info(r) for r in conn.execute(RUNNING, {"limit": limit}).fetchall()]


def workers(conn: sqlite3.Connection) -> list[WorkerRow]:
    with errors("dashboard"):
        rows = conn.execute(WORKERS, {"now": clock.now(), "alive": WORKER_ALIVE_WITHIN}).fetchall()
    return [WorkerRow(r[0], json.loads(r[1]), _at(r[2]), _at(r[3])) for r in rows]


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)
