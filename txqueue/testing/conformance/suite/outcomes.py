"""The worker's side after a claim: the look at an id a claim missed, and outcomes."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from .... import Task
from ....store.records import Why
from ..case import WORKER, StoreCase
from .claims import NO_XACT_STATUS, OTHER, error, near, outcome, request_cancel, running, seconds

# --- why_unclaimed -----------------------------------------------------------------------


def test_why_unclaimed_reports_each_rows_state_run_at_and_ripeness(s: StoreCase) -> None:
    later = s.enqueue(delay=60)
    ripe = s.enqueue("unknown")
    (taken,) = running(s)
    (done,) = running(s)
    s.store.record_outcomes(s.conn, [outcome(done, "succeeded")])
    absent = uuid.uuid4()

    why = s.store.why_unclaimed(s.conn, [(i, None) for i in (later, ripe, taken, done, absent)])

    assert why == {
        later: Why(None, "pending", s.row(later)["run_at"], False, "t"),
        ripe: Why(None, "pending", s.row(ripe)["run_at"], True, "unknown"),
        taken: Why(None, "running", s.row(taken)["run_at"], True, "t"),
        done: Why(None, "succeeded", s.row(done)["run_at"], True, "t"),
        absent: Why(None, None, None, False, None),
    }
    assert s.store.why_unclaimed(s.conn, []) == {}


def test_why_unclaimed_sees_a_task_ripen_as_the_clock_moves(s: StoreCase) -> None:
    task = s.enqueue(delay=60)
    assert s.store.why_unclaimed(s.conn, [(task, None)])[task].ripe is False
    s.advance(61)
    assert s.store.why_unclaimed(s.conn, [(task, None)])[task].ripe is True


def test_why_unclaimed_reads_an_uncommitted_row_as_absent(s: StoreCase) -> None:
    app = s.app()
    task = s.store.insert_task(app, Task("t", queue="q")).id
    why = s.store.why_unclaimed(s.conn, [(task, None)])[task]
    assert (why.state, why.run_at, why.ripe, why.name) == (None, None, False, None)


@pytest.mark.unsupported(sqlite=NO_XACT_STATUS)
def test_why_unclaimed_reads_the_enqueuing_transactions_status(s: StoreCase) -> None:
    committed = s.app()
    present = s.store.insert_task(committed, Task("t", queue="q"))
    gone = s.store.insert_task(committed, Task("t", queue="q"))
    committed.commit()
    s.execute("DELETE FROM txqueue_tasks WHERE id = %s", (str(gone.id),))
    aborted = s.app()
    rolled_back = s.store.insert_task(aborted, Task("t", queue="q"))
    aborted.rollback()
    open_ = s.app()
    uncommitted = s.store.insert_task(open_, Task("t", queue="q"))
    items = [(i.id, i.xid) for i in (present, gone, rolled_back, uncommitted)]

    why = s.store.why_unclaimed(s.conn, items)

    assert why == {
        present.id: Why("committed", "pending", s.row(present.id)["run_at"], True, "t"),
        gone.id: Why("committed", None, None, False, None),
        rolled_back.id: Why("aborted", None, None, False, None),
        uncommitted.id: Why("in progress", None, None, False, None),
    }


@pytest.mark.unsupported(sqlite=NO_XACT_STATUS)
def test_a_transaction_id_from_the_future_reads_as_unknown_and_spoils_no_other(
    s: StoreCase,
) -> None:
    app = s.app()
    real = s.store.insert_task(app, Task("t", queue="q"))
    app.commit()
    forged = s.enqueue()
    items = [(real.id, real.xid), (forged, "999999999999")]

    why = s.store.why_unclaimed(s.conn, items)

    assert (why[real.id].xact_status, why[real.id].state) == ("committed", "pending")
    assert (why[forged].xact_status, why[forged].state) == (None, "pending")
    # The failed statement left the connection fit for the next one.
    assert s.store.why_unclaimed(s.conn, [(real.id, real.xid)])[real.id].xact_status == (
        "committed"
    )


@pytest.mark.unsupported(sqlite=NO_XACT_STATUS)
def test_committed_names_the_committed_transactions_only(s: StoreCase) -> None:
    done = s.app()
    committed = s.store.insert_task(done, Task("t", queue="q")).xid
    done.commit()
    aborted = s.app()
    rolled_back = s.store.insert_task(aborted, Task("t", queue="q")).xid
    aborted.rollback()
    open_ = s.app()
    uncommitted = s.store.insert_task(open_, Task("t", queue="q")).xid
    xids = [x for x in (committed, rolled_back, uncommitted) if x is not None]
    assert len(xids) == 3

    assert s.store.committed(s.conn, [*xids, committed]) == {committed}  # type: ignore[list-item]
    # One from the future fails its statement: asked one by one, it spoils no other, and
    # the connection is fit for the next statement.
    assert s.store.committed(s.conn, [committed, "999999999999"]) == {committed}  # type: ignore[list-item]
    assert s.store.committed(s.conn, [committed]) == {committed}  # type: ignore[list-item]
    open_.rollback()


def test_committed_knows_none_without_transaction_ids(s: StoreCase) -> None:
    assert s.store.committed(s.conn, []) == set()


def test_a_malformed_frozen_or_future_xid_reads_as_unknown(s: StoreCase) -> None:
    xids = ["not-a-number", "", "-1", "12a", "3"]
    ids = [s.enqueue() for _ in xids]
    expected = {i: Why(None, "pending", s.row(i)["run_at"], True, "t") for i in ids}

    assert s.store.why_unclaimed(s.conn, list(zip(ids, xids, strict=True))) == expected
    # A future one fails PostgreSQL's whole statement: the store asks again one by one.
    future = [(i, "999999999999") for i in ids]
    assert s.store.why_unclaimed(s.conn, future) == expected


# --- record_outcomes ---------------------------------------------------------------------


def test_a_success_finishes_the_task_with_its_result(s: StoreCase) -> None:
    results = {'{"ok": [1, 2]}': {"ok": [1, 2]}, '"text"': "text", "3": 3, None: None}
    tasks = dict(zip(running(s, *({} for _ in results)), results, strict=True))
    s.advance(5)
    before = {i: s.row(i) for i in tasks}

    written = s.store.record_outcomes(
        s.conn, [outcome(i, "succeeded", result=r) for i, r in tasks.items()]
    )

    assert written == dict.fromkeys(tasks, "succeeded")
    for task, result in tasks.items():
        row = s.row(task)
        assert near(row["finished_at"], s.now())
        assert row["updated_at"] == row["finished_at"]
        assert (row["state"], row["expires_at"]) == ("succeeded", None)
        assert row["result"] == results[result]
        kept = ("run_at", "start_time", "attempts", "worker_id", "errors", "max_attempts")
        assert {k: row[k] for k in kept} == {k: before[task][k] for k in kept}


def test_a_retry_goes_back_to_pending_until_retry_in_has_passed(s: StoreCase) -> None:
    (task,) = running(s)
    before = s.row(task)

    written = s.store.record_outcomes(
        s.conn, [outcome(task, "pending", error=error("flaky"), retry_in=30.0)]
    )

    assert written == {task: "pending"}
    row = s.row(task)
    assert near(row["run_at"], s.now() + timedelta(seconds=30))
    assert seconds(row["run_at"], row["updated_at"]) == pytest.approx(30, abs=1e-3)
    assert (row["state"], row["finished_at"], row["expires_at"]) == ("pending", None, None)
    assert row["errors"] == [error("flaky")]
    # The last attempt's worker and start stay on the row until the next claim.
    kept = ("start_time", "attempts", "worker_id", "result")
    assert {k: row[k] for k in kept} == {k: before[k] for k in kept}

    assert s.claim(task) == []
    s.advance(31)
    (again,) = s.claim(task, worker=OTHER)
    assert again.attempts == 2


def test_a_retry_in_of_zero_is_ripe_at_once(s: StoreCase) -> None:
    (task,) = running(s)
    s.store.record_outcomes(s.conn, [outcome(task, "pending", error=error("x"))])
    assert [c.attempts for c in s.claim(task)] == [2]


@pytest.mark.parametrize("state", ["failed", "cancelled"])
def test_a_failure_or_a_cancellation_finishes_the_task_keeping_its_run_at(
    s: StoreCase, state: str
) -> None:
    (task,) = running(s)
    s.advance(5)
    before = s.row(task)

    written = s.store.record_outcomes(s.conn, [outcome(task, state, error=error("no"))])

    assert written == {task: state}
    row = s.row(task)
    assert near(row["finished_at"], s.now())
    assert (row["state"], row["expires_at"], row["result"]) == (state, None, None)
    assert row["errors"] == [error("no")]
    assert (row["run_at"], row["attempts"]) == (before["run_at"], 1)


def test_a_retry_of_a_task_whose_cancel_was_requested_ends_cancelled(s: StoreCase) -> None:
    (task,) = running(s)
    request_cancel(s, task)
    before = s.row(task)

    written = s.store.record_outcomes(
        s.conn, [outcome(task, "pending", error=error("flaky"), retry_in=30.0)]
    )

    assert written == {task: "cancelled"}
    row = s.row(task)
    assert near(row["finished_at"], s.now())
    assert (row["state"], row["run_at"], row["expires_at"]) == ("cancelled", before["run_at"], None)
    assert row["errors"] == [error("flaky")]


def test_a_requested_cancel_does_not_change_a_final_outcome(s: StoreCase) -> None:
    succeeded, failed = running(s, {}, {})
    request_cancel(s, succeeded, failed)
    final = {succeeded: "succeeded", failed: "failed"}
    written = s.store.record_outcomes(s.conn, [outcome(i, st) for i, st in final.items()])
    assert written == final
    assert {i: s.row(i)["state"] for i in final} == final


def test_outcomes_landed_tells_an_outcome_written_unanswered_from_a_fenced_out_one(
    s: StoreCase,
) -> None:
    succeeded, retried, failed, recovered, unwritten = running(s, {}, {}, {}, {"timeout": 1}, {})
    tried = {
        succeeded: outcome(succeeded, "succeeded", result="1"),
        retried: outcome(retried, "pending", error=error("flaky")),
        failed: outcome(failed, "failed", error=error("no")),
        recovered: outcome(recovered, "succeeded", result="1"),
        unwritten: outcome(unwritten, "succeeded", result="1"),
    }
    # Written, their replies lost; the retry is claimed again by another worker meanwhile.
    s.store.record_outcomes(s.conn, [tried[succeeded], tried[retried], tried[failed]])
    assert [c.attempts for c in s.claim(retried, worker=OTHER)] == [2]
    # Never written: the cleaner took one back when its lease ran out.
    s.advance(5)
    assert [r.id for r in s.store.recover_expired(s.conn, 10, 5)] == [recovered]

    landed = s.store.outcomes_landed(s.conn, list(tried.values()))

    assert landed == {succeeded: "succeeded", retried: "pending", failed: "failed"}
    # Another worker's attempt, and an attempt of this worker's other than the one written,
    # are not this outcome.
    theirs = outcome(succeeded, "succeeded", worker_id=OTHER)
    assert s.store.outcomes_landed(s.conn, [theirs, outcome(retried, "pending", 2)]) == {}


def test_an_outcome_of_an_attempt_that_lost_the_task_is_fenced_out(s: StoreCase) -> None:
    later_attempt, other_worker, finished, given_back = running(s, {}, {}, {}, {})
    s.store.record_outcomes(s.conn, [outcome(finished, "succeeded", result='"first"')])
    s.store.give_back(s.conn, WORKER, [(given_back, 1)])
    lost = {later_attempt: (2, WORKER), other_worker: (1, OTHER), finished: (1, WORKER)}
    lost[given_back] = (1, WORKER)
    before = {i: s.row(i) for i in lost}

    for state in ("succeeded", "pending", "failed", "cancelled"):
        late = [
            outcome(i, state, attempt, worker_id=worker, error=error("late"), result="1")
            for i, (attempt, worker) in lost.items()
        ]
        assert s.store.record_outcomes(s.conn, late) == {}
    assert {i: s.row(i) for i in lost} == before


def test_each_failed_attempt_appends_its_error_in_order(s: StoreCase) -> None:
    (task,) = running(s)
    s.store.record_outcomes(s.conn, [outcome(task, "pending", error=error("one"))])
    s.claim(task)
    s.store.record_outcomes(s.conn, [outcome(task, "pending", 2, error=error("two", 2))])
    s.claim(task)
    s.store.record_outcomes(s.conn, [outcome(task, "failed", 3, error=error("three", 3))])

    row = s.row(task)
    assert (row["state"], row["attempts"]) == ("failed", 3)
    assert row["errors"] == [error("one"), error("two", 2), error("three", 3)]


def test_a_batch_writes_the_outcomes_still_held_and_drops_the_others(s: StoreCase) -> None:
    a, b, c, d = running(s, {}, {}, {}, {})
    before = {i: s.row(i) for i in (b, d)}

    written = s.store.record_outcomes(
        s.conn,
        [
            outcome(a, "succeeded", result='"a"'),
            outcome(b, "succeeded", worker_id=OTHER),
            outcome(c, "pending", error=error("c"), retry_in=10.0),
            outcome(d, "failed", 2, error=error("d", 2)),
        ],
    )

    assert written == {a: "succeeded", c: "pending"}
    assert (s.row(a)["state"], s.row(a)["result"]) == ("succeeded", "a")
    assert (s.row(c)["state"], s.row(c)["errors"]) == ("pending", [error("c")])
    assert {i: s.row(i) for i in (b, d)} == before
    assert s.store.record_outcomes(s.conn, []) == {}
