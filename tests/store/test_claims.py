"""The worker's side of each store: claims, the look at an id a claim missed, outcomes
(atomic ones included), leases, release, give-back and cancellation flags."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from typing import Any

import psycopg
import pytest

from txqueue import Task
from txqueue.errors import StoreError
from txqueue.store.records import Claimed, Outcome, Why

from .conftest import WORKER, StoreCase, defaults

OTHER = "host:2:w1"
STOPPED = {
    "attempt": 1,
    "worker_id": WORKER,
    "type": "txqueue.WorkerStopped",
    "message": "the worker stopped before the task finished; released",
    "traceback": None,
}
NO_LOCKS = "SQLite has no row locks: every claim and write takes the database's one write lock"
NO_XACT_STATUS = "SQLite keeps no transaction status: xact_status is always None"


def seconds(later: datetime, earlier: datetime) -> float:
    return (later - earlier).total_seconds()


def near(moment: datetime, expected: datetime, within: float = 2.0) -> bool:
    """Close enough for two reads of a clock, on a loaded machine."""
    return abs(seconds(moment, expected)) <= within


def error(message: str, attempt: int = 1) -> dict[str, Any]:
    """An error-history entry as a worker writes one for a handler's exception."""
    return {
        "at": "2030-01-02T03:04:05.678901+00:00",
        "attempt": attempt,
        "worker_id": WORKER,
        "type": "builtins.ValueError",
        "message": message,
        "traceback": f'Traceback (most recent call last):\n  File "h.py"\nValueError: {message}\n',
    }


def outcome(task_id: uuid.UUID, state: str, attempt: int = 1, **fields: Any) -> Outcome:
    fields.setdefault("worker_id", WORKER)
    return Outcome(task_id, attempt, state=state, **fields)


def request_cancel(s: StoreCase, *ids: uuid.UUID) -> None:
    """What `txqueue cancel` does to a running task: it only raises the flag."""
    for task_id in ids:
        s.execute(
            "UPDATE txqueue_tasks SET cancel_requested = %s WHERE id = %s", (True, str(task_id))
        )


def lock(s: StoreCase, *ids: uuid.UUID) -> Any:
    """Another transaction holding the rows' locks (PostgreSQL), until it ends."""
    other = s.app()
    for task_id in ids:
        other.execute("SELECT id FROM txqueue_tasks WHERE id = %s FOR UPDATE", (task_id,))
    return other


def running(s: StoreCase, *options: dict[str, Any], worker: str = WORKER) -> list[uuid.UUID]:
    """Tasks enqueued and claimed by ``worker``, attempt 1."""
    ids = [s.enqueue(**o) for o in options or ({},)]
    assert len(s.claim(*ids, worker=worker)) == len(ids)
    return ids


def stopped_entry(s: StoreCase, entry: dict[str, Any]) -> bool:
    """A txqueue.WorkerStopped entry of attempt 1 by WORKER, written just now."""
    at = entry.pop("at")
    return entry == STOPPED and near(datetime.fromisoformat(at), s.now())


# --- claim_ids ---------------------------------------------------------------------------


def test_a_pending_ripe_task_is_claimed_for_its_first_attempt(s: StoreCase) -> None:
    task = s.enqueue(payload={"n": 1})
    s.advance(1000)  # the claim's times come from the database's clock
    before = s.row(task)

    (claimed,) = s.claim(task)

    assert claimed == Claimed(task, "q", "t", {"n": 1}, 1, 3, 30.0, claimed.waited, None)
    assert claimed.waited == pytest.approx(1000, abs=2.0)
    row = s.row(task)
    assert near(row["start_time"], s.now())
    assert seconds(row["expires_at"], row["start_time"]) == pytest.approx(30, abs=1e-3)
    assert row["updated_at"] == row["start_time"]
    changed = ("state", "attempts", "worker_id", "max_attempts")
    assert [row[k] for k in changed] == ["running", 1, WORKER, 3]
    # The row's own timeout stays unset: only max_attempts is filled in.
    unchanged = ("run_at", "finished_at", "timeout", "errors", "result", "on_lease_expired")
    assert {k: row[k] for k in unchanged} == {k: before[k] for k in unchanged}


