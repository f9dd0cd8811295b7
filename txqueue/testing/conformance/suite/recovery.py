"""The cleaner's recovery of expired leases, and its pruning of the history."""

from __future__ import annotations

import uuid

import pytest

from ....store.records import Inserted, Recovered
from ....workflows.readiness import OnFailure
from ..case import WORKER, StoreCase, defaults, finish, near
from .upkeep import (
    LEASE,
    NO_ROW_LOCKS,
    cancel_running,
    check_lease_expired,
    check_xid,
    lost,
    recover,
)
from .workflows import result_of, run, step, write

# --- recover_expired -------------------------------------------------------------------


def test_recover_expired_retries_a_lost_attempt_when_attempts_remain(s: StoreCase) -> None:
    task = lost(s, payload={"n": 1})
    claimed_row = s.row(task.id)
    s.advance(LEASE + 1)

    [r] = recover(s)

    check_xid(s, r.xid)
    assert r == Recovered(
        task.id, "q", "t", {"n": 1}, "pending", 1, "retry", WORKER, r.xid, r.error
    )
    row, now = s.row(task.id), s.now()
    assert r.error == row["errors"][-1]  # the entry written, as on_failed is given it
    assert (row["state"], row["attempts"], row["max_attempts"]) == ("pending", 1, 3)
    assert near(row["run_at"], now) and near(row["updated_at"], now)
    assert row["finished_at"] is None and row["expires_at"] is None
    # The lost worker stays named, as it is in the error entry.
    assert (row["worker_id"], row["start_time"]) == (WORKER, claimed_row["start_time"])
    [entry] = row["errors"]
    check_lease_expired(s, entry, attempt=1)
    # Ripe at once: the next claim is the second attempt.
    [again] = s.claim(task.id)
    assert again.attempts == 2


def test_recover_expired_fails_a_task_out_of_attempts_after_its_earlier_errors(
    s: StoreCase,
) -> None:
    first = lost(s, max_attempts=2)
    assert finish(s, first, "pending", error="ValueError") == {first.id: "pending"}
    [second] = s.claim(first.id, with_=defaults(timeout=LEASE))
    assert second.attempts == 2
    run_at = s.row(first.id)["run_at"]
    s.advance(LEASE + 1)

    [r] = recover(s)

    assert (r.state, r.attempts, r.policy, r.compensation) == ("failed", 2, "retry", None)
    row = s.row(first.id)
    assert (row["state"], row["attempts"], row["run_at"]) == ("failed", 2, run_at)
    assert near(row["finished_at"], s.now()) and row["expires_at"] is None
    earlier, entry = row["errors"]
    assert (earlier["type"], earlier["attempt"]) == ("ValueError", 1)
    check_lease_expired(s, entry, attempt=2)


def test_recover_expired_abandons_a_task_with_attempts_left(s: StoreCase) -> None:
    task = lost(s, policy={"policy": "abandon"})
    s.advance(LEASE + 1)

    [r] = recover(s)

    assert (r.state, r.attempts, r.policy, r.compensation) == ("failed", 1, "abandon", None)
    row = s.row(task.id)
    assert row["state"] == "failed" and near(row["finished_at"], s.now())
    assert len(s.rows()) == 1


def test_recover_expired_compensates_by_enqueueing_the_named_task(s: StoreCase) -> None:
    compensate = {"policy": "compensate", "name": "refund", "queue": "comp"}
    task = lost(s, "ship", {"order": 7}, policy=compensate)
    s.advance(LEASE + 1)

    [r] = recover(s)

    assert (r.state, r.attempts, r.policy) == ("failed", 1, "compensate")
    assert r.compensation is not None
    queue, inserted = r.compensation
    check_xid(s, inserted.xid)
    assert (queue, inserted) == ("comp", Inserted(inserted.id, True, r.xid))
    assert s.row(task.id)["state"] == "failed"
    comp, now = s.row(inserted.id), s.now()
    assert (comp["queue"], comp["name"], comp["state"], comp["attempts"]) == (
        "comp",
        "refund",
        "pending",
        0,
    )
    assert comp["payload"] == {"task_id": str(task.id), "name": "ship", "payload": {"order": 7}}
    assert near(comp["run_at"], now)
    assert comp["max_attempts"] is None and comp["timeout"] is None


