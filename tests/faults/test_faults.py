"""Promises 1, 3, 4 and 5 under real faults: killed and frozen worker processes, cut
connections to PostgreSQL and RabbitMQ, and backends terminated by the server."""

from __future__ import annotations

import ast
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from contextlib import closing
from itertools import pairwise
from pathlib import Path
from typing import Any

import pika
import psycopg
import pytest

import txqueue
from txqueue import Task
from txqueue.store import for_url

from ..integration.helpers import (
    children,
    connect,
    count,
    free_port,
    http_get,
    rows,
    running,
    samples,
    value,
    wait_until,
)
from ..partition import RABBITMQ
from ..store.kinds import POOLS_ON_EVERY_SERVER
from .conftest import Producers, Workers, summarize
from .proxy import Proxy

pytestmark = pytest.mark.xdist_group("faults")

LOST = ("txqueue.LeaseExpired", "txqueue.WorkerStopped")


def server_major(db_url: str) -> int:
    with psycopg.connect(db_url) as c:
        return c.info.server_version // 10000


def terminate_worker_backends(db_url: str) -> int:
    """Kill the workers' sessions from the server side, once they have some: tried again
    until one is killed, since sessions seen one moment may be gone the next (workers
    reconnecting after a cut, on a loaded machine)."""
    query = (
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
        "WHERE datname = current_database() AND application_name = 'txqueue-worker'"
    )
    killed = 0
    with psycopg.connect(db_url, autocommit=True) as c:

        def kill() -> bool:
            nonlocal killed
            row = c.execute(query).fetchone()
            killed = int(row[0]) if row else 0
            return killed > 0

        wait_until(kill, timeout=20, every=0.05)
    return killed


# Flow control must cost nothing of the guarantees: the same faults, with limits that bind
# (6 at once of 3 workers' 12 threads, 300 starts a second) on the tasks' queue, and with
# the queue shared fairly between the producers' tenants.
LIMITED = {"concurrency": 6, "rate_limit": "300/s"}
FAIR = {"fair_share": True}