@pytest.mark.parametrize(
    ("task", "per_name", "expected"),
    [
        ({"max_attempts": 7, "timeout": 12.5}, {"timeout": 20.0, "max_attempts": 4}, (7, 12.5)),
        ({}, {"timeout": 20.0, "max_attempts": 4}, (4, 20.0)),
        ({}, {}, (9, 45.0)),
        # As a registry writes a task defined without them.
        ({}, {"timeout": None, "max_attempts": None}, (9, 45.0)),
    ],
    ids=["the-rows-own", "per-name", "the-workers", "per-name-unset"],
)
def test_max_attempts_and_timeout_come_from_the_row_then_the_name_then_the_worker(
    s: StoreCase, task: dict[str, Any], per_name: dict[str, Any], expected: tuple[int, float]
) -> None:
    task_id = s.enqueue(**task)
    with_ = defaults(timeout=45.0, max_attempts=9, per_name={"t": per_name})

    (claimed,) = s.claim(task_id, with_=with_)

    assert (claimed.max_attempts, claimed.timeout) == expected
    row = s.row(task_id)
    assert row["max_attempts"] == expected[0]
    assert row["timeout"] == task.get("timeout")
    assert seconds(row["expires_at"], row["start_time"]) == pytest.approx(expected[1], abs=1e-3)


def test_the_lease_expiry_policy_is_copied_from_the_name_at_claim_time(s: StoreCase) -> None:
    policies: dict[str, dict[str, Any] | None] = {
        "none": None,
        "retry": {"policy": "retry"},
        "abandon": {"policy": "abandon"},
        "compensate": {"policy": "compensate", "name": "undo", "queue": "repairs"},
    }
    ids = {s.enqueue(name): name for name in policies}
    per_name = {n: {} if p is None else {"on_lease_expired": p} for n, p in policies.items()}

    assert len(s.claim(*ids, with_=defaults(per_name=per_name))) == 4

    assert {ids[r["id"]]: r["on_lease_expired"] for r in s.rows()} == policies


def test_a_claim_says_how_far_past_its_start_deadline_each_task_is(s: StoreCase) -> None:
    late = s.enqueue(payload={"k": "late"}, expires=60)
    within = s.enqueue(payload={"k": "within"}, expires=s.now() + timedelta(seconds=100))
    free = s.enqueue(payload={"k": "free"})
    delayed = s.enqueue(payload={"k": "delayed"}, delay=100, expires=timedelta(seconds=30))
    s.advance(61)

    found = {c.payload["k"]: c for c in s.claim(late, within, free, delayed)}

    assert set(found) == {"late", "within", "free"}  # the claim is the store's; the worker
    assert found["late"].late == pytest.approx(1, abs=2) and found["late"].expired
    assert found["within"].late == pytest.approx(-39, abs=2) and not found["within"].expired
    assert found["free"].late is None and not found["free"].expired
    s.advance(50)  # the duration counts from when the task is due, not from its enqueue
    (claimed,) = s.claim(delayed)
    assert claimed.late == pytest.approx(-19, abs=2)
    rows = {r["id"]: r for r in s.rows()}
    assert rows[delayed]["expires_in"] == 30.0 and rows[delayed]["start_by"] is None
    assert near(rows[within]["start_by"], s.now() - timedelta(seconds=11))


