"""Tasks given up by their worker: release, give-back and cancellation flags."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from ..case import WORKER, StoreCase, defaults
from .claims import OTHER, error, near, outcome, request_cancel, running, stopped_entry

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
