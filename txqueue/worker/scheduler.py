"""The scheduler: enqueues the periodic tasks the worker runs, each slot once across workers.

Every worker keeps every schedule of its queues; no leader is elected. At a slot each of
them reads the database's clock and the schedule's last slot, and tries to move the
last slot forward in the transaction that inserts the slot's task: one succeeds, the
others find the slot taken and insert nothing. So a schedule keeps running while any one
of its workers does, and host clocks never decide which slot is due.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Generic

from ..client import wakeups_for
from ..errors import StoreError
from ..periodic import Schedule
from ..store.protocols import Own, Schedules
from ..store.records import ScheduleRow
from .board import Link

log = logging.getLogger("txqueue.worker")

LOOK_EVERY = 1.0
"""The longest wait between two looks at the schedules, however far the next slot is, so
that a clock that jumped (a test's, or a corrected server's) is noticed within it."""

Send = Callable[[list[tuple[str, bytes]]], None]


class Scheduler(Generic[Own]):
    def __init__(
        self,
        store: Schedules[Own],
        schedules: Sequence[Schedule],
        link: Link[Own],
        stopping: threading.Event,
        send: Send,
    ) -> None:
        self._store = store
        # In one order on every worker: two writing the same rows never deadlock.
        self._schedules = sorted(schedules, key=lambda s: s.name)
        self._link = link
        self._stopping = stopping
        self._send = send
        self._kept = False

    def run(self) -> None:
        try:
            self._keep()
        finally:  # a loop that died is restarted on a new connection
            self._link.close()

    def _keep(self) -> None:
        while not self._stopping.is_set():
            try:
                conn = self._link.open()
                wait = self._look(conn)
                self._link.worked()
            except StoreError as exc:
                if not self._link.failed(exc):
                    raise  # a refused statement (no schedules table?): the supervisor says so
                wait = self._link.backoff()
            self._stopping.wait(wait)

    def _write_rows(self, conn: Own) -> None:
        """Write the schedules' rows; a new one starts at its latest slot, not before."""
        now = self._store.now(conn)
        self._store.keep_schedules(
            conn,
            [
                ScheduleRow(s.name, s.task, s.queue, s.cron, s.timezone, s.latest(now))
                for s in self._schedules
            ],
        )
        self._kept = True

    def _look(self, conn: Own) -> float:
        """Enqueue the slots that are due; the seconds until the next look."""
        if not self._kept:
            self._write_rows(conn)
        now, last = self._store.last_slots(conn, [s.name for s in self._schedules])
        if len(last) < len(self._schedules):  # a row was deleted under us: write it again
            self._write_rows(conn)
            return 0.0
        for s in self._schedules:
            slots = s.due(last[s.name], now)
            if not slots:
                continue
            tasks = [s.enqueued(slot) for slot in slots]
            inserted = self._store.fire_schedule(conn, s.name, last[s.name], slots[-1], tasks)
            if inserted is None:
                continue  # another worker enqueued it
            log.debug(
                "periodic %s: enqueued %s for %s",
                s.name,
                s.task if len(slots) == 1 else f"{len(slots)} x {s.task}",
                slots[-1].isoformat(),
            )
            self._send(wakeups_for(tasks, inserted))
        next_slot = min(s.next_after(now) for s in self._schedules)
        return max(0.01, min(LOOK_EVERY, (next_slot - now).total_seconds()))
