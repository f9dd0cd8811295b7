"""Management's reads and the rest: get_task, list_tasks, delete_queue, status and
listen_finished."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import fields
from datetime import timedelta
from typing import Any

import pytest

from .... import Task
from ....core.stored import RecordedStep, TaskInfo, timeline
from ....core.task import TaskState
from ....store.records import Outcome
from ..case import WORKER, StoreCase, defaults, finish, near
from .manage import NO_NOTIFICATIONS, cancelled, committed, failed, succeeded

# --- get_task and list_tasks -----------------------------------------------------------


def check_info(info: TaskInfo | None, row: dict[str, Any]) -> None:
    """Every field of ``info`` is the row's column, in the same Python type (the state a
    TaskState, the str enum of the stored text)."""
    assert info is not None
    assert info.events == timeline(
        row["events"], row["state"], row["attempts"], row["start_time"], row["worker_id"]
    )
    assert info.steps == [RecordedStep.of_json(e) for e in row["steps"] or []]
    for f in fields(TaskInfo):
        if f.name in ("events", "steps"):
            continue
        assert getattr(info, f.name) == row[f.name], f.name
        expected = TaskState if f.name == "state" else type(row[f.name])
        assert type(getattr(info, f.name)) is expected, f.name


def test_get_task_returns_a_new_task_as_enqueued(s: StoreCase) -> None:
    task_id = s.enqueue(
        "t",
        {"a": [1, "x", None]},
        priority=5,
        delay=timedelta(seconds=10),
        unique_key="k",
        max_attempts=4,
        timeout=12.5,
    )

    info = s.store.get_task(s.conn, task_id)

    check_info(info, s.row(task_id))
    assert info is not None
    now = s.now()
    assert (info.id, info.queue, info.name, info.payload, info.state) == (
        task_id,
        "q",
        "t",
        {"a": [1, "x", None]},
        "pending",
    )
    assert (info.priority, info.attempts, info.max_attempts, info.timeout) == (5, 0, 4, 12.5)
    assert (info.unique_key, info.worker_id, info.result, info.errors) == ("k", None, None, [])
    assert (info.start_time, info.expires_at, info.finished_at) == (None, None, None)
    assert info.cancel_requested is False
    assert near(info.run_at, now + timedelta(seconds=10)) and near(info.created_at, now)


def test_get_task_returns_a_finished_task_with_its_history(s: StoreCase) -> None:
    task_id = s.enqueue(payload=["list", 1])
    [first] = s.claim(task_id)
    finish(s, first, "pending", error="ValueError")
    s.advance(10)
    [second] = s.claim(task_id)
    finish(s, second, "succeeded", result='{"ok": true, "n": [1.5]}')

    info = s.store.get_task(s.conn, task_id)

    check_info(info, s.row(task_id))
    assert info is not None
    assert (info.state, info.attempts, info.max_attempts, info.worker_id) == (
        "succeeded",
        2,
        3,
        WORKER,
    )
    assert info.payload == ["list", 1] and info.result == {"ok": True, "n": [1.5]}
    assert [(e["type"], e["attempt"]) for e in info.errors] == [("ValueError", 1)]
    now = s.now()
    assert near(info.start_time, now) and near(info.finished_at, now) and not info.expires_at


def test_get_task_of_an_unknown_id_is_none(s: StoreCase) -> None:
    s.enqueue()
    assert s.store.get_task(s.conn, uuid.uuid4()) is None


def test_get_task_sees_the_callers_uncommitted_task_and_no_one_else_does(s: StoreCase) -> None:
    app = s.app()
    inserted = s.store.insert_task(app, Task("t", queue="q"))

    info = s.store.get_task(app, inserted.id)
    assert info is not None and info.state == "pending"
    assert s.store.get_task(s.conn, inserted.id) is None
    app.rollback()


def test_list_tasks_returns_the_newest_first_up_to_limit(s: StoreCase) -> None:
    ids = [s.enqueue(), succeeded(s), failed(s), s.enqueue()]

    listed = s.store.list_tasks(s.conn, state=None, queue=None, name=None, limit=3)

    assert [t.id for t in listed] == ids[:0:-1]
    assert listed == [s.store.get_task(s.conn, i) for i in ids[:0:-1]]


def test_list_tasks_keeps_tasks_matching_every_filter_given(s: StoreCase) -> None:
    a1 = s.enqueue("t", queue="a")
    a2 = failed(s, queue="a")
    b1 = succeeded(s, queue="b")
    b2 = s.enqueue("u", queue="b")

    app = s.app()

    def listed(**filters: str) -> list[uuid.UUID]:
        given = {"state": None, "queue": None, "name": None, **filters}
        return [t.id for t in s.store.list_tasks(app, **given, limit=100)]

    assert listed() == [b2, b1, a2, a1]
    assert listed(state="pending") == [b2, a1]
    assert listed(queue="a") == [a2, a1]
    assert listed(name="t") == [b1, a2, a1]
    assert listed(state="pending", name="u") == [b2]
    assert listed(state="failed", queue="b") == []
    assert listed(queue="a", name="u") == []


# --- delete_queue ----------------------------------------------------------------------


def test_delete_queue_deletes_its_tasks_in_every_state_and_counts_them(s: StoreCase) -> None:
    s.enqueue()
    s.claim(s.enqueue())
    succeeded(s)
    failed(s)
    cancelled(s)
    kept = s.enqueue(queue="other")

    assert s.store.delete_queue(s.conn, "q") == 5
    assert [r["id"] for r in s.rows()] == [kept]
    assert s.store.delete_queue(s.conn, "q") == 0
    assert s.store.delete_queue(s.conn, "unknown") == 0


# --- status ----------------------------------------------------------------------------


def test_status_counts_each_queue_and_state_with_the_oldest_ripe_tasks_age(
    s: StoreCase,
) -> None:
    s.enqueue(queue="a")
    s.enqueue(queue="c", delay=40)
    s.enqueue(queue="b", delay=1000)
    succeeded(s, queue="b")
    s.advance(100)
    s.enqueue(queue="a")
    s.claim(s.enqueue(queue="a"))

    rows = s.store.status(s.conn)

    assert [r[:3] for r in rows] == [
        ("a", "pending", 2),
        ("a", "running", 1),
        ("b", "pending", 1),
        ("b", "succeeded", 1),
        ("c", "pending", 1),
    ]
    ages = [r[3] for r in rows]
    # Age counts from when a task became ripe; not-ripe and unfinished groups have none.
    assert ages[1:4] == [None, None, None]
    assert isinstance(ages[0], float) and isinstance(ages[4], float)
    assert abs(ages[0] - 100) < 2 and abs(ages[4] - 60) < 2
    assert all(isinstance(r[2], int) for r in rows)


def test_status_of_an_empty_table_is_empty(s: StoreCase) -> None:
    assert s.store.status(s.conn) == []


# --- listen_finished -------------------------------------------------------------------


@contextlib.contextmanager
def listener(s: StoreCase) -> Any:
    conn = s.store.connect(s.url)
    try:
        yield s.store.listen_finished(conn)
    finally:
        conn.close()


def waited(wait: Callable[[uuid.UUID, float], None], task_id: uuid.UUID, timeout: float) -> float:
    """Seconds ``wait`` took to return."""
    started = time.monotonic()
    wait(task_id, timeout)
    return time.monotonic() - started


def test_listen_finished_offers_a_listener_on_postgres_and_none_on_sqlite(s: StoreCase) -> None:
    with listener(s) as wait:
        assert callable(wait) if s.kind.notifies else wait is None


@pytest.mark.unsupported(sqlite=NO_NOTIFICATIONS)
def test_listener_wakes_when_a_task_finishes(s: StoreCase) -> None:
    ids = [s.enqueue() for _ in range(3)]
    claimed = s.claim(*ids)
    error = {"type": "ValueError", "message": "boom"}
    outcomes = [
        Outcome(claimed[0].id, 1, WORKER, "succeeded", result="1"),
        Outcome(claimed[1].id, 1, WORKER, "failed", error=error),
        Outcome(claimed[2].id, 1, WORKER, "cancelled", error=error),
    ]
    # A waiter each, as txqueue.wait listens: one statement finishing several tasks
    # wakes every one of them.
    with listener(s) as first, listener(s) as second, listener(s) as third:
        assert len(s.store.record_outcomes(s.conn, outcomes)) == 3

        for wait, task in zip((first, second, third), claimed, strict=True):
            assert waited(wait, task.id, 10) < 5


@pytest.mark.unsupported(sqlite=NO_NOTIFICATIONS)
def test_listener_wakes_when_a_pending_task_is_cancelled_and_committed(s: StoreCase) -> None:
    task_id = s.enqueue()
    with listener(s) as wait:
        app = s.app()
        s.store.cancel(app, task_id)
        assert waited(wait, task_id, 0.2) >= 0.2  # nothing before the commit

        app.commit()
        assert waited(wait, task_id, 10) < 5


@pytest.mark.unsupported(sqlite=NO_NOTIFICATIONS)
def test_listener_waits_out_its_timeout_for_tasks_that_did_not_finish(s: StoreCase) -> None:
    done, retried, flagged, lost = (s.enqueue() for _ in range(4))
    claimed = s.claim(done, retried, flagged, lost, with_=defaults(max_attempts=1))
    by_id = {c.id: c for c in claimed}
    with listener(s) as wait:
        finish(s, by_id[done], "succeeded")
        finish(s, by_id[retried], "pending", error="ValueError")
        committed(s, lambda c: s.store.cancel(c, flagged))

        # Another task's notification, a retry and a cancel request are not a finish.
        for task_id in (retried, flagged):
            assert waited(wait, task_id, 0.2) >= 0.2

        # A recovery that ends a task tells its waiters at once, as every transition
        # that finishes one does (before the transitions, it sent nothing).
        s.advance(31)
        found = s.store.recover_expired(s.conn, 10, 5)
        assert {r.id: r.state for r in found} == {lost: "failed", flagged: "cancelled"}
        assert waited(wait, lost, 5) < 1  # one notification names both


@pytest.mark.unsupported(sqlite="one table, no slots: a task never moves under a statement")
def test_retry_ids_goes_on_when_slot_upkeep_moves_the_task_under_it(s: StoreCase) -> None:
    """Slot upkeep moves finished tasks to another partition: a retry that was waiting for
    the row's lock then finds it gone from where it looked (SQLSTATE 40001), and must look
    again rather than fail the caller's transaction."""
    task_id = failed(s)
    mover = s.app()
    mover.execute("UPDATE txqueue_tasks SET slot = -1 WHERE id = %s", (task_id,))
    moved: list[Any] = []

    def retry() -> None:
        moved.append(committed(s, lambda c: s.store.retry_ids(c, [task_id])))

    retrying = threading.Thread(target=retry)
    retrying.start()
    time.sleep(0.3)  # the retry waits for the row's lock
    mover.commit()
    retrying.join(10)
    assert [i for i, _, _ in moved[0]] == [task_id]
    [row] = s.rows()
    assert row["state"] == "pending"
