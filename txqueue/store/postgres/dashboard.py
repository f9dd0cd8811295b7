"""The dashboard's reads. Plain snapshot reads (no row locks), each bounded by a LIMIT on
an index scan, so the page costs the same on a table of millions (the plan tests hold
every one to its index)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import psycopg

from ...task import TaskInfo
from ..base import WORKER_ALIVE_WITHIN, CountRow, Page, RateRow, WorkerRow
from .connection import errors
from .manage import _INFO_COLUMNS, task_info

# Pending through the ripe index (queue and run_at are in it), running through the lease
# index, and the newest finished of each state through the finished index.
QUEUE_COUNTS = """
SELECT queue, 'pending', count(*)::int, count(*) FILTER (WHERE run_at <= now())::int,
       extract(epoch FROM now() - min(run_at) FILTER (WHERE run_at <= now()))::float8
FROM (SELECT queue, run_at FROM txqueue_tasks WHERE state = 'pending' LIMIT %(cap)s) AS p
GROUP BY queue
UNION ALL
SELECT queue, 'running', count(*)::int, 0, NULL
FROM (SELECT queue FROM txqueue_tasks WHERE state = 'running' LIMIT %(cap)s) AS r
GROUP BY queue
UNION ALL
SELECT f.queue, s.state, count(*)::int, 0, NULL
FROM (VALUES ('succeeded'), ('failed'), ('cancelled')) AS s (state)
CROSS JOIN LATERAL (
    SELECT queue FROM txqueue_tasks
    WHERE state = s.state AND finished_at IS NOT NULL
    ORDER BY finished_at DESC
    LIMIT %(cap)s
) AS f
GROUP BY f.queue, s.state
"""

FINISHED_PER_MINUTE = """
SELECT s.state, floor(extract(epoch FROM now() - f.finished_at) / 60)::int, count(*)::int
FROM (VALUES ('succeeded'), ('failed')) AS s (state)
CROSS JOIN LATERAL (
    SELECT finished_at FROM txqueue_tasks
    WHERE state = s.state AND finished_at > now() - interval '1 hour'
    ORDER BY finished_at DESC
    LIMIT %(cap)s
) AS f
GROUP BY 1, 2
"""

FAILING_NAMES = """
SELECT name, count(*)::int
FROM (
    SELECT name FROM txqueue_tasks
    WHERE state = 'failed' AND finished_at > now() - interval '1 day'
    ORDER BY finished_at DESC
    LIMIT %(cap)s
) AS f
GROUP BY name
ORDER BY 2 DESC, 1
LIMIT %(limit)s
"""

# A page walks the primary key down from ``before`` through at most ``window`` tasks and
# keeps those matching the filters: a filter that matches few tasks gives a short page,
# never a scan of the whole table.
BROWSE = f"""
SELECT {_INFO_COLUMNS}
FROM (
    SELECT * FROM txqueue_tasks WHERE id < %(before)s ORDER BY id DESC LIMIT %(window)s
) AS w
WHERE state = coalesce(%(state)s::text, state)
  AND queue = coalesce(%(queue)s::text, queue)
  AND name = coalesce(%(name)s::text, name)
ORDER BY id DESC
LIMIT %(limit)s
"""
WINDOW_END = """
SELECT id FROM txqueue_tasks WHERE id < %(before)s ORDER BY id DESC
OFFSET %(window)s - 1 LIMIT 1
"""

RUNNING = f"""
SELECT {_INFO_COLUMNS} FROM txqueue_tasks WHERE state = 'running'
ORDER BY expires_at LIMIT %(limit)s
"""

WORKERS = """
SELECT worker_id, queues::text, started_at, seen_at FROM txqueue_workers
WHERE seen_at > now() - make_interval(secs => %s)
ORDER BY worker_id LIMIT 1000
"""

_TOP = uuid.UUID(int=(1 << 128) - 1)


def queue_counts(conn: psycopg.Connection[Any], cap: int) -> list[CountRow]:
    with errors("dashboard"):
        rows = conn.execute(QUEUE_COUNTS, {"cap": cap}).fetchall()
    return [(r[0], r[1], r[2], r[3], r[4]) for r in rows]


def finished_per_minute(conn: psycopg.Connection[Any], cap: int) -> list[RateRow]:
    with errors("dashboard"):
        rows = conn.execute(FINISHED_PER_MINUTE, {"cap": cap}).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def failing_names(conn: psycopg.Connection[Any], cap: int, limit: int) -> list[tuple[str, int]]:
    with errors("dashboard"):
        rows = conn.execute(FAILING_NAMES, {"cap": cap, "limit": limit}).fetchall()
    return [(r[0], r[1]) for r in rows]


def browse(
    conn: psycopg.Connection[Any],
    *,
    state: str | None,
    queue: str | None,
    name: str | None,
    before: uuid.UUID | None,
    window: int,
    limit: int,
) -> Page:
    params = {
        "before": before or _TOP,
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
    # A short page: the next one starts below the window, if there is more below it.
    return Page(tasks, None if row is None else row[0])


def running_tasks(conn: psycopg.Connection[Any], limit: int) -> list[TaskInfo]:
    with errors("dashboard"):
        return [task_info(r) for r in conn.execute(RUNNING, {"limit": limit}).fetchall()]


def workers(conn: psycopg.Connection[Any]) -> list[WorkerRow]:
    with errors("dashboard"):
        rows = conn.execute(WORKERS, (WORKER_ALIVE_WITHIN,)).fetchall()
    return [WorkerRow(r[0], json.loads(r[1]), r[2], r[3]) for r in rows]
