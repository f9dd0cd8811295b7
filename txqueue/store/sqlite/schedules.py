"""Periodic tasks on SQLite: the schedules' rows, and the compare-and-set that enqueues
each slot once, in one write transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime

from ...task import Task
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

    def keep_schedules(self, conn: sqlite3.Connection, rows: Sequence[ScheduleRow]) -> None:
        """Write the worker's schedules; a new one starts from ``last_slot``."""
        now = self.clock.now()
        params = [{**asdict(r), "last_slot": r.last_slot.timestamp(), "now": now} for r in rows]
        with errors("periodic tasks"), _immediate(conn):
            conn.executemany(QUERIES["keep_schedule"], params)

    def last_slots(
        self, conn: sqlite3.Connection, names: Sequence[str]
    ) -> tuple[datetime, dict[str, datetime]]:
        """The store's time, and the newest slot enqueued of each named schedule."""
        wanted = set(names)
        with errors("periodic tasks"):
            rows = conn.execute(QUERIES["last_slots"]).fetchall()
        return _at(self.clock.now()), {name: _at(slot) for name, slot in rows if name in wanted}

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
        return [ScheduleRow(n, t, q, c, z, _at(s)) for n, t, q, c, z, s in rows]
