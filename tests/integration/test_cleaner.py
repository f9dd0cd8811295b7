"""The cleaner on each store, with RabbitMQ: recovery policies, re-notify, pruning, and task
management."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from typing import Any

import pika
import psycopg
import pytest

import txqueue
from txqueue import Task, broker
from txqueue.store import for_url
from txqueue.store.records import ClaimDefaults, Outcome, Poll

from .helpers import ago, connect, count, execute, rows, running, wait_until

LEASE = 0.2


def claim_and_die(db_url: str, registry: txqueue.Registry, queue: str, n: int = 10) -> list[Any]:
    """Claim as a worker that then dies: nothing heartbeats, nothing records an outcome."""
    per_name = {name: {**d, "timeout": LEASE} for name, d in registry.claim_defaults().items()}
    store = for_url(db_url)
    with closing(store.connect(db_url)) as conn:
        defaults = ClaimDefaults(per_name, LEASE, 5)
        claimed = store.claim_ripe(conn, Poll(queue, n, "dead-worker", defaults)).claimed
    time.sleep(LEASE + 0.05)
    return claimed


def enqueue(db_url: str, *tasks: Task) -> list[Any]:
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        return txqueue.enqueue_many(c, tasks)


@contextmanager
def woken_only(registry: txqueue.Registry, db_url: str, amqp_url: str) -> Iterator[None]:
    """A worker running that only a message can start a task in: no poll for a minute, and
    neither a cleaner of its own nor its own recovery (either would recover a task before
    the test's cleaner)."""
    worker = txqueue.Worker(
        registry, database_url=db_url, amqp_url=amqp_url, poll_interval=60, cleaner=False
    )
    worker._claimer.next_poll = time.monotonic() + 60
    worker._leases._recover = lambda conn: None
    with running(worker):
        yield


def cleaner(db_url: str, **options: Any) -> txqueue.Cleaner:
    return txqueue.Cleaner(database_url=db_url, amqp_url=options.pop("amqp_url", None), **options)


def test_expired_lease_is_retried_counting_the_lost_attempt(db_url: str, queue: str) -> None:
    registry = txqueue.Registry()
    registry.task("work", queue=queue, max_attempts=2)(lambda payload: None)
    [task_id] = enqueue(db_url, Task("work", queue=queue))
    claim_and_die(db_url, registry, queue)

    report = cleaner(db_url).run_once()
    assert (report.retried, report.failed, report.ok) == (1, 0, True)
    [row] = rows(db_url)
    assert row["state"] == "pending" and row["attempts"] == 1 and row["expires_at"] is None
    [error] = row["errors"]
    assert error["type"] == "txqueue.LeaseExpired" and "dead-worker" in error["message"]

    # The second attempt dies too: out of attempts, it fails and the hook hears of it.
    failures: list[txqueue.FailedTask] = []
    registry.on_failed(failures.append)
    claim_and_die(db_url, registry, queue)
    report = cleaner(db_url, registry=registry).run_once()
    assert (report.retried, report.failed) == (0, 1)
    [row] = rows(db_url)
    assert row["state"] == "failed" and row["attempts"] == 2 and len(row["errors"]) == 2
    assert [(f.id, f.reason) for f in failures] == [(task_id, "lease expired on the last attempt")]


def test_abandon_fails_at_once_and_alerts(db_url: str, queue: str) -> None:
    failures: list[txqueue.FailedTask] = []
    registry = txqueue.Registry(on_failed=failures.append)
    registry.task("charge", queue=queue, on_lease_expired="abandon")(lambda payload: None)
    enqueue(db_url, Task("charge", {"cents": 500}, queue=queue))
    claim_and_die(db_url, registry, queue)

    # The policy travels in the row: a cleaner without the registry honours it too.
    report = cleaner(db_url).run_once()
    assert (report.retried, report.failed) == (0, 1)
    [row] = rows(db_url)
    assert row["state"] == "failed" and row["attempts"] == 1 and row["finished_at"] is not None
    assert failures == []  # no registry, no hook

    [again] = enqueue(db_url, Task("charge", {"cents": 700}, queue=queue))
    claim_and_die(db_url, registry, queue)
    cleaner(db_url, registry=registry).run_once()
    [failure] = failures
    assert (failure.id, failure.payload, failure.reason) == (
        again,
        {"cents": 700},
        "lease expired: abandoned",
    )
    # The hook gets the error entry as the task's history keeps it, as for the worker's.
    [row] = rows(db_url, "id = %s", (str(again),))
    assert failure.error == row["errors"][-1]
    assert failure.error["type"] == "txqueue.LeaseExpired"


def test_compensate_enqueues_the_compensating_task_and_it_runs(
    db_url: str, amqp_url: str, queue: str
) -> None:
    registry = txqueue.Registry()
    refunds: list[Any] = []
    registry.task("ship", queue=queue, compensate="refund")(lambda payload: None)
    registry.task("refund", queue=queue)(refunds.append)
    # The worker that died had taken the task's wake-up with it. Left in the queue, it would
    # reach the worker below as the cleaner runs, and that worker's claim by id locks the
    # row for a moment: the cleaner skips a locked row (SKIP LOCKED) until its next pass.
    txqueue.configure(amqp_url=None)
    [task_id] = enqueue(db_url, Task("ship", {"order": 7}, queue=queue))
    claim_and_die(db_url, registry, queue)

    with woken_only(registry, db_url, amqp_url):
        report = cleaner(db_url, amqp_url=amqp_url).run_once()
        # A string: pytest would cut a tuple's repr short, and the rows are the evidence.
        assert (report.failed, report.compensations) == (1, 1), f"{report}: {rows(db_url)}"
        # Woken by the cleaner's message.
        wait_until(lambda: len(refunds) == 1, timeout=5)
    assert refunds == [{"task_id": str(task_id), "name": "ship", "payload": {"order": 7}}]
    states = {r["name"]: r["state"] for r in rows(db_url)}
    assert states == {"ship": "failed", "refund": "succeeded"}


def test_a_step_a_recovery_readies_is_woken_by_the_cleaner(
    db_url: str, amqp_url: str, queue: str
) -> None:
    """A step whose worker died ends failed by the cleaner's recovery; its child that takes
    its outcome is readied in that write and woken by the cleaner's message, not left to a
    poll or the next renotify."""
    registry = txqueue.Registry()
    seen: list[str] = []

    @registry.task(queue=queue, max_attempts=1)
    def ship(order: int) -> int:
        return order

    @registry.task(queue=queue)
    def notify(shipped: txqueue.Outcome[int]) -> None:
        seen.append(shipped.state)

    flow = txqueue.Workflow("order")
    flow.step(notify, flow.step(ship, 7).outcome)
    txqueue.configure(amqp_url=None)  # the dead worker took the first step's wake-up
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        txqueue.enqueue_workflow(c, flow)
    claim_and_die(db_url, registry, queue)

    with woken_only(registry, db_url, amqp_url):
        report = cleaner(db_url, amqp_url=amqp_url).run_once()
        assert report.failed == 1, f"{report}: {rows(db_url)}"
        wait_until(lambda: seen == ["failed"], timeout=5)


def test_recovery_never_overwrites_an_outcome_written_first(db_url: str, queue: str) -> None:
    registry = txqueue.Registry()
    registry.task("work", queue=queue)(lambda payload: None)
    enqueue(db_url, Task("work", queue=queue))
    [first] = claim_and_die(db_url, registry, queue)

    # The worker was only slow: its outcome lands after the lease ran out, before the
    # cleaner came. The fence accepts it (nothing else claimed the task).
    store = for_url(db_url)
    with closing(store.connect(db_url)) as conn:
        ok = Outcome(first.id, first.attempts, "dead-worker", "succeeded", "1")
        assert set(store.record_outcomes(conn, [ok])) == {first.id}
    assert cleaner(db_url).run_once().retried == 0
    [row] = rows(db_url)
    assert (row["state"], row["result"], row["errors"]) == ("succeeded", 1, [])


@pytest.mark.unsupported(
    sqlite="one writer at a time: the cleaner waits for the outcome's transaction to commit "
    "instead of skipping its locked row, then sees the task finished"
)
def test_recovery_skips_a_row_whose_outcome_is_being_written(db_url: str, queue: str) -> None:
    registry = txqueue.Registry()
    registry.task("work", queue=queue)(lambda payload: None)
    enqueue(db_url, Task("work", queue=queue))
    [task] = claim_and_die(db_url, registry, queue)
    with psycopg.connect(db_url) as writer:
        writer.execute("SELECT 1 FROM txqueue_tasks WHERE id = %s FOR UPDATE", (task.id,))
        report = cleaner(db_url).run_once()
        assert report.retried == 0  # skipped, not waited for or overwritten
        writer.execute(
            "UPDATE txqueue_tasks SET state = 'succeeded', finished_at = now() WHERE id = %s",
            (task.id,),
        )
        writer.commit()
    assert cleaner(db_url).run_once().retried == 0
    assert count(db_url, "state = 'succeeded' AND errors = '[]'") == 1


def test_two_cleaners_at_once_recover_each_task_once(db_url: str, queue: str) -> None:
    registry = txqueue.Registry()
    registry.task("work", queue=queue)(lambda payload: None)
    enqueue(db_url, *(Task("work", {"i": i}, queue=queue) for i in range(300)))
    claim_and_die(db_url, registry, queue, n=300)

    reports: list[txqueue.CleanupReport] = []
    threads = [
        threading.Thread(target=lambda: reports.append(cleaner(db_url, batch_size=7).run_once()))
        for _ in range(2)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sum(r.retried for r in reports) == 300
    assert [len(r["errors"]) for r in rows(db_url, "state = 'pending'")] == [1] * 300


def test_renotify_wakes_a_worker_for_a_task_whose_message_was_lost(
    db_url: str, amqp_url: str, queue: str
) -> None:
    registry = txqueue.Registry()
    ran: list[Any] = []
    registry.task("work", queue=queue)(ran.append)
    txqueue.configure(amqp_url=None)  # the wake-up is lost
    [task_id] = enqueue(db_url, Task("work", {"n": 1}, queue=queue))
    broker.check(amqp_url, [queue])

    time.sleep(0.3)
    report = cleaner(db_url, amqp_url=amqp_url, grace=0.2).run_once()
    assert report.renotified == 1
    assert broker.check(amqp_url, [queue]) == {queue: 1}
    # Once per grace period, not once per run; and not while the last wake-up is still
    # waiting in the queue (copies would pile up behind it when no worker consumes).
    assert cleaner(db_url, amqp_url=amqp_url, grace=0.2).run_once().renotified == 0
    time.sleep(0.3)
    assert cleaner(db_url, amqp_url=amqp_url, grace=0.2).run_once().renotified == 0
    with pika.BlockingConnection(pika.URLParameters(amqp_url)) as admin:
        admin.channel().queue_purge(f"txqueue.{queue}")  # the wake-up is lost after all
    assert cleaner(db_url, amqp_url=amqp_url, grace=0.2).run_once().renotified == 1

    worker = txqueue.Worker(registry, database_url=db_url, amqp_url=amqp_url, poll_interval=60)
    worker._claimer.next_poll = time.monotonic() + 60  # only a message can start it
    with running(worker):
        wait_until(lambda: ran == [{"n": 1}], timeout=5)
        wait_until(lambda: broker.check(amqp_url, [queue]) == {queue: 0}, timeout=5)
    assert rows(db_url)[0]["id"] == task_id


def test_prune_keeps_failed_tasks_longer(db_url: str, queue: str) -> None:
    groups = [
        (state, hours) for state in ("succeeded", "cancelled", "failed") for hours in (1, 30, 200)
    ]
    for state, hours in groups:
        group = f"{queue}-{state}-{hours}"
        enqueue(db_url, *(Task("n", queue=group) for _ in range(40)))
        execute(
            db_url,
            f"UPDATE txqueue_tasks SET state = %s, finished_at = {ago(db_url, hours * 3600)} "
            "WHERE queue = %s",
            (state, group),
        )
    enqueue(db_url, *(Task("n", queue=queue) for _ in range(5)))
    report = cleaner(db_url, batch_size=15).run_once()
    # Succeeded and cancelled older than 24 h go (2 ages x 2 states x 40); failed after 7 d.
    assert report.pruned == 160 + 40
    assert count(db_url, "state = 'pending'") == 5
    assert count(db_url, "state = 'failed'") == 80
    assert count(db_url) == 5 + 40 * 2 + 80


def test_cancel_pending_and_running_tasks(db_url: str, queue: str) -> None:
    registry = txqueue.Registry()
    started = threading.Event()

    @registry.task("long", queue=queue)
    def long(payload: Any, ctx: txqueue.TaskContext) -> None:
        started.set()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if ctx.cancelled:
                raise RuntimeError("stopped on request")
            time.sleep(0.02)

    with closing(connect(db_url)) as c, txqueue.transaction(c):
        later = txqueue.enqueue(c, Task("long", queue=queue, delay=3600))
        now = txqueue.enqueue(c, Task("long", queue=queue))
    with closing(connect(db_url, autocommit=True)) as c:
        assert txqueue.cancel(c, str(later)) == "cancelled"
        worker = txqueue.Worker(registry, database_url=db_url, amqp_url=None)
        with running(worker):
            assert started.wait(5)
            assert txqueue.cancel(c, now) == "running"
            wait_until(lambda: txqueue.get_task(c, now).state == "cancelled", timeout=5)
        info = txqueue.get_task(c, now)
        assert info.errors[-1]["message"] == "stopped on request" and info.attempts == 1
        with pytest.raises(txqueue.TaskStateError, match="already finished") as exc:
            txqueue.cancel(c, now)
        assert exc.value.state == "cancelled"
        assert worker.stats["cancelled"] == 1
        assert [t.id for t in txqueue.list_tasks(c, state="cancelled", queue=queue)] == [
            now,
            later,
        ]


def test_retry_failed_tasks_runs_them_again(db_url: str, queue: str) -> None:
    alerts: list[txqueue.FailedTask] = []
    registry = txqueue.Registry(on_failed=alerts.append)
    fail = threading.Event()
    fail.set()

    @registry.task("flaky", queue=queue, max_attempts=1)
    def flaky(payload: Any) -> str:
        if fail.is_set():
            raise ValueError("down")
        return "ok"

    ids = enqueue(db_url, *(Task("flaky", {"i": i}, queue=queue) for i in range(3)))
    txqueue.Worker(registry, database_url=db_url, amqp_url=None).run(burst=True)
    assert count(db_url, "state = 'failed'") == 3
    assert sorted(str(a.id) for a in alerts) == sorted(str(i) for i in ids)
    assert {(a.reason, a.error["message"]) for a in alerts if a.error} == {
        ("attempts exhausted", "down")
    }
    fail.clear()
    with closing(connect(db_url)) as c:
        with pytest.raises(txqueue.TaskStateError, match="only failed or cancelled"):
            [pending] = enqueue(db_url, Task("flaky", queue=queue, delay=3600))
            txqueue.retry(c, pending)
        c.rollback()
        txqueue.retry(c, ids[0])
        assert txqueue.retry_failed(c, queue=queue) == 2
        assert txqueue.retry_failed(c, queue=queue) == 0
        c.commit()
    txqueue.Worker(registry, database_url=db_url, amqp_url=None).run(burst=True)
    done = [r for r in rows(db_url) if r["id"] in ids]
    assert [(r["state"], r["attempts"], r["max_attempts"]) for r in done] == [
        ("succeeded", 2, 2)
    ] * 3
    assert all(len(r["errors"]) == 1 for r in done)


def test_management_errors_name_the_field(db_url: str) -> None:
    with closing(connect(db_url)) as c:
        with pytest.raises(txqueue.InvalidValueError) as info:
            txqueue.get_task(c, "not-a-uuid")
        assert info.value.field == "id"
        with pytest.raises(txqueue.TaskNotFoundError):
            txqueue.get_task(c, "01a20313-75b8-7e26-b104-7db56dc29e69")
        with pytest.raises(txqueue.InvalidValueError) as info:
            txqueue.list_tasks(c, state="done")
        assert info.value.field == "state"
        with pytest.raises(txqueue.InvalidValueError) as info:
            txqueue.list_tasks(c, limit=0)
        assert info.value.field == "limit"
    with pytest.raises(txqueue.ConfigError, match="batch_size"):
        txqueue.Cleaner(database_url="postgresql://x/y", batch_size=0)


def test_cleaner_reports_a_broker_it_cannot_reach(db_url: str, queue: str) -> None:
    registry = txqueue.Registry()
    registry.task("work", queue=queue)(lambda payload: None)
    enqueue(db_url, Task("work", queue=queue), Task("work", queue=queue))
    claim_and_die(db_url, registry, queue, n=1)  # one to recover, one left pending
    time.sleep(0.2)
    report = cleaner(db_url, amqp_url="amqp://guest:guest@127.0.0.1:1/", grace=0.1).run_once()
    # The database work is done; the wake-ups are not, and the report says so.
    assert report.retried == 1 and report.renotified == 0 and not report.ok
    assert "cannot connect to RabbitMQ" in report.problems[0]


def test_retry_failed_leaves_a_task_whose_unique_key_is_taken(db_url: str, queue: str) -> None:
    enqueue(db_url, Task("n", queue=queue, unique_key="k"), Task("n", queue=queue))
    execute(db_url, "UPDATE txqueue_tasks SET state = 'failed', finished_at = created_at")
    with closing(connect(db_url)) as c:
        txqueue.enqueue(c, Task("n", queue=queue, unique_key="k"))
        assert txqueue.retry_failed(c) == 1
        [failed] = txqueue.list_tasks(c, state="failed")
        assert failed.unique_key == "k"
        # Never claimed: it keeps the registry's max_attempts (NULL), not one attempt.
        pending = txqueue.list_tasks(c, state="pending")
        assert len(pending) == 2 and {t.max_attempts for t in pending} == {None}
        with pytest.raises(txqueue.StoreError, match="holds the same unique_key"):
            txqueue.retry(c, failed.id)


def test_stopping_worker_releases_by_policy(db_url: str, queue: str) -> None:
    registry = txqueue.Registry()
    gate = threading.Event()
    started = threading.Semaphore(0)

    def block(payload: Any) -> None:
        started.release()
        gate.wait(10)

    registry.task("idempotent", queue=queue)(block)
    registry.task("charge", queue=queue, on_lease_expired="abandon")(block)
    enqueue(db_url, Task("idempotent", queue=queue), Task("charge", queue=queue))
    # Without a cleaner of its own: its pass, if late, would apply the policy to the task
    # released below before this test looks at it.
    worker = txqueue.Worker(
        registry, database_url=db_url, amqp_url=None, shutdown_timeout=0.1, cleaner=False
    )
    thread = threading.Thread(target=worker.run)
    thread.start()
    assert started.acquire(timeout=5) and started.acquire(timeout=5)
    worker.stop()
    thread.join(10)
    gate.set()
    assert worker.stats["released"] == 2
    states = {r["name"]: (r["state"], r["errors"]) for r in rows(db_url)}
    # Safe to run again: at once. Must not run twice: the cleaner applies its policy now.
    assert states["idempotent"][0] == "pending"
    assert states["idempotent"][1][0]["type"] == "txqueue.WorkerStopped"
    assert states["charge"] == ("running", [])
    report = cleaner(db_url).run_once()
    assert report.failed == 1
    assert rows(db_url, "name = 'charge'")[0]["state"] == "failed"
