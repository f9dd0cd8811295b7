"""The worker's side of each store: claims, the look at an id a claim missed, outcomes
(atomic ones included), leases, release, give-back and cancellation flags."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta
from typing import Any

import pytest

from .... import Task
from ....store.records import Claimed, Outcome, Poll
from ..case import WORKER, StoreCase, defaults

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

    claimed = s.store.claim_ripe(s.conn, Poll("q", 10, WORKER, with_)).claimed

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
        return [
            c.id for c in s.store.claim_ripe(s.conn, Poll("q", limit, WORKER, defaults())).claimed
        ]

    assert poll(0) == []
    assert poll(2) == [p3, p2_old]
    assert poll(10) == [p2_new, p1, p0]
    assert poll(10) == []


def test_the_poll_claims_every_name_the_worker_knows_and_only_ripe_ones(s: StoreCase) -> None:
    t = s.enqueue("t")
    u = s.enqueue("u", payload=[1])
    later = s.enqueue("u", delay=30)

    claimed = s.store.claim_ripe(s.conn, Poll("q", 10, WORKER, defaults("t", "u"))).claimed

    assert {(c.id, c.name) for c in claimed} == {(t, "t"), (u, "u")}
    s.advance(31)
    assert [
        c.id for c in s.store.claim_ripe(s.conn, Poll("q", 10, WORKER, defaults("u"))).claimed
    ] == [later]


@pytest.mark.unsupported(sqlite=NO_LOCKS)
def test_the_poll_skips_rows_another_transaction_holds(s: StoreCase) -> None:
    held = s.enqueue(priority=9)
    free = s.enqueue()
    other = lock(s, held)

    assert [
        c.id for c in s.store.claim_ripe(s.conn, Poll("q", 10, WORKER, defaults())).claimed
    ] == [free]
    other.rollback()
    assert [
        c.id for c in s.store.claim_ripe(s.conn, Poll("q", 10, WORKER, defaults())).claimed
    ] == [held]
