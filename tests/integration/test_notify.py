"""Wake-ups without RabbitMQ on PostgreSQL: NOTIFY sent in the enqueuing transaction,
heard by a worker's listener. Every worker here polls once a minute: what starts a task
sooner was woken."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing
from datetime import timedelta
from typing import Any

import psycopg
import pytest

import txqueue
from txqueue import Task, Workflow

from .helpers import connect, execute, running, wait_until
from .kinds import no_broker
from .test_worker import Recorder, make, start_delays


@pytest.fixture(autouse=True)
def _no_broker() -> Iterator[None]:
    with no_broker():
        yield


def listening(pg_url: str) -> psycopg.Connection[Any]:
    conn = psycopg.connect(pg_url, autocommit=True)
    conn.execute("LISTEN txqueue_wakeup")
    return conn


def heard(listener: psycopg.Connection[Any], wait: float = 1.0) -> list[str]:
    """The notifications' payloads: waiting up to ``wait`` for the first, then for the
    others that came with it."""
    first = [n.payload for n in listener.notifies(timeout=wait, stop_after=1)]
    return first + [n.payload for n in listener.notifies(timeout=0.1)] if first else []


def listener_up(pg_url: str) -> None:
    """Wait for a running worker's listener to listen: a wake-up sent before then waits
    for the poll it makes once it listens, as long as a loaded machine takes to get there."""
    sql = "SELECT pid FROM pg_stat_activity WHERE datname = %s AND query LIKE 'LISTEN txqueue%%'"
    name = pg_url.rsplit("/", 1)[1]
    wait_until(lambda: execute(pg_url, sql, (name,)) == 1, timeout=30, every=0.05)


def worker(pg_url: str, queue: str, **options: Any) -> tuple[txqueue.Worker, Recorder]:
    registry, rec = make(queue)
    options.setdefault("poll_interval", 60)
    return txqueue.Worker(registry, database_url=pg_url, **options), rec


def test_a_worker_is_woken_by_notify_within_milliseconds_of_the_commit(
    pg_url: str, queue: str
) -> None:
    w, rec = worker(pg_url, queue)
    assert w.listen_url == pg_url and w.amqp_url is None
    assert w.wakeups() == "woken by PostgreSQL NOTIFY (a poll every 60s besides)"
    with running(w):
        listener_up(pg_url)
        time.sleep(0.2)  # past its first poll
        delays = sorted(start_delays(pg_url, rec, queue, 20))
    assert delays[len(delays) // 2] < 0.05, delays
    assert delays[-1] < 0.5, delays


def test_notify_goes_at_commit_once_per_queue_and_never_for_a_rollback(
    pg_url: str, queue: str
) -> None:
    other = queue + ".b"
    with closing(listening(pg_url)) as listener, closing(connect(pg_url)) as c:
        txqueue.enqueue(c, Task("a", queue=queue))
        txqueue.enqueue_many(c, [Task("a", queue=queue)] * 500 + [Task("b", queue=other)])
        assert heard(listener, wait=0.2) == []  # not before the commit
        c.commit()
        assert sorted(heard(listener)) == [queue, other]
        txqueue.enqueue(c, Task("a", queue=queue))
        txqueue.enqueue_many(c, [Task("a", queue=other)] * 3)
        c.rollback()
        assert heard(listener, wait=0.3) == []
        # A task due later says when: its worker looks again then, not at its next poll.
        before = time.time()
        txqueue.enqueue(c, Task("a", queue=queue, delay=timedelta(seconds=30)))
        txqueue.enqueue_many(c, [Task("a", queue=queue, delay=60), Task("b", queue=queue)])
        c.commit()
        now, *later = sorted(heard(listener), key=len)
        due = sorted(float(note.split(" ")[1]) for note in later)
        assert now == queue and {note.split(" ")[0] for note in later} == {queue}
        assert before + 29 < due[0] < time.time() + 30 < due[1] < time.time() + 60


@pytest.mark.parametrize(
    ("delay", "poll"), [(1.0, 60.0), (2.5, 1.0)], ids=["poll-far", "polls-before"]
)
def test_a_delayed_task_starts_at_its_time_not_at_a_poll(
    pg_url: str, queue: str, delay: float, poll: float
) -> None:
    """Its wake-up says when: the worker polls then, whether its next poll is a minute
    away or (polls-before) polls at 1 and 2 s find nothing and the one at 3 s would be
    half a second late."""
    w, rec = worker(pg_url, queue, poll_interval=poll)
    with running(w), closing(connect(pg_url)) as c:
        time.sleep(0.2)
        # Due `delay` after the transaction's start, which a loaded machine may take tens
        # of milliseconds to commit: the lower bound counts from before it began.
        began = time.monotonic()
        with txqueue.transaction(c):
            txqueue.enqueue(c, Task("rec", queue=queue, delay=delay))
        committed = time.monotonic()
        wait_until(lambda: len(rec.runs) == 1, timeout=10)
    started = rec.runs[0][2]
    assert started - began > delay - 0.05 and started - committed < delay + 0.3


def test_the_listener_listens_again_after_its_connection_is_killed(pg_url: str, queue: str) -> None:
    w, rec = worker(pg_url, queue)
    name = pg_url.rsplit("/", 1)[1]
    with running(w), closing(connect(pg_url)) as c:
        listener_up(pg_url)
        start_delays(pg_url, rec, queue, 1)
        killed = execute(
            pg_url,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = %s AND query LIKE 'LISTEN txqueue_wakeup%%'",
            (name,),
        )
        assert killed == 1
        # Committed while no one listens: found by the poll the listener makes once it
        # listens again, not at the claimer's own poll a minute later. (Within seconds: 5
        # were once too few for the reconnect under the whole suite's load.)
        with txqueue.transaction(c):
            txqueue.enqueue(c, Task("rec", queue=queue))
        wait_until(lambda: len(rec.runs) == 2, timeout=20)
        delays = sorted(start_delays(pg_url, rec, queue, 10))
    assert delays[5] < 0.05, delays


def test_steps_a_worker_readies_in_another_workers_queue_are_woken(pg_url: str, queue: str) -> None:
    second = queue + ".b"
    registry = txqueue.Registry()
    registry.task("hand_over", queue=queue)(lambda payload: None)
    first_w = txqueue.Worker(registry, database_url=pg_url, poll_interval=60)
    second_w, rec = worker(pg_url, second)
    with running(first_w), running(second_w), closing(connect(pg_url)) as c:
        time.sleep(0.2)
        flow = Workflow("handed over")
        flow.add(Task("rec", queue=second), after=[flow.add(Task("hand_over", queue=queue))])
        with txqueue.transaction(c):
            txqueue.enqueue_workflow(c, flow)
        wait_until(lambda: len(rec.runs) == 1, timeout=5)
        ended = execute(  # the first step's end, as the database saw it
            pg_url,
            "SELECT 1 FROM txqueue_tasks WHERE name = 'hand_over' AND state = 'succeeded'",
        )
    assert ended == 1


def test_the_cleaner_notifies_again_what_no_worker_took(pg_url: str, queue: str) -> None:
    with closing(connect(pg_url)) as c:
        txqueue.enqueue(c, Task("a", queue=queue))
        c.commit()
    execute(pg_url, "UPDATE txqueue_tasks SET run_at = now() - interval '10 minutes'")
    with closing(listening(pg_url)) as listener:
        report = txqueue.Cleaner(database_url=pg_url, grace=60).run_once()
        assert report.renotified == 1
        assert heard(listener) == [queue]


def test_a_retry_by_hand_notifies_in_the_callers_transaction(pg_url: str, queue: str) -> None:
    with closing(connect(pg_url)) as c, closing(listening(pg_url)) as listener:
        task_id = txqueue.enqueue(c, Task("a", queue=queue))
        c.commit()
        assert txqueue.cancel(c, task_id) == "cancelled"
        c.commit()
        heard(listener)
        txqueue.retry(c, task_id)
        assert heard(listener, wait=0.2) == []
        c.commit()
        assert heard(listener) == [queue]


def test_behind_a_transaction_pooler_a_worker_polls_unless_given_a_url_to_listen_on(
    pg_url: str, queue: str
) -> None:
    pooled = pg_url + "?pgbouncer=true"
    polling, _ = worker(pooled, queue, poll_interval=None)
    assert polling.listen_url is None and polling.poll_interval == 0.1
    assert "transaction pooler" in polling.wakeups() and "TXQUEUE_LISTEN_URL" in polling.wakeups()
    direct, _ = worker(pooled, queue, listen_url=pg_url)
    assert direct.listen_url == pg_url
    assert direct.wakeups().startswith("woken by PostgreSQL NOTIFY")
    with pytest.raises(txqueue.ConfigError, match="listen URL"):
        worker(pg_url, queue, listen_url="sqlite:///x.db")
    with pytest.raises(txqueue.ConfigError, match="listen_url: goes through a transaction"):
        worker(pooled, queue, listen_url=pooled)
