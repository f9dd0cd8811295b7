"""Measure enqueue rate, drain rate and commit-to-start latency against real services.

    python benchmarks/bench.py [--runs 3] [--drain 20000] [--latency 500]

Needs TXQUEUE_BENCH_DATABASE_URL (an admin URL: a scratch database is created and dropped)
and TXQUEUE_BENCH_AMQP_URL. Workers run as `txqueue worker` subprocesses with a noop
handler. Prints medians of the runs and writes benchmarks/results.json.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pika
import psycopg

import txqueue
from txqueue import Task, notify
from txqueue.store import postgres

ROOT = Path(__file__).resolve().parents[1]
QUEUE = "bench"


@contextmanager
def scratch_db(admin_url: str) -> Iterator[str]:
    name = f"txqueue_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin_url, autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    url = urlunsplit(urlsplit(admin_url)._replace(path="/" + name))
    try:
        with postgres.connect(url) as c:
            postgres.apply_schema(c)
        yield url
    finally:
        with psycopg.connect(admin_url, autocommit=True) as c:
            c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextmanager
def workers(db_url: str, amqp_url: str, processes: int, concurrency: int) -> Iterator[None]:
    env = {**os.environ, "TXQUEUE_DATABASE_URL": db_url, "TXQUEUE_AMQP_URL": amqp_url}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "txqueue",
                "worker",
                "--app",
                "benchmarks.noop:registry",
                "--concurrency",
                str(concurrency),
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(processes)
    ]
    time.sleep(1.5)  # connected and consuming
    try:
        yield
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(30)


def purge(amqp_url: str) -> None:
    """Drop wake-ups left by an earlier scenario: stale messages would be drained first."""
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        conn.channel().queue_delete(notify.queue_name(QUEUE))
    finally:
        conn.close()


def wait_done(db_url: str, total: int, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    with psycopg.connect(db_url, autocommit=True) as c:
        while time.monotonic() < deadline:
            row = c.execute(
                "SELECT count(*) FROM txqueue_tasks WHERE state = 'succeeded'"
            ).fetchone()
            if row and row[0] >= total:
                return
            time.sleep(0.05)
    raise SystemExit("workers did not finish in time")


def bench_enqueue(db_url: str, n: int) -> float:
    with psycopg.connect(db_url) as c:
        started = time.perf_counter()
        for i in range(n):
            with c.transaction():
                txqueue.enqueue(c, Task("noop", {"i": i}, queue=QUEUE))
        elapsed = time.perf_counter() - started
    notify.flush(30)
    return n / elapsed


def bench_enqueue_many(db_url: str, n: int, batch: int = 1000) -> float:
    with psycopg.connect(db_url) as c:
        started = time.perf_counter()
        for start in range(0, n, batch):
            with c.transaction():
                txqueue.enqueue_many(c, [Task("noop", queue=QUEUE)] * min(batch, n - start))
        elapsed = time.perf_counter() - started
    notify.flush(30)
    return n / elapsed


def bench_drain(db_url: str, amqp_url: str, n: int, processes: int, concurrency: int) -> float:
    purge(amqp_url)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("TRUNCATE txqueue_tasks")
        for start in range(0, n, 1000):
            txqueue.enqueue_many(c, [Task("noop", queue=QUEUE)] * min(1000, n - start))
    notify.flush(60)
    with workers(db_url, amqp_url, processes, concurrency):
        wait_done(db_url, n)
    with psycopg.connect(db_url) as c:
        row = c.execute(
            "SELECT extract(epoch FROM max(finished_at) - min(start_time)) FROM txqueue_tasks"
        ).fetchone()
    assert row is not None
    return n / float(row[0])


def bench_latency(db_url: str, amqp_url: str, n: int, rate: float) -> dict[str, float]:
    purge(amqp_url)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute("TRUNCATE txqueue_tasks")
    committed: dict[uuid.UUID, float] = {}
    with workers(db_url, amqp_url, 1, 8), psycopg.connect(db_url) as c:
        next_at = time.monotonic()
        for i in range(n):
            with txqueue.transaction(c):
                task_id = txqueue.enqueue(c, Task("noop", {"i": i}, queue=QUEUE))
            committed[task_id] = time.time()
            next_at += 1 / rate
            time.sleep(max(0.0, next_at - time.monotonic()))
        wait_done(db_url, n)
    with psycopg.connect(db_url) as c:
        starts = dict(c.execute("SELECT id, extract(epoch FROM start_time) FROM txqueue_tasks"))
    lat = sorted((float(starts[i]) - t) * 1000 for i, t in committed.items())

    def pct(p: float) -> float:
        return round(lat[min(len(lat) - 1, int(p * len(lat)))], 2)

    return {
        "p50_ms": pct(0.50),
        "p95_ms": pct(0.95),
        "p99_ms": pct(0.99),
        "max_ms": round(lat[-1], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--enqueue", type=int, default=5000)
    parser.add_argument("--drain", type=int, default=20000)
    parser.add_argument("--latency", type=int, default=500)
    args = parser.parse_args()
    admin_url = os.environ.get(
        "TXQUEUE_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    amqp_url = os.environ.get("TXQUEUE_BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
    txqueue.configure(amqp_url=amqp_url)
    runs: dict[str, list] = {}
    for _ in range(args.runs):
        with scratch_db(admin_url) as db_url:
            scenarios = {
                "enqueue, 1 tx each, 1 thread (tasks/s)": lambda: bench_enqueue(
                    db_url, args.enqueue
                ),
                "enqueue_many, batches of 1000 (tasks/s)": lambda: bench_enqueue_many(
                    db_url, 50_000
                ),
                "drain, 1 process x 8 threads (tasks/s)": lambda: bench_drain(
                    db_url, amqp_url, args.drain, 1, 8
                ),
                "drain, 2 processes x 8 threads (tasks/s)": lambda: bench_drain(
                    db_url, amqp_url, args.drain, 2, 8
                ),
                "latency at 50/s (ms)": lambda: bench_latency(db_url, amqp_url, args.latency, 50),
            }
            for name, fn in scenarios.items():
                runs.setdefault(name, []).append(fn())
                print(f"  {name}: {runs[name][-1]}", flush=True)
    summary: dict[str, object] = {}
    for name, values in runs.items():
        if isinstance(values[0], dict):
            summary[name] = {k: statistics.median(v[k] for v in values) for k in values[0]}
        else:
            summary[name] = round(statistics.median(values))
    print("\nmedians of", args.runs, "runs:")
    for name, value in summary.items():
        print(f"  {name:45} {value}")
    (ROOT / "benchmarks" / "results.json").write_text(
        json.dumps({"runs": runs, "medians": summary}, indent=2)
    )


if __name__ == "__main__":
    main()
