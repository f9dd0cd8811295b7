"""What a search by TaskFilter costs on a big table, with no index made for it. Run by hand,
never in CI:

    python -m benchmarks.search [--tasks 1000000] [--runs 5]

On a scratch PostgreSQL database (TXQUEUE_BENCH_DATABASE_URL, an admin URL, default the
local one): ``--tasks`` tasks of five names, each with a ``customer`` argument (10,000
customers), a tenth of them failed with one of two errors, then ANALYZE. Each filter is
timed as ``find_tasks`` (a first page of 50) and ``count_tasks``, on an application's
connection; prints the median of ``--runs`` calls of each, in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import psycopg

import txqueue
from txqueue import Task, TaskFilter

from .bench import scratch_db, waking

ADMIN_URL = os.environ.get(
    "TXQUEUE_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
NAMES = ("charge", "mail", "export", "resize", "sync")

FILTERS = {
    "a name (a fifth of the table)": TaskFilter(name="mail"),
    "a name and failed": TaskFilter(name="mail", state="failed"),
    "an error type": TaskFilter(error="TimeoutError"),
    "an error's text": TaskFilter(error="gateway"),
    "one customer (100 tasks)": TaskFilter(payload={"customer": 42}),
    "one customer, failed": TaskFilter(payload={"customer": 42}, state="failed"),
    "a queue and a name": TaskFilter(queue="bench", name="sync"),
}


def fill(db_url: str, n: int) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        for start in range(0, n, 10_000):
            tasks = [
                Task(NAMES[i % 5], {"customer": i % 10_000}, queue="bench")
                for i in range(start, min(n, start + 10_000))
            ]
            txqueue.enqueue_many(c, tasks)
        c.execute(
            """UPDATE txqueue_tasks SET state = 'failed', finished_at = now(), errors =
               jsonb_build_array(jsonb_build_object(
                   'type', CASE WHEN random() < 0.5 THEN 'builtins.TimeoutError'
                                ELSE 'builtins.ValueError' END,
                   'message', 'gateway said no', 'attempt', 1))
               WHERE random() < 0.1"""
        )
        c.execute("VACUUM ANALYZE txqueue_tasks")


def timed(call: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        call()
        times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tasks", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("TXQUEUE_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
    with scratch_db(ADMIN_URL) as db_url, waking("notify"):
        fill(db_url, args.tasks)
        print(f"{args.tasks:,} tasks; medians of {args.runs} calls, ms")
        print(f"  {'filter':<32} {'find (50)':>10} {'count':>10}")
        with psycopg.connect(db_url, autocommit=True) as c:
            for label, where in FILTERS.items():
                find = timed(lambda w=where: txqueue.find_tasks(c, w), args.runs)
                count = timed(lambda w=where: txqueue.count_tasks(c, w), args.runs)
                print(f"  {label:<32} {find:>10.1f} {count:>10.1f}", flush=True)


if __name__ == "__main__":
    main()
