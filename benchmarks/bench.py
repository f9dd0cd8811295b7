"""txqueue's speed on this machine, next to what its PostgreSQL can do at all.

    python benchmarks/bench.py [--runs 3] [--tasks 20000] [--memory-tasks 200000]

Against real services: TXQUEUE_BENCH_DATABASE_URL (an admin URL; each run creates a scratch
database and drops it) and TXQUEUE_BENCH_AMQP_URL, defaulting to the local ones. Workers
are `txqueue worker` processes running benchmarks/noop.py. Each run measures:

- ceiling: what the database itself can do, the yardstick for every txqueue number:
  pgbench claiming and completing pending rows of txqueue_tasks with `FOR UPDATE SKIP
  LOCKED`, one row and 100 rows per transaction, and inserting one row per transaction
  from 1 and from 8 clients;
- enqueue: one task per transaction, from 1 and from 8 threads (and from 1, a typed task's
  enqueue; and from 1 and 8 woken by NOTIFY, and with no wake-up, as enqueue_many too),
  and with enqueue_async on
  one psycopg and one asyncpg connection; enqueue_many in batches of 1,000 (wake-ups on;
  the time the callers spent, the publisher flushed afterwards); and the same one-row
  transactions by each driver alone, without txqueue (no wake-ups);
- drain: a committed backlog, then workers started; first task start to last finish,
  for 1 and 2 processes at several concurrencies, the backlog's wake-ups one per
  enqueue_many batch or one per task;
- the cost of observing: the drain at 2 x 8 and 2 x 128 with each worker serving
  Prometheus metrics, then also tracing every attempt (an SDK tracer provider, spans
  batched to an exporter that drops them), each task carrying a sampled parent context;
- the cost of flow control: the drain at 2 x 8 and 2 x 128 with the queue limited far
  above what it drains; over 100 keys, with no limit, a concurrency limit per key, and in
  a fair-share queue;
- latency: an idle, warm worker, tasks committed one per transaction at 50/s and 500/s;
  commit to handler start, woken by RabbitMQ and by NOTIFY; at 50/s also with the queue
  limited, and shared fairly.

Then, once, a worker's resident memory over a long drain. Prints a table of medians and
writes everything to benchmarks/results.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import pika
import psycopg

import txqueue
from txqueue import Task, broker
from txqueue.outbox import wakeup
from txqueue.outbox.calls import Enqueuing
from txqueue.outbox.client import Delivery
from txqueue.store import POSTGRES

ROOT = Path(__file__).resolve().parents[1]
QUEUE = "bench"
DRAIN = [(1, 8), (2, 8), (1, 32), (1, 128), (2, 32), (2, 128)]  # (processes, concurrency)
DRAIN_SINGLE = [(1, 128), (2, 128)]  # ... with one wake-up per task
OBSERVED = [(2, 8), (2, 128)]  # ... with metrics on, and with metrics and tracing on
OBSERVING = {", metrics on": {"metrics"}, ", metrics and tracing on": {"metrics", "tracing"}}
LATENCY_WORKER = (1, 8)
LIMITED = [(2, 8), (2, 128)]  # ... with the queue limited far above what it drains
KEYED: dict[str, tuple[str, dict[str, Any]]] = {  # a registry, and the queue's settings
    ", no limit": ("unkeyed", {}),
    ", a concurrency limit of 10 per key": ("keyed", {}),
    ", fair share": ("unkeyed", {"fair_share": True}),
}
LIMITS: dict[str, dict[str, Any]] = {
    ", rate limit 100000/s": {"rate_limit": "100000/s"},
    ", concurrency limit 10000": {"concurrency": 10000},
}

Result = float | dict[str, float]


# --- services ----------------------------------------------------------------------------


@contextmanager
def scratch_db(admin_url: str) -> Iterator[str]:
    name = f"txqueue_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    url = urlunsplit(urlsplit(admin_url)._replace(path="/" + name))
    try:
        with POSTGRES.connect(url) as c:
            POSTGRES.apply_schema(c)
        yield url
    finally:
        with psycopg.connect(admin_url, autocommit=True) as c:
            c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def consumers(amqp_url: str) -> int:
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        ok = conn.channel().queue_declare(wakeup.queue_name(QUEUE), durable=True)
    finally:
        conn.close()
    return int(ok.method.consumer_count)


def listeners(db_url: str) -> int:
    """Workers listening for wake-ups by NOTIFY on ``db_url``."""
    with psycopg.connect(db_url, autocommit=True) as c:
        row = c.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query LIKE 'LISTEN txqueue_wakeup%'"
        ).fetchone()
    return int(row[0]) if row else 0


class Silent(Delivery):
    """No wake-up at all: what NOTIFY is measured against."""

    def notifies(self, store: object) -> bool:
        return False

    def send(self, wakeups: Any) -> None:
        pass


class Through(Enqueuing):
    """The enqueue calls with a scenario's Delivery (None: the process's, as
    ``txqueue.enqueue``)."""

    def __init__(self, delivery: Delivery | None) -> None:
        self._delivery = delivery


@contextmanager
def waking(wake: str) -> Iterator[Delivery | None]:
    """The Delivery an enqueue scenario passes: RabbitMQ (``configure``'s), NOTIFY (no
    broker), or none."""
    if wake == "rabbitmq":
        yield None
    elif wake == "none":
        yield Silent(None)
    else:
        txqueue.configure(amqp_url=None)
        try:
            yield None
        finally:
            txqueue.configure(amqp_url=os.environ["TXQUEUE_AMQP_URL"])


def reset(db_url: str, amqp_url: str) -> None:
    """An empty table and queue: nothing left from the scenario before."""
    if amqp_url:
        broker.delete_queue(amqp_url, QUEUE)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("TRUNCATE txqueue_tasks, txqueue_queues, txqueue_starts")


def limit(db_url: str, limits: dict[str, Any]) -> None:
    """The bench queue's flow control, for the scenarios that measure what limits cost."""
    if limits:
        with psycopg.connect(db_url) as c:
            txqueue.limit_queue(c, QUEUE, **limits)


