"""The dashboard's reads: queue_counts, finished_per_minute, failing_names, browse and
running_tasks. Each looks at a bounded number of rows, so counts that reach their cap are
lower bounds."""

from __future__ import annotations

import uuid

import pytest

from .... import Task
from ....store.records import Outcome
from ....store.reports import Page
from ..case import WORKER, StoreCase, defaults

# Real time passes between the statements of a test, on top of the moved clock.
SLACK = 2.0
CAP = 1000


def about(seconds: float) -> object:
    return pytest.approx(seconds, abs=SLACK)


def ended(s: StoreCase, state: str, name: str = "t", queue: str = "q") -> uuid.UUID:
    """A task that ran once and ended in ``state`` now (cancelled: while still pending)."""
    task = s.enqueue(name, queue=queue)
    if state == "cancelled":
        assert s.store.cancel(s.conn, task) == "cancelled"
        return task
    s.claim(task, with_=defaults(name))
    error = {"type": "E", "message": "boom"} if state == "failed" else None
    result = "1" if state == "succeeded" else None
    outcome = Outcome(task, 1, WORKER, state, result=result, error=error)
    assert s.store.record_outcomes(s.conn, [outcome]) == {task: state}
    return task


def run(s: StoreCase, name: str = "t", queue: str = "q", timeout: float | None = None) -> uuid.UUID:
    task = s.insert(Task(name, queue=queue, timeout=timeout))[0].id
    assert len(s.claim(task, with_=defaults(name))) == 1
    return task


def test_every_read_of_an_empty_table_is_empty(s: StoreCase) -> None:
    assert s.store.queue_counts(s.conn, CAP) == []
    assert s.store.finished_per_minute(s.conn, CAP) == []
    assert s.store.failing_names(s.conn, CAP, 5) == []
    empty = s.store.browse(
        s.conn, state=None, queue=None, name=None, before=None, window=CAP, limit=10
    )
    assert empty == Page([], None)
    assert s.store.running_tasks(s.conn, 10) == []


# --- queue_counts ----------------------------------------------------------------------


def test_pending_tasks_are_counted_with_the_ripe_ones_and_the_oldest_ripe_age(
    s: StoreCase,
) -> None:
    s.enqueue(queue="q")
    s.advance(100)
    s.enqueue(queue="q")
    s.enqueue(queue="q", delay=3600)
    s.enqueue(queue="r", delay=60)
    assert sorted(s.store.queue_counts(s.conn, CAP)) == [
        ("q", "pending", 3, 2, about(100)),
        ("r", "pending", 1, 0, None),
    ]
    s.advance(60)  # r's task is ripe from now on
    assert sorted(s.store.queue_counts(s.conn, CAP)) == [
        ("q", "pending", 3, 2, about(160)),
        ("r", "pending", 1, 1, about(0)),
    ]


def test_running_and_finished_tasks_are_counted_per_queue_and_state(s: StoreCase) -> None:
    run(s, queue="q")
    ended(s, "succeeded", queue="q")
    ended(s, "succeeded", queue="q")
    ended(s, "failed", queue="q")
    ended(s, "cancelled", queue="r")
    ended(s, "succeeded", queue="r")
    assert sorted(s.store.queue_counts(s.conn, CAP)) == [
        ("q", "failed", 1, 0, None),
        ("q", "running", 1, 0, None),
        ("q", "succeeded", 2, 0, None),
        ("r", "cancelled", 1, 0, None),
        ("r", "succeeded", 1, 0, None),
    ]


def test_the_cap_bounds_each_states_count_and_keeps_the_newest_finished(s: StoreCase) -> None:
    for _ in range(3):
        s.enqueue(queue="p")
        run(s, queue="r")
    ended(s, "succeeded", queue="old")
    ended(s, "succeeded", queue="old")
    s.advance(10)
    ended(s, "succeeded", queue="new")
    assert sorted(s.store.queue_counts(s.conn, 2)) == [
        ("new", "succeeded", 1, 0, None),
        ("old", "succeeded", 1, 0, None),
        ("p", "pending", 2, 2, about(10)),
        ("r", "running", 2, 0, None),
    ]
    assert sorted(s.store.queue_counts(s.conn, 1))[0] == ("new", "succeeded", 1, 0, None)


