"""What parked tasks cost a draining worker, and how soon a signal resumes one.

    python benchmarks/parking.py [--runs 3] [--tasks 20000] [--parked 10000] [--signals 200]

- **drain**: ``--tasks`` noop tasks drained by 2 worker processes of 8 threads (RabbitMQ
  wake-ups, one per 1,000 tasks), with nothing else in the table, then beside
  ``--parked`` tasks parked a day (half sleeping, half waiting for a signal, each with its
  step recorded), interleaved; tasks/s from the first start to the last finish.
- **resume**: ``--signals`` tasks parked in ``ctx.wait_for``, each signalled in a
  transaction of its own, 20 a second: from the signal's commit to the handler's return
  from the wait; against a task's commit-to-start, its enqueue committed the same way
  (``bench.latency``). One worker process of 8 threads, RabbitMQ wake-ups.
- **children**: ``--signals`` parents, enqueued 20 a second, each running a child with
  ``ctx.run_child``: from the child's end (its write's time) to the parent's return.

Each line the median of ``--runs`` runs. Against TXQUEUE_BENCH_DATABASE_URL (an admin
URL; a scratch database is made and dropped) and TXQUEUE_AMQP_URL, defaulting to the
local servers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import txqueue
from benchmarks.bench import (
    LATENCY_WORKER,
    QUEUE,
    backlog,
    latency,
    paced,
    reset,
    scratch_db,
    wait_done,
    workers,
)
from benchmarks.pressure import pct

PARK = """
INSERT INTO txqueue_tasks (id, queue, name, payload, state, slot, run_at, wait_key, steps)
SELECT txqueue_uuid7(), 'sleepers', 'signalled', jsonb_build_object('key', 'k' || i),
       'parked', -3, now() + interval '1 day',
       CASE WHEN i %% 2 = 0 THEN 'k' || i END,
       jsonb_build_array(jsonb_build_object('name', 'sleep 1', 'at', extract(epoch FROM now()),
                                            'result', extract(epoch FROM now()) + 86400,
                                            'took', 0, 'attempt', 1))
FROM generate_series(1, %s) AS i
"""


def drain(db_url: str, amqp_url: str, tasks: int, parked: int) -> float:
    reset(db_url, amqp_url)
    with psycopg.connect(db_url, autocommit=True) as c:
        c.execute(PARK, (parked,))
        c.execute("ANALYZE txqueue_tasks")
    backlog(db_url, tasks, one_wakeup_each=False)
    with workers(db_url, amqp_url, 2, 8) as procs:
        wait_done(db_url, procs)
    with psycopg.connect(db_url) as c:
        row = c.execute(
            "SELECT count(*), extract(epoch FROM max(finished_at) - min(start_time))::float8 "
            "FROM txqueue_tasks WHERE queue = %s AND state = 'succeeded'",
            (QUEUE,),
        ).fetchone()
    assert row is not None and row[0] == tasks, row
    return tasks / float(row[1])


def resume(db_url: str, amqp_url: str, n: int) -> list[float]:
    """Milliseconds from each signal's commit to its handler's return from the wait."""
    reset(db_url, amqp_url)
    sent: dict[str, float] = {}
    with workers(db_url, amqp_url, *LATENCY_WORKER) as procs, psycopg.connect(db_url) as c:
        keys = [f"go:{i}" for i in range(n)]
        ids = txqueue.enqueue_many(
            c, [txqueue.Task("signalled", {"key": k}, queue=QUEUE) for k in keys]
        )
        c.commit()
        deadline = time.monotonic() + 60
        while c.execute("SELECT count(*) FROM txqueue_tasks WHERE state = 'parked'").fetchone() != (
            n,
        ):
            c.commit()
            if time.monotonic() > deadline:
                raise SystemExit("the tasks did not all park")
            time.sleep(0.1)
        c.commit()
        for key in paced(keys, 20):
            with txqueue.transaction(c):
                txqueue.signal(c, key)
            sent[key] = time.time()
        wait_done(db_url, procs)
    with psycopg.connect(db_url) as c:
        rows = c.execute(
            "SELECT payload ->> 'key', (result #>> '{}')::float8 FROM txqueue_tasks "
            "WHERE id = ANY(%s)",
            (ids,),
        ).fetchall()
    return sorted((at - sent[key]) * 1000 for key, at in rows)


def children(db_url: str, amqp_url: str, n: int) -> list[float]:
    """Milliseconds from each child's end (its finished_at) to its parent's return from
    ``run_child``, parents enqueued 20 a second."""
    reset(db_url, amqp_url)
    with workers(db_url, amqp_url, *LATENCY_WORKER) as procs, psycopg.connect(db_url) as c:
        for _ in paced(range(n), 20):
            with txqueue.transaction(c):
                txqueue.enqueue(c, txqueue.Task("parent", queue=QUEUE))
        wait_done(db_url, procs)
    with psycopg.connect(db_url) as c:
        rows = c.execute(
            "SELECT (p.result #>> '{}')::float8 - extract(epoch FROM k.finished_at)::float8 "
            "FROM txqueue_tasks AS p JOIN txqueue_tasks AS k ON k.parent_id = p.id "
            "WHERE p.name = 'parent'"
        ).fetchall()
    assert len(rows) == n, rows
    return sorted(r[0] * 1000 for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--parked", type=int, default=10_000)
    parser.add_argument("--signals", type=int, default=200)
    args = parser.parse_args()
    admin = os.environ.get(
        "TXQUEUE_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    amqp_url = os.environ.setdefault("TXQUEUE_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
    txqueue.configure(amqp_url=amqp_url)
    rates: dict[str, list[float]] = {"alone": [], "beside parked": []}
    resumed: list[list[float]] = []
    told: list[list[float]] = []
    started: list[dict[str, float]] = []
    for _ in range(args.runs):
        with scratch_db(admin) as url:
            rates["alone"].append(drain(url, amqp_url, args.tasks, 0))
            rates["beside parked"].append(drain(url, amqp_url, args.tasks, args.parked))
            resumed.append(resume(url, amqp_url, args.signals))
            told.append(children(url, amqp_url, args.signals))
            started.append(latency(url, amqp_url, args.signals, 20.0))
    print(f"medians of {args.runs} runs")
    for name, got in rates.items():
        print(
            f"drain {args.tasks:,} tasks, {name:>13}: {statistics.median(got):9,.0f} tasks/s  {got}"
        )
    for p in (0.5, 0.99):
        signal_ms = statistics.median(pct(r, p) for r in resumed)
        start_ms = statistics.median(s[f"p{round(p * 100)}"] for s in started)
        child_ms = statistics.median(pct(r, p) for r in told)
        print(
            f"p{round(p * 100)}: signal commit to resume {signal_ms:6.2f} ms, "
            f"a child's end to its parent's resume {child_ms:6.2f} ms, "
            f"enqueue commit to start {start_ms:6.2f} ms"
        )


if __name__ == "__main__":
    main()
