"""The dashboard's reads. Plain snapshot reads (no row locks), each bounded by a LIMIT on
an index scan, so the page costs the same on a table of millions (the plan tests hold
every one to its index)."""

from __future__ import annotations

import json
import uuid

from ...task import TaskInfo
from ..records import WORKER_ALIVE_WITHIN, CountRow, Page, RateRow, WorkerRow
from .connection import QUERIES, PgConnection, errors
from .manage import task_info

_TOP = uuid.UUID(int=(1 << 128) - 1)


class Dashboard:
    """The dashboard's reads. Plain snapshot reads (no row locks), each bounded by a LIMIT
    on an index scan, so the page costs the same on a table of millions (the plan tests
    hold every one to its index)."""

    def queue_counts(self, conn: PgConnection, cap: int) -> list[CountRow]:
        with errors("dashboard"):
            rows = conn.execute(QUERIES["queue_counts"], {"cap": cap}).fetchall()
        return [(r[0], r[1], r[2], r[3], r[4]) for r in rows]

    def finished_per_minute(self, conn: PgConnection, cap: int) -> list[RateRow]:
        with errors("dashboard"):
            rows = conn.execute(QUERIES["finished_per_minute"], {"cap": cap}).fetchall()
        return [(r[0], r[1], r[2]) for r in rows]

    def failing_names(self, conn: PgConnection, cap: int, limit: int) -> list[tuple[str, int]]:
        with errors("dashboard"):
            rows = conn.execute(QUERIES["failing_names"], {"cap": cap, "limit": limit}).fetchall()
        return [(r[0], r[1]) for r in rows]

    def browse(
        self,
        conn: PgConnection,
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
            tasks = [task_info(r) for r in conn.execute(QUERIES["browse"], params).fetchall()]
            if len(tasks) == limit:
                return Page(tasks, tasks[-1].id)
            row = conn.execute(QUERIES["window_end"], params).fetchone()
        # A short page: the next one starts below the window, if there is more below it.
        return Page(tasks, None if row is None else row[0])

    def running_tasks(self, conn: PgConnection, limit: int) -> list[TaskInfo]:
        with errors("dashboard"):
            return [
                task_info(r)
                for r in conn.execute(QUERIES["running_tasks"], {"limit": limit}).fetchall()
            ]

    def workers(self, conn: PgConnection) -> list[WorkerRow]:
        with errors("dashboard"):
            rows = conn.execute(QUERIES["workers"], (WORKER_ALIVE_WITHIN,)).fetchall()
        return [WorkerRow(r[0], json.loads(r[1]), r[2], r[3]) for r in rows]
