"""The dashboard's reads, each bounded by a LIMIT on an index scan (see the PostgreSQL
store's module of the same name)."""

from __future__ import annotations

import json
import sqlite3

from ...core.stored import TaskInfo
from ..records import WORKER_ALIVE_WITHIN
from ..reports import CountRow, RateRow, WorkerRow
from .connection import QUERIES, Clock, _at, errors
from .manage import task_info


class Dashboard:
    clock: Clock

    def queue_counts(self, conn: sqlite3.Connection, cap: int) -> list[CountRow]:
        params = {"cap": cap, "now": self.clock.now()}
        with errors("dashboard"):
            rows = conn.execute(QUERIES["queue_counts"], params).fetchall()
        return [CountRow(*r) for r in rows]

    def finished_per_minute(self, conn: sqlite3.Connection, cap: int) -> list[RateRow]:
        params = {"cap": cap, "now": self.clock.now()}
        with errors("dashboard"):
            rows = conn.execute(QUERIES["finished_per_minute"], params).fetchall()
        return [RateRow(*r) for r in rows]

    def failing_names(
        self, conn: sqlite3.Connection, cap: int, limit: int
    ) -> list[tuple[str, int]]:
        params = {"cap": cap, "limit": limit, "now": self.clock.now()}
        with errors("dashboard"):
            rows = conn.execute(QUERIES["failing_names"], params).fetchall()
            return [(r[0], r[1]) for r in rows]

    def running_tasks(self, conn: sqlite3.Connection, limit: int) -> list[TaskInfo]:
        with errors("dashboard"):
            rows = conn.execute(QUERIES["running_tasks"], {"limit": limit}).fetchall()
            return [task_info(r) for r in rows]

    def workers(self, conn: sqlite3.Connection) -> list[WorkerRow]:
        params = {"now": self.clock.now(), "alive": WORKER_ALIVE_WITHIN}
        with errors("dashboard"):
            rows = conn.execute(QUERIES["workers"], params).fetchall()
        return [WorkerRow(r[0], json.loads(r[1]), _at(r[2]), _at(r[3])) for r in rows]