@contextmanager
def workers(
    db_url: str,
    amqp_url: str,
    processes: int,
    concurrency: int,
    observed: frozenset[str] = frozenset(),
) -> Iterator[list[subprocess.Popen[bytes]]]:
    env = {**os.environ, "TXQUEUE_DATABASE_URL": db_url, "TXQUEUE_AMQP_URL": amqp_url}
    if not amqp_url:  # woken by NOTIFY
        del env["TXQUEUE_AMQP_URL"]
    app = "benchmarks.noop:" + next(iter(observed & {"keyed", "unkeyed"}), "registry")
    argv = [sys.executable, "-m", "txqueue", "worker", "--app", app]
    argv += ["--concurrency", str(concurrency)]
    if "metrics" in observed:
        argv += ["--metrics-port", "0", "--metrics-host", "127.0.0.1"]
    if "tracing" in observed:  # see benchmarks/noop.py
        env["TXQUEUE_BENCH_TRACING"] = "1"
    procs = [
        subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(processes)
    ]

    def ready() -> bool:
        return (consumers(amqp_url) if amqp_url else listeners(db_url)) >= processes

    with serving(procs, ready, 30):
        yield procs


@contextmanager
def serving(
    procs: list[subprocess.Popen[bytes]], ready: Callable[[], bool], timeout: float
) -> Iterator[None]:
    """The block, once ``ready()`` says the worker processes ``procs`` are woken; then they
    are stopped as on SIGTERM and waited for."""
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise SystemExit(f"workers did not start consuming within {timeout:g} s")
            time.sleep(0.05)
        yield
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(60)


