"""What a search by TaskFilter costs on a big table, with no index made for it or with the
opt-in payload index (``txqueue search-index``), and what that index costs enqueues and
claims. Run by hand, never in CI:

    python -m benchmarks.search [--tasks 1000000] [--runs 5] [--index]
    python -m benchmarks.search --cost [--runs 3]

On a scratch PostgreSQL database (TXQUEUE_BENCH_DATABASE_URL, an admin URL, default the
local one): ``--tasks`` tasks of five names, each with a ``customer`` argument (10,000
customers), a tenth of them failed with one of two errors, then ANALYZE. Each filter is
timed as ``find_tasks`` (a first page of 50) and ``count_tasks``, on an application's
connection; prints the median of ``--runs`` calls of each, in milliseconds. ``--index``
makes the payload index after the fill.

``--cost``: on fresh databases, with and without the index, interleaved (the order
swapped each run), the throughput of ``enqueue`` (one task per transaction, 8 threads),
``enqueue_many`` (batches of 1,000) and a drain by 2 workers x 8 threads, every task
with a ``customer`` argument; the medians of ``--runs``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Callable

import psycopg

import txqueue
from txqueue import Task, TaskFilter
from txqueue.store import POSTGRES

from .bench import QUEUE, drain_rate, reset, scratch_db, wait_done, waking, workers

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


def index(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as c:
        POSTGRES.payload_index(c)
        c.execute("ANALYZE txqueue_tasks")


def customers(start: int, stop: int) -> list[Task]:
    return [Task("noop", {"customer": i % 10_000, "i": i}, queue=QUEUE) for i in range(start, stop)]


def enqueue_one(db_url: str, n: int, threads: int = 8) -> float:
    """One task per transaction from ``threads`` threads, each on its own connection."""
    share = n // threads

    def produce(first: int) -> None:
        with psycopg.connect(db_url) as c:
            for task in customers(first, first + share):
                with c.transaction():
                    txqueue.enqueue(c, task)

    pool = [threading.Thread(target=produce, args=(t * share,)) for t in range(threads)]
    began = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return share * threads / (time.perf_counter() - began)


def enqueue_batches(db_url: str, n: int) -> float:
    with psycopg.connect(db_url) as c:
        began = time.perf_counter()
        for start in range(0, n, 1000):
            with c.transaction():
                txqueue.enqueue_many(c, customers(start, min(n, start + 1000)))
        return n / (time.perf_counter() - began)


def drain(db_url: str, amqp_url: str, n: int) -> float:
    reset(db_url, amqp_url)
    with psycopg.connect(db_url, autocommit=True) as c:
        for start in range(0, n, 1000):
            txqueue.enqueue_many(c, customers(start, min(n, start + 1000)))
    with workers(db_url, amqp_url, 2, 8) as procs:
        wait_done(db_url, procs)
    return drain_rate(db_url, n)


def cost(runs: int) -> None:
    amqp_url = os.environ["TXQUEUE_AMQP_URL"]
    found: dict[tuple[str, bool], list[float]] = {}
    for run in range(runs):
        for indexed in (False, True) if run % 2 == 0 else (True, False):
            with scratch_db(ADMIN_URL) as db_url:
                if indexed:
                    index(db_url)
                rates = {
                    "enqueue, 8 threads (tasks/s)": enqueue_one(db_url, 20_000),
                    "enqueue_many (tasks/s)": enqueue_batches(db_url, 200_000),
                    "drain, 2 x 8 (tasks/s)": drain(db_url, amqp_url, 20_000),
                }
            for label, rate in rates.items():
                found.setdefault((label, indexed), []).append(rate)
                print(f"  run {run + 1} {'with' if indexed else 'without'}: {label} {rate:,.0f}")
    print(f"medians of {runs} runs: {'':<24} {'without':>10} {'with index':>11}")
    for label in dict.fromkeys(label for label, _ in found):
        bare, indexed_ = (statistics.median(found[label, i]) for i in (False, True))
        change = 100 * (indexed_ / bare - 1)
        print(f"  {label:<36} {bare:>10,.0f} {indexed_:>11,.0f} ({change:+.1f}%)")


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
    parser.add_argument("--index", action="store_true", help="make the payload index first")
    parser.add_argument("--cost", action="store_true", help="what the index costs writes")
    args = parser.parse_args()
    os.environ.setdefault("TXQUEUE_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
    if args.cost:
        with waking("rabbitmq"):  # NOTIFY would make every commit wait its turn
            cost(args.runs)
        return
    with scratch_db(ADMIN_URL) as db_url, waking("notify"):
        fill(db_url, args.tasks)
        if args.index:
            index(db_url)
        print(f"{args.tasks:,} tasks; medians of {args.runs} calls, ms")
        print(f"  {'filter':<32} {'find (50)':>10} {'count':>10}")
        with psycopg.connect(db_url, autocommit=True) as c:
            for label, where in FILTERS.items():
                find = timed(lambda w=where: txqueue.find_tasks(c, w), args.runs)
                count = timed(lambda w=where: txqueue.count_tasks(c, w), args.runs)
                print(f"  {label:<32} {find:>10.1f} {count:>10.1f}", flush=True)


if __name__ == "__main__":
    main()
