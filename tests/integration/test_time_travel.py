"""Delays, retry backoff and periodic slots, on a clock the test moves forward: hours pass
in a second, on each store, with a real worker and the database's own notion of now."""

from __future__ import annotations

import time
from contextlib import closing
from datetime import UTC, datetime, timedelta
from typing import Any

import txqueue
from txqueue import Task
from txqueue.schedules.periodic import Schedule
from txqueue.store import for_url
from txqueue.store.records import ScheduleRow
from txqueue.testing import Clock

from .helpers import connect, rows, running, wait_until

HOUR = 3600.0


def _worker(db_url: str, registry: txqueue.Registry) -> txqueue.Worker:
    return txqueue.Worker(registry, database_url=db_url, amqp_url=None, poll_interval=0.05)


def _still_pending(db_url: str, task_id: Any, *, for_seconds: float = 0.5) -> bool:
    time.sleep(for_seconds)  # several polls of the worker
    return bool(rows(db_url, "id = %s AND state = 'pending'", (str(task_id),)))


def test_a_delayed_task_runs_when_the_clock_reaches_it(
    db_url: str, queue: str, clock: Clock
) -> None:
    registry = txqueue.Registry()
    ran: list[float] = []

    @registry.task("later", queue=queue)
    def later(payload: Any) -> None:
        ran.append(time.monotonic())

    with running(_worker(db_url, registry)):
        with closing(connect(db_url)) as c, txqueue.transaction(c):
            task_id = txqueue.enqueue(c, Task("later", queue=queue, delay=timedelta(hours=2)))
        assert _still_pending(db_url, task_id)
        clock.advance(HOUR)
        assert _still_pending(db_url, task_id)
        moved = time.monotonic()
        clock.advance(HOUR + 1)
        wait_until(lambda: bool(ran), timeout=5)
    assert ran[0] - moved < 2  # the next poll, not a wait of hours
    assert rows(db_url)[0]["state"] == "succeeded"


def test_a_failed_attempt_is_retried_after_its_backoff_on_the_moved_clock(
    db_url: str, queue: str, clock: Clock
) -> None:
    registry = txqueue.Registry()

    @registry.task("flaky", queue=queue, backoff=lambda attempt: 10 * 60 * attempt)
    def flaky(payload: Any, ctx: txqueue.TaskContext) -> int:
        if ctx.attempt < 3:
            raise RuntimeError(f"attempt {ctx.attempt} fails")
        return ctx.attempt

    with running(_worker(db_url, registry)):
        with closing(connect(db_url)) as c, txqueue.transaction(c):
            task_id = txqueue.enqueue(c, Task("flaky", queue=queue))
        for attempt, backoff in ((1, 600), (2, 1200)):
            wait_until(lambda a=attempt: len(rows(db_url)[0]["errors"]) == a, timeout=5)
            row = rows(db_url)[0]
            assert row["state"] == "pending"
            # Retried at its backoff after the failure, as the database's clock reads it.
            assert abs((row["run_at"] - row["updated_at"]).total_seconds() - backoff) < 1
            assert _still_pending(db_url, task_id)
            clock.advance(backoff - 30)
            assert _still_pending(db_url, task_id)
            clock.advance(31)
        wait_until(lambda: rows(db_url)[0]["state"] == "succeeded", timeout=5)
    assert (rows(db_url)[0]["attempts"], rows(db_url)[0]["result"]) == (3, 3)


def test_periodic_slots_come_once_each_and_missed_ones_once_or_all(
    db_url: str, queue: str, clock: Clock
) -> None:
    registry = txqueue.Registry()

    @registry.periodic("0 * * * *", queue=queue, payload={"every": "hour"})
    def hourly(payload: Any) -> None: ...

    registry.periodic("0 * * * *", queue=queue, name="hourly_catching_up", catch_up=True)(hourly)

    def slots(catching_up: bool) -> list[Any]:
        return sorted(
            r["run_at"]
            for r in rows(db_url)
            if (r["payload"] == {}) == catching_up and r["state"] == "succeeded"
        )

    # Two workers keep the same schedules, as two hosts would.
    with running(_worker(db_url, registry)), running(_worker(db_url, registry)):
        time.sleep(1.5)  # a new schedule starts at its next slot, not at once
        assert rows(db_url) == []
        now = clock.now()
        next_hour = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
        clock.advance((next_hour - now).total_seconds() + 0.2)
        wait_until(lambda: len(slots(False)) == 1 and len(slots(True)) == 1, timeout=5)
        time.sleep(1.5)  # more looks at the schedules: the slot is not enqueued again
        assert slots(False) == slots(True) == [next_hour]

        clock.advance(5 * HOUR)  # nobody looked for five slots
        later = [next_hour + timedelta(hours=h) for h in range(1, 6)]
        wait_until(lambda: len(slots(True)) == 6, timeout=5)
        wait_until(lambda: len(slots(False)) == 2, timeout=5)
        time.sleep(1.5)
    assert slots(True) == [next_hour, *later]
    assert slots(False) == [next_hour, later[-1]]
    assert len(rows(db_url)) == 8


def test_a_worker_firing_from_a_stale_reading_of_a_schedule_enqueues_nothing(
    db_url: str,
) -> None:
    store = for_url(db_url)
    hourly = Schedule("hourly", "0 * * * *", "hourly", "default", catch_up=True)
    s3, s4, s5 = (datetime(2026, 1, 1, h, tzinfo=UTC) for h in (3, 4, 5))
    with closing(store.connect(db_url)) as conn:
        store.keep_schedules(
            conn, [ScheduleRow("hourly", "hourly", "default", "0 * * * *", "UTC", s3)]
        )
        # Both read S3: one just after S4, the other, catching up, just after S5.
        first = store.fire_schedule(conn, "hourly", s3, s4, [hourly.enqueued(s4)])
        second = store.fire_schedule(
            conn, "hourly", s3, s5, [hourly.enqueued(s4), hourly.enqueued(s5)]
        )
        assert [r.last_slot for r in store.schedules_of(conn, [], ["hourly"])[1]] == [s4]
    assert first is not None and len(first) == 1 and second is None
    assert [r["run_at"] for r in rows(db_url)] == [s4]
