"""A running task's steps (``ctx.step``): recorded by the attempt that holds the task,
fenced as an outcome is, kept through retries, read back in their order, and written in an
open transaction with the work of an atomic step."""

from __future__ import annotations

from typing import Any

from ....core.task import PENDING, SUCCEEDED
from ....store.records import Claimed, StepDone
from ..case import WORKER, StoreCase, finish, near


def done(task: Claimed, name: str, result: str = "1", worker: str = WORKER) -> StepDone:
    return StepDone(task.id, task.attempts, worker, name, result, 0.25)


def test_steps_are_kept_in_their_order_through_a_retry(s: StoreCase) -> None:
    task_id = s.enqueue()
    assert s.store.recorded_steps(s.conn, task_id) == []
    [first] = s.claim(task_id)
    assert s.store.record_step(s.conn, done(first, "reserve", '{"seat": "12A"}'))
    finish(s, first, PENDING, error="ValueError")
    [second] = s.claim(task_id)
    assert s.store.record_step(s.conn, done(second, "charge", "null"))

    steps = s.store.recorded_steps(s.conn, task_id)
    assert [(e["name"], e["result"], e["attempt"], e["took"]) for e in steps] == [
        ("reserve", {"seat": "12A"}, 1, 0.25),
        ("charge", None, 2, 0.25),
    ]
    finish(s, second, SUCCEEDED)
    info = s.store.get_task(s.conn, task_id)
    assert info is not None
    assert [(r.name, r.result, r.attempt) for r in info.steps] == [
        ("reserve", {"seat": "12A"}, 1),
        ("charge", None, 2),
    ]
    assert all(near(r.at, s.now()) for r in info.steps)
    # Each is an event of the task's history, between its attempt's claim and its end.
    moves = [(e.move, e.attempt, e.reason) for e in info.events]
    assert moves[1:3] == [("step", 1, "reserve"), ("retried", 1, "ValueError: boom")]
    assert moves[4:] == [("step", 2, "charge"), ("succeeded", 2, None)]


def test_a_step_of_an_attempt_that_lost_the_task_is_not_recorded(s: StoreCase) -> None:
    task_id = s.enqueue()
    [first] = s.claim(task_id)
    s.advance(31)
    s.store.recover_expired(s.conn, 10, 5)
    assert not s.store.record_step(s.conn, done(first, "charge"))  # recovered: fenced out
    [second] = s.claim(task_id)
    assert not s.store.record_step(s.conn, done(first, "charge"))  # an earlier attempt
    assert not s.store.record_step(s.conn, done(second, "charge", worker="someone-else"))
    assert s.store.recorded_steps(s.conn, task_id) == []
    finish(s, second, SUCCEEDED)
    assert not s.store.record_step(s.conn, done(second, "charge"))  # ended
    assert s.store.recorded_steps(s.conn, task_id) == []


def test_an_atomic_steps_record_commits_or_rolls_back_with_its_work(
    s: StoreCase, effects: Any
) -> None:
    task_id = s.enqueue()
    [task] = s.claim(task_id)
    try:
        with s.store.atomic(s.conn):
            s.conn.execute("INSERT INTO effects (n) VALUES (1)")
            assert s.store.record_step(s.conn, done(task, "debit"))
            raise RuntimeError("the step's function failed after its record")
    except RuntimeError:
        pass
    assert effects() == 0 and s.store.recorded_steps(s.conn, task_id) == []

    with s.store.atomic(s.conn):
        s.conn.execute("INSERT INTO effects (n) VALUES (1)")
        assert s.store.record_step(s.conn, done(task, "debit"))
    assert effects() == 1
    assert [e["name"] for e in s.store.recorded_steps(s.conn, task_id)] == ["debit"]
