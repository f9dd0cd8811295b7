"""Schedules made at run time (txqueue.schedules.runtime), on each store: the calls in the caller's
transaction, and real workers keeping them beside those declared in code, each slot once,
on a clock the test moves forward."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from datetime import datetime, timedelta
from typing import Any

import pytest

import txqueue
from txqueue import InvalidTypeError, InvalidValueError, ScheduleNotFoundError
from txqueue.testing import Clock

from .helpers import connect, rows, running, wait_until

HOUR = 3600.0


@contextmanager
def committed(db_url: str) -> Iterator[Any]:
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        yield c


def _worker(db_url: str, registry: txqueue.Registry, queue: str) -> txqueue.Worker:
    return txqueue.Worker(
        registry, database_url=db_url, amqp_url=None, queues=[queue], poll_interval=0.05
    )


def _next_hour(clock: Clock) -> datetime:
    return clock.now().replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)


def _to_next_hour(clock: Clock) -> datetime:
    """Move the clock just past the next whole hour; that hour."""
    slot = _next_hour(clock)
    clock.advance((slot - clock.now()).total_seconds() + 0.2)
    return slot


def test_a_schedule_is_created_read_and_listed_in_the_callers_transaction(
    db_url: str, queue: str, clock: Clock
) -> None:
    with closing(connect(db_url)) as c:
        txqueue.create_schedule(c, "rolled_back", cron="0 * * * *", task="report")
        c.rollback()
        with txqueue.transaction(c):
            made = txqueue.create_schedule(
                c,
                "nightly",
                cron="0 3 * * *",
                task="report",
                queue=queue,
                payload={"kind": "daily", "to": ["ops"]},
                timezone="Europe/Paris",
                catch_up=True,
            )
    assert (made.name, made.task, made.queue, made.source) == (
        "nightly",
        "report",
        queue,
        "runtime",
    )
    assert (made.payload, made.timezone, made.catch_up, made.paused) == (
        {"kind": "daily", "to": ["ops"]},
        "Europe/Paris",
        True,
        False,
    )
    assert made.next_run is not None and made.last_run < clock.now() < made.next_run
    assert made.next_run - made.last_run == timedelta(days=1)
    with committed(db_url) as c:
        assert txqueue.get_schedule(c, "nightly") == made
        assert txqueue.list_schedules(c) == [made]
        with pytest.raises(ScheduleNotFoundError, match="no schedule named 'rolled_back'"):
            txqueue.get_schedule(c, "rolled_back")


@pytest.mark.parametrize(
    ("changes", "error", "field"),
    [
        ({"cron": "every hour"}, InvalidValueError, "cron"),
        ({"cron": "0 0 30 2 *"}, InvalidValueError, "cron"),  # February 30th never comes
        ({"timezone": "Mars/Olympus"}, InvalidValueError, "timezone"),
        ({"queue": ""}, InvalidValueError, "queue"),
        ({"task": " "}, InvalidValueError, "task"),
        ({"payload": {"at": object()}}, InvalidValueError, "payload"),
        ({"catch_up": "yes"}, InvalidTypeError, "catch_up"),
        ({"paused": 1}, InvalidTypeError, "paused"),
    ],
)
def test_a_bad_schedule_is_refused_naming_its_field_and_nothing_is_written(
    db_url: str, changes: dict[str, Any], error: type[Exception], field: str
) -> None:
    given: dict[str, Any] = {"cron": "0 * * * *", "task": "report", **changes}
    with committed(db_url) as c:
        with pytest.raises(error, match=f"^{field}: "):
            txqueue.create_schedule(c, "bad", **given)
        assert txqueue.list_schedules(c) == []


def test_a_name_is_one_schedules_and_an_apps_registry_checks_the_payload(
    db_url: str,
) -> None:
    registry = txqueue.Registry()

    @registry.task("report")
    def report(kind: str, days: int = 1) -> None: ...

    app = txqueue.App(registry, database_url=db_url, amqp_url=None)
    with committed(db_url) as c:
        app.create_schedule(c, "nightly", cron="0 3 * * *", task="report", payload={"kind": "x"})
        with pytest.raises(InvalidValueError, match=r"^name: a schedule named 'nightly' exists"):
            app.create_schedule(c, "nightly", cron="0 4 * * *", task="other")
        with pytest.raises(InvalidValueError, match=r"^payload: .*kind"):
            app.create_schedule(c, "weekly", cron="0 3 * * 1", task="report", payload={})
        with pytest.raises(InvalidValueError, match=r"^payload: .*days"):
            app.change_schedule(c, "nightly", payload={"kind": "x", "days": "two"})
        # A task this registry does not know is another application's to check.
        app.create_schedule(c, "theirs", cron="0 3 * * *", task="elsewhere", payload=[1])
        assert [s.name for s in app.list_schedules(c)] == ["nightly", "theirs"]


def test_a_change_keeps_what_is_left_out_and_a_new_expression_starts_at_its_next_slot(
    db_url: str, clock: Clock
) -> None:
    with committed(db_url) as c:
        made = txqueue.create_schedule(c, "s", cron="0 * * * *", task="t", payload={"a": 1})
    clock.advance(10 * HOUR)  # ten slots no worker enqueued
    with committed(db_url) as c:
        renamed = txqueue.change_schedule(c, "s", task="t2", payload=None)
        assert (renamed.task, renamed.payload, renamed.cron) == ("t2", None, "0 * * * *")
        assert renamed.last_run == made.last_run  # still due: a worker enqueues it
        moved = txqueue.change_schedule(c, "s", cron="30 * * * *", catch_up=True)
    assert moved.last_run > clock.now() - timedelta(hours=1)  # the missed ones are not
    assert moved.last_run.minute == 30 and moved.catch_up
    with committed(db_url) as c:
        assert txqueue.get_schedule(c, "s") == moved


def test_pausing_stops_the_next_run_and_resuming_skips_the_slots_passed(
    db_url: str, clock: Clock
) -> None:
    with committed(db_url) as c:
        made = txqueue.create_schedule(c, "s", cron="0 * * * *", task="t", catch_up=True)
        paused = txqueue.pause_schedule(c, "s")
    assert paused.paused and paused.next_run is None
    assert paused.last_run == made.last_run
    clock.advance(5 * HOUR)
    with committed(db_url) as c:
        resumed = txqueue.resume_schedule(c, "s")
        assert txqueue.resume_schedule(c, "s") == resumed  # resuming twice changes nothing
    assert not resumed.paused
    assert resumed.last_run == made.last_run + timedelta(hours=5)
    assert resumed.next_run == made.last_run + timedelta(hours=6)


def test_unknown_names_are_refused_and_a_code_schedule_is_changed_only_in_code(
    db_url: str, queue: str
) -> None:
    registry = txqueue.Registry()

    @registry.periodic("0 * * * *", queue=queue)
    def hourly() -> None: ...

    with running(_worker(db_url, registry, queue)):
        wait_until(lambda: bool(rows_of(db_url)), timeout=5)
    with committed(db_url) as c:
        [code] = txqueue.list_schedules(c)
        assert (code.name, code.source, code.queue) == ("hourly", "code", queue)
        with pytest.raises(InvalidValueError, match=r"^name: .*declared in code"):
            txqueue.change_schedule(c, "hourly", cron="*/5 * * * *")
        assert txqueue.pause_schedule(c, "hourly").paused
        for call in (
            txqueue.get_schedule,
            txqueue.pause_schedule,
            txqueue.resume_schedule,
            txqueue.delete_schedule,
        ):
            with pytest.raises(ScheduleNotFoundError, match=r"^no schedule named 'missing'$"):
                call(c, "missing")
        with pytest.raises(ScheduleNotFoundError):
            txqueue.change_schedule(c, "missing", cron="0 * * * *")
        txqueue.delete_schedule(c, "hourly")
        assert txqueue.list_schedules(c) == []


def rows_of(db_url: str) -> list[dict[str, Any]]:
    """The schedules' rows, as stored."""
    with closing(connect(db_url)) as c:
        return [{"name": s.name, "paused": s.paused} for s in txqueue.list_schedules(c)]