@pytest.mark.parametrize(
    ("limits", "rabbitmq", "pool", "pg_url"),
    [
        pytest.param(None, True, "threads", "15", marks=RABBITMQ),
        pytest.param(LIMITED, True, "threads", "15", marks=RABBITMQ),
        pytest.param(FAIR, True, "threads", "15", marks=RABBITMQ),
        (None, False, "threads", "15"),
        (None, False, "threads", "18"),
        pytest.param(None, True, "processes", "15", marks=RABBITMQ),
    ],
    ids=["free", "limited", "fair", "notify", "notify-pg18", "processes"],
    indirect=["pg_url"],
)
def test_every_committed_task_runs_and_no_rolled_back_one_ever_does(
    services: tuple[str, str],
    pg_url: str,
    queue: str,
    pg_proxy: Proxy,
    mq_proxy: Proxy,
    workers: Workers,
    tmp_path: Path,
    limits: dict[str, Any] | None,
    rabbitmq: bool,
    pool: str,
) -> None:
    """``rabbitmq`` False: woken by NOTIFY, the listeners cut off and killed with the
    workers' other connections. ``pool``: each worker's, its children killed with it."""
    amqp_url = services[1] if rabbitmq else ""
    workers.pool = pool
    if limits:
        with closing(psycopg.connect(pg_url)) as c:
            txqueue.limit_queue(c, queue, **limits)
            c.commit()
    producers_broker = mq_proxy.url(amqp_url) if rabbitmq else ""
    workers.env.update(
        TXQUEUE_DATABASE_URL=pg_proxy.url(pg_url),
        TXQUEUE_AMQP_URL=producers_broker,
        TXQUEUE_TEST_QUEUE=queue,
        TXQUEUE_TEST_LEASE="2",
    )
    args = ("--concurrency", "4", "--poll-interval", "0.5", "--shutdown-timeout", "10")
    args += ("--no-cleaner",)  # the cleaner runs apart, below
    procs = [workers.start(*args) for _ in range(3)]
    cleaner = workers.cleaner(pg_url, amqp_url)  # its own path, not through the proxies
    txqueue.configure(amqp_url=producers_broker or None)
    producers = Producers(pg_url, queue, threads=6, transactions=170)
    faults: Counter[str] = Counter()
    killed_holding: dict[int, list[str]] = {}  # pid: the tasks it was running
    try:
        producers.start()

        def kill_mid_task(proc: subprocess.Popen[bytes]) -> None:
            killed_holding[proc.pid] = workers.kill_holding(proc, pg_url)

        timeline: list[tuple[float, Any]] = [
            (1.5, lambda: kill_mid_task(procs[0])),
            (1.6, lambda: procs.append(workers.start(*args))),
            (3.0, mq_proxy.cut),
            (5.0, mq_proxy.restore),
            # Longer than the 2 s lease: the cleaner recovers what the cut-off workers hold,
            # and their outcomes, written once the database is back, are fenced out.
            (5.5, pg_proxy.cut),
            (8.5, pg_proxy.restore),
            (9.0, lambda: faults.update(backends_terminated=terminate_worker_backends(pg_url))),
            (9.5, lambda: kill_mid_task(procs[1])),
            (9.6, lambda: procs.append(workers.start(*args))),
        ]
        started = time.monotonic()
        for at, fault in timeline:
            time.sleep(max(0.0, started + at - time.monotonic()))
            fault()
        producers.join()
        committed, rolled_back = set(producers.committed), set(producers.rolled_back)
        wait_until(
            lambda: count(pg_url, "state = 'succeeded'") == len(committed), timeout=120, every=0.2
        )
    finally:
        cleaner.terminate()
        cleaner.wait(30)
        txqueue.configure()
    codes = workers.stop_all()
    survivors = [
        c for p, c in zip(workers.procs, codes, strict=True) if p.pid not in workers.killed
    ]
    assert survivors == [0, 0, 0]

    table = {str(r["id"]): r for r in rows(pg_url)}
    runs = workers.runs()
    ran = {task_id for task_id, _, _ in runs}
    # Promise 3: a rolled-back task never ran and left nothing behind.
    assert not ran & {str(i) for i in rolled_back}
    # Promise 1: every committed task is there, and succeeded.
    assert set(table) == {str(i) for i in committed}
    assert {r["state"] for r in table.values()} == {"succeeded"}
    # Promise 4: no attempt ran twice.
    attempts = [(task_id, attempt) for task_id, attempt, _ in runs]
    assert len(attempts) == len(set(attempts))
    # Promise 5: an earlier run is there only because its worker died or lost the lease.
    by_task: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for task_id, attempt, pid in runs:
        by_task[task_id].append((attempt, pid))
    reruns: Counter[str] = Counter()
    for task_id, row in table.items():
        assert (row["attempts"], row["result"]["pid"]) in by_task[task_id]
        lost = {e["attempt"]: e["type"] for e in row["errors"]}
        assert set(lost.values()) <= set(LOST), row["errors"]
        for attempt, pid in by_task[task_id]:
            if attempt == row["attempts"]:
                continue
            if pid in workers.killed:
                reruns["worker killed"] += 1
            else:
                assert lost.get(attempt) in LOST, (task_id, attempt, row["errors"])
                reruns["lease lost"] += 1
    # What each killed worker held was recovered from its expired lease; but for an outcome
    # it had sent before it froze, committed on a slow server after the look.
    for pid, held in killed_holding.items():
        recovered = {
            task_id
            for task_id in held
            if any(
                e["type"] == "txqueue.LeaseExpired" and f":{pid}:" in e["worker_id"]
                for e in table[task_id]["errors"]
            )
        }
        finished_by_it = {t for t in set(held) - recovered if table[t]["result"]["pid"] == pid}
        assert recovered and recovered | finished_by_it == set(held), (pid, held, recovered)
    assert faults["backends_terminated"] >= 1
    faults.update(
        sigkill_holding_tasks=sum(len(held) for held in killed_holding.values()),
        broker_cuts=mq_proxy.cuts,
        database_cuts=pg_proxy.cuts,
    )
    summarize(
        f"invariant{' with ' + ', '.join(limits) if limits else ''}"
        f"{'' if rabbitmq else ', woken by NOTIFY'}"
        f", on PostgreSQL {server_major(pg_url)}"
        f"{', process pools' if pool == 'processes' else ''}: "
        f"{producers.transactions} business transactions, {len(committed)} "
        f"committed tasks all succeeded, {len(rolled_back)} rolled back and never run; "
        f"{len(runs)} handler runs, reruns {dict(reruns) or 0}; faults {dict(faults)}"
    )


