"""The lifecycle's decisions, case by case, and the tables PostgreSQL's statements read
them from."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from txqueue import lifecycle
from txqueue.lifecycle import ABANDON, COMPENSATE, POLICIES, RETRY
from txqueue.task import CANCELLED, FAILED, PENDING, RUNNING, SUCCEEDED

AT = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("state", "cancel_requested", "after"),
    [
        (SUCCEEDED, False, SUCCEEDED),
        (SUCCEEDED, True, SUCCEEDED),  # it finished: the request came too late
        (FAILED, False, FAILED),
        (FAILED, True, FAILED),
        (CANCELLED, False, CANCELLED),  # the handler raised TaskCancelled
        (PENDING, False, PENDING),  # a retry
        (PENDING, True, CANCELLED),  # a retry of a task someone asked to cancel
    ],
)
def test_an_outcome_writes_its_state_but_a_cancelled_retry_ends(
    state: str, cancel_requested: bool, after: str
) -> None:
    assert lifecycle.after_outcome(state, cancel_requested) == after


@pytest.mark.parametrize(
    ("policy", "cancel_requested", "after"),
    [
        (RETRY, False, PENDING),
        (ABANDON, False, RUNNING),  # lease ended now: the cleaner applies the policy
        (COMPENSATE, False, RUNNING),
        (RETRY, True, CANCELLED),
        (ABANDON, True, CANCELLED),
        (COMPENSATE, True, CANCELLED),
    ],
)
def test_a_release_retries_only_under_the_retry_policy(
    policy: str, cancel_requested: bool, after: str
) -> None:
    assert lifecycle.after_release(policy, cancel_requested) == after


def test_a_task_given_back_is_pending_again_unless_cancelled() -> None:
    assert lifecycle.after_give_back(False) == PENDING
    assert lifecycle.after_give_back(True) == CANCELLED


@pytest.mark.parametrize(
    ("policy", "attempts", "max_attempts", "cancel_requested", "after"),
    [
        (RETRY, 1, 3, False, PENDING),
        (RETRY, 2, 3, False, PENDING),
        (RETRY, 3, 3, False, FAILED),  # the lost attempt was the last
        (RETRY, 4, 3, False, FAILED),  # max_attempts lowered since
        (ABANDON, 1, 3, False, FAILED),
        (COMPENSATE, 1, 3, False, FAILED),
        (RETRY, 1, 3, True, CANCELLED),
        (ABANDON, 3, 3, True, CANCELLED),
    ],
)
def test_an_expired_lease_retries_abandons_or_cancels(
    policy: str, attempts: int, max_attempts: int, cancel_requested: bool, after: str
) -> None:
    assert lifecycle.after_lease_expired(policy, attempts, max_attempts, cancel_requested) == after


def test_a_task_without_a_policy_copied_at_its_claim_is_retried() -> None:
    assert lifecycle.policy_of(None) == RETRY
    assert lifecycle.policy_of({}) == RETRY
    assert lifecycle.policy_of({"policy": ABANDON}) == ABANDON
    assert lifecycle.policy_of({"policy": COMPENSATE, "name": "undo", "queue": "q"}) == COMPENSATE


def test_the_compensation_task_carries_the_lost_task() -> None:
    spec = {"policy": COMPENSATE, "name": "refund", "queue": "money"}
    task = lifecycle.compensation(spec, "0190-id", "charge", {"order": 7})
    assert (task.name, task.queue) == ("refund", "money")
    assert task.payload == {"task_id": "0190-id", "name": "charge", "payload": {"order": 7}}


def test_error_entries_have_one_shape() -> None:
    stopped = lifecycle.worker_stopped(2, "w1", AT).as_json()
    expired = lifecycle.lease_expired(3, "w2", AT).as_json()
    failed = lifecycle.failure("w3", 1, ValueError, "bad", "Traceback…", at=AT).as_json()
    assert stopped == {
        "at": AT.isoformat(),
        "attempt": 2,
        "worker_id": "w1",
        "type": "txqueue.WorkerStopped",
        "message": "the worker stopped before the task finished; released",
        "traceback": None,
    }
    assert expired["type"] == "txqueue.LeaseExpired"
    assert expired["message"] == "lease expired, worker lost: w2 stopped heartbeating"
    assert failed["type"] == "builtins.ValueError"
    assert failed["traceback"] == "Traceback…"
    assert stopped.keys() == expired.keys() == failed.keys()


def test_the_decision_tables_hold_every_answer_of_their_function() -> None:
    release = json.loads(lifecycle.release_decisions())
    give_back = json.loads(lifecycle.give_back_decisions())
    expiry = json.loads(lifecycle.lease_expired_decisions())
    assert len(release) == len(POLICIES) * 2
    assert len(give_back) == 2
    assert len(expiry) == len(POLICIES) * 4
    for row in release:
        assert row["next"] == lifecycle.after_release(row["policy"], row["cancel_requested"])
    for row in give_back:
        assert row["next"] == lifecycle.after_give_back(row["cancel_requested"])
    for row in expiry:
        attempts = 1 if row["attempts_left"] else 3
        want = lifecycle.after_lease_expired(row["policy"], attempts, 3, row["cancel_requested"])
        assert row["next"] == want
    for row in release + give_back + expiry:
        assert row["finished"] == (row["next"] in (SUCCEEDED, FAILED, CANCELLED))
