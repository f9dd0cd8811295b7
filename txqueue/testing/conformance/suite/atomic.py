"""Atomic tasks' outcomes in their claim's transaction, leases extended, progress."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from ....errors import StoreError
from ....store.records import Outcome
from ..case import WORKER, StoreCase
from .claims import NO_LOCKS, OTHER, lock, near, outcome, running, seconds

# --- atomic and record_atomic ------------------------------------------------------------


@pytest.fixture
def effects(s: StoreCase) -> Any:
    """A table of the application's, written by an atomic task's handler; its row count."""
    s.execute("CREATE TABLE effects (n integer NOT NULL)")
    reader = s.app()

    def count() -> int:
        n = int(reader.execute("SELECT count(*) FROM effects").fetchone()[0])
        reader.commit()
        return n

    return count


def test_an_atomic_tasks_writes_and_success_commit_together(s: StoreCase, effects: Any) -> None:
    (task,) = running(s)

    with s.store.atomic(s.conn):
        s.conn.execute("INSERT INTO effects (n) VALUES (1)")
        assert s.store.record_atomic(s.conn, outcome(task, "succeeded", result='"done"'))
        # Nothing shows before the commit.
        assert effects() == 0
        assert s.row(task)["state"] == "running"

    assert effects() == 1
    row = s.row(task)
    assert (row["state"], row["result"], row["expires_at"]) == ("succeeded", "done", None)
    assert near(row["finished_at"], s.now())


def test_an_exception_in_an_atomic_task_rolls_back_its_writes_and_its_success(
    s: StoreCase, effects: Any
) -> None:
    (task,) = running(s)
    before = s.row(task)

    with pytest.raises(ZeroDivisionError), s.store.atomic(s.conn):
        s.conn.execute("INSERT INTO effects (n) VALUES (1)")
        assert s.store.record_atomic(s.conn, outcome(task, "succeeded"))
        raise ZeroDivisionError

    assert effects() == 0
    assert s.row(task) == before
    # The worker still holds the task and records the failure as for any task.
    assert s.store.record_outcomes(s.conn, [outcome(task, "failed")]) == {task: "failed"}


@pytest.mark.parametrize(("attempt", "worker"), [(2, WORKER), (1, OTHER)])
def test_an_atomic_success_of_an_attempt_that_lost_the_task_is_refused(
    s: StoreCase, effects: Any, attempt: int, worker: str
) -> None:
    (task,) = running(s)
    before = s.row(task)

    with pytest.raises(LookupError), s.store.atomic(s.conn):
        s.conn.execute("INSERT INTO effects (n) VALUES (1)")
        late = outcome(task, "succeeded", attempt, worker_id=worker)
        if not s.store.record_atomic(s.conn, late):
            raise LookupError  # the worker's FencedOut: its rollback takes the writes

    assert effects() == 0
    assert s.row(task) == before


def test_a_failed_statement_of_an_atomic_handler_is_raised_as_the_drivers_error(
    s: StoreCase, effects: Any
) -> None:
    (task,) = running(s)

    with pytest.raises(s.kind.driver_error) as raised, s.store.atomic(s.conn):
        s.conn.execute("INSERT INTO effects (n) VALUES (1)")
        s.conn.execute("INSERT INTO no_such_table (n) VALUES (1)")

    assert not isinstance(raised.value, StoreError)
    assert effects() == 0
    assert s.row(task)["state"] == "running"
    assert s.store.record_outcomes(s.conn, [outcome(task, "succeeded")]) == {task: "succeeded"}


def test_an_atomic_handler_that_commits_the_connection_itself_gets_no_success_written(
    s: StoreCase, effects: Any
) -> None:
    (task,) = running(s)

    refused = s.kind.guards_commit or StoreError
    with pytest.raises((refused, StoreError)) as raised, s.store.atomic(s.conn):
        s.conn.execute("INSERT INTO effects (n) VALUES (1)")
        s.conn.commit()
        s.store.record_atomic(s.conn, outcome(task, "succeeded"))

    # psycopg refuses the commit inside the transaction block, and all is rolled back;
    # sqlite3 commits, and the success then refuses to be written outside a transaction.
    if s.kind.guards_commit:
        assert isinstance(raised.value, s.kind.guards_commit)
        assert effects() == 0
    else:
        assert isinstance(raised.value, StoreError)
        assert "ended the transaction" in str(raised.value)
        assert effects() == 1
    assert s.row(task)["state"] == "running"


# --- extend_leases -----------------------------------------------------------------------


@pytest.mark.parametrize("timeout", [60.0, 5.0])
def test_a_heartbeat_sets_the_lease_to_now_plus_timeout_for_the_leases_still_held(
    s: StoreCase, timeout: float
) -> None:
    mine, stale = running(s, {}, {})
    (theirs,) = running(s, worker=OTHER)
    (done,) = running(s)
    s.store.record_outcomes(s.conn, [outcome(done, "succeeded")])
    s.advance(10)
    before = {i: s.row(i) for i in (stale, theirs, done)}

    held = s.store.extend_leases(
        s.conn,
        WORKER,
        [(mine, 1, timeout), (stale, 2, timeout), (theirs, 1, timeout), (done, 1, timeout)],
    )

    assert held == {mine}
    row = s.row(mine)
    # Now plus the timeout, even when that is sooner than the lease it replaces.
    assert near(row["expires_at"], s.now() + timedelta(seconds=timeout))
    assert seconds(row["expires_at"], row["updated_at"]) == pytest.approx(timeout, abs=1e-3)
    assert {i: s.row(i) for i in before} == before
    assert s.store.extend_leases(s.conn, WORKER, []) == set()


def test_a_lapsed_lease_not_yet_recovered_can_still_be_extended(s: StoreCase) -> None:
    (task,) = running(s)
    s.advance(100)
    assert s.store.extend_leases(s.conn, WORKER, [(task, 1, 30.0)]) == {task}
    assert near(s.row(task)["expires_at"], s.now() + timedelta(seconds=30))


@pytest.mark.unsupported(sqlite=NO_LOCKS)
def test_a_heartbeat_skips_a_lease_whose_row_another_transaction_holds(s: StoreCase) -> None:
    held, free = running(s, {}, {})
    other = lock(s, held)
    leases = [(held, 1, 60.0), (free, 1, 60.0)]
    assert s.store.extend_leases(s.conn, WORKER, leases) == {free}
    other.rollback()
    assert s.store.extend_leases(s.conn, WORKER, leases) == {held, free}


# --- progress ----------------------------------------------------------------------------


def shown_progress(s: StoreCase, task_id: uuid.UUID) -> str | None:
    info = s.store.get_task(s.conn, task_id)
    assert info is not None
    return None if info.progress is None else info.progress.describe()


def test_progress_is_written_only_on_the_attempts_this_worker_still_runs(s: StoreCase) -> None:
    mine, stale = running(s, {}, {})
    (theirs,) = running(s, worker=OTHER)
    (done,) = running(s)
    s.store.record_outcomes(s.conn, [outcome(done, "succeeded")])
    report = '{"done": 3, "total": 4, "message": null, "at": 1.5}'
    reports = [(mine, 1, report), (stale, 2, report), (theirs, 1, report), (done, 1, report)]

    assert s.store.write_progress(s.conn, WORKER, reports) == {mine}

    assert shown_progress(s, mine) == "3/4 (75%)"
    assert [shown_progress(s, i) for i in (stale, theirs, done)] == [None] * 3
    assert s.store.write_progress(s.conn, WORKER, []) == set()


def test_a_claim_clears_the_progress_of_the_attempt_before(s: StoreCase) -> None:
    (task,) = running(s)
    report = '{"done": 3, "total": 4, "message": null, "at": 1.5}'
    retry = Outcome(
        task, 1, WORKER, "pending", error={"type": "E", "message": "m"}, progress=report
    )
    s.store.record_outcomes(s.conn, [retry])
    assert shown_progress(s, task) == "3/4 (75%)"
    (claimed,) = s.claim(task)
    assert claimed.attempts == 2
    assert shown_progress(s, task) is None


@pytest.mark.unsupported(sqlite=NO_LOCKS)
def test_progress_skips_a_row_another_transaction_holds(s: StoreCase) -> None:
    held, free = running(s, {}, {})
    other = lock(s, held)
    report = '{"done": 1, "total": null, "message": null, "at": 1.5}'
    reports = [(held, 1, report), (free, 1, report)]
    assert s.store.write_progress(s.conn, WORKER, reports) == {free}
    other.rollback()
    assert s.store.write_progress(s.conn, WORKER, reports) == {held, free}
