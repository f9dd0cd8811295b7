"""What a durable step costs a handler over a plain call of the same function.

    python benchmarks/steps.py [--tasks 20] [--steps 50] [--runs 3]

A worker (threads, no broker) runs ``--tasks`` tasks one at a time, each making
``--steps`` calls of a function that does nothing, timed one by one in the handler: plain
calls, ``ctx.step`` (its record written), ``ctx.atomic_step`` (a transaction begun, the
record written, committed) and, on each task's second attempt, the same steps replayed
from their records (the first read the recorded steps). Percentiles of every call of a
run in microseconds, each line the median of ``--runs`` runs.

Against TXQUEUE_BENCH_DATABASE_URL (an admin URL; a scratch database is made and dropped),
defaulting to the local server.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import txqueue
from benchmarks.bench import scratch_db
from benchmarks.pressure import pct

KINDS = ("plain call", "step", "atomic step", "step replayed")


def nothing(*args: Any) -> int:
    return 1


def run(url: str, tasks: int, steps: int) -> dict[str, list[float]]:
    """Seconds of every call, by kind."""
    times: dict[str, list[float]] = defaultdict(list)
    registry = txqueue.Registry()

    @registry.task("stepped", queue="steps", context=True, max_attempts=2, backoff=0.01)
    def stepped(ctx: txqueue.TaskContext) -> None:
        for i in range(steps):
            began = time.perf_counter()
            nothing(i)
            times["plain call"].append(time.perf_counter() - began)
        kind = "step" if ctx.attempt == 1 else "step replayed"
        for i in range(steps):
            began = time.perf_counter()
            ctx.step(f"s{i}", nothing, i)
            times[kind].append(time.perf_counter() - began)
        for i in range(steps):
            began = time.perf_counter()
            ctx.atomic_step(f"a{i}", nothing, i)
            if ctx.attempt == 1:
                times["atomic step"].append(time.perf_counter() - began)
        if ctx.attempt == 1:
            raise RuntimeError("again, to replay the steps")

    with psycopg.connect(url) as conn:
        txqueue.enqueue_many(conn, [txqueue.Task("stepped", queue="steps")] * tasks)
    worker = txqueue.Worker(
        registry, database_url=url, amqp_url=None, queues=["steps"], concurrency=1
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        worker.run(burst=True)
        with psycopg.connect(url) as conn:
            left = conn.execute(
                "SELECT count(*) FROM txqueue_tasks WHERE state <> 'succeeded'"
            ).fetchone()
        if left is not None and left[0] == 0:
            return times
        time.sleep(0.05)  # the retries' backoff
    raise SystemExit("the tasks did not all succeed")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    logging.getLogger("txqueue").setLevel(logging.ERROR)  # each first attempt's retry
    admin = os.environ.get(
        "TXQUEUE_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    runs = []
    for _ in range(args.runs):
        with scratch_db(admin) as url:
            runs.append(run(url, args.tasks, args.steps))
    print(f"{args.tasks} tasks x {args.steps} calls of each kind, medians of {args.runs} runs")
    for kind in KINDS:
        p50 = statistics.median(pct(r[kind], 0.5) for r in runs) * 1e6
        p99 = statistics.median(pct(r[kind], 0.99) for r in runs) * 1e6
        print(f"{kind:>14}: p50 {p50:8.1f} µs   p99 {p99:8.1f} µs")


if __name__ == "__main__":
    main()
