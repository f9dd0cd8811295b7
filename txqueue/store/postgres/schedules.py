"""Periodic tasks: the schedules' rows, read by the clock of the database, and the
compare-and-set that enqueues each slot once."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from datetime import datetime
from typing import Any

import psycopg

from ...task import Task
from ..base import Inserted, ScheduleRow
from .connection import errors
from .enqueue import insert_tasks

# A changed expression or time zone starts at its own latest slot: without that, the new
# expression's last slot before now would count as missed and run at once.
KEEP = """
INSERT INTO txqueue_schedules AS s (name, task, queue, cron, timezone, last_slot)
VALUES (%(name)s, %(task)s, %(queue)s, %(cron)s, %(timezone)s, %(last_slot)s)
ON CONFLICT (name) DO UPDATE
SET task = excluded.task, queue = excluded.queue, cron = excluded.cron,
    timezone = excluded.timezone, updated_at = now(),
    last_slot = CASE WHEN (s.cron, s.timezone) = (excluded.cron, excluded.timezone)
                     THEN s.last_slot ELSE greatest(s.last_slot, excluded.last_slot) END
"""

LAST_SLOTS = """
SELECT now(), array_agg(name), array_agg(last_slot) FROM txqueue_schedules
WHERE name = ANY(%s)
"""

# Compared with the last slot the worker read, so its slots are exactly those after it:
# of two workers firing from the same reading, the second finds the row moved (after
# waiting for the first one's row lock) and enqueues nothing.
ADVANCE = """
UPDATE txqueue_schedules SET last_slot = %(slot)s, updated_at = now()
WHERE name = %(name)s AND last_slot = %(seen)s
"""

LIST = """
SELECT name, task, queue, cron, timezone, last_slot FROM txqueue_schedules ORDER BY name
"""


def now(conn: psycopg.Connection[Any]) -> datetime:
    """The database's time: what every worker's schedule is read against."""
    with errors("periodic tasks"):
        row = conn.execute("SELECT now()").fetchone()
    assert row is not None
    return row[0]  # type: ignore[no-any-return]


def keep_schedules(conn: psycopg.Connection[Any], rows: Sequence[ScheduleRow]) -> None:
    """Write the worker's schedules; a new one starts from ``last_slot``."""
    with errors("periodic tasks"), conn.transaction():
        conn.cursor().executemany(KEEP, [asdict(r) for r in rows])


def last_slots(
    conn: psycopg.Connection[Any], names: Sequence[str]
) -> tuple[datetime, dict[str, datetime]]:
    """The database's time, and the newest slot enqueued of each named schedule."""
    with errors("periodic tasks"):
        row = conn.execute(LAST_SLOTS, (list(names),), prepare=True).fetchone()
    assert row is not None
    now, found, slots = row
    return now, dict(zip(found or [], slots or [], strict=True))


def fire_schedule(
    conn: psycopg.Connection[Any],
    name: str,
    seen: datetime,
    slot: datetime,
    tasks: Sequence[Task],
) -> list[Inserted] | None:
    """Move the schedule's last slot from ``seen`` to ``slot`` and insert the tasks of the
    slots between, in one transaction; None (nothing inserted) if another worker moved it
    first."""
    with errors("periodic task"), conn.transaction():
        if conn.execute(ADVANCE, {"name": name, "seen": seen, "slot": slot}).rowcount == 0:
            return None
        return insert_tasks(conn, tasks)


def list_schedules(conn: psycopg.Connection[Any]) -> list[ScheduleRow]:
    with errors("schedule"):
        return [ScheduleRow(*row) for row in conn.execute(LIST)]
