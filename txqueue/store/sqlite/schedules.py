"""Periodic tasks on SQLite: the schedules' rows, and the compare-and-set that enqueues
each slot once, in one write transaction."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any

from ...core.task import Task
from ..records import Inserted, ScheduleRow
from .connection import QUERIES, _immediate, errors
from .enqueue import Enqueue


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


class Schedules(Enqueue):
    """A slot's tasks are enqueued as any other (``insert_tasks``), in the transaction that
    moves the slot."""

    def now(self, conn: sqlite3.Connection) -> datetime:
        """The store's time (this machine's): what the schedules are read against."""
        return _at(self.clock.now())

    def keep_schedules(self, conn: sqlite3.Connection, rows: Sequence[ScheduleRow]) -> list[str]:
        """Write the worker's schedules declared in code (a new one starts from
        ``last_slot``); the names among them that schedules made at run time hold."""
        params = [self._params(r) for r in rows]
        names = json.dumps([r.name for r in rows])
        with errors("periodic tasks"), _immediate(conn):
            conn.executemany(QUERIES["keep_schedule"], params)
            return [name for (name,) in conn.execute(QUERIES["schedules_taken"], (names,))]

    def schedules_of(
        self, conn: sqlite3.Connection, queues: Sequence[str], names: Sequence[str] = ()
    ) -> tuple[datetime, list[ScheduleRow]]:
        """The store's time, and by name the schedules of these queues and those named."""
        wanted, named = set(queues), set(names)
        with errors("periodic tasks"):
            rows = [_row(r) for r in conn.execute(QUERIES["list_schedules"]).fetchall()]
        return _at(self.clock.now()), [r for r in rows if r.queue in wanted or r.name in named]

    def fire_schedule(
        self,
        conn: sqlite3.Connection,
        name: str,
        seen: datetime,
        slot: datetime,
        tasks: Sequence[Task],
    ) -> list[Inserted] | None:
        """Move the schedule's last slot from ``seen`` to ``slot`` and insert the tasks of the
        slots between, in one write transaction; None (nothing inserted) if another worker
        moved it first."""
        params = {
            "name": name,
            "seen": seen.timestamp(),
            "slot": slot.timestamp(),
            "now": self.clock.now(),
        }
        with errors("periodic task"), _immediate(conn):
            if conn.execute(QUERIES["advance_schedule"], params).rowcount == 0:
                return None
            return self.insert_tasks(conn, tasks)

    def list_schedules(self, conn: sqlite3.Connection) -> list[ScheduleRow]:
        with errors("schedule"):
            rows = conn.execute(QUERIES["list_schedules"]).fetchall()
        return [_row(r) for r in rows]

    def get_schedule(
        self, conn: sqlite3.Connection, name: str, lock: bool = False
    ) -> ScheduleRow | None:
        """One schedule (``lock`` is PostgreSQL's: SQLite has one writer at a time)."""
        with errors("schedule"):
            row = conn.execute(QUERIES["get_schedule"], (name,)).fetchone()
        return None if row is None else _row(row)

    def add_schedule(self, conn: sqlite3.Connection, row: ScheduleRow) -> bool:
        """Insert a schedule, in the caller's transaction; False if the name is taken."""
        with errors("schedule"):
            return conn.execute(QUERIES["add_schedule"], self._params(row)).rowcount == 1

    def write_schedule(self, conn: sqlite3.Connection, row: ScheduleRow, seen: ScheduleRow) -> bool:
        """Replace a schedule's definition, last slot and pause, in the caller's
        transaction, if it is still as ``seen``."""
        params = self._params(row) | {f"seen_{k}": v for k, v in self._params(seen).items()}
        with errors("schedule"):
            return conn.execute(QUERIES["write_schedule"], params).rowcount == 1

    def delete_schedule(self, conn: sqlite3.Connection, name: str) -> bool:
        with errors("schedule"):
            return conn.execute(QUERIES["delete_schedule"], (name,)).rowcount == 1

    def _params(self, row: ScheduleRow) -> dict[str, Any]:
        return {
            **asdict(row),
            "last_slot": row.last_slot.timestamp(),
            "payload": None if row.payload is None else json.dumps(row.payload),
            "now": self.clock.now(),
        }


def _row(row: Any) -> ScheduleRow:
    name, task, queue, cron, zone, slot, payload, catch_up, paused, source = row
    return ScheduleRow(
        name,
        task,
        queue,
        cron,
        zone,
        _at(slot),
        None if payload is None else json.loads(payload),
        bool(catch_up),
        bool(paused),
        source,
    )
