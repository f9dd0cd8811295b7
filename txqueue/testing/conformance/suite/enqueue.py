"""The enqueue side of each store: ``insert_task`` and ``insert_tasks`` on an application's
connection, and the async stores' same calls on their native drivers."""

from __future__ import annotations

import json
import zoneinfo
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from .... import Task
from ....errors import InvalidValueError
from ....store.records import Inserted, Outcome
from ..case import WORKER, StoreCase, finish

TRACE = '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'


def seconds(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()


def near(moment: datetime, expected: datetime, within: float = 2.0) -> bool:
    """Close enough for two reads of a clock, on a loaded machine."""
    return abs(seconds(moment, expected)) <= within


def current_xid(s: StoreCase, app: Any) -> str | None:
    """The transaction the app's connection is in, as PostgreSQL names it for a wake-up."""
    if s.kind.current_xid is None:
        return None
    row = app.execute(s.kind.current_xid).fetchone()
    return str(row[0])


def trace_of(row: dict[str, Any]) -> Any:
    """A row's trace context, decoded: PostgreSQL hands jsonb back decoded, SQLite the text
    as written."""
    value = row["trace_context"]
    return json.loads(value) if isinstance(value, str) else value


def names(s: StoreCase) -> list[str]:
    return [r["name"] for r in s.rows()]


# --- insert_task -------------------------------------------------------------------------


def test_a_plain_task_is_stored_pending_ripe_now_with_nothing_filled_in(s: StoreCase) -> None:
    app = s.app()
    inserted = s.store.insert_task(app, Task("t", {"n": 1, "s": "é"}, queue="q"))
    app.commit()

    assert inserted.new is True
    row = s.row(inserted.id)
    assert near(row["created_at"], s.now())
    assert row["run_at"] == row["created_at"] == row["updated_at"]
    assert {k: v for k, v in row.items() if k not in ("created_at", "run_at", "updated_at")} == {
        "id": inserted.id,
        "queue": "q",
        "name": "t",
        "payload": {"n": 1, "s": "é"},
        "state": "pending",
        "priority": 0,
        "start_time": None,
        "expires_at": None,
        "finished_at": None,
        "attempts": 0,
        "max_attempts": None,
        "timeout": None,
        "unique_key": None,
        "worker_id": None,
        "result": None,
        "errors": [],
        "on_lease_expired": None,
        "cancel_requested": False,
        "notified_at": None,
        "trace_context": None,
        "concurrency_key": None,
        "events": [],  # no history yet: it begins with the first claim
        "workflow_id": None,
        "step": None,
        "parents": None,
        "inputs": None,
        "progress": None,  # until its handler says how far it is
        "start_by": None,
        "expires_in": None,
        "time_limit": None,
        "steps": None,  # until its handler records one
        "wait_key": None,  # until its handler waits for a signal
        "parent_id": None,  # a task a handler started (ctx.start_child) has one
    }


def test_run_at_follows_the_database_clock(s: StoreCase) -> None:
    s.advance(1000)
    (now, later) = s.insert(Task("t", queue="q"), Task("t", queue="q", delay=10))
    assert near(s.row(now.id)["run_at"], s.now())
    assert near(s.row(later.id)["run_at"], s.now() + timedelta(seconds=10))


def test_the_xid_names_the_enqueuing_transaction_on_postgres_and_is_none_on_sqlite(
    s: StoreCase,
) -> None:
    app = s.app()
    first = s.store.insert_task(app, Task("t", queue="q"))
    second = s.store.insert_task(app, Task("t", queue="q", unique_key="k"))
    xid = current_xid(s, app)
    app.commit()

    assert first.xid == second.xid == xid
    if s.kind.xids:
        assert xid is not None and xid.isdigit()


def test_a_task_is_invisible_until_the_app_commits(s: StoreCase) -> None:
    app = s.app()
    inserted = s.store.insert_task(app, Task("t", queue="q"))
    assert s.rows() == []
    assert s.store.why_unclaimed(s.conn, [(inserted.id, None)])[inserted.id].state is None

    app.commit()
    assert [r["id"] for r in s.rows()] == [inserted.id]


def test_a_task_whose_transaction_rolls_back_is_gone(s: StoreCase) -> None:
    app = s.app()
    s.store.insert_task(app, Task("t", queue="q"))
    s.store.insert_task(app, Task("t", queue="q", unique_key="k"))
    app.rollback()

    assert s.rows() == []
    # The rolled-back key holds nothing.
    assert s.insert(Task("t", queue="q", unique_key="k"))[0].new is True


@pytest.mark.parametrize("holder_state", ["pending", "running", "parked"])
def test_a_live_unique_key_returns_its_holder_without_a_new_row(
    s: StoreCase, holder_state: str
) -> None:
    holder = s.enqueue(unique_key="k", payload={"first": True})
    if holder_state != "pending":
        [claimed] = s.claim(holder)
        if holder_state == "parked":  # its handler sleeps
            assert finish(s, claimed, "parked", retry_in=3600.0) == {holder: "parked"}

    app = s.app()
    again = s.store.insert_task(app, Task("t", {"first": False}, queue="q", unique_key="k"))
    app.commit()

    assert again == Inserted(holder, False, None)
    (row,) = s.rows()
    assert (row["id"], row["state"], row["payload"]) == (holder, holder_state, {"first": True})


def test_a_unique_key_taken_earlier_in_the_same_transaction_returns_that_task(
    s: StoreCase,
) -> None:
    app = s.app()
    first = s.store.insert_task(app, Task("t", queue="q", unique_key="k"))
    second = s.store.insert_task(app, Task("t", queue="q", unique_key="k"))
    app.commit()

    assert first.new is True
    assert second == Inserted(first.id, False, None)
    assert len(s.rows()) == 1


@pytest.mark.parametrize("finished", ["succeeded", "failed", "cancelled"])
def test_a_unique_key_is_free_again_once_its_holder_finished(s: StoreCase, finished: str) -> None:
    holder = s.enqueue(unique_key="k")
    s.claim(holder)
    assert s.store.record_outcomes(s.conn, [Outcome(holder, 1, WORKER, finished)]) == {
        holder: finished
    }

    (again,) = s.insert(Task("t", queue="q", unique_key="k"))

    assert again.new is True and again.id != holder
    assert [(r["id"], r["state"]) for r in s.rows()] == [
        (holder, finished),
        (again.id, "pending"),
    ]


def test_a_unique_key_does_not_depend_on_the_queue_and_stands_for_one_name(
    s: StoreCase,
) -> None:
    holder = s.enqueue("t", unique_key="k")
    (again,) = s.insert(Task("t", queue="elsewhere", unique_key="k"))
    assert again == Inserted(holder, False, None)
    with pytest.raises(InvalidValueError, match=r"'k' is held by the live task t .*, not a other"):
        s.insert(Task("other", queue="q", unique_key="k"))


def test_a_delay_puts_run_at_that_far_after_the_enqueue(s: StoreCase) -> None:
    delays: list[float | timedelta] = [60, 60.5, timedelta(minutes=2), 0]
    inserted = s.insert(*(Task("t", queue="q", delay=d) for d in delays))
    for delay, task in zip(delays, inserted, strict=True):
        row = s.row(task.id)
        expected = delay.total_seconds() if isinstance(delay, timedelta) else delay
        assert seconds(row["run_at"], row["created_at"]) == pytest.approx(expected, abs=1e-3)


def test_run_at_is_stored_as_the_instant_given_in_the_future_or_the_past(s: StoreCase) -> None:
    when = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    instants = [
        when,
        when - timedelta(days=3650),
        # Another zone's time for the same instant.
        when.astimezone(zoneinfo.ZoneInfo("Asia/Kolkata")),
    ]
    inserted = s.insert(*(Task("t", queue="q", run_at=at) for at in instants))
    for at, task in zip(instants, inserted, strict=True):
        assert seconds(s.row(task.id)["run_at"], at) == pytest.approx(0, abs=1e-3)


def test_priority_max_attempts_and_timeout_are_stored_as_given(s: StoreCase) -> None:
    given = [(-32768, 1, 1.0), (-1, 5, 1.5), (7, 999, 300.0), (32767, 1000, 86400.0)]
    inserted = s.insert(
        *(Task("t", queue="q", priority=p, max_attempts=m, timeout=t) for p, m, t in given)
    )
    stored = [s.row(i.id) for i in inserted]
    assert [(r["priority"], r["max_attempts"], r["timeout"]) for r in stored] == given


def test_the_trace_context_is_stored_with_the_task(s: StoreCase) -> None:
    app = s.app()
    traced = s.store.insert_task(app, Task("t", queue="q"), trace=TRACE)
    untraced = s.store.insert_task(app, Task("t", queue="q"))
    app.commit()

    assert {r["id"]: trace_of(r) for r in s.rows()} == {
        traced.id: json.loads(TRACE),
        untraced.id: None,
    }
