"""Periodic tasks: the schedules' rows, read by the clock of the database, and the
compare-and-set that enqueues each slot once."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

from ...core.task import Task
from ..records import Inserted, ScheduleRow
from .connection import QUERIES, PgConnection, errors
from .enqueue import Enqueue


class Schedules(Enqueue):
    """Periodic tasks: the schedules' rows, read by the clock of the database, and the
    compare-and-set that enqueues each slot once."""

    def now(self, conn: PgConnection) -> datetime:
        """The database's time: what every worker's schedule is read against."""
        with errors("periodic tasks"):
            row = conn.execute(QUERIES["now"]).fetchone()
        assert row is not None
        return row[0]  # type: ignore[no-any-return]

    def keep_schedules(self, conn: PgConnection, rows: Sequence[ScheduleRow]) -> list[str]:
        """Write the worker's schedules declared in code (a new one starts from
        ``last_slot``); the names among them that schedules made at run time hold."""
        with errors("periodic tasks"), conn.transaction():
            conn.cursor().executemany(QUERIES["keep_schedule"], [_params(r) for r in rows])
            taken = conn.execute(QUERIES["schedules_taken"], ([r.name for r in rows],))
            return [name for (name,) in taken]

    def schedules_of(
        self, conn: PgConnection, queues: Sequence[str], names: Sequence[str] = ()
    ) -> tuple[datetime, list[ScheduleRow]]:
        """The database's time, and by name the schedules of these queues and those named."""
        params = {"queues": list(queues), "names": list(names)}
        with errors("periodic tasks"):
            rows = conn.execute(QUERIES["schedules_of"], params, prepare=True).fetchall()
        return rows[0][0], [_row(row[1:]) for row in rows if row[1] is not None]

    def fire_schedule(
        self,
        conn: PgConnection,
        name: str,
        seen: datetime,
        slot: datetime,
        tasks: Sequence[Task],
    ) -> list[Inserted] | None:
        """Move the schedule's last slot from ``seen`` to ``slot`` and insert the tasks of the
        slots between, in one transaction; None (nothing inserted) if another worker moved it
        first."""
        with errors("periodic task"), conn.transaction():
            if (
                conn.execute(
                    QUERIES["advance_schedule"], {"name": name, "seen": seen, "slot": slot}
                ).rowcount
                == 0
            ):
                return None
            return self.insert_tasks(conn, tasks)

    def list_schedules(self, conn: PgConnection) -> list[ScheduleRow]:
        with errors("schedule"):
            return [_row(row) for row in conn.execute(QUERIES["list_schedules"])]

    def get_schedule(self, conn: PgConnection, name: str, lock: bool = False) -> ScheduleRow | None:
        """One schedule; with ``lock``, held to be changed in the caller's transaction."""
        query = QUERIES["get_schedule_locked" if lock else "get_schedule"]
        with errors("schedule"):
            row = conn.execute(query, (name,)).fetchone()
        return None if row is None else _row(row)

    def add_schedule(self, conn: PgConnection, row: ScheduleRow) -> bool:
        """Insert a schedule, in the caller's transaction; False if the name is taken."""
        with errors("schedule"):
            return conn.execute(QUERIES["add_schedule"], _params(row)).rowcount == 1

    def write_schedule(self, conn: PgConnection, row: ScheduleRow, seen: ScheduleRow) -> bool:
        """Replace a schedule's definition, last slot and pause, in the caller's
        transaction, if it is still as ``seen``."""
        params = _params(row) | {f"seen_{k}": v for k, v in _params(seen).items()}
        with errors("schedule"):
            return conn.execute(QUERIES["write_schedule"], params).rowcount == 1

    def delete_schedule(self, conn: PgConnection, name: str) -> bool:
        with errors("schedule"):
            return conn.execute(QUERIES["delete_schedule"], (name,)).rowcount == 1


def _row(row: Sequence[Any]) -> ScheduleRow:
    name, task, queue, cron, zone, slot, payload, catch_up, paused, source = row
    loaded = None if payload is None else json.loads(payload)
    return ScheduleRow(name, task, queue, cron, zone, slot, loaded, catch_up, paused, source)


def _params(row: ScheduleRow) -> dict[str, Any]:
    return {**asdict(row), "payload": None if row.payload is None else json.dumps(row.payload)}