@pytest.mark.parametrize(
    ("task", "per_name", "expected"),
    [
        ({"expires": 5, "time_limit": 7.5}, {"expires": 100.0, "time_limit": 20.0}, (-5, 7.5)),
        ({}, {"expires": 100.0, "time_limit": 20.0}, (-100, 20.0)),
        ({}, {}, (None, None)),
    ],
    ids=["the-rows-own", "per-name", "none"],
)
def test_start_deadline_and_time_limit_come_from_the_row_then_the_name(
    s: StoreCase,
    task: dict[str, Any],
    per_name: dict[str, Any],
    expected: tuple[float | None, float | None],
) -> None:
    task_id = s.enqueue(**task)

    (claimed,) = s.claim(task_id, with_=defaults(per_name={"t": per_name}))

    if expected[0] is None:
        assert claimed.late is None
    else:
        assert claimed.late == pytest.approx(expected[0], abs=2)
    assert claimed.time_limit == expected[1]
    row = s.row(task_id)
    assert (row["expires_in"], row["time_limit"]) == (task.get("expires"), task.get("time_limit"))


def test_a_task_not_yet_ripe_is_claimed_once_its_time_comes(s: StoreCase) -> None:
    task = s.enqueue(delay=60)
    assert s.claim(task) == []
    s.advance(50)
    assert s.claim(task) == []
    row = s.row(task)
    assert (row["state"], row["attempts"], row["worker_id"]) == ("pending", 0, None)

    s.advance(11)
    (claimed,) = s.claim(task)
    assert claimed.attempts == 1


def test_a_task_of_a_name_the_worker_does_not_know_is_not_claimed(s: StoreCase) -> None:
    task = s.enqueue("other")
    assert s.claim(task, with_=defaults("t", "u")) == []
    assert s.row(task)["state"] == "pending"
    assert [c.id for c in s.claim(task, with_=defaults("t", "other"))] == [task]


def test_a_running_or_finished_task_is_not_claimed_again(s: StoreCase) -> None:
    first, done = running(s, {}, {})
    s.store.record_outcomes(s.conn, [outcome(done, "succeeded")])
    before = s.row(first)

    assert s.claim(first, done, worker=OTHER) == []
    assert s.row(first) == before
    assert s.row(done)["state"] == "succeeded"


def test_unknown_ids_claim_nothing_and_an_id_given_twice_is_claimed_once(s: StoreCase) -> None:
    task = s.enqueue()
    assert s.claim() == []
    assert s.claim(uuid.uuid4()) == []
    # An id delivered twice in one batch is claimed once.
    assert [c.id for c in s.claim(task, uuid.uuid4(), task)] == [task]
    assert s.row(task)["attempts"] == 1


def test_claimed_tasks_come_back_best_priority_then_oldest_run_at_then_id(s: StoreCase) -> None:
    now = s.now()
    a = s.enqueue(run_at=now - timedelta(seconds=10))
    b = s.enqueue(priority=5)
    c = s.enqueue(run_at=now - timedelta(seconds=20))
    d = s.enqueue(priority=-1, run_at=now - timedelta(seconds=30))
    e = s.enqueue(run_at=now - timedelta(seconds=20))

    assert [x.id for x in s.claim(d, e, a, b, c)] == [b, c, e, a, d]


def test_waited_counts_from_the_enqueue_or_the_run_at_whichever_is_later(
    s: StoreCase,
) -> None:
    backdated = s.enqueue(run_at=s.now() - timedelta(seconds=100))
    delayed = s.enqueue(delay=5)
    s.advance(15)

    waited = {c.id: c.waited for c in s.claim(backdated, delayed)}

    assert waited[backdated] == pytest.approx(15, abs=1.0)
    assert waited[delayed] == pytest.approx(10, abs=1.0)


def test_the_payload_comes_back_decoded(s: StoreCase) -> None:
    payloads = [
        {"nested": {"a": [1, 2.5, None]}, "é": "✓"},
        [1, "two", True],
        "text",
        42,
        0.5,
        False,
        {},
    ]
    ids = [s.enqueue(payload=p) for p in payloads]

    got = {c.id: c.payload for c in s.claim(*ids)}

    assert [got[i] for i in ids] == payloads
    assert [type(got[i]) for i in ids] == [type(p) for p in payloads]


