"""Periodic tasks: the schedules' rows, read by the clock of the database, and the
compare-and-set that enqueues each slot once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime

from ...task import Task
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

    def keep_schedules(self, conn: PgConnection, rows: Sequence[ScheduleRow]) -> None:
        """Write the worker's schedules; a new one starts from ``last_slot``."""
        with errors("periodic tasks"), conn.transaction():
            conn.cursor().executemany(QUERIES["keep_schedule"], [asdict(r) for r in rows])

    def last_slots(
        self, conn: PgConnection, names: Sequence[str]
    ) -> tuple[datetime, dict[str, datetime]]:
        """The database's time, and the newest slot enqueued of each named schedule."""
        with errors("periodic tasks"):
            row = conn.execute(QUERIES["last_slots"], (list(names),), prepare=True).fetchone()
        assert row is not None
        now, found, slots = row
        return now, dict(zip(found or [], slots or [], strict=True))

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
            return [ScheduleRow(*row) for row in conn.execute(QUERIES["list_schedules"])]
