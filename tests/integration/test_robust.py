"""A healthy-looking worker must never stop doing its job, or do it twice, unnoticed: one
regression test per way it once could (issue 11)."""

from __future__ import annotations

import gc
import logging
import socket
import sqlite3
import threading
import time
from contextlib import closing
from typing import Any

import psycopg
import pytest

import txqueue
from txqueue import Task, broker
from txqueue.broker.publisher import Publisher
from txqueue.store import POSTGRES, SQLITE
from txqueue.store.records import ClaimDefaults, Poll

from .helpers import connect, execute, rows, running, wait_until


def burst(worker: txqueue.Worker, timeout: float = 30.0) -> None:
    """``run(burst=True)``, failing the test instead of hanging if the worker never settles."""
    thread = threading.Thread(target=worker.run, kwargs={"burst": True})
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        worker.stop(now=True)
        thread.join(10)
        raise AssertionError(f"the worker did not finish its burst in {timeout}s: {worker.stats}")


def by_payload(db_url: str) -> dict[Any, dict[str, Any]]:
    return {r["payload"]["i"]: r for r in rows(db_url)}


def test_a_result_the_database_cannot_store_fails_that_task_alone(db_url: str, queue: str) -> None:
    registry = txqueue.Registry()
    registry.task("nul", queue=queue, max_attempts=1)(lambda payload: "a\x00b")
    registry.task("ok", queue=queue)(lambda payload: payload["i"])
    with closing(connect(db_url, autocommit=True)) as c:
        txqueue.enqueue_many(
            c, [Task("ok", {"i": 0}, queue=queue), Task("nul", {"i": 1}, queue=queue)]
        )
        txqueue.enqueue_many(c, [Task("ok", {"i": i}, queue=queue) for i in range(2, 6)])
    burst(txqueue.Worker(registry, database_url=db_url, amqp_url=None))
    tasks = by_payload(db_url)
    assert tasks[1]["state"] == "failed"
    assert "result: has a NUL character" in tasks[1]["errors"][0]["message"]
    assert all(tasks[i]["state"] == "succeeded" for i in (0, 2, 3, 4, 5))


def _refuse_poison(db_url: str) -> None:
    """Make the database itself refuse one outcome (as a constraint or trigger of the
    application's might), past every check txqueue makes first."""
    if db_url.startswith("sqlite:"):
        execute(
            db_url,
            "CREATE TRIGGER poison BEFORE UPDATE ON txqueue_tasks WHEN NEW.result = '\"poison\"' "
            "BEGIN SELECT RAISE(ABORT, 'poison refused'); END",
        )
    else:
        execute(
            db_url,
            "ALTER TABLE txqueue_tasks ADD CONSTRAINT poison "
            "CHECK (result IS DISTINCT FROM '\"poison\"'::jsonb)",
        )


def test_an_outcome_the_database_refuses_holds_up_no_other(db_url: str, queue: str) -> None:
    _refuse_poison(db_url)
    registry = txqueue.Registry()
    registry.task("echo", queue=queue)(lambda payload: payload["r"])
    tasks = [Task("echo", {"i": i, "r": "poison" if i == 3 else i}, queue=queue) for i in range(8)]
    with closing(connect(db_url, autocommit=True)) as c:
        txqueue.enqueue_many(c, tasks)
    worker = txqueue.Worker(registry, database_url=db_url, amqp_url=None, concurrency=8)
    burst(worker)
    done = by_payload(db_url)
    assert [done[i]["state"] for i in range(8) if i != 3] == ["succeeded"] * 7
    assert done[3]["state"] == "failed"
    assert done[3]["errors"][-1]["message"].startswith("the outcome could not be stored")
    assert worker.stats["succeeded"] == 7 and worker.stats["failed"] == 1


class BrokenStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("__str__ itself fails")


class NulStr(Exception):
    def __str__(self) -> str:
        return "bad \x00 byte \ud800"


def test_an_exception_that_cannot_be_described_still_gives_the_task_an_outcome(
    db_url: str, queue: str
) -> None:
    registry = txqueue.Registry()

    @registry.task("raises", queue=queue, max_attempts=1)
    def raises(payload: Any) -> None:
        raise {"broken": BrokenStr, "nul": NulStr}[payload["i"]]()

    with closing(connect(db_url, autocommit=True)) as c:
        txqueue.enqueue_many(c, [Task("raises", {"i": k}, queue=queue) for k in ("broken", "nul")])
    burst(txqueue.Worker(registry, database_url=db_url, amqp_url=None))
    done = by_payload(db_url)
    assert done["broken"]["state"] == "failed"
    assert done["broken"]["errors"][0]["message"] == "<str() of the BrokenStr failed>"
    assert done["nul"]["state"] == "failed"
    assert done["nul"]["errors"][0]["message"] == "bad \\x00 byte \\ud800"


