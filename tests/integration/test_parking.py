"""Sleeps and waits on each store (``ctx.sleep``, ``ctx.wait_for``, ``txqueue.signal``):
the attempt ends and the task is parked, an attempt added to its budget, until its time
(on the test's movable clock) or its signal; a signal commits or rolls back with the
sender's transaction, and one sent before the wait is kept for it."""

from __future__ import annotations

import time
import uuid
from contextlib import closing
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import txqueue
from txqueue.testing import Clock, run_tasks

from .helpers import connect, enqueue_named, running, task_info


def _signal(db_url: str, key: str, payload: Any, commit: bool = True) -> int:
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        woke = txqueue.signal(c, key, payload)
        if not commit:
            raise _RolledBack
    return woke


class _RolledBack(Exception):
    pass


def test_a_sleep_parks_the_task_spending_no_attempt_until_its_time_then_resumes(
    db_url: str, queue: str, clock: Clock
) -> None:
    registry = txqueue.Registry()
    calls: list[str] = []

    def reserve() -> int:
        calls.append("reserve")
        return 7

    @registry.task("remind", queue=queue, context=True, max_attempts=1)
    def remind(ctx: txqueue.TaskContext) -> int:
        seat = ctx.step("reserve", reserve)
        ctx.sleep(3600)
        ctx.sleep_until(datetime.now(UTC) - timedelta(seconds=1))  # passed: no park
        calls.append("after")
        return seat

    task_id = enqueue_named(db_url, "remind", queue)
    ran = run_tasks(registry, db_url)
    assert [r.state for r in ran] == ["parked"]
    info = task_info(db_url, task_id)
    assert (info.state, info.attempts, info.max_attempts) == ("parked", 1, 2)  # one more
    assert info.run_at > datetime.now(UTC) + timedelta(minutes=59)
    assert run_tasks(registry, db_url) == []  # not before its time
    ran = run_tasks(registry, db_url, clock=clock)  # moves the clock to its time
    assert [(r.state, r.result) for r in ran] == [("succeeded", 7)]
    assert calls == ["reserve", "after"]
    moves = [e.move for e in task_info(db_url, task_id).events if e.move != "step"]
    assert moves == ["claimed", "parked", "woken", "claimed", "succeeded"]
    assert [s.name for s in task_info(db_url, task_id).steps] == ["reserve", "sleep 1", "sleep 2"]


def test_a_signal_wakes_its_wait_with_its_payload_and_a_rolled_back_one_never_arrives(
    db_url: str, queue: str
) -> None:
    registry = txqueue.Registry()

    @registry.task("approve", queue=queue, context=True)
    def approve(ctx: txqueue.TaskContext, order: int) -> Any:
        return ctx.wait_for(f"approval:{order}")

    task_id = enqueue_named(db_url, "approve", queue, order=42)
    assert [r.state for r in run_tasks(registry, db_url)] == ["parked"]
    with pytest.raises(_RolledBack):
        _signal(db_url, "approval:42", {"ok": False}, commit=False)
    assert task_info(db_url, task_id).state == "parked"
    assert run_tasks(registry, db_url) == []
    assert _signal(db_url, "approval:41", "someone else's") == 0
    assert _signal(db_url, "approval:42", {"ok": True}) == 1
    ran = run_tasks(registry, db_url)
    assert [(r.state, r.result) for r in ran] == [("succeeded", {"ok": True})]
    woken = [e for e in task_info(db_url, task_id).events if e.move == "woken"]
    assert [e.reason for e in woken] == ["signal approval:42"]