def test_recover_expired_cancels_a_task_whose_cancellation_was_requested(
    s: StoreCase,
) -> None:
    # Whatever the policy: a cancelled task is neither retried nor compensated.
    compensate = {"policy": "compensate", "name": "refund", "queue": "comp"}
    tasks = [
        lost(s, "retry"),
        lost(s, "abandon", policy={"policy": "abandon"}),
        lost(s, "compensate", policy=compensate),
    ]
    for task in tasks:
        cancel_running(s, task.id)
    s.advance(LEASE + 1)

    found = recover(s)

    assert {(r.name, r.state, r.policy, r.compensation) for r in found} == {
        ("retry", "cancelled", "retry", None),
        ("abandon", "cancelled", "abandon", None),
        ("compensate", "cancelled", "compensate", None),
    }
    now = s.now()
    for row in s.rows():
        assert (row["state"], row["cancel_requested"]) == ("cancelled", True)
        assert near(row["finished_at"], now) and row["expires_at"] is None
        [entry] = row["errors"]
        check_lease_expired(s, entry, attempt=1)
    assert len(s.rows()) == 3


def test_recover_expired_takes_default_max_attempts_for_a_row_without_one(
    s: StoreCase,
) -> None:
    # A claim always fills max_attempts in; a row without one is from an older txqueue.
    last = lost(s)
    s.execute("UPDATE txqueue_tasks SET max_attempts = NULL")
    s.advance(LEASE + 1)
    assert [(r.id, r.state) for r in recover(s, default_max_attempts=1)] == [(last.id, "failed")]

    more = lost(s)
    s.execute("UPDATE txqueue_tasks SET max_attempts = NULL WHERE id = %s", (str(more.id),))
    s.advance(LEASE + 1)
    assert [(r.id, r.state) for r in recover(s, default_max_attempts=2)] == [(more.id, "pending")]
    assert s.row(more.id)["max_attempts"] is None


def test_recover_expired_leaves_a_lease_that_has_not_run_out(s: StoreCase) -> None:
    task = lost(s)
    before = s.row(task.id)
    s.advance(LEASE - 5)

    assert recover(s) == []
    assert s.row(task.id) == before


def test_recover_expired_takes_the_earliest_expired_leases_up_to_limit(s: StoreCase) -> None:
    late = lost(s, timeout=LEASE)
    early = lost(s, timeout=LEASE - 20)
    middle = lost(s, timeout=LEASE - 10)
    s.advance(LEASE + 1)

    first = s.store.recover_expired(s.conn, 2, 5)
    assert {r.id for r in first} == {early.id, middle.id}
    assert [r.id for r in recover(s, limit=2)] == [late.id]
    assert recover(s) == []


def test_recover_expired_leaves_a_task_whose_outcome_was_written_first(s: StoreCase) -> None:
    # The worker was slow, not dead: its outcome landed after the lease ran out, before
    # the cleaner came by, and stands (River #1302).
    done, retried = lost(s), lost(s)
    s.advance(LEASE + 1)
    assert finish(s, done, "succeeded", result='"ok"') == {done.id: "succeeded"}
    assert finish(s, retried, "pending", error="ValueError", retry_in=600) == {
        retried.id: "pending"
    }

    assert recover(s) == []
    assert s.row(done.id)["state"] == "succeeded" and s.row(done.id)["errors"] == []
    assert [e["type"] for e in s.row(retried.id)["errors"]] == ["ValueError"]


def test_recover_expired_fences_out_the_lost_workers_late_outcome(s: StoreCase) -> None:
    task = lost(s)
    s.advance(LEASE + 1)
    recover(s)

    assert finish(s, task, "succeeded", result='"late"') == {}
    row = s.row(task.id)
    assert (row["state"], row["result"]) == ("pending", None)


def test_recover_expired_applies_the_policy_at_once_to_a_task_its_worker_released(
    s: StoreCase,
) -> None:
    # A stopping worker puts back only tasks it may retry; for the others it ends the
    # lease now, and the cleaner applies their policy without waiting out the timeout.
    task = lost(s, policy={"policy": "abandon"})
    assert s.store.release(s.conn, WORKER, [(task.id, 1)]) == {task.id: "running"}

    [r] = recover(s)

    assert (r.id, r.state, r.policy) == (task.id, "failed", "abandon")
    [entry] = s.row(task.id)["errors"]
    check_lease_expired(s, entry, attempt=1)