def _recovered_by_a_busy_cleaner(db_url: str, *, seconds: float) -> int:
    """Run the cleaner back to back for ``seconds``: how many tasks it took back."""
    cleaner = txqueue.Cleaner(database_url=db_url, amqp_url=None)
    recovered = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        report = cleaner.run_once()
        recovered += report.retried + report.failed
        time.sleep(0.01)
    return recovered


def test_a_short_lease_never_lapses_on_a_healthy_worker(db_url: str, queue: str) -> None:
    """The lease is extended every third of it, however short: a cleaner running all the
    while never takes the task back, though the handler outlasts the lease."""
    registry = txqueue.Registry()
    runs = []
    # 1 s on PostgreSQL. On SQLite every extension waits for the one write lock, which the
    # back-to-back cleaner and the claimer's polls keep taking: under the whole suite's
    # load it once waited past a 1 s lease's two thirds (one run in CI, none in a dozen
    # beside a CPU hog alone).
    lease = 2 if db_url.startswith("sqlite") else 1

    @registry.task("slow", queue=queue, timeout=lease)
    def slow(payload: Any, ctx: txqueue.TaskContext) -> None:
        runs.append(ctx.attempt)
        time.sleep(3.5)

    with closing(connect(db_url, autocommit=True)) as c:
        txqueue.enqueue(c, slow.task())
    worker = txqueue.Worker(registry, database_url=db_url, amqp_url=None, poll_interval=0.05)
    with running(worker):
        wait_until(lambda: runs == [1])
        assert _recovered_by_a_busy_cleaner(db_url, seconds=3.6) == 0
        wait_until(lambda: rows(db_url)[0]["state"] == "succeeded")
    assert runs == [1]
    assert rows(db_url)[0]["errors"] == []


@pytest.mark.unsupported(
    sqlite="one writer at a time: a long outcome write holds the lock a lease extension needs"
)
def test_a_slow_outcome_write_never_lets_another_lease_lapse(db_url: str, queue: str) -> None:
    """Leases are kept on a connection of their own, until the outcome is written: an
    outcome that takes the database 2.5 s to write (a 10 MB result, a slow disk) lets
    neither its own 1 s lease nor another's lapse."""
    execute(
        db_url,
        """CREATE FUNCTION slow_outcome() RETURNS trigger LANGUAGE plpgsql AS $$
           BEGIN
             IF NEW.result = '"slow"'::jsonb THEN PERFORM pg_sleep(2.5); END IF;
             RETURN NEW;
           END $$""",
    )
    execute(
        db_url,
        "CREATE TRIGGER slow_outcome BEFORE UPDATE ON txqueue_tasks "
        "FOR EACH ROW EXECUTE FUNCTION slow_outcome()",
    )
    registry = txqueue.Registry()
    runs = []
    registry.task("slow_to_write", queue=queue, timeout=1)(lambda payload: "slow")

    @registry.task("long", queue=queue, timeout=1)
    def long(payload: Any, ctx: txqueue.TaskContext) -> None:
        runs.append(("long", ctx.attempt))
        time.sleep(3.5)

    @registry.task("behind", queue=queue, timeout=1)
    def behind(payload: Any, ctx: txqueue.TaskContext) -> None:
        """Done while the slow write runs: its outcome waits its turn, its lease kept."""
        runs.append(("behind", ctx.attempt))
        time.sleep(0.3)

    with closing(connect(db_url, autocommit=True)) as c:
        txqueue.enqueue_many(c, [long.task(), Task("slow_to_write", queue=queue), behind.task()])
    worker = txqueue.Worker(
        registry, database_url=db_url, amqp_url=None, concurrency=3, poll_interval=0.05
    )
    with running(worker):
        wait_until(lambda: len(runs) == 2)
        assert _recovered_by_a_busy_cleaner(db_url, seconds=3.6) == 0
        wait_until(lambda: {r["state"] for r in rows(db_url)} == {"succeeded"}, timeout=20)
    assert sorted(runs) == [("behind", 1), ("long", 1)]


