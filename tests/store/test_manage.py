"""Task management's store methods on each store: retry_ids, retry_failed, cancel,
get_task, list_tasks, delete_queue, status and listen_finished.

The methods an application calls (retry, cancel, get and list) run on its connection, in
its transaction; the others on txqueue's own.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import fields
from datetime import timedelta
from typing import Any, TypeVar

import pytest

from tests.store.conftest import WORKER, StoreCase, defaults, finish, near
from txqueue import Task
from txqueue.errors import StoreError
from txqueue.store.records import Moved, Outcome
from txqueue.task import TaskInfo, TaskState, timeline

T = TypeVar("T")
ZERO = uuid.UUID(int=0)
NO_ROW_LOCKS = "no row locks: a writer holds the whole file, so there is nothing to skip"
NO_NOTIFICATIONS = "SQLite sends no notifications: a waiter polls"
KEY_TAKEN = "retry: a pending or running task holds the same unique_key"


def committed(s: StoreCase, call: Callable[[Any], T]) -> T:
    """``call`` on an application's connection, in a transaction then committed."""
    app = s.app()
    out = call(app)
    app.commit()
    return out


def failed(s: StoreCase, **options: Any) -> uuid.UUID:
    """A task whose only attempt raised."""
    task_id = s.enqueue(**options)
    [claimed] = s.claim(task_id, with_=defaults(max_attempts=1))
    assert finish(s, claimed, "failed", error="ValueError") == {task_id: "failed"}
    return task_id


def succeeded(s: StoreCase, **options: Any) -> uuid.UUID:
    [claimed] = s.claim(s.enqueue(**options))
    assert finish(s, claimed, "succeeded", result='"ok"') == {claimed.id: "succeeded"}
    return claimed.id


def cancelled(s: StoreCase, **options: Any) -> uuid.UUID:
    task_id = s.enqueue(**options)
    assert committed(s, lambda c: s.store.cancel(c, task_id)) == "cancelled"
    return task_id


def check_moved(s: StoreCase, moved: list[Moved], expected: list[tuple[uuid.UUID, str]]) -> None:
    """``moved`` names exactly the (id, queue) expected, in any order, with the xid of the
    caller's transaction on PostgreSQL (one for all) and none on SQLite."""
    assert sorted((i, q) for i, q, _ in moved) == sorted(expected)
    xids = {xid for _, _, xid in moved}
    if s.kind.xids:
        assert len(xids) == 1 and all(x is not None and x.isdigit() for x in xids)
    else:
        assert xids == {None}


# --- retry_ids -------------------------------------------------------------------------


def test_retry_ids_puts_failed_and_cancelled_tasks_back_to_pending_now(s: StoreCase) -> None:
    fail = failed(s, queue="a")
    cancel = cancelled(s, queue="b")
    # Cancelled while running, then its handler raised: the flag is still set.
    [running] = s.claim(s.enqueue(queue="c"))
    assert committed(s, lambda c: s.store.cancel(c, running.id)) == "running"
    assert finish(s, running, "pending", error="Cancelled") == {running.id: "cancelled"}
    before = {r["id"]: r for r in s.rows()}
    s.advance(100)

    moved = committed(s, lambda c: s.store.retry_ids(c, [fail, cancel, running.id]))

    check_moved(s, moved, [(fail, "a"), (cancel, "b"), (running.id, "c")])
    now = s.now()
    for row in s.rows():
        was = before[row["id"]]
        assert row["state"] == "pending"
        assert near(row["run_at"], now) and near(row["updated_at"], now)
        assert row["finished_at"] is None and row["expires_at"] is None
        assert row["cancel_requested"] is False and row["notified_at"] is None
        # A retry is one more attempt of the same task, not a new task: its history stays.
        for column in ("attempts", "errors", "worker_id", "start_time", "result"):
            assert row[column] == was[column]
    assert s.row(fail)["max_attempts"] == 2  # one more than the attempt it used up
    assert s.row(cancel)["max_attempts"] is None  # never claimed: still the registry's
    assert s.row(running.id)["max_attempts"] == 3


