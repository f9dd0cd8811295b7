"""What the API shows of a stored schedule: ``ScheduleInfo``, with the slot it enqueues
next worked out from its cron expression (``next_run``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..core.task import DEFAULT_QUEUE
from ..store.records import ScheduleRow
from .periodic import Schedule


@dataclass(frozen=True, slots=True)
class ScheduleInfo:
    """A periodic schedule as the database keeps it. ``source`` is ``"code"`` (declared
    with ``registry.periodic``: its workers write it, and only pausing changes it here) or
    ``"runtime"`` (made with ``create_schedule``, the CLI or the dashboard).
    ``last_run`` is the newest slot enqueued (or passed over); ``next_run`` the slot a
    worker enqueues next, None while paused.

    Example:

    ```python
    for schedule in txqueue.list_schedules(conn):
        print(schedule.name, schedule.cron, schedule.source, schedule.paused, schedule.next_run)
    ```
    """

    name: str
    task: str
    queue: str
    cron: str
    timezone: str
    payload: Any
    catch_up: bool
    paused: bool
    source: str
    last_run: datetime
    next_run: datetime | None


def next_run(cron: str, timezone: str, last_slot: datetime, paused: bool) -> datetime | None:
    """The slot a schedule enqueues next, given the last one; None while it is paused."""
    if paused:
        return None
    return Schedule("next_run", cron, "next_run", DEFAULT_QUEUE, None, timezone).next_after(
        last_slot
    )


def info(row: ScheduleRow) -> ScheduleInfo:
    """What the API shows of a stored schedule, with its next slot."""
    upcoming = next_run(row.cron, row.timezone, row.last_slot, row.paused)
    return ScheduleInfo(
        row.name,
        row.task,
        row.queue,
        row.cron,
        row.timezone,
        row.payload,
        row.catch_up,
        row.paused,
        row.source,
        row.last_slot,
        upcoming,
    )
