"""The worker on each store, with and without RabbitMQ: claims, the commit check, outcomes."""

from __future__ import annotations

import asyncio
import dataclasses
import faulthandler
import itertools
import logging
import threading
import time
import uuid
from contextlib import closing
from typing import Any

import pika
import pytest

import txqueue
from txqueue import Task
from txqueue.errors import StoreError
from txqueue.outbox import wakeup
from txqueue.store import for_url
from txqueue.store.postgres.claims import Claims

from .helpers import connect, count, rows, running, wait_until


class Recorder:
    """Handlers that note when they started, for timing and run counts."""

    def __init__(self) -> None:
        self.runs: list[tuple[uuid.UUID, int, float]] = []
        self.lock = threading.Lock()

    def __call__(self, payload: Any, ctx: txqueue.TaskContext) -> Any:
        with self.lock:
            self.runs.append((ctx.id, ctx.attempt, time.monotonic()))
        return {"echo": payload}

    def ids(self) -> list[uuid.UUID]:
        return [r[0] for r in self.runs]


def start_delays(db_url: str, rec: Recorder, queue: str, n: int) -> list[float]:
    """Enqueue ``n`` tasks one transaction at a time; seconds from each commit to its start."""
    delays = []
    with closing(connect(db_url)) as c:
        for i in range(n):
            before = len(rec.runs)
            with txqueue.transaction(c):
                txqueue.enqueue(c, Task("rec", {"i": i}, queue=queue))
            committed = time.monotonic()
            wait_until(lambda b=before: len(rec.runs) == b + 1, timeout=5)
            delays.append(rec.runs[-1][2] - committed)
    return delays


def make(queue: str, **options: Any) -> tuple[txqueue.Registry, Recorder]:
    registry = txqueue.Registry()
    recorder = Recorder()
    registry.task("rec", queue=queue, **options)(recorder)
    return registry, recorder


def test_committed_task_runs_once_with_result(db_url: str, queue: str) -> None:
    registry, rec = make(queue)
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        task_id = txqueue.enqueue(c, registry.get("rec").task({"n": 1}))  # type: ignore[union-attr]
    txqueue.Worker(registry, database_url=db_url, amqp_url=None).run(burst=True)
    assert rec.ids() == [task_id]
    [row] = rows(db_url)
    assert row["state"] == "succeeded" and row["attempts"] == 1
    assert row["result"] == {"echo": {"n": 1}}
    assert row["finished_at"] >= row["start_time"] >= row["created_at"]


