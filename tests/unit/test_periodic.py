"""Periodic schedules: declaration, validation and which slots are due. No services needed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import txqueue
from txqueue.schedules.periodic import CATCH_UP_LIMIT, Schedule


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


@pytest.mark.parametrize(
    ("kwargs", "error", "field"),
    [
        ({"cron": "61 * * * *"}, txqueue.InvalidValueError, "cron"),
        ({"cron": "* * * *"}, txqueue.InvalidValueError, "cron"),
        ({"cron": "0 0 30 2 *"}, txqueue.InvalidValueError, "cron"),  # never matches
        ({"cron": 5}, txqueue.InvalidTypeError, "cron"),
        ({"timezone": "Mars/Olympus"}, txqueue.InvalidValueError, "timezone"),
        ({"timezone": "../etc/passwd"}, txqueue.InvalidValueError, "timezone"),
        ({"timezone": None}, txqueue.InvalidTypeError, "timezone"),
        ({"catch_up": "yes"}, txqueue.InvalidTypeError, "catch_up"),
        ({"queue": "has space"}, txqueue.InvalidValueError, "queue"),
        ({"payload": {"x": object()}}, txqueue.InvalidValueError, "payload"),
        ({"name": ""}, txqueue.InvalidValueError, "name"),
    ],
)
def test_a_bad_schedule_is_refused_naming_the_field(
    kwargs: dict[str, Any], error: type[Exception], field: str
) -> None:
    registry = txqueue.Registry()
    with pytest.raises(error) as caught:
        registry.periodic(**{"cron": "* * * * *", **kwargs})(lambda payload: None)
    assert caught.value.field == field  # type: ignore[attr-defined]


def test_periodic_registers_a_plain_function_or_schedules_a_registered_task() -> None:
    registry = txqueue.Registry()

    @registry.periodic("*/5 * * * *", queue="maintenance", payload={"full": False})
    def sweep(payload: Any) -> None: ...

    @registry.periodic("0 3 * * *", name="nightly_sweep", payload={"full": True})
    @registry.task(timeout=600)
    def deep_sweep(payload: Any) -> None: ...

    assert registry.get("sweep") is sweep and sweep.queue == "maintenance"
    assert deep_sweep.timeout == 600
    assert [(s.name, s.task, s.queue, s.payload) for s in registry.schedules()] == [
        ("sweep", "sweep", "maintenance", {"full": False}),
        ("nightly_sweep", "deep_sweep", "default", {"full": True}),
    ]
    with pytest.raises(txqueue.ConfigError, match="give the second a name="):
        registry.periodic("0 4 * * *")(sweep)


def test_a_typed_tasks_schedule_is_checked_against_its_arguments() -> None:
    registry = txqueue.Registry()

    @registry.periodic("0 3 * * *", payload={"older_than_days": 30})
    @registry.task()
    def purge(older_than_days: int) -> None: ...

    @registry.periodic("0 * * * *", payload={"tenant": "acme"})
    @registry.task(concurrency_key="tenant")
    def report(tenant: str) -> None: ...

    assert registry.schedules()[0].payload == {"older_than_days": 30}
    now = datetime.now(UTC)
    assert registry.schedules()[1].enqueued(now).concurrency_key == "tenant:acme"
    assert registry.schedules()[0].enqueued(now).concurrency_key is None
    for payload, wrong in [
        ({"older_than_days": "30"}, "older_than_days: must be int, not str"),
        (None, "older_than_days: is missing"),
        ({"older_than_days": 1, "dry": True}, "dry: is not an argument"),
    ]:
        with pytest.raises(txqueue.ConfigError, match=f"periodic 'purge': payload: {wrong}"):
            registry.periodic("0 4 * * *", name="other", payload=payload)(purge)


def test_the_latest_slot_counts_now_itself_and_the_next_is_strictly_after() -> None:
    hourly = Schedule("h", "0 * * * *", "h", "default")
    assert hourly.latest(at("2026-01-01T12:00:00+00:00")) == at("2026-01-01T12:00:00+00:00")
    assert hourly.latest(at("2026-01-01T12:59:59.9+00:00")) == at("2026-01-01T12:00:00+00:00")
    assert hourly.next_after(at("2026-01-01T12:00:00+00:00")) == at("2026-01-01T13:00:00+00:00")
    seconds = Schedule("s", "*/10 * * * * *", "s", "default")  # six fields: seconds first
    assert seconds.next_after(at("2026-01-01T12:00:01+00:00")) == at("2026-01-01T12:00:10+00:00")


def test_missed_slots_run_once_unless_catching_up() -> None:
    last = at("2026-01-01T12:00:00+00:00")
    now = at("2026-01-01T17:30:00+00:00")
    once = Schedule("h", "0 * * * *", "h", "default")
    every = Schedule("h", "0 * * * *", "h", "default", catch_up=True)
    assert once.due(last, last + timedelta(minutes=59)) == []
    assert once.due(last, now) == [at("2026-01-01T17:00:00+00:00")]
    assert every.due(last, now) == [at(f"2026-01-01T{h}:00:00+00:00") for h in range(13, 18)]
    # A long outage catches up the newest slots only.
    seconds = Schedule("s", "* * * * * *", "s", "default", catch_up=True)
    due = seconds.due(last, last + timedelta(days=1))
    assert len(due) == CATCH_UP_LIMIT and due[-1] == last + timedelta(days=1)


def test_slots_are_read_in_the_schedules_time_zone_across_daylight_saving() -> None:
    paris = Schedule("p", "30 2 * * *", "p", "default", timezone="Europe/Paris")
    # 2026-03-29: Paris skips 02:00-03:00; cron runs the missing 02:30 at 03:00 local.
    assert paris.next_after(at("2026-03-28T12:00:00+00:00")) == at("2026-03-29T01:00:00+00:00")
    assert paris.next_after(at("2026-03-29T12:00:00+00:00")) == at("2026-03-30T00:30:00+00:00")
    task = paris.enqueued(at("2026-03-30T00:30:00+00:00"))
    assert (task.name, task.queue, task.run_at) == ("p", "default", at("2026-03-30T00:30:00+00:00"))


def test_a_repeated_hour_neither_loses_the_latest_slot_nor_gives_a_next_one_in_the_past() -> None:
    # 2024-11-03: New York repeats 01:00-02:00; cron runs 01:30 once, in the first pass.
    nightly = Schedule("n", "30 1 * * *", "n", "default", timezone="America/New_York")
    first_pass = at("2024-11-03T05:30:00+00:00")
    for minutes in range(0, 4 * 60, 7):
        now = at("2024-11-03T04:00:00+00:00") + timedelta(minutes=minutes)
        assert nightly.latest(now) <= now < nightly.next_after(now)
    in_second_pass = at("2024-11-03T06:05:00+00:00")
    assert nightly.latest(in_second_pass) == first_pass
    assert nightly.next_after(in_second_pass) == at("2024-11-04T06:30:00+00:00")
