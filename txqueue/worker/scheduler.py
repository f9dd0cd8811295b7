"""The scheduler: enqueues the periodic tasks of the worker's queues, each slot once across
workers: those declared in its registry and those made at run time (txqueue.schedules.runtime).

Every worker keeps every schedule of its queues; no leader is elected. At each look it
reads the database's clock and the schedules' rows, and for one with a slot due tries to
move the row's last slot forward in the transaction that inserts the slot's task: one
worker succeeds, the others find the slot taken and insert nothing. So a schedule keeps
running while any one of its workers does, and host clocks never decide which slot is
due. A schedule made at run time is read from its row at each look: a change or a pause
holds from the look after its commit.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, Generic

from ..errors import TxQueueError
from ..outbox.client import wakeups_for
from ..schedules.periodic import Schedule
from ..store.protocols import Own, Schedules
from ..store.records import ScheduleRow
from .link import Link
from .once import Once

log = logging.getLogger("txqueue.worker")

LOOK_EVERY = 1.0
"""The longest wait between two looks at the schedules, however far the next slot is, so
that a schedule made or changed at run time, or a clock that jumped (a test's, or a
corrected server's), is noticed within it."""

Send = Callable[[list[tuple[str, bytes]]], None]
KeyFor = Callable[[str, Any], "str | None"]
"""A task's concurrency key for these arguments, as its registration makes it."""


class Scheduler(Generic[Own]):
    def __init__(
        self,
        store: Schedules[Own],
        schedules: Sequence[Schedule],
        queues: Sequence[str],
        link: Link[Own],
        stopping: threading.Event,
        send: Send,
        key_for: KeyFor,
    ) -> None:
        self._store = store
        self._code = {s.name: s for s in schedules}
        self._queues = list(queues)
        self._link = link
        self._stopping = stopping
        self._send = send
        self._key_for = key_for
        self._kept = False
        # Run-time schedules as last read: (their definition, what it parsed to).
        self._read: dict[str, tuple[tuple[Any, ...], Schedule | None]] = {}
        self._clashes = Once()  # code's names a run-time schedule holds

    def run(self) -> None:
        # A refused statement (no schedules table?) ends the loop: the supervisor says so.
        self._link.serve(lambda: self._look(self._link.open()), self._stopping)

    def _write_rows(self, conn: Own) -> None:
        """Write the rows of the schedules declared in code; a new one starts at its latest
        slot, not before. A name a run-time schedule holds is left to that one."""
        if not self._code:  # no write, no transaction: on SQLite, no turn at its write lock
            self._kept = True
            return
        now = self._store.now(conn)
        rows = [
            ScheduleRow(
                s.name, s.task, s.queue, s.cron, s.timezone, s.latest(now), s.payload, s.catch_up
            )
            for s in self._code.values()
        ]
        for name in self._store.keep_schedules(conn, rows):
            if self._clashes.first(name):
                log.warning(
                    "periodic %s: a schedule made at run time has this name; it is kept "
                    "instead of the one declared in code until it is deleted",
                    name,
                )
        self._kept = True

    def _look(self, conn: Own) -> float:
        """Enqueue the slots that are due; the seconds until the next look."""
        if not self._kept:
            self._write_rows(conn)
        now, rows = self._store.schedules_of(conn, self._queues, list(self._code))
        if not {r.name for r in rows} >= self._code.keys():
            self._write_rows(conn)  # a row was deleted under us: write it again
            return 0.0
        next_slot: datetime | None = None
        # In one order on every worker (by name): two writing the same rows never deadlock.
        for row in rows:
            schedule = self._schedule(row)
            if schedule is None:
                continue
            upcoming = schedule.next_after(now)
            next_slot = upcoming if next_slot is None else min(next_slot, upcoming)
            if not row.paused:
                self._fire(conn, schedule, row.last_slot, now)
        if next_slot is None:
            return LOOK_EVERY
        return max(0.01, min(LOOK_EVERY, (next_slot - now).total_seconds()))

    def _schedule(self, row: ScheduleRow) -> Schedule | None:
        """What the row says to keep: the registry's own schedule for one declared in code,
        the row itself for one made at run time (None: not this worker's to keep)."""
        if row.source != "runtime":
            return self._code.get(row.name)
        if row.queue not in self._queues:
            return None
        payload = json.dumps(row.payload, sort_keys=True)
        definition = (row.task, row.queue, row.cron, row.timezone, row.catch_up, payload)
        seen = self._read.get(row.name)
        if seen is not None and seen[0] == definition:
            return seen[1]
        schedule: Schedule | None = None
        try:
            key = self._key_for(row.task, row.payload)
            schedule = Schedule(
                row.name,
                row.cron,
                row.task,
                row.queue,
                row.payload,
                row.timezone,
                row.catch_up,
                key,
            )
        except TxQueueError as exc:  # written by hand, or this worker lacks cronsim
            log.error("periodic %s: not kept by this worker: %s", row.name, exc)
        self._read[row.name] = (definition, schedule)
        return schedule

    def _fire(self, conn: Own, s: Schedule, last: datetime, now: datetime) -> None:
        slots = s.due(last, now)
        if not slots:
            return
        tasks = [s.enqueued(slot) for slot in slots]
        inserted = self._store.fire_schedule(conn, s.name, last, slots[-1], tasks)
        if inserted is None:
            return  # another worker enqueued it, or it was paused meanwhile
        log.debug(
            "periodic %s: enqueued %s for %s",
            s.name,
            s.task if len(slots) == 1 else f"{len(slots)} x {s.task}",
            slots[-1].isoformat(),
        )
        self._send(wakeups_for(tasks, inserted))