def test_the_trace_context_comes_back_with_the_claim(s: StoreCase) -> None:
    trace = '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'
    app = s.app()
    traced = s.store.insert_task(app, Task("t", queue="q"), trace=trace).id
    plain = s.store.insert_task(app, Task("t", queue="q")).id
    app.commit()

    got = {c.id: c.trace_context for c in s.claim(traced, plain)}

    assert got[plain] is None
    # JSON text on both stores; PostgreSQL's is jsonb's rendering of it.
    assert json.loads(got[traced] or "null") == json.loads(trace)


@pytest.mark.unsupported(sqlite=NO_LOCKS)
def test_a_claim_by_id_skips_a_row_another_transaction_holds(s: StoreCase) -> None:
    task = s.enqueue()
    other = lock(s, task)
    assert s.claim(task) == []
    assert s.store.why_unclaimed(s.conn, [(task, None)])[task].state == "pending"

    other.rollback()
    assert [c.id for c in s.claim(task)] == [task]


# --- claim_ripe --------------------------------------------------------------------------


def test_the_poll_claims_the_ripe_tasks_of_its_queue_it_knows_best_first(s: StoreCase) -> None:
    low = s.enqueue(priority=0)
    high = s.enqueue(priority=5, timeout=7.0)
    s.enqueue("unknown", priority=9)
    s.enqueue(priority=10, delay=60)
    running(s, {"priority": 8})
    s.enqueue(priority=10, queue="elsewhere")
    with_ = defaults(per_name={"t": {"timeout": 20.0, "max_attempts": 4}})

    claimed = s.store.claim_ripe(s.conn, "q", 10, WORKER, with_).claimed

    assert [(c.id, c.attempts, c.max_attempts, c.timeout) for c in claimed] == [
        (high, 1, 4, 7.0),
        (low, 1, 4, 20.0),
    ]
    assert {r["worker_id"] for r in s.rows("state = 'running'")} == {WORKER}


def test_the_poll_takes_at_most_limit_tasks_in_priority_then_run_at_order(
    s: StoreCase,
) -> None:
    now = s.now()
    p1 = s.enqueue(priority=1)
    p2_new = s.enqueue(priority=2)
    p2_old = s.enqueue(priority=2, run_at=now - timedelta(seconds=5))
    p0 = s.enqueue(priority=0)
    p3 = s.enqueue(priority=3)

    def poll(limit: int) -> list[uuid.UUID]:
        return [c.id for c in s.store.claim_ripe(s.conn, "q", limit, WORKER, defaults()).claimed]

    assert poll(0) == []
    assert poll(2) == [p3, p2_old]
    assert poll(10) == [p2_new, p1, p0]
    assert poll(10) == []


def test_the_poll_claims_every_name_the_worker_knows_and_only_ripe_ones(s: StoreCase) -> None:
    t = s.enqueue("t")
    u = s.enqueue("u", payload=[1])
    later = s.enqueue("u", delay=30)

    claimed = s.store.claim_ripe(s.conn, "q", 10, WORKER, defaults("t", "u")).claimed

    assert {(c.id, c.name) for c in claimed} == {(t, "t"), (u, "u")}
    s.advance(31)
    assert [c.id for c in s.store.claim_ripe(s.conn, "q", 10, WORKER, defaults("u")).claimed] == [
        later
    ]


@pytest.mark.unsupported(sqlite=NO_LOCKS)
def test_the_poll_skips_rows_another_transaction_holds(s: StoreCase) -> None:
    held = s.enqueue(priority=9)
    free = s.enqueue()
    other = lock(s, held)

    assert [c.id for c in s.store.claim_ripe(s.conn, "q", 10, WORKER, defaults()).claimed] == [free]
    other.rollback()
    assert [c.id for c in s.store.claim_ripe(s.conn, "q", 10, WORKER, defaults()).claimed] == [held]


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

    assert s.store.committed(s.conn, [*xids, committed]) == {committed}
    # One from the future fails its statement: asked one by one, it spoils no other, and
    # the connection is fit for the next statement.
    assert s.store.committed(s.conn, [committed, "999999999999"]) == {committed}
    assert s.store.committed(s.conn, [committed]) == {committed}
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

    with pytest.raises((psycopg.ProgrammingError, StoreError)) as raised, s.store.atomic(s.conn):
        s.conn.execute("INSERT INTO effects (n) VALUES (1)")
        s.conn.commit()
        s.store.record_atomic(s.conn, outcome(task, "succeeded"))

    # psycopg refuses the commit inside the transaction block, and all is rolled back;
    # sqlite3 commits, and the success then refuses to be written outside a transaction.
    if s.kind.guards_commit:
        assert isinstance(raised.value, psycopg.ProgrammingError)
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