# --- finished_per_minute ---------------------------------------------------------------


def test_successes_and_failures_are_counted_by_whole_minutes_ago(s: StoreCase) -> None:
    ended(s, "succeeded")
    s.advance(60)
    ended(s, "succeeded")
    s.advance(90)
    ended(s, "succeeded")
    ended(s, "failed")
    ended(s, "failed")
    ended(s, "cancelled")  # neither
    run(s)
    assert sorted(s.store.finished_per_minute(s.conn, CAP)) == [
        ("failed", 0, 2),
        ("succeeded", 0, 1),
        ("succeeded", 1, 1),
        ("succeeded", 2, 1),
    ]


def test_a_minute_ago_is_the_first_whole_minute(s: StoreCase) -> None:
    ended(s, "succeeded")
    s.advance(55)
    assert s.store.finished_per_minute(s.conn, CAP) == [("succeeded", 0, 1)]
    s.advance(5)
    assert s.store.finished_per_minute(s.conn, CAP) == [("succeeded", 1, 1)]


def test_tasks_finished_an_hour_ago_or_more_are_left_out(s: StoreCase) -> None:
    ended(s, "failed")
    s.advance(3595)
    assert s.store.finished_per_minute(s.conn, CAP) == [("failed", 59, 1)]
    s.advance(5)
    assert s.store.finished_per_minute(s.conn, CAP) == []


def test_the_cap_keeps_the_newest_of_each_state(s: StoreCase) -> None:
    for _ in range(3):
        ended(s, "succeeded")
        ended(s, "failed")
        s.advance(60)
    assert sorted(s.store.finished_per_minute(s.conn, 2)) == [
        ("failed", 1, 1),
        ("failed", 2, 1),
        ("succeeded", 1, 1),
        ("succeeded", 2, 1),
    ]


# --- failing_names ---------------------------------------------------------------------


def test_failing_names_are_ordered_by_failures_then_name_up_to_the_limit(s: StoreCase) -> None:
    for name in ("c", "a", "b", "c", "b"):
        ended(s, "failed", name=name)
    ended(s, "succeeded", name="a")
    ended(s, "cancelled", name="a")
    assert s.store.failing_names(s.conn, CAP, 5) == [("b", 2), ("c", 2), ("a", 1)]
    assert s.store.failing_names(s.conn, CAP, 2) == [("b", 2), ("c", 2)]


def test_failures_a_day_old_or_more_are_left_out(s: StoreCase) -> None:
    ended(s, "failed", name="a")
    s.advance(86395)
    assert s.store.failing_names(s.conn, CAP, 5) == [("a", 1)]
    s.advance(5)
    assert s.store.failing_names(s.conn, CAP, 5) == []


def test_the_cap_counts_only_the_newest_failures(s: StoreCase) -> None:
    ended(s, "failed", name="old")
    ended(s, "failed", name="old")
    s.advance(10)
    ended(s, "failed", name="new")
    assert s.store.failing_names(s.conn, 1, 5) == [("new", 1)]
    assert s.store.failing_names(s.conn, 2, 5) == [("new", 1), ("old", 1)]


# --- browse ----------------------------------------------------------------------------


def browse(
    s: StoreCase,
    *,
    state: str | None = None,
    queue: str | None = None,
    name: str | None = None,
    before: uuid.UUID | None = None,
    window: int = CAP,
    limit: int = 10,
) -> tuple[list[uuid.UUID], uuid.UUID | None]:
    page = s.store.browse(
        s.conn, state=state, queue=queue, name=name, before=before, window=window, limit=limit
    )
    assert isinstance(page, Page)
    return [t.id for t in page.tasks], page.older