@pytest.mark.unsupported(sqlite=NO_ROW_LOCKS)
def test_recover_expired_skips_tasks_another_transaction_holds(s: StoreCase) -> None:
    held, free = lost(s), lost(s)
    s.advance(LEASE + 1)
    other = s.app()
    other.execute("SELECT 1 FROM txqueue_tasks WHERE id = %s FOR UPDATE", (held.id,))

    assert [r.id for r in recover(s)] == [free.id]
    other.rollback()
    assert [r.id for r in recover(s)] == [held.id]


# --- prune -----------------------------------------------------------------------------

AGE = 3600.0


def finished(s: StoreCase, state: str, queue: str = "q") -> uuid.UUID:
    """A task that ended in ``state`` now."""
    task_id = s.enqueue(queue=queue)
    if state == "cancelled":
        app = s.app()
        assert s.store.cancel(app, task_id) == "cancelled"
        app.commit()
        return task_id
    [claimed] = s.claim(task_id)
    assert finish(s, claimed, state) == {task_id: state}
    return task_id


def test_prune_deletes_only_tasks_of_the_state_given(s: StoreCase) -> None:
    ids = {state: finished(s, state) for state in ("succeeded", "failed", "cancelled")}
    ids["pending"] = s.enqueue()
    [running] = s.claim(s.enqueue())
    ids["running"] = running.id
    s.advance(AGE + 1)

    # Unfinished tasks have no finished_at: never old enough, whatever state is asked.
    for state in ("pending", "running", "succeeded", "failed", "cancelled"):
        left = {r["id"] for r in s.rows()}
        expected = 0 if state in ("pending", "running") else 1
        assert s.store.prune(s.conn, state, AGE, 100) == expected
        assert {r["id"] for r in s.rows()} == left - ({ids[state]} if expected else set())
    assert {r["state"] for r in s.rows()} == {"pending", "running"}


def test_prune_keeps_tasks_finished_within_age(s: StoreCase) -> None:
    task_id = finished(s, "succeeded")
    s.advance(AGE - 10)
    assert s.store.prune(s.conn, "succeeded", AGE, 100) == 0

    s.advance(11)
    assert s.store.prune(s.conn, "succeeded", AGE, 100) == 1
    assert s.rows("id = %s", (str(task_id),)) == []


def test_prune_deletes_at_most_limit_and_returns_how_many(s: StoreCase) -> None:
    for _ in range(3):
        finished(s, "failed")
    s.advance(AGE + 1)

    assert s.store.prune(s.conn, "failed", AGE, 2) == 2
    assert len(s.rows()) == 1
    assert s.store.prune(s.conn, "failed", AGE, 2) == 1
    assert s.store.prune(s.conn, "failed", AGE, 2) == 0


@pytest.mark.unsupported(sqlite=NO_ROW_LOCKS)
def test_prune_skips_tasks_another_transaction_holds(s: StoreCase) -> None:
    held, free = finished(s, "succeeded"), finished(s, "succeeded")
    s.advance(AGE + 1)
    other = s.app()
    other.execute("SELECT 1 FROM txqueue_tasks WHERE id = %s FOR UPDATE", (held,))

    assert s.store.prune(s.conn, "succeeded", AGE, 100) == 1
    assert [r["id"] for r in s.rows()] == [held]
    other.rollback()
    assert s.store.prune(s.conn, "succeeded", AGE, 100) == 1
    assert free != held and s.rows() == []


def test_prune_takes_a_workflows_steps_once_every_one_of_them_is_old_enough(s: StoreCase) -> None:
    # C takes A's result and waits for B as well: A, long succeeded, is what C will read.
    a, b = step("a"), step("b")
    c = step("c", {a.id: OnFailure.CANCEL, b.id: OnFailure.CANCEL}, {"x": result_of(a)})
    write(s, a, b, c)
    run(s, a, result=7)
    s.advance(AGE + 1)
    assert s.store.prune(s.conn, "succeeded", AGE, 100) == 0

    assert run(s, b) == {b.id: "succeeded", c.id: "pending"}
    [claimed] = s.claim(c.id)
    assert claimed.payload == {"x": 7}
    finish(s, claimed, "succeeded")
    s.advance(AGE - 10)
    assert s.store.prune(s.conn, "succeeded", AGE, 100) == 0  # A is, but not B and C
    s.advance(11)
    assert s.store.prune(s.conn, "succeeded", AGE, 100) == 3