# --- release -----------------------------------------------------------------------------


@pytest.mark.parametrize("policy", [None, {"policy": "retry"}])
def test_a_released_task_under_the_retry_policy_is_pending_again_at_once(
    s: StoreCase, policy: dict[str, Any] | None
) -> None:
    task = s.enqueue()
    per_name = {} if policy is None else {"on_lease_expired": policy}
    s.claim(task, with_=defaults(per_name={"t": per_name}))
    s.advance(5)
    before = s.row(task)

    assert s.store.release(s.conn, WORKER, [(task, 1)]) == {task: "pending"}

    row = s.row(task)
    assert near(row["run_at"], s.now())
    assert row["run_at"] == row["updated_at"]
    assert (row["state"], row["expires_at"], row["finished_at"]) == ("pending", None, None)
    (entry,) = row["errors"]
    assert stopped_entry(s, entry)
    # The attempt is counted: it started.
    kept = ("attempts", "worker_id", "start_time", "max_attempts", "on_lease_expired")
    assert {k: row[k] for k in kept} == {k: before[k] for k in kept}
    assert [c.attempts for c in s.claim(task)] == [2]


@pytest.mark.parametrize(
    "policy", [{"policy": "abandon"}, {"policy": "compensate", "name": "undo", "queue": "q"}]
)
def test_a_released_task_under_another_policy_keeps_running_with_its_lease_ended_now(
    s: StoreCase, policy: dict[str, Any]
) -> None:
    task = s.enqueue()
    s.claim(task, with_=defaults(per_name={"t": {"on_lease_expired": policy}}))
    s.advance(5)
    before = s.row(task)

    assert s.store.release(s.conn, WORKER, [(task, 1)]) == {task: "running"}

    row = s.row(task)
    assert near(row["expires_at"], s.now())
    assert row["expires_at"] == row["updated_at"]
    kept = ("state", "run_at", "finished_at", "errors", "attempts", "worker_id", "start_time")
    assert {k: row[k] for k in kept} == {k: before[k] for k in kept}


@pytest.mark.parametrize("policy", [None, {"policy": "abandon"}])
def test_a_released_task_whose_cancel_was_requested_ends_cancelled(
    s: StoreCase, policy: dict[str, Any] | None
) -> None:
    task = s.enqueue()
    per_name = {} if policy is None else {"on_lease_expired": policy}
    s.claim(task, with_=defaults(per_name={"t": per_name}))
    request_cancel(s, task)
    before = s.row(task)

    assert s.store.release(s.conn, WORKER, [(task, 1)]) == {task: "cancelled"}

    row = s.row(task)
    assert near(row["finished_at"], s.now())
    assert row["finished_at"] == row["updated_at"]
    assert (row["state"], row["expires_at"], row["run_at"]) == ("cancelled", None, before["run_at"])
    (entry,) = row["errors"]
    assert stopped_entry(s, entry)


def test_release_ignores_tasks_this_worker_does_not_hold_and_maps_the_rest(
    s: StoreCase,
) -> None:
    retried, cancelled, stale, done = running(s, {}, {}, {}, {})
    (theirs,) = running(s, worker=OTHER)
    abandoned = s.enqueue()
    s.claim(abandoned, with_=defaults(per_name={"t": {"on_lease_expired": {"policy": "abandon"}}}))
    request_cancel(s, cancelled)
    s.store.record_outcomes(s.conn, [outcome(done, "succeeded")])
    before = {i: s.row(i) for i in (stale, done, theirs)}

    released = s.store.release(
        s.conn,
        WORKER,
        [(retried, 1), (cancelled, 1), (stale, 2), (done, 1), (theirs, 1), (abandoned, 1)],
    )

    assert released == {retried: "pending", cancelled: "cancelled", abandoned: "running"}
    assert {i: s.row(i) for i in before} == before
    assert s.store.release(s.conn, WORKER, []) == {}


