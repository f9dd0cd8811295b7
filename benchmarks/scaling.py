"""What docs/explanation/scaling.md rests on: the database connections one worker process holds, and
a drain straight to PostgreSQL next to one through PgBouncer in transaction mode.

    python benchmarks/scaling.py [--runs 3] [--tasks 20000] [--pool-size 20]

Same services and variables as bench.py (TXQUEUE_BENCH_DATABASE_URL, _AMQP_URL); the
PgBouncer is Debian's `pgbouncer`, started on a free port for the run (as the tests do).
Each run measures, for 2 worker processes at the default 8 threads:

- connections: server sessions the idle workers hold, counted in pg_stat_activity;
- drain direct, and drain through PgBouncer: a committed backlog (enqueue_many, one
  wake-up per 1,000), first start to last finish, with the most server sessions the
  workers held meanwhile (sampled every 10 ms);
- WAL: bytes written per task, by the backlog's inserts and by the drain's claims and
  outcomes (the whole cluster's WAL, so run it on an otherwise idle server).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench import backlog, drain_rate, reset, scratch_db, wait_done, workers  # noqa: E402
from tests.integration.pgbouncer import pgbouncer, through  # noqa: E402

PROCESSES, THREADS = 2, 8


# The workers' sessions, directly or PgBouncer's on their behalf (it passes their
# application_name on), not the benchmark's own.
SESSIONS = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND application_name LIKE 'txqueue%%'"
)


def sessions(admin_url: str, database: str) -> int:
    with psycopg.connect(admin_url, autocommit=True) as c:
        row = c.execute(SESSIONS, (database,)).fetchone()
    return int(row[0]) if row else 0


def wal(admin_url: str) -> int:
    with psycopg.connect(admin_url, autocommit=True) as c:
        row = c.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint").fetchone()
    return int(row[0]) if row else 0


@contextmanager
def most_sessions(admin_url: str, database: str) -> Iterator[Callable[[], int]]:
    """The most server sessions on ``database`` seen while the block runs."""
    seen = [0]
    done = threading.Event()

    def sample() -> None:
        with psycopg.connect(admin_url, autocommit=True) as c:
            while not done.wait(0.01):
                row = c.execute(SESSIONS, (database,)).fetchone()
                seen[0] = max(seen[0], int(row[0]) if row else 0)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield lambda: seen[0]
    finally:
        done.set()
        thread.join()


def idle_connections(admin_url: str, db_url: str, amqp_url: str) -> float:
    database = urlsplit(db_url).path.lstrip("/")
    reset(db_url, amqp_url)
    with workers(db_url, amqp_url, PROCESSES, THREADS):
        time.sleep(2)  # past start-up: what they hold while idle
        return sessions(admin_url, database) / PROCESSES


def drain(
    admin_url: str, db_url: str, worker_url: str, amqp_url: str, n: int
) -> tuple[float, int, float, float]:
    """Tasks/s, the most sessions, and WAL bytes per task enqueued and per task run."""
    database = urlsplit(db_url).path.lstrip("/")
    reset(db_url, amqp_url)
    start = wal(admin_url)
    backlog(db_url, n, one_wakeup_each=False)
    enqueued = wal(admin_url)
    with most_sessions(admin_url, database) as most:
        with workers(worker_url, amqp_url, PROCESSES, THREADS) as procs:
            wait_done(db_url, procs)
        peak = most()
    ran = wal(admin_url)
    return drain_rate(db_url, n), peak, (enqueued - start) / n, (ran - enqueued) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--pool-size", type=int, default=20, help="PgBouncer's per database")
    args = parser.parse_args()
    admin_url = os.environ.setdefault(
        "TXQUEUE_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    amqp_url = os.environ.setdefault("TXQUEUE_BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
    os.environ["TXQUEUE_AMQP_URL"] = amqp_url
    results: dict[str, list[float]] = {}

    def note(name: str, value: float) -> None:
        results.setdefault(name, []).append(value)
        print(f"  {name}: {value:,.1f}", flush=True)

    with pgbouncer(admin_url, pool_size=args.pool_size) as port:
        for run in range(args.runs):
            print(f"run {run + 1} of {args.runs}", flush=True)
            with scratch_db(admin_url) as db_url:
                note(
                    "connections per idle worker process",
                    idle_connections(admin_url, db_url, amqp_url),
                )
                rate, peak, enqueue_wal, run_wal = drain(
                    admin_url, db_url, db_url, amqp_url, args.tasks
                )
                note("drain direct (tasks/s)", rate)
                note("drain direct, most worker sessions", peak)
                note("WAL bytes per task enqueued (enqueue_many)", enqueue_wal)
                note("WAL bytes per task claimed and completed", run_wal)
                rate, peak, _, _ = drain(
                    admin_url, db_url, through(db_url, port), amqp_url, args.tasks
                )
                note("drain through PgBouncer (tasks/s)", rate)
                note("drain through PgBouncer, most server sessions", peak)
                reset(db_url, amqp_url)
    print(f"medians of {args.runs} runs, {args.tasks:,} tasks, {PROCESSES} x {THREADS}:")
    for name, values in results.items():
        print(f"  {name}: {statistics.median(values):,.1f}")


if __name__ == "__main__":
    main()