def wait_done(db_url: str, procs: list[subprocess.Popen[bytes]], timeout: float = 900) -> None:
    """Until no task is pending or running (cheap: the partial indexes answer)."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(db_url, autocommit=True) as c:
        while time.monotonic() < deadline:
            if any(p.poll() is not None for p in procs):
                raise SystemExit("a worker exited before the tasks were done")
            row = c.execute(
                "SELECT EXISTS (SELECT 1 FROM txqueue_tasks WHERE state = 'pending') "
                "OR EXISTS (SELECT 1 FROM txqueue_tasks WHERE state = 'running')"
            ).fetchone()
            if row is not None and not row[0]:
                return
            time.sleep(0.1)
    raise SystemExit("workers did not finish in time")


def backlog(db_url: str, n: int, *, one_wakeup_each: bool, keys: int = 0) -> None:
    """``n`` committed noop tasks: enqueue_many's wake-ups (one per 1,000), or one per task;
    with ``keys``, keyed_noop tasks spread over that many concurrency keys."""
    tasks = [
        Task("keyed_noop", {"key": i % keys}, queue=QUEUE, concurrency_key=f"key:{i % keys}")
        if keys
        else Task("noop", queue=QUEUE)
        for i in range(n)
    ]
    with psycopg.connect(db_url, autocommit=True) as c:
        if one_wakeup_each:
            txqueue.configure(amqp_url=None)
        try:
            ids = []
            for start in range(0, n, 1000):
                ids += txqueue.enqueue_many(c, tasks[start : start + 1000])
        finally:
            txqueue.configure(amqp_url=os.environ["TXQUEUE_AMQP_URL"])
    if one_wakeup_each:
        pub = broker.publisher(os.environ["TXQUEUE_AMQP_URL"])
        for task_id in ids:
            pub.publish(QUEUE, wakeup.encode(task_id, None))
    if not broker.flush(120):
        raise SystemExit("RabbitMQ did not confirm the backlog's wake-ups")


# --- scenarios ---------------------------------------------------------------------------

CLAIM_SQL = """
\\set batch {batch}
BEGIN;
WITH c AS (
    SELECT id FROM txqueue_tasks
    WHERE state = 'pending' AND queue = 'ceiling' AND run_at <= now()
    ORDER BY priority DESC, run_at, id LIMIT :batch FOR UPDATE SKIP LOCKED)
UPDATE txqueue_tasks t
SET state = 'running', attempts = t.attempts + 1, start_time = now(),
    expires_at = now() + interval '5 minutes', worker_id = 'c' || :client_id
FROM c WHERE t.id = c.id;
UPDATE txqueue_tasks
SET state = 'succeeded', finished_at = now(), expires_at = NULL
WHERE state = 'running' AND worker_id = 'c' || :client_id;
COMMIT;
"""
INSERT_SQL = """
BEGIN;
INSERT INTO txqueue_tasks (id, queue, name, payload) VALUES (gen_random_uuid(), 'c', 'n', '{}');
COMMIT;
"""


def pgbench(db_url: str, script: str, clients: int, seconds: int = 5) -> float:
    """Transactions/s of a pgbench script."""
    program = shutil.which("pgbench")
    if program is None:
        raise SystemExit("pgbench not found: install PostgreSQL's client tools")
    with tempfile.NamedTemporaryFile("w", suffix=".sql") as f:
        f.write(script)
        f.flush()
        argv = [program, "-n", "-c", str(clients), "-j", str(min(clients, 2)), "-T", str(seconds)]
        out = subprocess.run(
            [*argv, "-f", f.name, db_url], capture_output=True, text=True, check=True
        ).stdout
    tps = re.search(r"tps = ([0-9.]+)", out)
    assert tps is not None, out
    return float(tps.group(1))


def claim_ceiling(db_url: str, batch: int) -> float:
    """Jobs/s of pgbench claiming and completing ``batch`` rows per transaction."""
    rows = 30_000 if batch == 1 else 400_000
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("TRUNCATE txqueue_tasks")
        c.execute(
            "INSERT INTO txqueue_tasks (id, queue, name) "
            "SELECT gen_random_uuid(), 'ceiling', 'noop' FROM generate_series(1, %s)",
            (rows,),
        )
        c.execute("VACUUM ANALYZE txqueue_tasks")
    jobs = pgbench(db_url, CLAIM_SQL.format(batch=batch), 4 if batch == 1 else 2) * batch
    with psycopg.connect(db_url) as c:
        done = c.execute("SELECT count(*) FROM txqueue_tasks WHERE state = 'succeeded'").fetchone()
    assert done is not None and done[0] < rows, "the ceiling ran out of rows"
    return jobs


def insert_ceiling(db_url: str, clients: int) -> float:
    """Rows/s of pgbench inserting one row per transaction, BEGIN/INSERT/COMMIT as an app does."""
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("TRUNCATE txqueue_tasks")
    return pgbench(db_url, INSERT_SQL, clients)


TYPED = txqueue.Registry()


@TYPED.task("noop", queue=QUEUE)
def typed_noop(i: int) -> None:
    """The benchmark's noop as a typed task: the same row, its payload made by the
    handler's signature."""