def test_leases_shorter_than_a_second_are_refused() -> None:
    with pytest.raises(txqueue.InvalidValueError, match="at least 1 second"):
        Task("x", timeout=0.5)
    with pytest.raises(txqueue.InvalidValueError, match="at least 1 second"):
        txqueue.Registry().task("x", timeout=0.2)


@pytest.mark.unsupported(
    sqlite="SQLite keeps no transaction status: the wake-up of a retry "
    "still uncommitted finds the old row, and the poll runs the task"
)
def test_a_retry_in_an_open_transaction_runs_right_after_its_commit(
    db_url: str, amqp_url: str, queue: str
) -> None:
    registry = txqueue.Registry()
    attempts = []
    registry.task("flaky", queue=queue, max_attempts=1)(
        lambda payload, ctx: attempts.append(time.monotonic()) or ctx.attempt > 1 or 1 / 0
    )
    with closing(connect(db_url, autocommit=True)) as c:
        task_id = txqueue.enqueue(c, Task("flaky", queue=queue))
    worker = txqueue.Worker(registry, database_url=db_url, amqp_url=amqp_url, poll_interval=60)
    with running(worker), closing(connect(db_url)) as c:
        wait_until(lambda: rows(db_url)[0]["state"] == "failed")
        txqueue.retry(c, task_id)  # in the caller's open transaction: woken at once
        assert txqueue.flush(5)
        time.sleep(0.5)  # the worker has the wake-up and sees the old, failed row
        c.commit()
        committed = time.monotonic()
        wait_until(lambda: rows(db_url)[0]["state"] == "succeeded", timeout=10)
    assert len(attempts) == 2 and attempts[1] - committed < 1.0


def test_txqueue_reads_committed_whatever_the_server_default(pg_url: str, queue: str) -> None:
    name = pg_url.rsplit("/", 1)[1]
    execute(pg_url, f"ALTER DATABASE {name} SET default_transaction_isolation = 'repeatable read'")
    with closing(psycopg.connect(pg_url)) as plain:
        assert plain.execute("SHOW transaction_isolation").fetchone() == ("repeatable read",)
    with closing(POSTGRES.connect(pg_url)) as ours:
        assert ours.execute("SHOW transaction_isolation").fetchone() == ("read committed",)
        with ours.transaction():
            assert ours.execute("SHOW transaction_isolation").fetchone() == ("read committed",)


def test_heartbeat_returns_false_once_the_recorder_is_gone(db_url: str, queue: str) -> None:
    registry = txqueue.Registry()
    go, answers = threading.Event(), []

    @registry.task("beats", queue=queue)
    def beats(payload: Any, ctx: txqueue.TaskContext) -> None:
        answers.append(ctx.heartbeat())
        go.wait(30)
        started = time.monotonic()
        answers.append(ctx.heartbeat())
        answers.append(time.monotonic() - started)

    with closing(connect(db_url, autocommit=True)) as c:
        txqueue.enqueue(c, beats.task())
    worker = txqueue.Worker(registry, database_url=db_url, amqp_url=None, poll_interval=0.05)
    with running(worker):
        wait_until(lambda: answers == [True])
        worker.stop(now=True)
    go.set()  # the worker has returned; its handler thread runs on
    wait_until(lambda: len(answers) == 3, timeout=10)
    assert answers[1] is False and answers[2] < 1.0