# --- give_back ---------------------------------------------------------------------------


def test_a_task_given_back_before_it_started_is_as_if_never_claimed(s: StoreCase) -> None:
    task = s.enqueue()
    before = s.row(task)
    s.claim(task, with_=defaults(per_name={"t": {"on_lease_expired": {"policy": "abandon"}}}))
    s.advance(5)

    assert s.store.give_back(s.conn, WORKER, [(task, 1)]) == 1

    row = s.row(task)
    assert near(row["updated_at"], s.now())
    reset = ("state", "attempts", "start_time", "worker_id", "expires_at", "finished_at")
    assert {k: row[k] for k in reset} == {k: before[k] for k in reset}
    assert (row["run_at"], row["errors"]) == (before["run_at"], [])
    # What the claim filled in from the worker's defaults stays.
    assert (row["max_attempts"], row["on_lease_expired"]) == (3, {"policy": "abandon"})
    assert [c.attempts for c in s.claim(task)] == [1]


def test_a_later_attempt_given_back_keeps_its_start_time_and_history(s: StoreCase) -> None:
    (task,) = running(s)
    s.store.record_outcomes(s.conn, [outcome(task, "pending", error=error("one"))])
    s.claim(task)
    before = s.row(task)

    assert s.store.give_back(s.conn, WORKER, [(task, 2)]) == 1

    row = s.row(task)
    assert (row["state"], row["attempts"], row["worker_id"]) == ("pending", 1, None)
    assert (row["start_time"], row["errors"]) == (before["start_time"], [error("one")])


def test_a_task_given_back_whose_cancel_was_requested_ends_cancelled(s: StoreCase) -> None:
    (task,) = running(s)
    request_cancel(s, task)

    assert s.store.give_back(s.conn, WORKER, [(task, 1)]) == 1

    row = s.row(task)
    assert near(row["finished_at"], s.now())
    assert (row["state"], row["attempts"], row["worker_id"], row["start_time"]) == (
        "cancelled",
        0,
        None,
        None,
    )


def test_give_back_counts_only_the_tasks_this_worker_holds(s: StoreCase) -> None:
    mine, stale, done = running(s, {}, {}, {})
    (theirs,) = running(s, worker=OTHER)
    s.store.record_outcomes(s.conn, [outcome(done, "succeeded")])
    before = {i: s.row(i) for i in (stale, done, theirs)}

    held = [(mine, 1), (stale, 2), (done, 1), (theirs, 1)]
    assert s.store.give_back(s.conn, WORKER, held) == 1

    assert s.row(mine)["state"] == "pending"
    assert {i: s.row(i) for i in before} == before
    assert s.store.give_back(s.conn, WORKER, []) == 0


# --- cancel_requested --------------------------------------------------------------------


def test_cancel_requested_names_only_this_workers_running_flagged_tasks_asked_about(
    s: StoreCase,
) -> None:
    flagged, unflagged, not_asked = running(s, {}, {}, {})
    (theirs,) = running(s, worker=OTHER)
    pending = s.enqueue()
    (done,) = running(s)
    request_cancel(s, flagged, not_asked, theirs, pending, done)
    s.store.record_outcomes(s.conn, [outcome(done, "succeeded")])

    asked = [flagged, unflagged, theirs, pending, done, uuid.uuid4()]
    assert s.store.cancel_requested(s.conn, WORKER, asked) == {flagged}
    assert s.store.cancel_requested(s.conn, OTHER, asked) == {theirs}
    assert s.store.cancel_requested(s.conn, WORKER, []) == set()
