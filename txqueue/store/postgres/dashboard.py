"""The dashboard's reads. Plain snapshot reads (no row locks), each bounded by a LIMIT on
an index scan, so the page costs the same on a table of millions (the plan tests hold
every one to its index)."""

from __future__ import annotations

import json

from ...core.stored import TaskInfo
from ..records import WORKER_ALIVE_WITHIN
from ..reports import CountRow, RateRow, WorkerRow
from .connection import QUERIES, PgConnection, errors
from .manage import task_info


class Dashboard:
    """The dashboard's reads. Plain snapshot reads (no row locks), each bounded by a LIMIT
    on an index scan, so the page costs the same on a table of millions (the plan tests
    hold every one to its index)."""

    def queue_counts(self, conn: PgConnection, cap: int) -> list[CountRow]:
        with errors("dashboard"):
            rows = conn.execute(QUERIES["queue_counts"], {"cap": cap}).fetchall()
        return [CountRow(*r) for r in rows]

    def finished_per_minute(self, conn: PgConnection, cap: int) -> list[RateRow]:
        with errors("dashboard"):
            rows = conn.execute(QUERIES["finished_per_minute"], {"cap": cap}).fetchall()
        return [RateRow(*r) for r in rows]

    def failing_names(self, conn: PgConnection, cap: int, limit: int) -> list[tuple[str, int]]:
        with errors("dashboard"):
            rows = conn.execute(QUERIES["failing_names"], {"cap": cap, "limit": limit}).fetchall()
        return [(r[0], r[1]) for r in rows]

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