@pytest.mark.parametrize("pool", ["threads", "processes"])
def test_a_frozen_worker_cannot_overwrite_the_attempt_that_replaced_it(
    db_url: str, queue: str, workers: Workers, pool: str
) -> None:
    """With a process pool, the parent frozen: its child finishes attempt 1 meanwhile, and
    the outcome waits in the pipe for the parent."""
    workers.pool = pool
    workers.env.update(
        TXQUEUE_DATABASE_URL=db_url, TXQUEUE_TEST_QUEUE=queue, TXQUEUE_TEST_LEASE="1"
    )
    args = ("--poll-interval", "0.05")
    frozen = workers.start(*args)
    with closing(connect(db_url, autocommit=True)) as c:
        task_id = txqueue.enqueue(c, Task("record", {"sleep": 1.5}, queue=queue))
    wait_until(lambda: any(pid == frozen.pid for _, _, pid in workers.runs()), timeout=20)
    workers.freeze(frozen, db_url)  # mid-run: no heartbeats from here on
    time.sleep(1.3)
    report = txqueue.Cleaner(database_url=db_url, amqp_url=None).run_once()
    assert report.retried == 1

    replacement = workers.start(*args)
    wait_until(lambda: count(db_url, "state = 'succeeded'") == 1, timeout=20)
    frozen.send_signal(signal.SIGCONT)  # wakes up, finishes attempt 1, tries to record it
    wait_until(lambda: "outcome dropped" in workers.output(frozen), timeout=20)
    assert workers.stop_all() == [0, 0]

    [row] = rows(db_url)
    assert row["id"] == task_id and row["state"] == "succeeded" and row["attempts"] == 2
    assert row["result"] == {"pid": replacement.pid}
    assert [(e["attempt"], e["type"]) for e in row["errors"]] == [(1, "txqueue.LeaseExpired")]
    assert sorted((a, p) for _, a, p in workers.runs()) == [
        (1, frozen.pid),
        (2, replacement.pid),
    ]
    summarize(
        f"fencing ({db_url.split(':')[0]}, {pool}): a worker frozen past its lease finished "
        "attempt 1 after attempt 2 succeeded elsewhere; its outcome was fenced out"
    )


@POOLS_ON_EVERY_SERVER
def test_workers_alone_recover_the_task_of_a_worker_killed_holding_it(
    db_url: str, queue: str, workers: Workers, pool: str
) -> None:
    """No cleaner process anywhere: the workers run its passes, one at a time."""
    workers.serving(db_url, queue, pool)
    args = ("--poll-interval", "0.05", "--cleaner-interval", "1")
    first = workers.start(*args)
    second = workers.start(*args)
    with closing(connect(db_url, autocommit=True)) as c:
        task_id = txqueue.enqueue(c, Task("record", {"sleep": 1.0}, queue=queue))
    wait_until(lambda: workers.runs(), timeout=20)
    [(_, _, holder)] = workers.runs()
    killed, survivor = (first, second) if holder == first.pid else (second, first)
    workers.kill(killed)  # whether or not it was the one running the cleaner's passes
    wait_until(lambda: count(db_url, "state = 'succeeded'") == 1, timeout=30)
    [row] = rows(db_url)
    assert row["id"] == task_id and row["attempts"] == 2
    assert row["result"] == {"pid": survivor.pid}
    assert [(e["attempt"], e["type"]) for e in row["errors"]] == [(1, "txqueue.LeaseExpired")]
    assert "lease expired" in workers.output(survivor)