def test_workers_keep_a_schedule_made_at_run_time_once_per_slot_until_paused_or_deleted(
    db_url: str, queue: str, clock: Clock
) -> None:
    registry = txqueue.Registry()
    ran: list[str] = []

    @registry.task("report", queue=queue)
    def report(kind: str) -> None:
        ran.append(kind)

    def enqueued() -> list[datetime]:
        return sorted(r["run_at"] for r in rows(db_url) if r["state"] == "succeeded")

    # Two workers, as two hosts, and no schedule in their code.
    with running(_worker(db_url, registry, queue)), running(_worker(db_url, registry, queue)):
        with committed(db_url) as c:
            txqueue.create_schedule(
                c, "hourly", cron="0 * * * *", task="report", queue=queue, payload={"kind": "x"}
            )
        time.sleep(1.5)  # a new schedule starts at its next slot, not at once
        assert rows(db_url) == []
        first = _to_next_hour(clock)
        wait_until(lambda: len(enqueued()) == 1, timeout=5)
        time.sleep(1.5)  # more looks: the slot is not enqueued again
        assert enqueued() == [first]
        assert ran == ["x"]

        with committed(db_url) as c:
            txqueue.pause_schedule(c, "hourly")
        time.sleep(1.2)  # a look at the pause
        _to_next_hour(clock)
        time.sleep(1.5)
        assert enqueued() == [first]

        with committed(db_url) as c:
            txqueue.resume_schedule(c, "hourly")
            txqueue.change_schedule(c, "hourly", payload={"kind": "y"})
        third = _to_next_hour(clock)
        wait_until(lambda: len(enqueued()) == 2, timeout=5)
        assert enqueued() == [first, third]  # the slot passed while paused was skipped
        assert ran == ["x", "y"]

        with committed(db_url) as c:
            txqueue.delete_schedule(c, "hourly")
        time.sleep(1.2)
        _to_next_hour(clock)
        time.sleep(1.5)
    assert enqueued() == [first, third]
    assert len(rows(db_url)) == 2