def enqueue(
    db_url: str, n: int, threads: int, typed: bool = False, wake: str = "rabbitmq"
) -> float:
    """One task per transaction, from ``threads`` threads with a connection each: a Task
    built by hand, or ``typed``, a typed task's ``enqueue(conn, i=…)``; woken by ``wake``
    (``waking``)."""
    share = n // threads

    def produce(delivery: Delivery | None) -> None:
        calls = Through(delivery)
        with psycopg.connect(db_url) as c:
            for i in range(share):
                with c.transaction():
                    if typed:
                        typed_noop.enqueue(c, i=i)
                    else:
                        task = Task("noop", {"i": i}, queue=QUEUE)
                        calls.enqueue(c, task)

    with waking(wake) as delivery:
        started = time.perf_counter()
        pool = [threading.Thread(target=produce, args=(delivery,)) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        elapsed = time.perf_counter() - started
    broker.flush(60)
    return share * threads / elapsed


def enqueue_async(db_url: str, n: int, driver: str) -> float:
    """``enqueue_async``, one task per transaction, on one asyncio connection of ``driver``
    (psycopg or asyncpg): to hold against ``enqueue`` from 1 thread."""

    async def produce() -> float:
        if driver == "asyncpg":
            import asyncpg

            conn: Any = await asyncpg.connect(db_url)
        else:
            conn = await psycopg.AsyncConnection.connect(db_url)
        try:
            started = time.perf_counter()
            for i in range(n):
                async with conn.transaction():
                    await txqueue.enqueue_async(conn, Task("noop", {"i": i}, queue=QUEUE))
            return time.perf_counter() - started
        finally:
            await conn.close()

    elapsed = asyncio.run(produce())
    broker.flush(60)
    return n / elapsed


DRIVER_INSERT = (
    "INSERT INTO txqueue_tasks (id, queue, name, payload) VALUES ({}, {}, 'noop', {}) "
    "RETURNING id, pg_current_xact_id()::text"
)


def driver_alone(db_url: str, n: int, driver: str) -> float:
    """The loop of ``enqueue`` / ``enqueue_async`` with the driver's own INSERT of a task
    row in place of txqueue's: what the driver costs, so that the ratios of txqueue's
    enqueue lines can be read against their drivers'."""
    rows = [(uuid.uuid4(), QUEUE, json.dumps({"i": i})) for i in range(n)]
    if driver == "psycopg":
        sql = DRIVER_INSERT.format("%s", "%s", "%s")
        with psycopg.connect(db_url) as c:
            started = time.perf_counter()
            for row in rows:
                with c.transaction():
                    c.execute(sql, row, prepare=True).fetchall()
            return n / (time.perf_counter() - started)

    async def produce() -> float:
        if driver == "asyncpg":
            import asyncpg

            conn: Any = await asyncpg.connect(db_url)
            sql = DRIVER_INSERT.format("$1", "$2", "$3")
            run = conn.fetch
        else:
            conn = await psycopg.AsyncConnection.connect(db_url)
            sql = DRIVER_INSERT.format("%s", "%s", "%s")

            async def run(*row: Any) -> None:
                await (await conn.execute(sql, row, prepare=True)).fetchall()

        try:
            started = time.perf_counter()
            for row in rows:
                async with conn.transaction():
                    await run(sql, *row) if driver == "asyncpg" else await run(*row)
            return n / (time.perf_counter() - started)
        finally:
            await conn.close()

    return asyncio.run(produce())


def enqueue_many(db_url: str, n: int, batch: int = 1000, wake: str = "rabbitmq") -> float:
    """Batches of distinct tasks, built inside the timed loop as an application builds them."""
    with psycopg.connect(db_url) as c, waking(wake) as delivery:
        calls = Through(delivery)
        started = time.perf_counter()
        for start in range(0, n, batch):
            tasks = [
                Task("noop", {"i": i}, queue=QUEUE) for i in range(start, min(n, start + batch))
            ]
            with c.transaction():
                calls.enqueue_many(c, tasks)
        elapsed = time.perf_counter() - started
    broker.flush(60)
    return n / elapsed


T = TypeVar("T")


def paced(items: Iterable[T], rate: float) -> Iterator[T]:
    """``items``, one each 1/``rate`` seconds from the first: the loop's body runs on
    each, and the time it took comes off the pause after it."""
    next_at = time.monotonic()
    for item in items:
        yield item
        next_at += 1 / rate
        time.sleep(max(0.0, next_at - time.monotonic()))


def drain_rate(db_url: str, n: int) -> float:
    """Tasks/s from the first start to the last finish, once all ``n`` have succeeded."""
    with psycopg.connect(db_url) as c:
        row = c.execute(
            "SELECT count(*) FILTER (WHERE state = 'succeeded'), count(*), "
            "       extract(epoch FROM max(finished_at) - min(start_time))::float8 "
            "FROM txqueue_tasks"
        ).fetchone()
    assert row is not None and row[0] == row[1] == n, f"{row} for {n} tasks"
    return n / float(row[2])


def drain(
    db_url: str,
    amqp_url: str,
    n: int,
    processes: int,
    concurrency: int,
    one_wakeup_each: bool,
    observed: frozenset[str] = frozenset(),
    limits: dict[str, Any] | None = None,
    keys: int = 0,
) -> float:
    reset(db_url, amqp_url)
    limit(db_url, limits or {})
    backlog(db_url, n, one_wakeup_each=one_wakeup_each, keys=keys)
    if "tracing" in observed:
        # As if each task were enqueued in a request's trace: every attempt's span has a
        # parent to continue (this process sets no tracer provider, to leave the others be).
        with psycopg.connect(db_url, autocommit=True) as c:
            c.execute(
                "UPDATE txqueue_tasks SET trace_context = jsonb_build_object('traceparent', "
                "'00-' || md5(id::text) || '-' || left(md5(queue || id::text), 16) || '-01')"
            )
    with workers(db_url, amqp_url, processes, concurrency, observed) as procs:
        wait_done(db_url, procs)
    return drain_rate(db_url, n)


def latency(
    db_url: str, amqp_url: str, n: int, rate: float, limits: dict[str, Any] | None = None
) -> dict[str, float]:
    """Commit to handler start, for tasks committed one per transaction at ``rate``/s."""
    reset(db_url, amqp_url)
    limit(db_url, limits or {})
    committed: dict[uuid.UUID, float] = {}
    with (
        waking("rabbitmq" if amqp_url else "notify"),
        workers(db_url, amqp_url, *LATENCY_WORKER) as procs,
        psycopg.connect(db_url) as c,
    ):
        for i in paced(range(n + 50), rate):  # the first 50 warm the worker up, not counted
            with txqueue.transaction(c):
                task_id = txqueue.enqueue(c, Task("stamp", {"i": i}, queue=QUEUE))
            if i >= 50:
                committed[task_id] = time.time()
        wait_done(db_url, procs)
    with psycopg.connect(db_url) as c:
        started = dict(c.execute("SELECT id, (result #>> '{}')::float8 FROM txqueue_tasks"))
    ms = sorted((started[i] - t) * 1000 for i, t in committed.items())

    def pct(p: float) -> float:
        return round(ms[min(len(ms) - 1, int(p * len(ms)))], 2)

    return {"p50": pct(0.50), "p95": pct(0.95), "p99": pct(0.99), "max": round(ms[-1], 2)}


def wait_latency(db_url: str, amqp_url: str, n: int) -> dict[str, float]:
    """From a task's outcome write (its finished_at) to ``txqueue.wait`` returning, for
    tasks that run 20 ms, so that the waiter listens before the outcome commits."""
    reset(db_url, amqp_url)
    late = []
    with workers(db_url, amqp_url, *LATENCY_WORKER), psycopg.connect(db_url) as c:
        for _ in range(n):
            with txqueue.transaction(c):
                task_id = txqueue.enqueue(c, Task("nap", {"seconds": 0.02}, queue=QUEUE))
            info = txqueue.wait(db_url, task_id, timeout=30)
            assert info.finished_at is not None
            late.append((datetime.now(UTC) - info.finished_at).total_seconds() * 1000)
    late.sort()
    return {
        "p50": round(statistics.median(late), 2),
        "p99": round(late[min(len(late) - 1, int(0.99 * len(late)))], 2),
    }


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS:")).split()[1])


def memory(db_url: str, amqp_url: str, n: int) -> dict[str, float]:
    """A worker's RSS through a drain of ``n`` tasks: at 10% done, at the end, and the peak."""
    reset(db_url, amqp_url)
    backlog(db_url, n, one_wakeup_each=False)
    samples: list[tuple[int, int]] = []
    with workers(db_url, amqp_url, 1, 32) as [proc], psycopg.connect(db_url, autocommit=True) as c:
        while True:
            row = c.execute(
                "SELECT count(*) FROM txqueue_tasks WHERE state = 'succeeded'"
            ).fetchone()
            assert row is not None
            samples.append((row[0], rss_kib(proc.pid)))
            if row[0] >= n:
                break
            if proc.poll() is not None:
                raise SystemExit("the worker exited before the tasks were done")
            time.sleep(0.5)
    at_10 = next(rss for done, rss in samples if done >= n // 10)
    end, peak = samples[-1][1], max(rss for _, rss in samples)
    return {
        "rss_at_10pct_mib": round(at_10 / 1024, 1),
        "rss_at_end_mib": round(end / 1024, 1),
        "rss_peak_mib": round(peak / 1024, 1),
        "change_pct": round((end - at_10) / at_10 * 100, 1),
        "tasks_per_s": round(drain_rate(db_url, n)),
    }


# --- the run -----------------------------------------------------------------------------


def scenarios(db_url: str, amqp_url: str, n: int) -> dict[str, Callable[[], Result]]:
    out: dict[str, Callable[[], Result]] = {
        "ceiling: claim+complete 1 row per transaction (jobs/s)": lambda: claim_ceiling(db_url, 1),
        "ceiling: claim+complete 100 rows per transaction (jobs/s)": lambda: claim_ceiling(
            db_url, 100
        ),
        "ceiling: insert 1 row per transaction, 1 client (rows/s)": lambda: insert_ceiling(
            db_url, 1
        ),
        "ceiling: insert 1 row per transaction, 8 clients (rows/s)": lambda: insert_ceiling(
            db_url, 8
        ),
        "enqueue, 1 tx each, 1 thread (tasks/s)": lambda: enqueue(db_url, n, 1),
        "enqueue, 1 tx each, 8 threads (tasks/s)": lambda: enqueue(db_url, n, 8),
        "typed task.enqueue(conn, i=…), 1 tx each, 1 thread (tasks/s)": lambda: enqueue(
            db_url, n, 1, typed=True
        ),
        "enqueue_async on psycopg, 1 tx each (tasks/s)": lambda: enqueue_async(
            db_url, n, "psycopg"
        ),
        "enqueue_async on asyncpg, 1 tx each (tasks/s)": lambda: enqueue_async(
            db_url, n, "asyncpg"
        ),
        "driver alone: psycopg, 1 tx each (rows/s)": lambda: driver_alone(db_url, n, "psycopg"),
        "driver alone: psycopg async, 1 tx each (rows/s)": lambda: driver_alone(
            db_url, n, "psycopg-async"
        ),
        "driver alone: asyncpg, 1 tx each (rows/s)": lambda: driver_alone(db_url, n, "asyncpg"),
        "enqueue_many, batches of 1,000 (tasks/s)": lambda: enqueue_many(db_url, 5 * n),
    }
    for wake in ("notify", "none"):
        how = "NOTIFY" if wake == "notify" else "no wake-up"
        for threads in (1, 8):
            out[f"enqueue, 1 tx each, {threads} thread{'s' * (threads > 1)}, {how} (tasks/s)"] = (
                lambda t=threads, w=wake: enqueue(db_url, n, t, wake=w)
            )
        out[f"enqueue_many, batches of 1,000, {how} (tasks/s)"] = lambda w=wake: enqueue_many(
            db_url, 5 * n, wake=w
        )
    for procs, conc in DRAIN:
        out[f"drain, {procs} process x {conc} (tasks/s)"] = lambda p=procs, k=conc: drain(
            db_url, amqp_url, n, p, k, False
        )
    for procs, conc in DRAIN_SINGLE:
        out[f"drain, {procs} process x {conc}, a wake-up per task (tasks/s)"] = (
            lambda p=procs, k=conc: drain(db_url, amqp_url, n, p, k, True)
        )
    for procs, conc in OBSERVED:
        for suffix, parts in OBSERVING.items():
            out[f"drain, {procs} process x {conc}{suffix} (tasks/s)"] = (
                lambda p=procs, k=conc, o=frozenset(parts): drain(
                    db_url, amqp_url, n, p, k, False, o
                )
            )
    for procs, conc in LIMITED:
        for suffix, limits in LIMITS.items():
            out[f"drain, {procs} process x {conc}{suffix} (tasks/s)"] = (
                lambda p=procs, k=conc, lim=limits: drain(
                    db_url, amqp_url, n, p, k, False, limits=lim
                )
            )
    for procs, conc in LIMITED:
        for suffix, (app, limits) in KEYED.items():
            out[f"drain, {procs} process x {conc}, 100 keys{suffix} (tasks/s)"] = (
                lambda p=procs, k=conc, a=app, lim=limits: drain(
                    db_url, amqp_url, n, p, k, False, frozenset({a}), lim, keys=100
                )
            )
    for rate in (50, 500):
        out[f"latency at {rate}/s, 500 tasks (ms)"] = lambda r=rate: latency(
            db_url, amqp_url, 500, r
        )
        out[f"latency at {rate}/s, woken by NOTIFY, 500 tasks (ms)"] = lambda r=rate: latency(
            db_url, "", 500, r
        )
    for suffix, limits in {**LIMITS, ", fair share": {"fair_share": True}}.items():
        out[f"latency at 50/s{suffix}, 500 tasks (ms)"] = lambda lim=limits: latency(
            db_url, amqp_url, 500, 50, lim
        )
    out["wait: outcome written to wait returning, 200 tasks (ms)"] = lambda: wait_latency(
        db_url, amqp_url, 200
    )
    return out


def median(values: list[Result]) -> Result:
    if isinstance(values[0], dict):
        return {
            k: statistics.median(v[k] for v in values if isinstance(v, dict)) for k in values[0]
        }
    return round(statistics.median(v for v in values if isinstance(v, float)))


def machine() -> dict[str, str]:
    cpu = "unknown"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with psycopg.connect(os.environ["TXQUEUE_BENCH_DATABASE_URL"]) as c:
        pg = c.execute("SHOW server_version").fetchone()
    return {
        "cpus": str(os.cpu_count()),
        "cpu": cpu,
        "python": platform.python_version(),
        "postgresql": str(pg[0] if pg else "?"),
        "pika": pika.__version__,
        "psycopg": psycopg.__version__,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--memory-tasks", type=int, default=200_000, help="0: skip")
    parser.add_argument(
        "--only", default="", help="run scenarios whose name contains this (a|b: either)"
    )
    args = parser.parse_args()
    admin_url = os.environ.setdefault(
        "TXQUEUE_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    amqp_url = os.environ.setdefault("TXQUEUE_BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
    os.environ["TXQUEUE_AMQP_URL"] = amqp_url
    txqueue.configure(amqp_url=amqp_url)
    runs: dict[str, list[Result]] = {}
    for run in range(args.runs):
        print(f"run {run + 1} of {args.runs}", flush=True)
        with scratch_db(admin_url) as db_url:
            for name, fn in scenarios(db_url, amqp_url, args.tasks).items():
                if any(part in name for part in args.only.split("|")):
                    runs.setdefault(name, []).append(fn())
                    print(f"  {name}: {runs[name][-1]}", flush=True)
            reset(db_url, amqp_url)
    medians = {name: median(values) for name, values in runs.items()}
    mem: dict[str, float] = {}
    if args.memory_tasks:
        with scratch_db(admin_url) as db_url:
            mem = memory(db_url, amqp_url, args.memory_tasks)
            reset(db_url, amqp_url)
        print(f"  memory over a {args.memory_tasks:,}-task drain: {mem}", flush=True)
    report(medians, mem, args)
    (ROOT / "benchmarks" / "results.json").write_text(
        json.dumps(
            {
                "machine": machine(),
                "args": vars(args),
                "runs": runs,
                "medians": medians,
                "memory": mem,
            },
            indent=2,
        )
        + "\n"
    )


DRIVER_OF = {
    "enqueue_async on psycopg, 1 tx each (tasks/s)": "psycopg async",
    "enqueue_async on asyncpg, 1 tx each (tasks/s)": "asyncpg",
}


def report(medians: dict[str, Result], mem: dict[str, float], args: argparse.Namespace) -> None:
    hundred = medians.get("ceiling: claim+complete 100 rows per transaction (jobs/s)")
    inserts = {
        "1 thread": medians.get("ceiling: insert 1 row per transaction, 1 client (rows/s)"),
        "8 threads": medians.get("ceiling: insert 1 row per transaction, 8 clients (rows/s)"),
    }
    sync = medians.get("enqueue, 1 tx each, 1 thread (tasks/s)")
    print(f"\nmedians of {args.runs} runs, {args.tasks:,} tasks:")
    for name, value in medians.items():
        if isinstance(value, dict):
            text = ", ".join(f"{k} {v}" for k, v in value.items())
        else:
            text = f"{value:,}"
            suffix = next((o for o in OBSERVING if o in name), None)
            plain = medians.get(name.replace(suffix, "")) if suffix else None
            if isinstance(plain, int):
                text += f"  ({value / plain:.1%} of the same drain with both off)"
            elif name.startswith("drain") and isinstance(hundred, int):
                text += f"  ({value / hundred:.0%} of the 100-row ceiling)"
            elif name.startswith("enqueue_async") and isinstance(sync, int | float):
                text += f"  ({value / sync:.2f}x enqueue from 1 thread"
                alone = medians.get(f"driver alone: {DRIVER_OF[name]}, 1 tx each (rows/s)")
                if isinstance(alone, int):
                    text += f"; {value / alone:.0%} of its driver alone"
                text += ")"
            elif name.startswith("driver alone") and isinstance(sync, int | float):
                text += f"  ({value / sync:.2f}x enqueue from 1 thread)"
            elif name.startswith("enqueue,"):
                base = next((v for k, v in inserts.items() if k in name), None)
                if isinstance(base, int):
                    text += f"  ({value / base:.0%} of the insert ceiling)"
        print(f"  {name:62} {text}")
    if mem:
        print(f"  {'worker RSS over the long drain (MiB)':62} {mem}")


if __name__ == "__main__":
    main()
