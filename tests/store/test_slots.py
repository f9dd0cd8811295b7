"""keep_slots: the slots PostgreSQL writes tasks to, turned and emptied
(docs/explanation/storage.md), with every task kept where ``get_task`` and the claims find
it. SQLite has one table."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from psycopg import sql

from txqueue.core.task import Task
from txqueue.errors import StoreError
from txqueue.testing.conformance import StoreCase, select
from txqueue.testing.conformance.suite.claims import outcome

ONE_TABLE = "SQLite keeps its tasks in one table: there are no slots"
PERIOD = 10.0


def fresh(s: StoreCase) -> None:
    """Slot 0 current since now (the test database was cloned from one made earlier)."""
    s.execute("UPDATE txqueue_slots SET since = now()")


def slots(s: StoreCase) -> dict[str, int]:
    return {str(i): n for i, n in select(s, "SELECT id::text, slot FROM txqueue_tasks")}


def pages(s: StoreCase, slot: int) -> int:
    [(n,)] = select(s, f"SELECT pg_relation_size('txqueue_tasks_s{slot}')")
    return int(n)


@pytest.mark.unsupported(sqlite=ONE_TABLE)
def test_slots_turn_and_empty_with_no_task_lost(s: StoreCase) -> None:
    fresh(s)
    done, waiting, running = s.enqueue(), s.enqueue(delay=3600), s.enqueue()
    s.claim(done, running)
    s.store.record_outcomes(s.conn, [outcome(done, "succeeded")])
    kept = s.store.keep_slots(s.conn, PERIOD)
    assert kept is not None and (kept.current, kept.rotated) == (0, False)

    s.advance(PERIOD + 1)
    kept = s.store.keep_slots(s.conn, PERIOD)
    assert kept is not None and (kept.current, kept.rotated) == (1, True)
    later = s.enqueue()
    # Slot 0 still runs a task: its finished ones go to the history, the rest stay.
    kept = s.store.keep_slots(s.conn, PERIOD)
    assert kept is not None and (kept.finished_moved, kept.truncated) == (1, ())
    assert slots(s) == {str(done): -1, str(waiting): 0, str(running): 0, str(later): 1}

    s.store.record_outcomes(s.conn, [outcome(running, "failed")])
    kept = s.store.keep_slots(s.conn, PERIOD)
    assert kept is not None
    assert (kept.finished_moved, kept.pending_moved, kept.truncated) == (1, 1, (0,))
    assert slots(s) == {str(done): -1, str(waiting): 1, str(running): -1, str(later): 1}
    assert pages(s, 0) == 0
    assert s.store.get_task(s.conn, done).state == "succeeded"  # type: ignore[union-attr]
    # The failed task, retried, comes back to the current slot.
    assert [m[0] for m in s.store.retry_ids(s.conn, [running])] == [running]
    assert slots(s)[str(running)] == 1
    assert {c.id for c in s.claim(running, later)} == {running, later}

    s.advance(PERIOD + 1)
    kept = s.store.keep_slots(s.conn, PERIOD)
    assert kept is not None and (kept.current, kept.rotated) == (2, True)  # the next empty


@pytest.mark.unsupported(sqlite=ONE_TABLE)
def test_an_outcome_written_unanswered_is_found_once_its_task_is_in_the_history(
    s: StoreCase,
) -> None:
    fresh(s)
    done = s.enqueue()
    s.claim(done)
    written = outcome(done, "succeeded")
    s.store.record_outcomes(s.conn, [written])
    s.advance(PERIOD + 1)
    for _ in range(2):  # a turn, then the finished task to the history
        s.store.keep_slots(s.conn, PERIOD)
    assert slots(s) == {str(done): -1}
    assert s.store.outcomes_landed(s.conn, [written]) == {done: "succeeded"}


@pytest.mark.unsupported(sqlite=ONE_TABLE)
def test_a_reader_of_the_tasks_delays_the_truncation_not_the_queue(s: StoreCase) -> None:
    fresh(s)
    with psycopg.connect(s.url) as reader:  # a report reading the tasks, left open
        reader.execute("SELECT count(*) FROM txqueue_tasks")
        for slot in (0, 1, 2, 3):
            task_id = s.enqueue()
            assert slots(s)[str(task_id)] == slot
            s.claim(task_id)
            s.store.record_outcomes(s.conn, [outcome(task_id, "succeeded")])
            s.advance(PERIOD + 1)
            started = time.monotonic()
            kept = s.store.keep_slots(s.conn, PERIOD)
            assert time.monotonic() - started < 1.0  # gave up on each lock at once
            assert kept is not None and kept.truncated == ()
        # Slot 3 stays current: every other one holds what it could not truncate.
        assert (kept.current, kept.rotated, kept.stuck) == (3, False, False)
        s.advance(PERIOD + 1)
        kept = s.store.keep_slots(s.conn, PERIOD)
        assert kept is not None and (kept.current, kept.stuck) == (3, True)
        task_id = s.enqueue()
        assert [c.id for c in s.claim(task_id)] == [task_id]
        reader.rollback()
    kept = s.store.keep_slots(s.conn, PERIOD)
    assert kept is not None and (kept.truncated, kept.current, kept.rotated) == ((0,), 0, True)
    assert len(slots(s)) == 5


class Stalling:
    """A connection whose process stops (frozen, cut off) just before it sends a statement
    containing ``marker``: nothing more reaches the server until ``go`` is set."""

    def __init__(self, conn: psycopg.Connection[Any], marker: str) -> None:
        self._conn, self._marker = conn, marker
        self.stopped, self.go = threading.Event(), threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def execute(self, query: Any, *args: Any, **kwargs: Any) -> Any:
        text = query.as_string(self._conn) if isinstance(query, sql.Composable) else str(query)
        if self._marker in text:
            self.stopped.set()
            self.go.wait()
        return self._conn.execute(query, *args, **kwargs)


@pytest.mark.unsupported(sqlite=ONE_TABLE)
def test_a_process_stopped_inside_slot_upkeep_holds_up_the_queue_two_seconds_at_most(
    s: StoreCase,
) -> None:
    fresh(s)
    done = s.enqueue()
    s.claim(done)
    s.store.record_outcomes(s.conn, [outcome(done, "succeeded")])
    s.advance(PERIOD + 1)
    s.store.keep_slots(s.conn, PERIOD)  # slot 1 current; slot 0 holds a finished task
    # Stopped holding slot 0's ACCESS EXCLUSIVE lock, before its TRUNCATE.
    stalling = Stalling(s.store.connect(s.url), "TRUNCATE")
    failed: list[BaseException] = []

    def upkeep() -> None:
        try:
            s.store.keep_slots(stalling, PERIOD)  # type: ignore[arg-type]
        except StoreError as exc:
            failed.append(exc)

    keeper = threading.Thread(target=upkeep)
    keeper.start()
    try:
        assert stalling.stopped.wait(10)
        started = time.monotonic()
        recovering = threading.Thread(target=s.store.recover_expired, args=(s.conn, 10, 5))
        recovering.start()
        recovering.join(10)
        assert not recovering.is_alive(), "recovery still waits for the stopped upkeep's lock"
        assert time.monotonic() - started < 5
    finally:
        stalling.go.set()
        keeper.join(10)
        stalling.close()
    # The server ended the stopped session: its upkeep fails as a lost connection.
    assert len(failed) == 1 and s.store.is_connection_error(failed[0]), failed


@pytest.mark.unsupported(sqlite=ONE_TABLE)
def test_a_unique_key_its_task_ended_without_giving_back_is_taken_again(s: StoreCase) -> None:
    old = s.enqueue(unique_key="k")
    # As a worker of a release from before txqueue_unique_keys ends a task.
    s.execute(
        "UPDATE txqueue_tasks SET state = 'succeeded', finished_at = now() WHERE id = %s",
        (str(old),),
    )
    (again,) = s.insert(Task("t", queue="q", unique_key="k"))
    assert again.new and again.id != old
    (dup,) = s.insert(Task("t", queue="q", unique_key="k"))
    assert (dup.new, dup.id) == (False, again.id)


def test_a_round_of_upkeep_on_each_store(s: StoreCase) -> None:
    if not s.kind.slots:
        assert s.store.keep_slots(s.conn, PERIOD) is None  # one table: nothing to keep
        return
    fresh(s)
    kept = s.store.keep_slots(s.conn, PERIOD)
    assert kept is not None and (kept.current, kept.rotated, kept.stuck) == (0, False, False)
