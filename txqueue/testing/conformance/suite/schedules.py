"""now, keep_schedules, schedules_of, fire_schedule, list_schedules and the run-time calls
(get, add, write, delete): periodic tasks' rows, read against the store's clock, and the
compare-and-set that enqueues each slot once."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from .... import Task
from ....errors import StoreError
from ....store.records import ScheduleRow
from ..case import StoreCase, near

# Slots are whole seconds, as cron's are.
S1, S2, S3, S4 = (datetime(2030, 1, 1, hour, tzinfo=UTC) for hour in (1, 2, 3, 4))


def hourly(name: str = "hourly", last_slot: datetime = S1, **changes: Any) -> ScheduleRow:
    fields = {"task": "t", "queue": "q", "cron": "0 * * * *", "timezone": "UTC", **changes}
    return ScheduleRow(name=name, last_slot=last_slot, **fields)


def at(*slots: datetime) -> list[Task]:
    return [Task("t", {"slot": slot.isoformat()}, queue="q", run_at=slot) for slot in slots]


def test_now_is_the_stores_clock_and_moves_with_it(s: StoreCase) -> None:
    now = s.store.now(s.conn)
    assert now.tzinfo is not None
    assert near(now, s.now())
    s.advance(3600)
    assert near(s.store.now(s.conn), now + timedelta(hours=1))


def test_schedules_kept_are_listed_by_name(s: StoreCase) -> None:
    b, a = hourly("b", S2), hourly("a", S1, task="other", queue="r", timezone="Europe/Paris")
    s.store.keep_schedules(s.conn, [b, a])
    assert s.store.list_schedules(s.conn) == [a, b]


def test_keeping_no_schedules_changes_nothing(s: StoreCase) -> None:
    s.store.keep_schedules(s.conn, [])
    assert s.store.list_schedules(s.conn) == []
    s.store.keep_schedules(s.conn, [hourly()])
    s.store.keep_schedules(s.conn, [])
    assert s.store.list_schedules(s.conn) == [hourly()]


def test_an_unchanged_schedule_keeps_its_last_slot_and_takes_the_new_task_and_queue(
    s: StoreCase,
) -> None:
    s.store.keep_schedules(s.conn, [hourly(last_slot=S2)])
    s.store.keep_schedules(s.conn, [hourly(last_slot=S3, task="t2", queue="q2")])
    assert s.store.list_schedules(s.conn) == [hourly(last_slot=S2, task="t2", queue="q2")]
    s.store.keep_schedules(s.conn, [hourly(last_slot=S1)])
    assert s.store.list_schedules(s.conn) == [hourly(last_slot=S2)]


def test_a_changed_schedule_starts_at_the_later_of_its_last_slot_and_the_one_offered(
    s: StoreCase,
) -> None:
    s.store.keep_schedules(s.conn, [hourly(last_slot=S3)])
    s.store.keep_schedules(s.conn, [hourly(last_slot=S1, cron="30 * * * *")])
    assert s.store.list_schedules(s.conn) == [hourly(last_slot=S3, cron="30 * * * *")]
    s.store.keep_schedules(s.conn, [hourly(last_slot=S4, cron="30 * * * *", task="t2")])
    assert s.store.list_schedules(s.conn) == [hourly(last_slot=S3, cron="30 * * * *", task="t2")]
    s.store.keep_schedules(s.conn, [hourly(last_slot=S4)])  # the cron changed back
    assert s.store.list_schedules(s.conn) == [hourly(last_slot=S4)]
    s.store.keep_schedules(s.conn, [hourly(last_slot=S2, timezone="Asia/Tokyo")])
    assert s.store.list_schedules(s.conn) == [hourly(last_slot=S4, timezone="Asia/Tokyo")]


def last_slots(s: StoreCase, *names: str) -> dict[str, datetime]:
    return {r.name: r.last_slot for r in s.store.schedules_of(s.conn, [], names)[1]}


def test_schedules_of_gives_the_clock_and_the_rows_of_the_queues_and_names_asked(
    s: StoreCase,
) -> None:
    a, b, c = hourly("a", S1), hourly("b", S2, queue="r"), hourly("c", S3, queue="other")
    s.store.keep_schedules(s.conn, [c, b, a])
    now, rows = s.store.schedules_of(s.conn, ["q", "r"])
    assert rows == [a, b]
    assert near(now, s.now())
    assert s.store.schedules_of(s.conn, ["r"], ["c", "missing"])[1] == [b, c]


def test_schedules_of_no_queue_or_none_kept_is_the_clock_alone(s: StoreCase) -> None:
    assert s.store.schedules_of(s.conn, ["q"], ["missing"])[1] == []
    s.store.keep_schedules(s.conn, [hourly()])
    now, rows = s.store.schedules_of(s.conn, [])
    assert rows == []
    assert near(now, s.now())


def test_firing_from_the_last_slot_read_moves_it_and_enqueues_the_tasks(s: StoreCase) -> None:
    s.store.keep_schedules(s.conn, [hourly(last_slot=S1)])
    inserted = s.store.fire_schedule(s.conn, "hourly", S1, S3, at(S2, S3))
    assert inserted is not None
    assert [i.new for i in inserted] == [True, True]
    # One transaction: on PostgreSQL one xid for the wake-ups; SQLite has none.
    assert len({i.xid for i in inserted}) == 1
    assert (inserted[0].xid is None) == (not s.kind.xids)
    found = {
        r["id"]: (r["state"], r["queue"], r["name"], r["run_at"], r["payload"]) for r in s.rows()
    }
    assert found == {
        inserted[0].id: ("pending", "q", "t", S2, {"slot": S2.isoformat()}),
        inserted[1].id: ("pending", "q", "t", S3, {"slot": S3.isoformat()}),
    }
    assert last_slots(s, "hourly") == {"hourly": S3}


def test_a_second_firing_from_the_same_reading_enqueues_nothing(s: StoreCase) -> None:
    s.store.keep_schedules(s.conn, [hourly(last_slot=S1)])
    assert s.store.fire_schedule(s.conn, "hourly", S1, S2, at(S2)) is not None
    # Another worker, catching up from the same reading.
    assert s.store.fire_schedule(s.conn, "hourly", S1, S3, at(S2, S3)) is None
    assert [r["run_at"] for r in s.rows()] == [S2]
    assert last_slots(s, "hourly") == {"hourly": S2}


def test_firing_from_a_slot_other_than_the_last_one_enqueues_nothing(s: StoreCase) -> None:
    s.store.keep_schedules(s.conn, [hourly(last_slot=S2)])
    assert s.store.fire_schedule(s.conn, "hourly", S1, S4, at(S4)) is None
    assert s.store.fire_schedule(s.conn, "hourly", S3, S4, at(S4)) is None
    assert s.rows() == []
    assert s.store.list_schedules(s.conn) == [hourly(last_slot=S2)]


def test_firing_a_schedule_not_kept_enqueues_nothing(s: StoreCase) -> None:
    s.store.keep_schedules(s.conn, [hourly("other", S1)])
    assert s.store.fire_schedule(s.conn, "hourly", S1, S2, at(S2)) is None
    assert s.rows() == []


def test_firing_with_no_tasks_moves_the_slot(s: StoreCase) -> None:
    s.store.keep_schedules(s.conn, [hourly(last_slot=S1)])
    assert s.store.fire_schedule(s.conn, "hourly", S1, S2, []) == []
    assert last_slots(s, "hourly") == {"hourly": S2}


def test_firing_takes_any_slot_even_one_before_the_last(s: StoreCase) -> None:
    # The store compares, it does not order: the scheduler only ever passes a later slot.
    s.store.keep_schedules(s.conn, [hourly(last_slot=S3)])
    assert s.store.fire_schedule(s.conn, "hourly", S3, S1, []) == []
    assert last_slots(s, "hourly") == {"hourly": S1}


def test_a_fired_task_whose_unique_key_is_live_gets_the_holders_id(s: StoreCase) -> None:
    holder = s.enqueue("t", unique_key="daily")
    s.store.keep_schedules(s.conn, [hourly(last_slot=S1)])
    task = Task("t", queue="q", run_at=S2, unique_key="daily")
    inserted = s.store.fire_schedule(s.conn, "hourly", S1, S2, [task])
    assert inserted is not None
    assert [(i.id, i.new) for i in inserted] == [(holder, False)]
    assert [r["id"] for r in s.rows()] == [holder]
    assert last_slots(s, "hourly") == {"hourly": S2}


def test_a_firing_whose_tasks_cannot_be_written_leaves_the_slot_where_it_was(
    s: StoreCase,
) -> None:
    for statement in s.kind.refuse_inserts("1 = 1", "refused"):
        s.execute(statement)
    s.store.keep_schedules(s.conn, [hourly(last_slot=S1)])
    with pytest.raises(StoreError, match=r"^enqueue(_many)?: refused$"):
        s.store.fire_schedule(s.conn, "hourly", S1, S3, at(S2, S3))
    assert last_slots(s, "hourly") == {"hourly": S1}
    assert s.rows() == []


def made(name: str = "made", last_slot: datetime = S1, **changes: Any) -> ScheduleRow:
    return replace(hourly(name, last_slot), source="runtime", **changes)


def test_a_schedule_added_at_run_time_is_kept_with_its_arguments_once_per_name(
    s: StoreCase,
) -> None:
    row = made(payload={"n": 1, "to": ["a"]}, catch_up=True)
    assert s.store.add_schedule(s.conn, row) is True
    assert s.store.add_schedule(s.conn, made(task="other")) is False
    assert s.store.get_schedule(s.conn, "made") == row
    assert s.store.get_schedule(s.conn, "missing") is None
    assert s.store.list_schedules(s.conn) == [row]


def test_a_schedule_is_added_in_the_callers_transaction(s: StoreCase) -> None:
    app = s.app()
    s.store.add_schedule(app, made("rolled_back"))
    app.rollback()
    s.store.add_schedule(app, made())
    assert s.store.list_schedules(s.conn) == []
    app.commit()
    assert s.store.list_schedules(s.conn) == [made()]


def test_writing_a_schedule_replaces_its_definition_slot_and_pause_if_unchanged_since_read(
    s: StoreCase,
) -> None:
    s.store.add_schedule(s.conn, made())
    changed = made(last_slot=S3, cron="30 * * * *", payload=[1], paused=True, queue="r")
    # As read before a worker moved it, or before someone else paused or changed it: no.
    for stale in (made(last_slot=S2), made(paused=True), made(payload={"a": 1}), made(cron="x")):
        assert s.store.write_schedule(s.conn, changed, stale) is False
    assert s.store.get_schedule(s.conn, "made") == made()
    assert s.store.write_schedule(s.conn, changed, made()) is True
    assert s.store.get_schedule(s.conn, "made", lock=True) == changed
    assert s.store.list_schedules(s.conn) == [changed]
    assert s.store.write_schedule(s.conn, made(), changed) is True  # its payload as read
    assert s.store.list_schedules(s.conn) == [made()]


def test_deleting_a_schedule_says_whether_it_existed(s: StoreCase) -> None:
    s.store.add_schedule(s.conn, made())
    assert s.store.delete_schedule(s.conn, "made") is True
    assert s.store.delete_schedule(s.conn, "made") is False
    assert s.store.list_schedules(s.conn) == []


def test_a_paused_schedule_is_not_fired(s: StoreCase) -> None:
    s.store.add_schedule(s.conn, made(paused=True))
    assert s.store.fire_schedule(s.conn, "made", S1, S2, at(S2)) is None
    assert s.rows() == []
    assert last_slots(s, "made") == {"made": S1}


def test_code_does_not_overwrite_a_schedule_made_at_run_time_and_is_told_its_name(
    s: StoreCase,
) -> None:
    s.store.add_schedule(s.conn, made("clash"))
    taken = s.store.keep_schedules(s.conn, [hourly("clash", S3, task="code"), hourly("mine")])
    assert taken == ["clash"]
    assert s.store.list_schedules(s.conn) == [made("clash"), hourly("mine")]


def test_code_keeps_a_pause_and_writes_its_arguments(s: StoreCase) -> None:
    s.store.keep_schedules(s.conn, [hourly()])
    assert s.store.write_schedule(s.conn, hourly(paused=True), hourly())
    kept = hourly(payload={"a": 1}, catch_up=True)
    assert s.store.keep_schedules(s.conn, [kept]) == []
    assert s.store.list_schedules(s.conn) == [hourly(payload={"a": 1}, catch_up=True, paused=True)]
