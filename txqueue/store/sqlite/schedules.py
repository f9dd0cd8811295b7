"""Periodic tasks on SQLite: the schedules' rows, and the compare-and-set that enqueues
each slot once, in one write transaction."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import asdict
from datetime import UTC, datetime

from ...task import Task
from ..base import Inserted, ScheduleRow
from .connection import _immediate, clock, errors
from .enqueue import insert_tasks

# A changed expression or time zone starts at its own latest slot (see the PostgreSQL store).
KEEP = """
INSERT INTO txqueue_schedules AS s (name, task, queue, cron, timezone, last_slot, updated_at)
VALUES (:name, :task, :queue, :cron, :timezone, :last_slot, :now)
ON CONFLICT (name) DO UPDATE
SET task = excluded.task, queue = excluded.queue, cron = excluded.cron,
    timezone = excluded.timezone, updated_at = excluded.updated_at,
    last_slot = CASE WHEN s.cron = excluded.cron AND s.timezone = excluded.timezone
                     THEN s.last_slot ELSE max(s.last_slot, excluded.last_slot) END
"""

LAST_SLOTS = "SELECT name, last_slot FROM txqueue_schedules"

# Compared with the last slot the worker read (see the PostgreSQL store); slots are whole
# seconds, which a REAL holds exactly.
ADVANCE = """
UPDATE txqueue_schedules SET last_slot = :slot, updated_at = :now
WHERE name = :name AND last_slot = :seen
"""

LIST = """
SELECT name, task, queue, cron, timezone, last_slot FROM txqueue_schedules ORDER BY name
"""


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def now(conn: sqlite3.Connection) -> datetime:
    """The store's time (this machine's): what the schedules are read against."""
    return _at(clock.now())


def keep_schedules(conn: sqlite3.Connection, rows: Sequence[ScheduleRow]) -> None:
    """Write the worker's schedules; a new one starts from ``last_slot``."""
    now = clock.now()
    params = [{**asdict(r), "last_slot": r.last_slot.timestamp(), "now": now} for r in rows]
    with errors("periodic tasks"), _immediate(conn):
        conn.executemany(KEEP, params)


def last_slots(
    conn: sqlite3.Connection, names: Sequence[str]
) -> tuple[datetime, dict[str, datetime]]:
    """The store's time, and the newest slot enqueued of each named schedule."""
    wanted = set(names)
    with errors("periodic tasks"):
        rows = conn.execute(LAST_SLOTS).fetchall()
    return _at(clock.now()), {name: _at(slot) for name, slot in rows if name in wanted}


def fire_schedule(
    conn: sqlite3.Connection, name: str, seen: datetime, slot: datetime, tasks: Sequence[Task]
) -> list[Inserted] | None:
    """Move the schedule's last slot from ``seen`` to ``slot`` and insert the tasks of the
    slots between, in one write transaction; None (nothing inserted) if another worker
    moved it first."""
    params = {
        "name": name,
        "seen": seen.timestamp(),
        "slot": slot.timestamp(),
        "now": clock.now(),
    }
    with errors("periodic task"), _immediate(conn):
        if conn.execute(ADVANCE, params).rowcount == 0:
            return None
        return insert_tasks(conn, tasks)


def list_schedules(conn: sqlite3.Connection) -> list[ScheduleRow]:
    with errors("schedule"):
        rows = conn.execute(LIST).fetchall()
    return [ScheduleRow(n, t, q, c, z, _at(s)) for n, t, q, c, z, s in rows]