def test_a_code_schedule_paused_stays_paused_across_restarts_and_resumes(
    db_url: str, queue: str, clock: Clock
) -> None:
    registry = txqueue.Registry()

    @registry.periodic("0 * * * *", queue=queue)
    def hourly() -> None: ...

    with running(_worker(db_url, registry, queue)):
        wait_until(lambda: bool(rows_of(db_url)), timeout=5)
        with committed(db_url) as c:
            txqueue.pause_schedule(c, "hourly")
    with running(_worker(db_url, registry, queue)):  # a deploy writes the code's rows again
        time.sleep(1.2)
        _to_next_hour(clock)
        time.sleep(1.5)
        assert rows(db_url) == []
        assert [s["paused"] for s in rows_of(db_url)] == [True]
        with committed(db_url) as c:
            txqueue.resume_schedule(c, "hourly")
        slot = _to_next_hour(clock)
        wait_until(lambda: [r["run_at"] for r in rows(db_url)] == [slot], timeout=5)


def test_a_run_time_schedule_of_the_same_name_is_kept_instead_of_the_codes(
    db_url: str, queue: str, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    registry = txqueue.Registry()
    done: list[str] = []

    @registry.periodic("0 * * * *", queue=queue, payload={"by": "code"})
    @registry.task("hourly", queue=queue)
    def hourly(by: str) -> None:
        done.append(by)

    with committed(db_url) as c:
        txqueue.create_schedule(
            c, "hourly", cron="0 * * * *", task="hourly", queue=queue, payload={"by": "runtime"}
        )
    warned = caplog.at_level(logging.WARNING, "txqueue.worker")
    with warned, running(_worker(db_url, registry, queue)):
        time.sleep(1.2)
        _to_next_hour(clock)
        wait_until(lambda: bool(done), timeout=5)
        time.sleep(1)
        assert done == ["runtime"]
        with committed(db_url) as c:
            assert txqueue.get_schedule(c, "hourly").source == "runtime"
            txqueue.delete_schedule(c, "hourly")
        # The code's schedule is written again at the next look, and kept from then on.
        wait_until(lambda: [s["name"] for s in rows_of(db_url)] == ["hourly"], timeout=5)
        time.sleep(1.2)
        _to_next_hour(clock)
        wait_until(lambda: len(done) == 2, timeout=5)
    assert done == ["runtime", "code"]
    assert caplog.text.count("periodic hourly: a schedule made at run time has this name") == 1
    with committed(db_url) as c:
        assert txqueue.get_schedule(c, "hourly").source == "code"


def test_a_worker_of_other_queues_does_not_keep_a_schedule(
    db_url: str, queue: str, clock: Clock
) -> None:
    with committed(db_url) as c:
        txqueue.create_schedule(c, "elsewhere", cron="0 * * * *", task="t", queue="nobody")
    with running(_worker(db_url, txqueue.Registry(), queue)):
        time.sleep(1.2)
        _to_next_hour(clock)
        time.sleep(1.5)
    assert rows(db_url) == []