def test_a_task_without_a_handler_stays_pending_and_costs_no_attempt(
    db_url: str, amqp_url: str, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    registry = txqueue.Registry()
    registry.task("known", queue=queue)(lambda payload: None)
    with closing(connect(db_url, autocommit=True)) as c:
        txqueue.enqueue(c, Task("from_a_newer_deploy", {"i": 1}, queue=queue))
        txqueue.enqueue(c, Task("from_a_newer_deploy", {"i": 2}, queue=queue))
        txqueue.enqueue(c, Task("known", {"i": 3}, queue=queue))
    assert txqueue.flush(5)
    worker = txqueue.Worker(registry, database_url=db_url, amqp_url=amqp_url, poll_interval=0.05)
    with caplog.at_level(logging.WARNING, "txqueue"), running(worker):
        wait_until(lambda: by_payload(db_url)[3]["state"] == "succeeded")
        wait_until(lambda: worker.stats["no_handler"] == 2)
        time.sleep(0.3)  # polls go by
    left = by_payload(db_url)
    assert [(left[i]["state"], left[i]["attempts"]) for i in (1, 2)] == [("pending", 0)] * 2
    assert sum("'from_a_newer_deploy' have no handler" in r.message for r in caplog.records) == 1
    assert broker.check(amqp_url, [queue]) == {queue: 0}  # its wake-ups acked, not requeued


class _WriteBetween:
    """A SQLite connection that lets another write in right after the store's first
    SELECT, as if the write lock did not keep it out: the UPDATE's own fence must hold."""

    def __init__(self, conn: sqlite3.Connection, sql: str) -> None:
        self._conn, self._sql, self._done = conn, sql, False

    def execute(self, sql: str, *args: Any) -> Any:
        cursor = self._conn.execute(sql, *args)
        if sql.lstrip().startswith("SELECT") and not self._done:
            self._done = True
            rows = cursor.fetchall()
            self._conn.execute(self._sql)
            return _One(rows)
        return cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _One:
    def __init__(self, rows: list[Any]) -> None:
        self._rows = rows

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[Any]:
        return self._rows


def test_sqlite_release_and_recover_are_fenced_in_the_update(sqlite_url: str) -> None:
    with closing(connect(sqlite_url, autocommit=True)) as c:
        first = txqueue.enqueue(c, Task("t", queue="q"))
        second = txqueue.enqueue(c, Task("t", queue="q"))
    finish = "UPDATE txqueue_tasks SET state = 'succeeded', expires_at = NULL WHERE id = '{}'"
    defaults = ClaimDefaults({"t": {}}, 1.0, 5)
    with closing(SQLITE.connect(sqlite_url)) as conn:
        claimed = SQLITE.claim_ripe(conn, Poll("q", 2, "w1", defaults)).claimed
        assert {c.id for c in claimed} == {first, second}
        held = [(first, 1)]
        released = SQLITE.release(_WriteBetween(conn, finish.format(first)), "w1", held)
        assert released == {}
        execute(sqlite_url, "UPDATE txqueue_tasks SET expires_at = 0 WHERE id = %s", (str(second),))
        recovered = SQLITE.recover_expired(_WriteBetween(conn, finish.format(second)), 10, 5)
        assert recovered == []
    assert {r["state"] for r in rows(sqlite_url)} == {"succeeded"}


def test_a_part_that_dies_is_restarted_and_said_so(
    db_url: str, queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    alerts = []

    def on_failed(failure: txqueue.FailedTask) -> None:
        alerts.append(failure.payload["i"])
        if len(alerts) == 1:
            raise SystemExit("a hook that exits")  # past Registry.alert's `except Exception`

    registry = txqueue.Registry(on_failed=on_failed)
    registry.task("fails", queue=queue, max_attempts=1)(lambda payload: 1 / 0)
    with closing(connect(db_url, autocommit=True)) as c:
        txqueue.enqueue(c, Task("fails", {"i": 1}, queue=queue))
    worker = txqueue.Worker(registry, database_url=db_url, amqp_url=None, poll_interval=0.05)
    with caplog.at_level(logging.ERROR, "txqueue"), running(worker):
        wait_until(lambda: alerts == [1])
        with closing(connect(db_url, autocommit=True)) as c:
            txqueue.enqueue(c, Task("fails", {"i": 2}, queue=queue))
        wait_until(lambda: alerts == [1, 2])
    assert [r.message for r in caplog.records if "died" in r.message] == [
        "txqueue-alerts died unexpectedly; restarting it"
    ]


def test_a_part_that_keeps_dying_stops_the_worker_with_an_error(
    db_url: str, queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    registry = txqueue.Registry()
    registry.task("t", queue=queue)(lambda payload: None)
    worker = txqueue.Worker(registry, database_url=db_url, amqp_url=None)

    def broken(conn: Any) -> None:
        raise RuntimeError("a bug in the recorder")

    monkeypatch.setattr(worker._leases, "_beat_due", broken)
    started = time.monotonic()
    with pytest.raises(txqueue.WorkerError, match="txqueue-leases died 6 times in a row"):
        worker.run()
    assert time.monotonic() - started < 20


def test_a_publisher_closed_while_it_connects_leaves_no_socket_behind() -> None:
    """Closed while its connection waits on a server that never answers AMQP, the publisher
    aborts the attempt and its socket is closed, not left to the garbage collector (whose
    ResourceWarning pytest reports as a failure of whichever test is running then)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        silent.settimeout(10)
        publisher = Publisher(f"amqp://guest:guest@127.0.0.1:{silent.getsockname()[1]}/")
        accepted, _ = silent.accept()  # its attempt is connected; the handshake never comes
        with accepted:
            publisher.close(timeout=5)
            assert not publisher._thread.is_alive()
    del publisher
    gc.collect()