def test_retry_ids_raises_max_attempts_only_when_no_attempt_is_left(s: StoreCase) -> None:
    spare = failed(s, max_attempts=5)
    s.store.retry_ids(s.conn, [spare])

    assert (s.row(spare)["attempts"], s.row(spare)["max_attempts"]) == (1, 5)


def test_retry_ids_leaves_unfinished_succeeded_and_unknown_tasks(s: StoreCase) -> None:
    pending = s.enqueue()
    [running] = s.claim(s.enqueue())
    done = succeeded(s)
    before = s.rows()

    assert committed(s, lambda c: s.store.retry_ids(c, [pending, running.id, done])) == []
    assert committed(s, lambda c: s.store.retry_ids(c, [uuid.uuid4()])) == []
    assert committed(s, lambda c: s.store.retry_ids(c, [])) == []
    assert s.rows() == before


def test_retry_ids_is_undone_with_the_callers_transaction(s: StoreCase) -> None:
    task_id = failed(s)
    app = s.app()
    assert len(s.store.retry_ids(app, [task_id])) == 1
    info = s.store.get_task(app, task_id)
    assert info is not None and info.state == "pending"

    app.rollback()
    assert s.row(task_id)["state"] == "failed"


def test_retry_ids_refuses_a_task_whose_unique_key_a_live_task_holds(s: StoreCase) -> None:
    old = failed(s, unique_key="k")
    live = s.enqueue(unique_key="k")
    app = s.app()

    with pytest.raises(StoreError, match=KEY_TAKEN):
        s.store.retry_ids(app, [old])
    app.rollback()
    assert (s.row(old)["state"], s.row(live)["state"]) == ("failed", "pending")


# --- retry_failed ----------------------------------------------------------------------


def test_retry_failed_moves_failed_tasks_only(s: StoreCase) -> None:
    ids = [failed(s), failed(s, queue="other")]
    cancel = cancelled(s)
    done = succeeded(s)
    s.advance(100)

    moved = committed(s, lambda c: s.store.retry_failed(c, None, ZERO, 100))

    check_moved(s, moved, [(ids[0], "q"), (ids[1], "other")])
    now = s.now()
    for task_id in ids:
        row = s.row(task_id)
        assert (row["state"], row["attempts"], row["max_attempts"]) == ("pending", 1, 2)
        assert near(row["run_at"], now) and row["finished_at"] is None
    assert (s.row(cancel)["state"], s.row(done)["state"]) == ("cancelled", "succeeded")


def test_retry_failed_takes_only_the_queue_given(s: StoreCase) -> None:
    a, b = failed(s, queue="a"), failed(s, queue="b")

    moved = committed(s, lambda c: s.store.retry_failed(c, "a", ZERO, 100))

    check_moved(s, moved, [(a, "a")])
    assert s.row(b)["state"] == "failed"
    assert committed(s, lambda c: s.store.retry_failed(c, "none", ZERO, 100)) == []


def test_retry_failed_pages_in_id_order_after_the_id_given(s: StoreCase) -> None:
    ids = sorted(failed(s) for _ in range(5))

    def page(after: uuid.UUID) -> list[uuid.UUID]:
        return sorted(
            i for i, _, _ in committed(s, lambda c: s.store.retry_failed(c, None, after, 2))
        )

    pages = [page(ZERO)]
    while pages[-1]:
        pages.append(page(pages[-1][-1]))

    assert pages == [ids[0:2], ids[2:4], ids[4:5], []]


def test_retry_failed_starts_strictly_after_the_id_given(s: StoreCase) -> None:
    ids = sorted(failed(s) for _ in range(3))

    moved = committed(s, lambda c: s.store.retry_failed(c, None, ids[0], 100))

    assert sorted(i for i, _, _ in moved) == ids[1:]
    assert s.row(ids[0])["state"] == "failed"