def test_browse_gives_whole_tasks_newest_first_and_no_older_page_at_the_end(
    s: StoreCase,
) -> None:
    t1 = s.enqueue("a", {"n": 1}, queue="q")
    t2 = s.enqueue("b", {"n": 2}, queue="r", priority=5)
    t3 = ended(s, "succeeded")
    assert browse(s) == ([t3, t2, t1], None)
    page = s.store.browse(
        s.conn, state=None, queue=None, name=None, before=None, window=CAP, limit=10
    )
    assert page.tasks[1] == s.store.get_task(s.conn, t2)
    second = page.tasks[1]
    assert (second.queue, second.name, second.payload, second.state, second.priority) == (
        "r",
        "b",
        {"n": 2},
        "pending",
        5,
    )
    assert (page.tasks[0].state, page.tasks[0].result) == ("succeeded", 1)


def test_a_full_page_points_below_its_last_task_and_the_next_continues_there(
    s: StoreCase,
) -> None:
    t1, t2, t3, t4, t5 = (s.enqueue() for _ in range(5))
    assert browse(s, limit=2) == ([t5, t4], t4)
    assert browse(s, limit=2, before=t4) == ([t3, t2], t2)
    assert browse(s, limit=2, before=t2) == ([t1], None)


def test_a_full_page_ending_at_the_oldest_task_points_to_an_empty_last_page(
    s: StoreCase,
) -> None:
    # Telling would cost another read: the page after is empty instead.
    t1, t2 = s.enqueue(), s.enqueue()
    assert browse(s, limit=2) == ([t2, t1], t1)
    assert browse(s, limit=2, before=t1) == ([], None)


def test_browse_filters_by_state_queue_and_name_together(s: StoreCase) -> None:
    a_q = s.enqueue("a", queue="q")
    b_q = s.enqueue("b", queue="q")
    a_r = s.enqueue("a", queue="r")
    done = ended(s, "succeeded", name="a", queue="q")
    assert browse(s, state="pending") == ([a_r, b_q, a_q], None)
    assert browse(s, queue="q") == ([done, b_q, a_q], None)
    assert browse(s, name="a") == ([done, a_r, a_q], None)
    assert browse(s, name="a", queue="q") == ([done, a_q], None)
    assert browse(s, name="a", queue="q", state="pending") == ([a_q], None)
    assert browse(s, state="failed") == ([], None)


def test_a_page_looks_at_a_window_of_tasks_and_points_below_it(s: StoreCase) -> None:
    # A filter that matches few tasks gives short pages, never a scan of the whole table.
    t1, t2, _, t4, _ = (s.enqueue(name) for name in ("x", "y", "y", "x", "y"))
    assert browse(s, name="x", window=2) == ([t4], t4)
    assert browse(s, name="x", window=2, before=t4) == ([], t2)
    assert browse(s, name="x", window=2, before=t2) == ([t1], None)


def test_a_window_smaller_than_the_page_ends_the_page_early(s: StoreCase) -> None:
    t1, t2, t3, t4, t5 = (s.enqueue() for _ in range(5))
    assert browse(s, window=2) == ([t5, t4], t4)
    assert browse(s, window=2, before=t4) == ([t3, t2], t2)
    assert browse(s, window=2, before=t2) == ([t1], None)


def test_browse_before_an_id_of_no_task_starts_below_that_id(s: StoreCase) -> None:
    t1, t2 = s.enqueue(), s.enqueue()
    between = uuid.UUID(int=t1.int + 1)
    assert browse(s, before=between) == ([t1], None)
    assert browse(s, before=uuid.UUID(int=0)) == ([], None)
    assert browse(s, before=uuid.UUID(int=t2.int + 1)) == ([t2, t1], None)


# --- running_tasks ---------------------------------------------------------------------


def test_running_tasks_are_listed_by_lease_end_up_to_the_limit(s: StoreCase) -> None:
    s.enqueue()
    ended(s, "succeeded")
    ended(s, "failed")
    late = run(s, timeout=30)
    soon = run(s, timeout=10)
    middle = run(s, name="u", queue="r", timeout=20)
    running = s.store.running_tasks(s.conn, 10)
    assert [t.id for t in running] == [soon, middle, late]
    assert {(t.state, t.worker_id, t.attempts) for t in running} == {("running", WORKER, 1)}
    assert running[1] == s.store.get_task(s.conn, middle)
    assert [t.id for t in s.store.running_tasks(s.conn, 2)] == [soon, middle]