def test_a_signal_sent_before_the_wait_is_kept_for_it_one_signal_one_wait(
    db_url: str, queue: str
) -> None:
    registry = txqueue.Registry()

    @registry.task("collect", queue=queue, context=True)
    def collect(ctx: txqueue.TaskContext) -> list[Any]:
        return [ctx.wait_for("batch", name="first"), ctx.wait_for("batch", name="second")]

    assert _signal(db_url, "batch", 1) == 0  # kept: no wait yet
    assert _signal(db_url, "batch", 2) == 0
    first = enqueue_named(db_url, "collect", queue)
    assert [(r.state, r.result) for r in run_tasks(registry, db_url)] == [("succeeded", [1, 2])]
    second = enqueue_named(db_url, "collect", queue)
    assert [r.state for r in run_tasks(registry, db_url)] == ["parked"]  # both were taken
    assert _signal(db_url, "batch", 3) == 1
    assert _signal(db_url, "batch", 4) == 0  # kept: its waiter is pending already
    assert [(r.state, r.result) for r in run_tasks(registry, db_url)] == [("succeeded", [3, 4])]
    assert task_info(db_url, first).result == [1, 2]
    assert task_info(db_url, second).steps[-1].result == {"signal": 4}


def test_a_wait_times_out_catchably_and_every_later_attempt_sees_the_same(
    db_url: str, queue: str, clock: Clock
) -> None:
    registry = txqueue.Registry()
    seen: list[str] = []

    @registry.task("escalate", queue=queue, context=True, max_attempts=2, backoff=0)
    def escalate(ctx: txqueue.TaskContext) -> str:
        try:
            answer = ctx.wait_for("reply", timeout=60)
        except txqueue.SignalTimeoutError:
            seen.append(f"timed out, attempt {ctx.attempt}")
            answer = "none"
        if len(seen) == 1:
            raise RuntimeError("the mail server was down")
        return str(answer)

    task_id = enqueue_named(db_url, "escalate", queue)
    assert [r.state for r in run_tasks(registry, db_url)] == ["parked"]
    ran = run_tasks(registry, db_url, clock=clock)
    assert [r.state for r in ran] == ["pending", "succeeded"]
    assert seen == ["timed out, attempt 2", "timed out, attempt 3"]  # 1 parked
    assert _signal(db_url, "reply", "too late") == 0
    assert task_info(db_url, task_id).result == "none"


def test_a_parked_task_is_cancelled_by_hand_and_bad_signals_are_refused(
    db_url: str, queue: str
) -> None:
    registry = txqueue.Registry()

    @registry.task("nap", queue=queue, context=True)
    def nap(ctx: txqueue.TaskContext) -> None:
        ctx.sleep(86400)

    task_id = enqueue_named(db_url, "nap", queue)
    run_tasks(registry, db_url)
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        assert txqueue.cancel(c, task_id, by="ops") == "cancelled"
    assert task_info(db_url, task_id).state == "cancelled"
    with closing(connect(db_url)) as c:
        with pytest.raises(txqueue.InvalidTypeError, match="key"):
            txqueue.signal(c, 42, None)  # type: ignore[arg-type]
        with pytest.raises(txqueue.InvalidValueError, match="key"):
            txqueue.signal(c, "", None)
        with pytest.raises(txqueue.InvalidValueError, match="payload"):
            txqueue.signal(c, "k", float("nan"))


def test_a_worker_wakes_a_sleep_at_its_time_and_a_signal_at_once(db_url: str, queue: str) -> None:
    # Real time: each worker's recovery look wakes the sleep; the signal's wake-up, the wait.
    registry = txqueue.Registry()
    resumed: dict[str, float] = {}

    @registry.task("pause", queue=queue, context=True)
    def pause(ctx: txqueue.TaskContext, key: str) -> None:
        if key == "sleep":
            ctx.sleep(1.0)
        else:
            ctx.wait_for(key)
        resumed[key] = time.monotonic()

    worker = txqueue.Worker(
        registry, database_url=db_url, amqp_url=None, queues=[queue], concurrency=2
    )
    with running(worker):
        started = time.monotonic()
        ids = [enqueue_named(db_url, "pause", queue, key=k) for k in ("sleep", "go")]
        while task_info(db_url, ids[1]).state != "parked":
            assert time.monotonic() - started < 10, "the wait never parked"
            time.sleep(0.05)
        sent = time.monotonic()
        _signal(db_url, "go", None)
        while len(resumed) < 2:
            assert time.monotonic() - started < 15, f"not resumed: {resumed}"
            time.sleep(0.05)
    assert resumed["go"] - sent < 1.0
    assert 1.0 <= resumed["sleep"] - started < 5.0  # its time, then the next look (2 s)
    assert [task_info(db_url, i).state for i in ids] == ["succeeded", "succeeded"]