@RABBITMQ
def test_worker_rides_out_a_broker_outage_and_resumes_consuming(
    services: tuple[str, str], db_url: str, queue: str, mq_proxy: Proxy
) -> None:
    amqp_url = services[1]
    registry = txqueue.Registry()
    started: dict[Any, float] = {}

    @registry.task("note", queue=queue)
    def note(payload: Any, ctx: txqueue.TaskContext) -> None:
        started.setdefault(ctx.id, time.monotonic())

    worker = txqueue.Worker(
        registry, database_url=db_url, amqp_url=mq_proxy.url(amqp_url), poll_interval=2.0
    )
    txqueue.configure(amqp_url=amqp_url)

    def delay_of_one() -> float:
        with closing(connect(db_url)) as c, txqueue.transaction(c):
            task_id = txqueue.enqueue(c, Task("note", queue=queue))
        committed = time.monotonic()
        wait_until(lambda: task_id in started, timeout=10)
        return started[task_id] - committed

    try:
        with running(worker):
            assert delay_of_one() < 0.5
            mq_proxy.cut()
            # The queue is gone when the broker comes back (as after a reset): the worker
            # must declare it again, not only reconnect.
            params = pika.URLParameters(amqp_url)
            with pika.BlockingConnection(params) as admin:
                admin.channel().queue_delete(f"txqueue.{queue}")
            outage = [delay_of_one() for _ in range(3)]
            assert max(outage) < 3.0  # found by the idle poll, never lost
            mq_proxy.restore()
            wait_until(lambda: worker.wait_consuming(0.05), timeout=20)
            after = sorted(delay_of_one() for _ in range(10))
            # The poll is 2 s away: only consuming wake-ups again gets them this fast.
            assert after[len(after) // 2] < 0.1 and after[-1] < 1.5, after
            assert worker._consumer is not None and worker._consumer.generation >= 2
    finally:
        txqueue.configure()
    summarize(
        f"broker outage ({db_url.split(':')[0]}): tasks ran from the poll in at most "
        f"{max(outage):.2f}s; after reconnecting, median commit-to-start "
        f"{after[len(after) // 2] * 1000:.1f} ms"
    )


def test_database_outage_outcomes_written_after_it_one_line_each(
    pg_url: str, queue: str, pg_proxy: Proxy, workers: Workers
) -> None:
    workers.env.update(
        TXQUEUE_DATABASE_URL=pg_proxy.url(pg_url),
        TXQUEUE_TEST_QUEUE=queue,
        TXQUEUE_TEST_LEASE="30",
    )
    proc = workers.start("--poll-interval", "0.05", "--concurrency", "4")
    with psycopg.connect(pg_url) as c, c.transaction():
        txqueue.enqueue_many(c, [Task("record", {"sleep": 1.0}, queue=queue) for _ in range(4)])
    wait_until(lambda: len(workers.runs()) == 4, timeout=20)
    pg_proxy.cut()  # while all four handlers run
    time.sleep(3.0)
    assert proc.poll() is None  # no crash
    pg_proxy.restore()
    wait_until(lambda: count(pg_url, "state = 'succeeded'") == 4, timeout=30)
    # The server itself drops the worker's sessions too: reconnect and go on.
    assert terminate_worker_backends(pg_url) >= 1
    with psycopg.connect(pg_url) as c, c.transaction():
        txqueue.enqueue(c, Task("record", {"sleep": 0}, queue=queue))
    wait_until(lambda: count(pg_url, "state = 'succeeded'") == 5, timeout=30)
    assert workers.stop_all() == [0]
    output = workers.output(proc)
    assert "Traceback" not in output
    # One line when each outage starts (the cut, the terminate), one when it ends.
    assert output.count("database unreachable") == 2, output
    assert output.count("database reachable again") == 2, output
    assert len(workers.runs()) == 5  # nothing ran twice: the leases outlived the outage
    assert json.dumps(sorted(r["attempts"] for r in rows(pg_url))) == "[1, 1, 1, 1, 1]"


def test_a_worker_stopped_while_the_database_is_cut_exits_on_time_and_names_what_it_left(
    pg_url: str, queue: str, pg_proxy: Proxy, workers: Workers
) -> None:
    """Outcomes it could not write and tasks it could not release are left to the leases,
    by task id, and the cleaner recovers them once the database is back."""
    workers.env.update(
        TXQUEUE_DATABASE_URL=pg_proxy.url(pg_url), TXQUEUE_TEST_QUEUE=queue, TXQUEUE_TEST_LEASE="3"
    )
    proc = workers.start("--poll-interval", "0.05", "--concurrency", "4", "--shutdown-timeout", "3")
    with psycopg.connect(pg_url) as c, c.transaction():
        ids = txqueue.enqueue_many(c, [Task("record", {"sleep": 1.0}, queue=queue)] * 4)
    wait_until(lambda: len(workers.runs()) == 4, timeout=20)
    pg_proxy.cut()  # while all four handlers run: their outcomes have nowhere to go
    proc.send_signal(signal.SIGTERM)
    stopping = time.monotonic()
    proc.wait(timeout=30)
    assert time.monotonic() - stopping < 3 + 4  # the shutdown timeout, and some slack
    output = workers.output(proc)
    assert "Traceback" not in output
    [said] = [line for line in output.splitlines() if "not written" in line]
    assert "4 outcomes not written" in said and all(str(i) in said for i in ids), said
    assert proc.returncode == 3, output  # work left to the leases: not a clean stop
    # "stopped" is the last word, once it is true: after what was left is named.
    assert " stopped: " in output.splitlines()[-1], output
    pg_proxy.restore()
    time.sleep(3.5)  # the leases run out
    cleaner = subprocess.run(
        [sys.executable, "-m", "txqueue", "cleaner", "--once", "--database-url", pg_url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert cleaner.returncode == 0, cleaner.stderr
    assert count(pg_url, "state = 'pending' AND attempts = 1") == 4  # to run again


def test_an_outcome_whose_reply_was_lost_is_not_reported_dropped(
    pg_url: str, queue: str, pg_proxy: Proxy, workers: Workers
) -> None:
    """The recorder's write commits, its reply is lost and its connection with it: the
    retry's fence then matches nothing, and the row, not the fence, says it was written."""
    workers.env.update(
        TXQUEUE_DATABASE_URL=pg_proxy.url(pg_url),
        TXQUEUE_TEST_QUEUE=queue,
        PYTHONFAULTHANDLER="1",  # SIGABRT prints every thread's stack (below, on a failure)
    )
    proc = workers.start("--poll-interval", "0.05")
    # The first outcome prepares the statement (a round trip of its own); the second's
    # write is then sent whole, at once.
    with psycopg.connect(pg_url) as c, c.transaction():
        txqueue.enqueue(c, Task("record", {"sleep": 0.0}, queue=queue))
    wait_until(lambda: count(pg_url, "state = 'succeeded'") == 1, timeout=20)
    with psycopg.connect(pg_url) as c, c.transaction():
        task_id = txqueue.enqueue(c, Task("record", {"sleep": 1.0}, queue=queue))
    # Its handler started, not only its row running: a claim committed whose reply the
    # mute below then dropped would leave the worker never knowing it held the task (as it
    # did twice in CI), and its lease of five minutes to end it.
    wait_until(lambda: str(task_id) in {r[0] for r in workers.runs()}, timeout=20)
    pg_proxy.mute()  # the handler sleeps for a second: its outcome's write gets no answer
    try:
        wait_until(lambda: count(pg_url, "state = 'succeeded'") == 2, timeout=10)
    except AssertionError:  # say what the worker did
        with psycopg.connect(pg_url, autocommit=True) as c:
            sessions = c.execute(
                "SELECT application_name, state, wait_event, left(query, 80)"
                " FROM pg_stat_activity WHERE application_name LIKE 'txqueue%'"
            ).fetchall()
        proc.send_signal(signal.SIGABRT)
        proc.wait(timeout=10)
        raise AssertionError(
            f"the muted write never landed; sessions {sessions}; {workers.output(proc)}"
        ) from None
    pg_proxy.cut()
    pg_proxy.restore()
    try:
        wait_until(lambda: "written before the connection was lost" in workers.output(proc), 30)
    except AssertionError:  # failed once in a full run, not alone: say what the worker did
        proc.send_signal(signal.SIGABRT)
        proc.wait(timeout=10)
        raise AssertionError(f"the retry never said so; {workers.output(proc)}") from None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    output = workers.output(proc)
    assert "outcome dropped" not in output, output
    stats = re.search(r"stopped: (\{.*\})", output)
    assert stats is not None, output
    counted = ast.literal_eval(stats[1])
    assert counted["fenced_out"] == 0 and counted["succeeded"] == 2, counted
    assert [r["attempts"] for r in rows(pg_url, "id = %s", (str(task_id),))] == [1]


@RABBITMQ
def test_a_worker_started_while_the_broker_is_down_polls_then_consumes(
    services: tuple[str, str], pg_url: str, queue: str, mq_proxy: Proxy, workers: Workers
) -> None:
    mq_proxy.cut()
    broker = mq_proxy.url(services[1])
    workers.env.update(TXQUEUE_DATABASE_URL=pg_url, TXQUEUE_TEST_QUEUE=queue)
    proc = workers.start("--poll-interval", "0.2", "--amqp-url", broker)
    txqueue.configure(amqp_url=services[1])
    try:
        with psycopg.connect(pg_url) as c, txqueue.transaction(c):
            txqueue.enqueue(c, Task("record", {"sleep": 0}, queue=queue))
        wait_until(lambda: len(workers.runs()) == 1, timeout=20)  # from the poll
        assert proc.poll() is None
        mq_proxy.restore()
        wait_until(lambda: "consuming txqueue." in workers.output(proc), timeout=30)
    finally:
        txqueue.configure()
    assert workers.stop_all() == [0]
    output = workers.output(proc)
    assert output.count("RabbitMQ connection lost or refused") == 1, output
    assert output.count("RabbitMQ reachable again") == 1, output
    assert "Traceback" not in output and ":guest@" not in output


def test_a_worker_started_while_the_database_is_down_starts_and_claims_once_it_is_back(
    pg_url: str, queue: str, pg_proxy: Proxy, workers: Workers
) -> None:
    """As a service manager may start workers while PostgreSQL restarts: the worker says
    the database is unreachable, starts, and claims once it answers."""
    pg_proxy.cut()
    workers.env.update(TXQUEUE_DATABASE_URL=pg_proxy.url(pg_url), TXQUEUE_TEST_QUEUE=queue)
    proc = workers.start("--poll-interval", "0.2")
    wait_until(lambda: "starting anyway" in workers.output(proc), timeout=30)
    with psycopg.connect(pg_url) as c:
        txqueue.enqueue(c, Task("record", {"sleep": 0}, queue=queue))
    time.sleep(0.5)
    assert proc.poll() is None and workers.runs() == []
    pg_proxy.restore()
    wait_until(lambda: len(workers.runs()) == 1, timeout=10)
    assert workers.stop_all() == [0]
    output = workers.output(proc)
    assert output.count("cannot connect to PostgreSQL") == 2, output  # the CLI's, the worker's
    assert output.count("database reachable again") == 1, output
    assert "Traceback" not in output


def test_claims_resume_within_a_second_of_the_database_coming_back(
    pg_url: str, queue: str, pg_proxy: Proxy
) -> None:
    registry = txqueue.Registry()
    started: list[float] = []
    registry.task("note", queue=queue)(lambda payload: started.append(time.monotonic()))
    worker = txqueue.Worker(
        registry, database_url=pg_proxy.url(pg_url), amqp_url=None, poll_interval=0.05
    )
    with running(worker):
        pg_proxy.cut()
        time.sleep(8)  # long enough for a doubling backoff to have grown to seconds
        with psycopg.connect(pg_url) as c, c.transaction():
            txqueue.enqueue(c, Task("note", queue=queue))
        pg_proxy.restore()
        back = time.monotonic()
        wait_until(lambda: len(started) == 1, timeout=20)
    assert started[0] - back < 1.2, started[0] - back
    summarize(f"database back: first task started {started[0] - back:.2f}s later")


@POOLS_ON_EVERY_SERVER
def test_atomic_transfers_apply_exactly_once_through_kills_and_a_freeze(
    db_url: str, queue: str, workers: Workers, pool: str
) -> None:
    """2,000 atomic transfers while one worker is killed again and again and another is
    frozen past its leases: every task succeeds once, and its work is in the ledger once.
    In process pools the transactions are the children's, and a frozen parent's children
    run on: their successes are fenced in their own transactions."""
    workers.pool = pool
    sql = [
        "CREATE TABLE ledger_accounts (id int PRIMARY KEY, balance int NOT NULL, "
        "moved int NOT NULL)",
        "CREATE TABLE ledger_applied (task_id text PRIMARY KEY)",
        *(f"INSERT INTO ledger_accounts VALUES ({i}, 0, 0)" for i in range(10)),
    ]
    with closing(connect(db_url)) as c:
        for statement in sql:
            c.execute(statement)
        c.commit()
    workers.env.update(
        TXQUEUE_DATABASE_URL=db_url, TXQUEUE_TEST_QUEUE=queue, TXQUEUE_TEST_LEASE="1"
    )
    args = ("--poll-interval", "0.05", "--concurrency", "4")
    workers.start(*args)
    frozen, victim = workers.start(*args), workers.start(*args)
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        txqueue.enqueue_many(
            c,
            [
                Task("transfer", {"src": i % 10, "dst": (i + 3) % 10, "sleep": 0.005}, queue=queue)
                for i in range(2000)
            ],
        )
    cleaner = txqueue.Cleaner(database_url=db_url, amqp_url=None)

    def ran(proc: subprocess.Popen[bytes]) -> bool:
        return any(pid == proc.pid for _, _, pid in workers.runs())

    wait_until(lambda: ran(frozen), timeout=20)
    # The worker and its children (whose transactions they are, in a process pool).
    frozen_pids = [frozen.pid, *children(frozen.pid)]
    for pid in frozen_pids:
        os.kill(pid, signal.SIGSTOP)  # mid-transaction, its rows locked, its leases lapse
    time.sleep(1.5)
    if db_url.startswith("postgresql"):
        # Its tasks go back to pending, to run elsewhere, taken back by the other workers
        # as their leases lapse. (On SQLite its open transaction holds the database's
        # write lock: everyone waits for it.)
        lost = f'@.move == "recovered" && @.worker like_regex ":{frozen.pid}:"'
        wait_until(
            lambda: count(db_url, f"jsonb_path_exists(events, '$[*] ? ({lost})')") > 0,
            every=0.2,
        )
    for pid in frozen_pids:
        os.kill(pid, signal.SIGCONT)  # its successes are fenced out, their work undone
    for _ in range(4):  # each started one, once it has begun tasks (if any are left)
        deadline = time.monotonic() + 30  # a loaded machine takes seconds to start one
        while not ran(victim) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        workers.kill(victim)
        victim = workers.start(*args)

    def done() -> int:
        cleaner.run_once()
        return count(db_url, "state = 'succeeded'")

    wait_until(lambda: done() == 2000, timeout=240, every=0.5)
    codes = workers.stop_all()
    assert [
        c for p, c in zip(workers.procs, codes, strict=True) if p.pid not in workers.killed
    ] == [
        0,
        0,
        0,
    ]

    with closing(connect(db_url)) as c:
        applied = c.execute("SELECT count(*) FROM ledger_applied").fetchone()[0]
        moved, balance = c.execute(
            "SELECT sum(moved), sum(balance) FROM ledger_accounts"
        ).fetchone()
    assert (applied, moved, balance) == (2000, 2000, 0)
    tasks = rows(db_url)
    assert all(t["state"] == "succeeded" for t in tasks)
    errors = Counter(e["type"] for t in tasks for e in t["errors"])
    assert set(errors) <= set(LOST), errors  # lost attempts only: no work applied twice
    runs = workers.runs()
    # The kills cost attempts (on SQLite rarely mid-handler: a handler's 5 ms is a short
    # window beside the waits for the write lock, so count the lost attempts, not the reruns).
    assert sum(errors.values()) > 0, errors
    # Killed mid-work: the first victim at least, which ran from the start. A later one
    # may start, on a loaded machine, after the last transfer was taken.
    assert {pid for _, _, pid in runs} & workers.killed
    summarize(
        f"atomic ({db_url.split(':')[0]}, {pool}): 2,000 transfers through 4 kills and a freeze, "
        f"{len(runs) - 2000} handler runs beyond one each, lost attempts {dict(errors)}; "
        "the ledger applied exactly 2,000"
    )


def test_three_workers_enqueue_each_slot_of_a_periodic_task_once_through_a_kill(
    db_url: str, queue: str, workers: Workers
) -> None:
    workers.env.update(
        TXQUEUE_DATABASE_URL=db_url, TXQUEUE_TEST_QUEUE=queue, TXQUEUE_TEST_PERIODIC="* * * * * *"
    )
    args = ("--poll-interval", "0.05")
    procs = [workers.start(*args) for _ in range(3)]
    wait_until(lambda: count(db_url, "name = 'tick'") > 0, timeout=20)
    time.sleep(5)
    workers.kill(procs[1])  # perhaps mid-slot, the schedule's row locked
    workers.start(*args)
    time.sleep(5)
    store = for_url(db_url)
    with closing(store.connect(db_url)) as c:
        stopping = store.now(c)
    codes = workers.stop_all()
    assert [c for p, c in zip(workers.procs, codes, strict=True) if p is not procs[1]] == [0, 0, 0]

    ticks = rows(db_url, "name = 'tick'")
    slots = sorted(t["run_at"] for t in ticks)
    assert len(slots) >= 9
    assert len(set(slots)) == len(slots), "a slot was enqueued twice"
    gaps = {(b - a).total_seconds() for a, b in pairwise(slots)}
    assert gaps == {1.0}, "a slot was lost"
    killed = f":{procs[1].pid}:"
    # A slot a scheduler enqueued as its worker was stopping may be left for the next
    # worker: pending, never lost and never twice. Every one before that ran.
    before = [t for t in ticks if (stopping - t["run_at"]).total_seconds() > 1]
    assert len(before) >= 8
    assert all(t["state"] == "succeeded" for t in before if killed not in (t["worker_id"] or ""))
    assert {t["state"] for t in ticks if t not in before} <= {"succeeded", "pending"}
    runs = Counter(task_id for task_id, _, _ in workers.runs())
    assert set(runs.values()) == {1}
    summarize(
        f"periodic ({db_url.split(':')[0]}): 3 workers, one killed and replaced, kept a 1/s "
        f"schedule for {len(slots)} slots: each enqueued once, none skipped"
    )


def test_health_fails_while_the_database_is_cut_and_recovers_after(
    pg_url: str, queue: str, pg_proxy: Proxy, workers: Workers
) -> None:
    port = free_port()
    workers.env.update(TXQUEUE_DATABASE_URL=pg_proxy.url(pg_url), TXQUEUE_TEST_QUEUE=queue)
    proc = workers.start(
        "--poll-interval", "0.2", "--metrics-port", str(port), "--metrics-host", "127.0.0.1"
    )

    def health() -> tuple[int, str]:
        try:
            return http_get(port, "/healthz")
        except OSError:  # not serving yet
            return 0, ""

    wait_until(lambda: health() == (200, "ok\n"), timeout=20)
    pg_proxy.cut()
    wait_until(lambda: health()[0] == 503, timeout=10)
    assert health() == (503, "the database is unreachable\n")
    down = samples(http_get(port, "/metrics")[1])
    assert value(down, "txqueue_database_up") == 0
    # One cut, one outage; two if a connection opened as the proxy was closing reached
    # the database in between (the cut is not instant).
    outages = value(down, "txqueue_database_outages_total")
    assert outages in (1, 2)
    pg_proxy.restore()
    wait_until(lambda: health() == (200, "ok\n"), timeout=20)
    up = samples(http_get(port, "/metrics")[1])
    assert value(up, "txqueue_database_up") == 1
    assert value(up, "txqueue_database_outages_total") == outages  # coming back is no outage
    assert workers.stop_all() == [0]
    assert "Traceback" not in workers.output(proc)
    summarize("health: /healthz 503 through a database cut, 200 again after it")
