"""Measure one cleaner pass over a large backlog: expired leases to recover, history to prune.

    python benchmarks/cleaner.py [--runs 3] [--expired 10000] [--finished 200000]

Needs TXQUEUE_BENCH_DATABASE_URL (an admin URL: a scratch database is created and dropped
for each run). No broker: re-notify is not measured here. Prints medians of the runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import txqueue
from benchmarks.bench import scratch_db

FILL = """
INSERT INTO txqueue_tasks (id, queue, name, state, attempts, max_attempts, worker_id,
                           expires_at, finished_at)
SELECT gen_random_uuid(), 'bench', 'noop', 'running', 1, 5, 'gone',
       now() - interval '1 minute', NULL
FROM generate_series(1, %(expired)s)
UNION ALL
SELECT gen_random_uuid(), 'bench', 'noop', 'succeeded', 1, 5, 'done',
       NULL, now() - interval '2 days'
FROM generate_series(1, %(finished)s)
"""


def one_run(admin_url: str, expired: int, finished: int) -> tuple[float, txqueue.CleanupReport]:
    with scratch_db(admin_url) as url:
        with psycopg.connect(url) as c:
            c.execute(FILL, {"expired": expired, "finished": finished})
            c.execute("ANALYZE txqueue_tasks")
        report = txqueue.Cleaner(database_url=url, amqp_url=None).run_once()
    return report.seconds, report


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--expired", type=int, default=10_000)
    parser.add_argument("--finished", type=int, default=200_000)
    args = parser.parse_args()
    admin_url = os.environ.get("TXQUEUE_BENCH_DATABASE_URL")
    if not admin_url:
        sys.exit(
            "set TXQUEUE_BENCH_DATABASE_URL, e.g. postgresql://postgres@127.0.0.1:5432/postgres"
        )
    times = []
    for i in range(args.runs):
        seconds, report = one_run(admin_url, args.expired, args.finished)
        times.append(seconds)
        print(f"run {i + 1}: {seconds:.2f}s, {report.summary()}")
    median = statistics.median(times)
    print(
        f"median of {args.runs}: {median:.2f}s for {args.expired:,} recoveries and "
        f"{args.finished:,} deletions ({(args.expired + args.finished) / median:,.0f} rows/s)"
    )


if __name__ == "__main__":
    main()