def test_retry_failed_leaves_a_task_whose_unique_key_a_live_task_holds(s: StoreCase) -> None:
    held = failed(s, unique_key="k")
    s.enqueue(unique_key="k")
    free = failed(s, unique_key="j")

    moved = committed(s, lambda c: s.store.retry_failed(c, None, ZERO, 100))

    check_moved(s, moved, [(free, "q")])
    assert s.row(held)["state"] == "failed"


def test_retry_failed_of_two_failed_tasks_sharing_a_unique_key_retries_neither(
    s: StoreCase,
) -> None:
    # Neither key is held by a live task when the page is chosen, so both are picked, and
    # the second one's move collides with the first's: the whole statement fails.
    first, second = failed(s, unique_key="k"), failed(s, unique_key="k")
    app = s.app()

    with pytest.raises(StoreError, match=KEY_TAKEN):
        s.store.retry_failed(app, None, ZERO, 100)
    app.rollback()
    assert (s.row(first)["state"], s.row(second)["state"]) == ("failed", "failed")


@pytest.mark.unsupported(sqlite=NO_ROW_LOCKS)
def test_retry_failed_skips_tasks_another_transaction_holds(s: StoreCase) -> None:
    held, free = failed(s), failed(s)
    other = s.app()
    other.execute("SELECT 1 FROM txqueue_tasks WHERE id = %s FOR UPDATE", (held,))

    moved = committed(s, lambda c: s.store.retry_failed(c, None, ZERO, 100))

    assert [i for i, _, _ in moved] == [free]
    other.rollback()
    assert s.row(held)["state"] == "failed"


# --- cancel ----------------------------------------------------------------------------


def test_cancel_of_a_pending_task_cancels_it_now(s: StoreCase) -> None:
    ripe, delayed = s.enqueue(), s.enqueue(delay=1000)
    s.advance(100)

    assert committed(s, lambda c: s.store.cancel(c, ripe)) == "cancelled"
    assert committed(s, lambda c: s.store.cancel(c, delayed)) == "cancelled"

    now = s.now()
    for row in s.rows():
        assert (row["state"], row["cancel_requested"], row["attempts"]) == ("cancelled", False, 0)
        assert near(row["finished_at"], now) and near(row["updated_at"], now)
    s.advance(1000)
    assert s.claim(ripe, delayed) == []


def test_cancel_of_a_running_task_flags_it_for_its_handler(s: StoreCase) -> None:
    [running] = s.claim(s.enqueue())
    before = s.row(running.id)
    s.advance(10)

    assert committed(s, lambda c: s.store.cancel(c, running.id)) == "running"
    # A second request is harmless: the handler is told once either way.
    assert committed(s, lambda c: s.store.cancel(c, running.id)) == "running"

    row = s.row(running.id)
    assert (row["state"], row["cancel_requested"], row["finished_at"]) == ("running", True, None)
    assert row["expires_at"] == before["expires_at"] and near(row["updated_at"], s.now())
    assert s.store.cancel_requested(s.conn, WORKER, [running.id]) == {running.id}


def test_cancel_of_a_finished_or_unknown_task_returns_none_and_changes_nothing(
    s: StoreCase,
) -> None:
    ids = [succeeded(s), failed(s), cancelled(s)]
    before = s.rows()
    s.advance(10)  # so that a touched updated_at would show

    for task_id in [*ids, uuid.uuid4()]:
        assert committed(s, lambda c, task_id=task_id: s.store.cancel(c, task_id)) is None
    assert s.rows() == before


def test_cancel_is_undone_with_the_callers_transaction(s: StoreCase) -> None:
    task_id = s.enqueue()
    app = s.app()
    assert s.store.cancel(app, task_id) == "cancelled"

    app.rollback()
    assert s.row(task_id)["state"] == "pending"


# --- get_task and list_tasks -----------------------------------------------------------


def check_info(info: TaskInfo | None, row: dict[str, Any]) -> None:
    """Every field of ``info`` is the row's column, in the same Python type (the state a
    TaskState, the str enum of the stored text)."""
    assert info is not None
    assert info.events == timeline(
        row["events"], row["state"], row["attempts"], row["start_time"], row["worker_id"]
    )
    for f in fields(TaskInfo):
        if f.name == "events":
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