def test_a_parked_task_holds_its_unique_key_and_bad_sleeps_and_waits_fail_clearly(
    db_url: str, queue: str
) -> None:
    registry = txqueue.Registry()

    @registry.task("poll", queue=queue, context=True, max_attempts=1)
    def poll(ctx: txqueue.TaskContext, how: str) -> None:
        if how == "sleep":
            ctx.sleep(3600)
        elif how == "too long":
            ctx.sleep(400 * 86400)
        elif how == "no key":
            ctx.wait_for("")
        else:
            ctx.wait_for("k", timeout=400 * 86400)

    def enqueue(how: str, unique_key: str | None = None) -> uuid.UUID:
        with closing(connect(db_url)) as c, txqueue.transaction(c):
            task = txqueue.Task("poll", {"how": how}, queue=queue, unique_key=unique_key)
            return txqueue.enqueue(c, task)

    held = enqueue("sleep", unique_key=f"{queue}:account")
    assert [r.state for r in run_tasks(registry, db_url)] == ["parked"]
    assert enqueue("sleep", unique_key=f"{queue}:account") == held  # still its key
    bad = [enqueue(how) for how in ("too long", "no key", "long wait")]
    assert {r.state for r in run_tasks(registry, db_url)} == {"failed"}
    errors = [task_info(db_url, i).errors[-1] for i in bad]
    expected = [
        ("StepError", "step 'sleep': seconds: must be 0 to 31,622,400 (a year)"),
        ("StepError", "step 'wait_for': key: must be 1 to 180 characters"),
        ("StepError", "step 'wait_for': timeout: at most 31,622,400 s (a year)"),
    ]
    for error, (kind, message) in zip(errors, expected, strict=True):
        assert error["type"].endswith(kind) and error["message"].startswith(message), error


def test_a_signal_sent_from_sql_wakes_its_wait_at_the_next_look(pg_url: str, queue: str) -> None:
    registry = txqueue.Registry()

    @registry.task("approve", queue=queue, context=True)
    def approve(ctx: txqueue.TaskContext) -> Any:
        return ctx.wait_for(f"{queue}:approval")

    task_id = enqueue_named(pg_url, "approve", queue)
    assert [r.state for r in run_tasks(registry, pg_url)] == ["parked"]
    with closing(connect(pg_url)) as c:
        c.execute("SELECT txqueue_signal(%s, '{\"ok\": true}')", (f"{queue}:approval",))
        c.commit()
        with pytest.raises(Exception, match="1 to 180 characters"):
            c.execute("SELECT txqueue_signal('')")
        c.rollback()
        c.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        with pytest.raises(txqueue.ConfigError, match="read committed"):
            txqueue.signal(c, "k", None)
        c.rollback()
    assert task_info(pg_url, task_id).state == "parked"  # woken by the next look, not the signal
    assert [(r.state, r.result) for r in run_tasks(registry, pg_url)] == [
        ("succeeded", {"ok": True})
    ]


def test_a_task_that_started_in_time_is_not_held_to_its_start_deadline_after_a_sleep(
    db_url: str, queue: str, clock: Clock
) -> None:
    registry = txqueue.Registry()

    @registry.task("report", queue=queue, context=True)
    def report(ctx: txqueue.TaskContext) -> str:
        ctx.sleep(3600)
        return "sent"

    deadline = datetime.now(UTC) + timedelta(minutes=5)
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        task_id = report.options(expires=deadline).enqueue(c)
    assert [r.state for r in run_tasks(registry, db_url)] == ["parked"]
    ran = run_tasks(registry, db_url, clock=clock)  # an hour on: past the deadline
    assert [(r.state, r.result) for r in ran] == [("succeeded", "sent")]
    assert task_info(db_url, task_id).start_by is not None  # its deadline, kept and passed