def test_wakeup_starts_task_within_milliseconds_of_commit(
    db_url: str, amqp_url: str, queue: str
) -> None:
    registry, rec = make(queue)
    worker = txqueue.Worker(registry, database_url=db_url, amqp_url=amqp_url, poll_interval=60)
    with running(worker):
        delays = sorted(start_delays(db_url, rec, queue, 20))
    # The poll is a minute away: only the wake-up can have started these.
    assert delays[len(delays) // 2] < 0.05, delays
    assert delays[-1] < 0.5, delays


@dataclasses.dataclass
class ClaimSpy:
    """The names of the threads that claim wake-ups by id, in order; the next ``fail``
    claims fail as a lost connection would."""

    threads: list[str] = dataclasses.field(default_factory=list)
    fail: int = 0


def spy_on_claims(monkeypatch: pytest.MonkeyPatch, db_url: str) -> ClaimSpy:
    store, spy = for_url(db_url), ClaimSpy()
    claim_ids = store.claim_ids

    def claim(*args: Any) -> Any:
        spy.threads.append(threading.current_thread().name)
        if spy.fail:
            spy.fail -= 1
            raise StoreError("claim failed: injected")
        return claim_ids(*args)

    monkeypatch.setattr(store, "claim_ids", claim)
    return spy


def woken_worker(db_url: str, amqp_url: str, queue: str) -> tuple[txqueue.Worker, Recorder]:
    """A worker whose tasks only wake-ups start: its poll is a minute away."""
    registry, rec = make(queue)
    return txqueue.Worker(registry, database_url=db_url, amqp_url=amqp_url, poll_interval=60), rec


def settle(worker: txqueue.Worker, spy: ClaimSpy, db_url: str, rec: Recorder, queue: str) -> None:
    """Run one task, wait until the worker is idle, forget its claims: a wake-up that
    comes while the claimer is in its first poll, or in the round it makes when a task
    ends, is the claimer's to claim."""
    start_delays(db_url, rec, queue, 1)
    wait_until(lambda: sum(worker.state().running.values()) == 0, timeout=5)
    time.sleep(0.05)
    spy.threads.clear()


def test_an_idle_worker_claims_a_wakeup_on_the_thread_that_received_it(
    db_url: str, amqp_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One thread hand-off fewer between a wake-up's arrival and its task's start."""
    spy = spy_on_claims(monkeypatch, db_url)
    worker, rec = woken_worker(db_url, amqp_url, queue)
    threads = []
    with running(worker):
        for _ in range(5):
            settle(worker, spy, db_url, rec, queue)
            start_delays(db_url, rec, queue, 1)
            threads += spy.threads
    assert threads == ["txqueue-consumer"] * 5, threads


def test_a_claim_failing_on_the_consumers_thread_leaves_the_wakeup_to_the_claimer(
    db_url: str, amqp_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = spy_on_claims(monkeypatch, db_url)
    worker, rec = woken_worker(db_url, amqp_url, queue)
    with running(worker):
        settle(worker, spy, db_url, rec, queue)
        spy.fail = 1
        # The poll is a minute away: the claimer took the kept wake-up over at once.
        [delay] = start_delays(db_url, rec, queue, 1)
    assert delay < 0.5
    # Then on the claimer's thread: the one that called ``run``.
    assert spy.threads == ["txqueue-consumer", "test-worker"]
    assert worker.stats["claimed"] == 2


def test_message_before_a_slow_commit_runs_right_after_it(
    db_url: str, amqp_url: str, queue: str
) -> None:
    registry, rec = make(queue)
    worker = txqueue.Worker(registry, database_url=db_url, amqp_url=amqp_url, poll_interval=60)
    with running(worker), closing(connect(db_url)) as c:
        txqueue.enqueue(c, Task("rec", queue=queue))  # a bare connection: published at once
        assert txqueue.flush(5)
        time.sleep(1.0)  # the worker has the message; the row is not committed
        assert rec.runs == []
        c.commit()
        committed = time.monotonic()
        wait_until(lambda: len(rec.runs) == 1, timeout=5)
    assert rec.runs[0][2] - committed < 0.4
    assert worker.stats["claimed"] == 1


def test_acks_never_cover_a_wakeup_still_waiting_for_its_commit(
    pg_url: str, amqp_url: str, queue: str
) -> None:
    """Deliveries 1 and 3 are claimed while 2 waits for its commit: acking 3 must not
    acknowledge 2 with it (one multiple-ack frame reaches only below the oldest waiting)."""
    registry, rec = make(queue)
    worker = txqueue.Worker(registry, database_url=pg_url, amqp_url=amqp_url, poll_interval=60)
    with closing(connect(pg_url)) as open_tx, closing(connect(pg_url, autocommit=True)) as c:
        with running(worker):
            first = txqueue.enqueue(c, Task("rec", queue=queue))
            waiting = txqueue.enqueue(open_tx, Task("rec", queue=queue))  # not committed yet
            third = txqueue.enqueue(c, Task("rec", queue=queue))
            wait_until(lambda: sorted(rec.ids()) == sorted([first, third]))
            time.sleep(0.3)
        # The worker stopped holding delivery 2 unacked: RabbitMQ has it back.
        assert _ready_messages(amqp_url, queue) == 1
        open_tx.commit()
        worker = txqueue.Worker(registry, database_url=pg_url, amqp_url=amqp_url, poll_interval=60)
        with running(worker):
            wait_until(lambda: len(rec.runs) == 3)
            wait_until(lambda: _ready_messages(amqp_url, queue) == 0)
    assert rec.ids()[2] == waiting


@pytest.mark.unsupported(
    sqlite="SQLite keeps no transaction status: the wake-up of a rolled-back task is "
    "dropped after commit_wait, not at once"
)
def test_rolled_back_task_never_runs_and_is_dropped_at_once(
    db_url: str, amqp_url: str, queue: str
) -> None:
    registry, rec = make(queue)
    worker = txqueue.Worker(
        registry, database_url=db_url, amqp_url=amqp_url, poll_interval=60, commit_wait=120
    )
    with running(worker), closing(connect(db_url)) as c:
        txqueue.enqueue(c, Task("rec", queue=queue))  # a bare connection: published at once
        assert txqueue.flush(5)
        time.sleep(0.3)  # the worker is now waiting for this commit
        c.rollback()  # the business transaction fails
        rolled_back = time.monotonic()
        # Dropped on pg_xact_status = 'aborted', not after the 120 s give-up time.
        wait_until(lambda: worker.stats["dropped_rolled_back"] == 1, timeout=5)
        assert time.monotonic() - rolled_back < 2
        time.sleep(0.2)
    assert rec.runs == []
    assert count(db_url) == 0
    assert worker.stats["gave_up_waiting"] == 0


def test_session_and_transaction_helper_publish_only_after_commit(
    db_url: str, amqp_url: str, queue: str
) -> None:
    with closing(connect(db_url)) as c:
        with txqueue.transaction(c):
            txqueue.enqueue(c, Task("rec", queue=queue))
            txqueue.flush(5)
            assert _ready_messages(amqp_url, queue) is None  # not even declared yet
        assert txqueue.flush(5)
        assert _ready_messages(amqp_url, queue) == 1
        with pytest.raises(RuntimeError), txqueue.transaction(c):
            txqueue.enqueue(c, Task("rec", queue=queue))
            raise RuntimeError
        assert txqueue.flush(5)
        assert _ready_messages(amqp_url, queue) == 1  # nothing sent for the rollback


def _ready_messages(amqp_url: str, queue: str) -> int | None:
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        ok = connection.channel().queue_declare(f"txqueue.{queue}", passive=True)
        return int(ok.method.message_count)
    except pika.exceptions.ChannelClosedByBroker:
        return None
    finally:
        if connection.is_open:
            connection.close()


def test_retries_with_backoff_then_fails_with_error_history(db_url: str, queue: str) -> None:
    registry = txqueue.Registry()
    attempts = []

    @registry.task("flaky", queue=queue, max_attempts=3, backoff=lambda attempt: 0.1 * attempt)
    def flaky(payload: Any, ctx: txqueue.TaskContext) -> None:
        attempts.append((ctx.attempt, time.monotonic()))
        raise ValueError(f"bad payload {payload['n']}")

    with closing(connect(db_url, autocommit=True)) as c:
        txqueue.enqueue(c, flaky.task({"n": 7}))
    worker = txqueue.Worker(registry, database_url=db_url, amqp_url=None, poll_interval=0.02)
    with running(worker):
        wait_until(lambda: count(db_url, "state = 'failed'") == 1, timeout=10)
    assert [a for a, _ in attempts] == [1, 2, 3]
    assert attempts[1][1] - attempts[0][1] >= 0.1  # the backoff was waited out
    assert attempts[2][1] - attempts[1][1] >= 0.2
    [row] = rows(db_url)
    assert row["attempts"] == 3 and row["finished_at"] is not None
    assert [e["attempt"] for e in row["errors"]] == [1, 2, 3]
    for error in row["errors"]:
        assert error["type"] == "builtins.ValueError"
        assert error["message"] == "bad payload 7"
        assert "raise ValueError" in error["traceback"]
    assert worker.stats["retried"] == 2 and worker.stats["failed"] == 1


def test_default_backoff_retries_within_a_few_seconds(db_url: str, queue: str) -> None:
    registry = txqueue.Registry()

    @registry.task("once", queue=queue)
    def once(payload: Any, ctx: txqueue.TaskContext) -> str:
        if ctx.attempt == 1:
            raise RuntimeError("first attempt fails")
        return "second attempt"

    with closing(connect(db_url, autocommit=True)) as c:
        txqueue.enqueue(c, once.task())
    worker = txqueue.Worker(registry, database_url=db_url, amqp_url=None, poll_interval=0.05)
    with running(worker):
        wait_until(lambda: count(db_url, "state = 'succeeded'") == 1, timeout=5)
    [row] = rows(db_url)
    assert row["result"] == "second attempt" and len(row["errors"]) == 1


def test_a_retry_starts_when_its_backoff_ends_not_at_the_next_poll(db_url: str, queue: str) -> None:
    registry = txqueue.Registry()
    attempts: list[float] = []

    @registry.task("flaky", queue=queue, max_attempts=3, backoff=0.2)
    def flaky(payload: Any, ctx: txqueue.TaskContext) -> None:
        attempts.append(time.monotonic())
        if ctx.attempt < 3:
            raise ValueError("not yet")

    worker = txqueue.Worker(registry, database_url=db_url, amqp_url=None, poll_interval=30)
    with running(worker):
        with closing(connect(db_url, autocommit=True)) as c:
            txqueue.enqueue(c, flaky.task())
        try:
            wait_until(lambda: count(db_url, "state = 'succeeded'") == 1, timeout=20)
        except AssertionError:  # failed once in CI, not reproduced: say where it stood
            faulthandler.dump_traceback(all_threads=True)  # shown as captured stderr
            [row] = rows(db_url)
            late = {k: row[k] for k in ("state", "attempts", "run_at")}
            raise AssertionError(f"attempts at {attempts}, then {late}") from None
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    # Backoffs of 0.2 s then 0.4 s, each ±50%; the poll would have taken 30 s.
    assert 0.1 <= gaps[0] < 1.5 and 0.2 <= gaps[1] < 1.5, gaps


def test_delayed_task_does_not_run_before_run_at(db_url: str, amqp_url: str, queue: str) -> None:
    registry, rec = make(queue)
    worker = txqueue.Worker(registry, database_url=db_url, amqp_url=amqp_url, poll_interval=0.05)
    with running(worker), closing(connect(db_url, autocommit=True)) as c:
        enqueued = time.monotonic()
        txqueue.enqueue(c, Task("rec", queue=queue, delay=1.5))
        wait_until(lambda: len(rec.runs) == 1, timeout=10)
    started = rec.runs[0][2] - enqueued
    assert 1.4 <= started < 3.0, started
    [row] = rows(db_url)
    assert row["start_time"] >= row["run_at"]


def test_priority_orders_the_poll(db_url: str, queue: str) -> None:
    registry, rec = make(queue)
    with closing(connect(db_url, autocommit=True)) as c:
        low = txqueue.enqueue(c, Task("rec", queue=queue, priority=-1))
        high = txqueue.enqueue(c, Task("rec", queue=queue, priority=10))
        mid = txqueue.enqueue(c, Task("rec", queue=queue))
    txqueue.Worker(registry, database_url=db_url, amqp_url=None, concurrency=1).run(burst=True)
    assert rec.ids() == [high, mid, low]


def test_async_handler_and_context(db_url: str, queue: str) -> None:
    registry = txqueue.Registry()
    seen = {}

    @registry.task("aio", queue=queue, timeout=40)
    async def aio(payload: Any, ctx: txqueue.TaskContext) -> int:
        await asyncio.sleep(0.01)
        seen.update(
            id=ctx.id, attempt=ctx.attempt, max_attempts=ctx.max_attempts, beat=ctx.heartbeat()
        )
        return int(payload["x"]) * 2

    with closing(connect(db_url, autocommit=True)) as c:
        task_id = txqueue.enqueue(c, aio.task({"x": 21}))
    txqueue.Worker(registry, database_url=db_url, amqp_url=None).run(burst=True)
    assert seen == {"id": task_id, "attempt": 1, "max_attempts": 5, "beat": True}
    [row] = rows(db_url)
    assert row["result"] == 42 and row["state"] == "succeeded"


def test_result_that_is_not_json_fails_the_attempt(db_url: str, queue: str) -> None:
    registry = txqueue.Registry()
    registry.task("bad_result", queue=queue, max_attempts=1)(lambda payload: object())
    with closing(connect(db_url, autocommit=True)) as c:
        txqueue.enqueue(c, Task("bad_result", queue=queue))
    txqueue.Worker(registry, database_url=db_url, amqp_url=None).run(burst=True)
    [row] = rows(db_url)
    assert row["state"] == "failed"
    assert "not JSON-serializable" in row["errors"][0]["message"]


def test_a_result_too_large_fails_the_attempt_and_a_long_message_is_kept_short(
    db_url: str, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    registry = txqueue.Registry()

    @registry.task(queue=queue, max_attempts=1)
    def huge(kind: str) -> str:
        if kind == "result":
            return "x" * (2 << 20)
        raise ValueError("y" * 50_000)

    with closing(connect(db_url, autocommit=True)) as c:
        huge.enqueue(c, "result")
        huge.enqueue(c, "message")
    txqueue.Worker(registry, database_url=db_url, amqp_url=None).run(burst=True)
    result, message = (r["errors"][0]["message"] for r in rows(db_url))
    assert "result: is 2,097,154 bytes of JSON, over the limit of 1,048,576" in result
    assert message == "y" * 10_000 + "… (40,000 more characters)"
    assert max(len(r.getMessage()) for r in caplog.records) < 11_000


@pytest.mark.unsupported(sqlite="wake-ups on SQLite carry no transaction id to check")
def test_malformed_and_unknown_messages_are_logged_acked_and_dropped(
    db_url: str, amqp_url: str, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    registry, rec = make(queue)
    worker = txqueue.Worker(registry, database_url=db_url, amqp_url=amqp_url, poll_interval=60)
    bodies = [
        b"not json",
        b"[1, 2]",
        b'{"xid": "5"}',
        b'{"id": "nope"}',
        b'{"id": "%s", "xid": "abc"}' % str(uuid.uuid4()).encode(),
    ]
    with caplog.at_level(logging.WARNING, "txqueue"), running(worker):
        connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
        channel = connection.channel()
        for body in bodies:
            channel.basic_publish("", f"txqueue.{queue}", body)
        # A well-formed message for an id that does not exist, from a committed transaction.
        with closing(connect(db_url, autocommit=True)) as c:
            row = c.execute("SELECT pg_current_xact_id()::text").fetchone()
        assert row is not None
        channel.basic_publish("", f"txqueue.{queue}", wakeup.encode(uuid.uuid4(), row[0]))
        # A forged transaction id from the future is not trusted either.
        channel.basic_publish("", f"txqueue.{queue}", wakeup.encode(uuid.uuid4(), str(2**40)))
        connection.close()
        wait_until(lambda: worker._consumer is not None and worker._consumer.malformed == 5)
        wait_until(lambda: worker.stats["dropped_gone"] == 2)
        # The worker is still healthy: a real task still runs.
        with closing(connect(db_url, autocommit=True)) as c:
            txqueue.enqueue(c, Task("rec", queue=queue))
        wait_until(lambda: len(rec.runs) == 1)
        wait_until(lambda: _ready_messages(amqp_url, queue) == 0)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert logged.count("dropped a malformed message") == 5
    assert "not JSON" in logged and "is not a UUID" in logged


def test_duplicate_wakeups_run_a_task_once(db_url: str, amqp_url: str, queue: str) -> None:
    registry, rec = make(queue)
    worker = txqueue.Worker(registry, database_url=db_url, amqp_url=amqp_url, poll_interval=60)
    with running(worker), closing(connect(db_url, autocommit=True)) as c:
        task_id = txqueue.enqueue(c, Task("rec", queue=queue))
        connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
        for _ in range(5):
            connection.channel().basic_publish("", f"txqueue.{queue}", wakeup.encode(task_id, None))
        connection.close()
        wait_until(lambda: worker.stats["claimed"] == 1 and _ready_messages(amqp_url, queue) == 0)
        time.sleep(0.3)
    assert rec.ids() == [task_id]
    assert worker.stats["claimed"] == 1


def test_broker_unreachable_enqueue_is_fast_and_task_still_runs(
    db_url: str, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A vhost of its own: a fresh publisher, whose one outage warning this test expects.
    txqueue.configure(amqp_url=f"amqp://guest:secret@127.0.0.1:1/{queue}")
    try:
        registry, rec = make(queue)
        timings = []
        with caplog.at_level(logging.WARNING, "txqueue"), closing(connect(db_url)) as c:
            for i in range(50):
                started = time.perf_counter()
                with txqueue.transaction(c):
                    txqueue.enqueue(c, Task("rec", {"i": i}, queue=queue))
                timings.append(time.perf_counter() - started)
            wait_until(lambda: any("unreachable" in r.getMessage() for r in caplog.records))
            time.sleep(0.5)  # several reconnect attempts fail meanwhile
        timings.sort()
        # Each enqueue is one insert; one that waited on the publisher would wait out its
        # reconnect pauses, which reach 0.4 s by the fourth refusal. Another test process
        # on the two cores can stretch an insert to tens of milliseconds.
        assert timings[len(timings) // 2] < 0.02 and timings[-1] < 0.2, timings[-5:]
        warnings = [r.getMessage() for r in caplog.records if "unreachable" in r.getMessage()]
        assert len(warnings) == 1, warnings  # one warning per outage
        assert "secret" not in warnings[0]
        txqueue.Worker(registry, database_url=db_url, amqp_url=None).run(burst=True)
        assert len(rec.runs) == 50
    finally:
        txqueue.configure()


def test_sqlalchemy_session_and_connection(db_url: str, amqp_url: str, queue: str) -> None:
    import sqlalchemy
    from sqlalchemy.orm import Session

    engine = sqlalchemy.create_engine(db_url.replace("postgresql://", "postgresql+psycopg://"))
    try:
        with Session(engine) as session:
            kept = txqueue.enqueue(session, Task("rec", queue=queue))
            txqueue.flush(5)
            assert _ready_messages(amqp_url, queue) is None  # waits for the commit
            session.commit()
            assert txqueue.flush(5)
            assert _ready_messages(amqp_url, queue) == 1
            txqueue.enqueue(session, Task("rec", queue=queue))
            session.rollback()
            assert txqueue.flush(5)
            assert _ready_messages(amqp_url, queue) == 1
        with engine.connect() as connection:
            many = txqueue.enqueue_many(connection, [Task("rec", queue=queue)] * 2)
            connection.rollback()
            with connection.begin():
                one = txqueue.enqueue(connection, Task("rec", queue=queue))
        assert {r["id"] for r in rows(db_url)} == {kept, one}
        assert not set(many) & {kept, one}
    finally:
        engine.dispose()


def test_without_a_broker_a_worker_in_the_same_process_is_woken_at_once(
    db_url: str, queue: str
) -> None:
    registry, rec = make(queue)
    txqueue.configure(amqp_url=None)
    worker = txqueue.Worker(registry, database_url=db_url, amqp_url=None, poll_interval=60)
    try:
        with running(worker), closing(connect(db_url)) as c:
            time.sleep(0.2)  # past the first poll: from here on only a wake-up starts a task
            delays = start_delays(db_url, rec, queue, 10)
            # On SQLite woken at once, in process: with no transaction status to look up,
            # the worker waits for it, in vain. On PostgreSQL no NOTIFY: only a commit sends.
            txqueue.enqueue(c, Task("rec", {"i": "never"}, queue=queue))
            c.rollback()
            time.sleep(0.5)
    finally:
        txqueue.configure()
    assert max(delays) < 0.5 and sorted(delays)[5] < 0.05, delays
    assert len(rec.runs) == 10


def gated(queue: str) -> tuple[txqueue.Registry, list[int], threading.Event]:
    """A registry whose task ``slow`` notes its payload, then waits for the event."""
    gate = threading.Event()
    started: list[int] = []
    registry = txqueue.Registry()

    @registry.task("slow", queue=queue)
    def slow(payload: int) -> None:
        started.append(payload)
        gate.wait(10)

    return registry, started, gate


def test_a_full_worker_acks_the_wakeups_it_cannot_claim_and_polls_them_when_free(
    db_url: str, amqp_url: str, queue: str
) -> None:
    """Held, a wake-up would wait for the tasks ahead of it, unacked past RabbitMQ's
    consumer_timeout and out of other workers' reach: it is acked once its row is seen
    committed, and the task runs from the poll when a thread frees up."""
    registry, started, gate = gated(queue)
    with closing(connect(db_url, autocommit=True)) as c:
        txqueue.enqueue_many(c, [Task("slow", i, queue=queue) for i in range(3)])
    assert txqueue.flush(5)
    assert _ready_messages(amqp_url, queue) == 1  # one wake-up for the batch
    worker = txqueue.Worker(
        registry, database_url=db_url, amqp_url=amqp_url, poll_interval=60, concurrency=1
    )
    with running(worker):
        # Two, or three if a poll (the listener's first) claimed the first task before the
        # message came: a batch due now is passed on whole, its rows not read.
        wait_until(lambda: worker.stats["passed_on"] >= 2)
        # The first task is claimed before its wake-ups are passed on, and its handler
        # thread may start it a moment after.
        wait_until(lambda: started == [0])
        gate.set()
        # The poll is a minute away on its own: only the passed-on wake-ups brought it near
        # (a loaded machine took over 15 s once, beside a CPU hog): half the interval.
        wait_until(lambda: count(db_url, "state = 'succeeded'") == 3, timeout=30)
    assert sorted(started) == [0, 1, 2]
    # The one message of the batch was acked, not left to be redelivered.
    assert _ready_messages(amqp_url, queue) == 0


def test_a_batch_due_now_is_passed_on_without_reading_its_rows(
    pg_url: str, amqp_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its message says its tasks were all due: once its transaction reads as committed,
    the full worker leaves them to its poll without asking about each row."""
    asked: list[int] = []
    why_unclaimed = Claims.why_unclaimed

    def counted(self: Claims, conn: Any, items: Any) -> Any:
        asked.append(len(items))
        return why_unclaimed(self, conn, items)

    monkeypatch.setattr(Claims, "why_unclaimed", counted)
    registry, started, gate = gated(queue)
    worker = txqueue.Worker(
        registry, database_url=pg_url, amqp_url=amqp_url, poll_interval=60, concurrency=1
    )
    with running(worker), closing(connect(pg_url)) as c:
        # The one thread busy first, so that no task of the batch is claimed by id.
        with txqueue.transaction(c):
            txqueue.enqueue(c, Task("slow", -1, queue=queue))
        wait_until(lambda: started == [-1])
        # Its own wake-up decided first: it may have lost the row to a poll (the listener's
        # first), and then been asked about, or passed on.
        decided = ("woken", "passed_on", "dropped_not_pending")
        wait_until(lambda: sum(worker.stats[k] for k in decided) >= 1)
        asked.clear()
        before = worker.stats["passed_on"]
        with txqueue.transaction(c):
            txqueue.enqueue_many(c, [Task("slow", i, queue=queue) for i in range(4)])
        wait_until(lambda: worker.stats["passed_on"] == before + 4)
        gate.set()
        wait_until(lambda: count(pg_url, "state = 'succeeded'") == 5, timeout=5)
    assert asked == []
    assert _ready_messages(amqp_url, queue) == 0


def test_a_task_due_later_in_a_batch_passed_on_starts_at_its_time(
    db_url: str, amqp_url: str, queue: str
) -> None:
    """A batch with a task due later, that a full worker passes on to its poll: the rows
    say when that task is due, and the worker looks again then, not a poll later."""
    gate = threading.Event()
    started: dict[int, float] = {}
    registry = txqueue.Registry()

    @registry.task("slow", queue=queue)
    def slow(payload: int) -> None:
        started[payload] = time.monotonic()
        if payload == 0:
            gate.wait(10)

    tasks = [Task("slow", i, queue=queue) for i in range(3)]
    tasks.append(Task("slow", 3, queue=queue, delay=1.5))
    worker = txqueue.Worker(
        registry, database_url=db_url, amqp_url=amqp_url, poll_interval=60, concurrency=1
    )
    with running(worker), closing(connect(db_url)) as c:
        enqueued = time.monotonic()
        with txqueue.transaction(c):
            txqueue.enqueue_many(c, tasks)
        wait_until(lambda: worker.stats["dropped_not_ripe"] == 1)
        assert worker.stats["passed_on"] == 2
        gate.set()
        wait_until(lambda: 3 in started, timeout=10)
    assert 1.45 <= started[3] - enqueued < 2.5, started[3] - enqueued
    assert sorted(started) == [0, 1, 2, 3]


def test_a_locked_row_holds_up_neither_the_worker_nor_its_own_wakeup(
    pg_url: str, amqp_url: str, queue: str
) -> None:
    registry, rec = make(queue)
    with closing(connect(pg_url, autocommit=True)) as c:
        locked = txqueue.enqueue(c, Task("rec", queue=queue))
    assert txqueue.flush(5)
    with closing(connect(pg_url)) as holder:
        holder.execute("SELECT 1 FROM txqueue_tasks WHERE id = %s FOR UPDATE", (locked,))
        worker = txqueue.Worker(registry, database_url=pg_url, amqp_url=amqp_url, poll_interval=60)
        with running(worker):
            with closing(connect(pg_url, autocommit=True)) as c:
                free = txqueue.enqueue(c, Task("rec", queue=queue))
            wait_until(lambda: rec.ids() == [free])
            holder.rollback()
            # The wake-up of the locked row was kept and asked about again.
            wait_until(lambda: rec.ids() == [free, locked])


def test_short_tasks_are_claimed_ahead_of_the_free_threads(db_url: str, queue: str) -> None:
    registry, rec = make(queue)
    with closing(connect(db_url, autocommit=True)) as c:
        txqueue.enqueue_many(c, [Task("rec", i, queue=queue) for i in range(300)])
    txqueue.Worker(registry, database_url=db_url, amqp_url=None, concurrency=1).run(burst=True)
    done = rows(db_url)
    assert len(rec.runs) == 300 and {r["state"] for r in done} == {"succeeded"}
    # The tasks of one claim share its start time: one thread, far fewer claims than tasks.
    assert len({r["start_time"] for r in done}) < 30


def test_long_tasks_are_claimed_only_for_free_threads(db_url: str, queue: str) -> None:
    registry = txqueue.Registry()
    registry.task("nap", queue=queue)(lambda payload: time.sleep(0.05))
    with closing(connect(db_url, autocommit=True)) as c:
        txqueue.enqueue_many(c, [Task("nap", i, queue=queue) for i in range(6)])
    txqueue.Worker(registry, database_url=db_url, amqp_url=None, concurrency=2).run(burst=True)
    done = rows(db_url)
    assert {r["state"] for r in done} == {"succeeded"}
    # Two per claim at most (the first claim, before any was measured, takes two too).
    starts = sorted(r["start_time"] for r in done)
    assert all(starts.count(s) <= 2 for s in starts), starts


def test_a_stopping_worker_gives_back_the_tasks_it_claimed_ahead_at_once(
    db_url: str, queue: str
) -> None:
    gate = threading.Event()
    started: list[int] = []

    def hold(payload: int) -> None:
        started.append(payload)
        gate.wait(10)

    registry = txqueue.Registry()
    registry.task("quick", queue=queue)(lambda payload: None)
    registry.task("hold", queue=queue)(hold)
    worker = txqueue.Worker(
        registry, database_url=db_url, amqp_url=None, concurrency=2, poll_interval=0.05
    )
    try:
        with running(worker), closing(connect(db_url, autocommit=True)) as c:
            txqueue.enqueue_many(c, [Task("quick", i, queue=queue) for i in range(50)])
            wait_until(lambda: count(db_url, "state = 'succeeded'") == 50)
            # The quick ones taught the worker that tasks here are short: the holds are
            # claimed ahead of its two threads (how far ahead depends on the machine's
            # speed), and two of them start.
            txqueue.enqueue_many(c, [Task("hold", i, queue=queue) for i in range(20)])
            wait_until(lambda: len(started) == 2)
            time.sleep(0.2)  # no more claims: both threads are busy
            claimed = count(db_url, "name = 'hold' AND state = 'running'")
            assert claimed > 2
            worker.stop()
            # Those never started go back at once, as if never claimed, while the two
            # started ones still run.
            ahead = claimed - 2
            wait_until(lambda: count(db_url, "name = 'hold' AND state = 'pending'") == 20 - 2, 2)
            gate.set()
    finally:
        gate.set()
    held = rows(db_url, "name = 'hold'")
    back = [r for r in held if r["state"] == "pending"]
    assert len(back) == 18 and {(r["attempts"], r["worker_id"]) for r in back} == {(0, None)}
    assert all(r["errors"] in ([], None) and r["start_time"] is None for r in back)
    assert sorted(r["state"] for r in held).count("succeeded") == 2
    assert worker.stats["given_back"] == ahead


def test_a_burst_does_not_wait_for_a_backoff_a_run_at_or_a_rate_limit(
    db_url: str, queue: str
) -> None:
    """What the workers how-to says ``--burst`` leaves: it returns at once, those pending."""
    registry = txqueue.Registry()
    ran: list[int] = []

    @registry.task(queue=queue, max_attempts=2, backoff=30.0)
    def fails(n: int) -> None:
        ran.append(n)
        raise RuntimeError("a retry in 30 s")

    with closing(connect(db_url, autocommit=True)) as c:
        txqueue.limit_queue(c, queue, rate_limit="1/min")
        fails.enqueue(c, 1)
        fails.enqueue(c, 2)  # the other of these two waits for the rate limit
        fails.options(delay=30).enqueue(c, 3)
    began = time.monotonic()
    txqueue.Worker(registry, database_url=db_url, amqp_url=None).run(burst=True)
    assert time.monotonic() - began < 10
    assert len(ran) == 1 and ran[0] in (1, 2)
    assert [r["state"] for r in rows(db_url)] == ["pending"] * 3


def test_an_idle_workers_lease_keeper_sleeps_until_a_chore_is_due(db_url: str, queue: str) -> None:
    """Its loop waits for the next of its periodic statements (at least one a second): a
    loop that spun, some chore always due, would take a core from the handlers."""
    registry, _ = make(queue)
    w = txqueue.Worker(registry, database_url=db_url, amqp_url=None)
    passes: list[float] = []
    beat_due = w._leases._beat_due

    def counted(conn: Any) -> None:
        passes.append(time.monotonic())
        beat_due(conn)

    w._leases._beat_due = counted
    with running(w):
        time.sleep(2.0)
    assert 1 <= len(passes) < 20, f"{len(passes)} passes in 2 s"
