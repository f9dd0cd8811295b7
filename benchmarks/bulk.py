"""A bulk cancel of a big backlog beside a queue that keeps working. Run by hand, never in CI:

    python -m benchmarks.bulk [--tasks 1000000] [--rate 100] [--seconds 20] [--runs 2]
                              [--batch 1000]

Each run, on a scratch PostgreSQL database (TXQUEUE_BENCH_DATABASE_URL, an admin URL,
default the local one): ``--tasks`` pending tasks committed on the queue ``backlog``
(which no worker serves), then one ``txqueue worker`` (8 threads, woken by NOTIFY) on the
queue ``bench``, warmed by 50 tasks. Tasks are committed on ``bench`` one per transaction
at ``--rate``/s for ``--seconds`` with nothing else running (before), then again while
``txqueue.cancel_tasks(TaskFilter(queue="backlog"))`` cancels the backlog (during: the
tasks committed between its start and its end). Prints commit-to-start p50 / p99 before and
during (a claim commits before its handler starts, so a claim held up shows there), and how
long the cancel took.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
import uuid

import psycopg

import txqueue
from txqueue import Task, TaskFilter

from .bench import QUEUE, scratch_db, waking, workers

ADMIN_URL = os.environ.get(
    "TXQUEUE_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def fill(db_url: str, n: int) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        for start in range(0, n, 10_000):
            size = min(10_000, n - start)
            txqueue.enqueue_many(c, [Task("parked", queue="backlog") for _ in range(size)])
        c.execute("ANALYZE txqueue_tasks")


def timed(db_url: str, rate: float, until: threading.Event | float) -> dict[uuid.UUID, float]:
    """Tasks committed on ``bench`` at ``rate``/s until ``until`` (an Event set, or a number
    of seconds): their ids and commit times."""
    committed: dict[uuid.UUID, float] = {}
    end = time.monotonic() + until if isinstance(until, float) else None
    with psycopg.connect(db_url) as c:
        next_at = time.monotonic()
        i = 0
        while not (until.is_set() if end is None else time.monotonic() >= end):
            with txqueue.transaction(c):
                task_id = txqueue.enqueue(c, Task("stamp", {"i": i}, queue=QUEUE))
            committed[task_id] = time.time()
            i += 1
            next_at += 1 / rate
            time.sleep(max(0.0, next_at - time.monotonic()))
    return committed


def latencies(db_url: str, committed: dict[uuid.UUID, float]) -> dict[str, float]:
    deadline = time.monotonic() + 60
    with psycopg.connect(db_url, autocommit=True) as c:
        while True:
            rows = c.execute(
                "SELECT id, (result #>> '{}')::float8 FROM txqueue_tasks"
                " WHERE id = ANY(%s) AND state = 'succeeded'",
                (list(committed),),
            ).fetchall()
            if len(rows) == len(committed) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    ms = sorted((start - committed[i]) * 1000 for i, start in rows)

    def pct(p: float) -> float:
        return round(ms[min(len(ms) - 1, int(p * len(ms)))], 2)

    return {"n": len(ms), "p50": pct(0.5), "p99": pct(0.99), "max": round(ms[-1], 2)}


def run(tasks: int, rate: float, seconds: float, batch: int) -> dict[str, object]:
    with scratch_db(ADMIN_URL) as db_url, waking("notify"):
        started = time.monotonic()
        fill(db_url, tasks)
        filled = time.monotonic() - started
        with workers(db_url, "", 1, 8):
            latencies(db_url, timed(db_url, rate, 1.0))  # warm-up
            before = latencies(db_url, timed(db_url, rate, seconds))
            done = threading.Event()
            result: dict[str, float] = {}

            def cancel() -> None:
                began = time.monotonic()
                result["cancelled"] = txqueue.cancel_tasks(
                    TaskFilter(queue="backlog"), database_url=db_url, batch=batch
                )
                result["seconds"] = time.monotonic() - began
                done.set()

            canceller = threading.Thread(target=cancel)
            canceller.start()
            during = latencies(db_url, timed(db_url, rate, done))
            canceller.join()
    return {
        "filled_s": round(filled, 1),
        "before": before,
        "during": during,
        "cancelled": result["cancelled"],
        "cancel_s": round(result["seconds"], 1),
        "cancel_per_s": round(result["cancelled"] / result["seconds"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1000, help="the cancel's batch size")
    args = parser.parse_args()
    os.environ.setdefault("TXQUEUE_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
    results = []
    for number in range(args.runs):
        results.append(run(args.tasks, args.rate, args.seconds, args.batch))
        print(f"run {number + 1}: {results[-1]}", flush=True)
    for phase in ("before", "during"):
        p50 = statistics.median(r[phase]["p50"] for r in results)  # type: ignore[index]
        p99 = statistics.median(r[phase]["p99"] for r in results)  # type: ignore[index]
        print(
            f"{phase}: commit to start p50 {p50:.2f} ms, p99 {p99:.2f} ms (medians of {args.runs})"
        )
    rate = statistics.median(r["cancel_per_s"] for r in results)  # type: ignore[type-var]
    print(f"cancel: {args.tasks:,} tasks, {args.batch:,} a batch, at {rate:,.0f} tasks/s (median)")


if __name__ == "__main__":
    main()
