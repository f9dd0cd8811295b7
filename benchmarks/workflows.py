"""What workflows cost, beside what a plain task costs, on PostgreSQL and RabbitMQ at the
defaults (2 `txqueue worker` processes of 8 threads, the peers harness's setting):

- chain hop: a chain of 100 no-op steps, from one step's start to the next's, beside a
  single task's commit-to-start p50 (``bench.latency`` at 50/s, the same minutes);
- fan-out: a group of 10,000 no-ops joined by one step, enqueued in one transaction,
  beside ``enqueue_many`` of 10,000 tasks in one transaction;
- fan-in: from that commit to the join's start, beside the time from the commit of
  10,000 plain tasks to the last one's end.

    python benchmarks/workflows.py --runs 3

Scratch databases and the services as benchmarks/bench.py takes them; medians printed.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import txqueue
from benchmarks import bench
from benchmarks.noop import hop, join, part

QUEUE = bench.QUEUE
WORKERS = (2, 8)


def chain(db_url: str, amqp_url: str, hops: int) -> float:
    """Milliseconds from a step's start to its child's, median over the chain."""
    bench.reset(db_url, amqp_url)
    flow = txqueue.Workflow("chain")
    step = flow.step(hop, 0.0)
    steps = [step]
    for _ in range(hops - 1):
        step = flow.step(hop, step.result)
        steps.append(step)
    with bench.workers(db_url, amqp_url, *WORKERS) as procs:
        with psycopg.connect(db_url) as c:
            txqueue.enqueue_workflow(c, flow)
        bench.wait_done(db_url, procs)
        info = txqueue.wait_workflow(db_url, flow.id, timeout=300)
    assert info.state == "succeeded", info.state
    started = [float(info.step(s.name).result) for s in steps]
    gaps = [(b - a) * 1000 for a, b in itertools.pairwise(started)]
    return round(statistics.median(gaps), 3)


def group(n: int) -> txqueue.Workflow:
    flow = txqueue.Workflow("fan-out")
    flow.step(join, flow.results([flow.step(part, i) for i in range(n)]))
    return flow


def enqueue_group(db_url: str, n: int) -> float:
    """Seconds to declare and write a group of ``n`` joined by one step, one transaction."""
    with psycopg.connect(db_url) as c:
        began = time.perf_counter()
        txqueue.enqueue_workflow(c, group(n))
        c.commit()
        took = time.perf_counter() - began
        c.execute("TRUNCATE txqueue_tasks, txqueue_waits, txqueue_workflows")
        c.commit()
    return round(took, 4)


def enqueue_plain(db_url: str, n: int) -> float:
    """Seconds to build and write ``n`` tasks of the group's typed task with enqueue_many,
    one transaction: the steps' arguments are checked and stored the same way."""
    with psycopg.connect(db_url) as c:
        began = time.perf_counter()
        txqueue.enqueue_many(c, [part.task(i) for i in range(n)])
        c.commit()
        took = time.perf_counter() - began
        c.execute("TRUNCATE txqueue_tasks")
        c.commit()
    return round(took, 4)


def fan_in(db_url: str, amqp_url: str, n: int) -> float:
    """Seconds from the commit of a group of ``n`` joined by one step to the join's start."""
    bench.reset(db_url, amqp_url)
    flow = group(n)
    with bench.workers(db_url, amqp_url, *WORKERS) as procs:
        with psycopg.connect(db_url) as c:
            txqueue.enqueue_workflow(c, flow)
            c.commit()
            committed = time.time()
        bench.wait_done(db_url, procs)
        info = txqueue.wait_workflow(db_url, flow.id, timeout=600)
    assert info.state == "succeeded", info.state
    return round(float(info.step("join").result) - committed, 3)


def drain_plain(db_url: str, amqp_url: str, n: int) -> float:
    """Seconds from the commit of ``n`` plain tasks to the commit of the last one's outcome,
    as a ``txqueue.wait`` caller hears of it (the notification of each finished task that
    PostgreSQL sends on commit). ``finished_at`` would say when the last outcome's write
    began, before the time that write takes."""
    bench.reset(db_url, amqp_url)
    with (
        bench.workers(db_url, amqp_url, *WORKERS) as procs,
        psycopg.connect(db_url, autocommit=True) as listener,
    ):
        listener.execute("LISTEN txqueue_finished")
        with psycopg.connect(db_url) as c:
            txqueue.enqueue_many(c, [part.task(i) for i in range(n)])
            c.commit()
            committed = time.time()
        heard = 0
        for note in listener.notifies(timeout=600):
            heard += len(note.payload.split(","))
            if heard >= n:
                drained = time.time()
                break
        else:
            raise TimeoutError(f"heard of {heard} of {n} tasks finished")
        bench.wait_done(db_url, procs)
    return round(drained - committed, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--hops", type=int, default=100)
    parser.add_argument("--group", type=int, default=10_000)
    parser.add_argument("--only", help="a regular expression: run the scenarios it matches")
    args = parser.parse_args()
    admin_url = os.environ.setdefault(
        "TXQUEUE_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    amqp_url = os.environ.setdefault("TXQUEUE_BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
    os.environ["TXQUEUE_AMQP_URL"] = amqp_url
    txqueue.configure(amqp_url=amqp_url)
    scenarios: dict[str, Any] = {
        "single task commit-to-start p50 at 50/s (ms)": lambda u: bench.latency(
            u, amqp_url, 500, 50
        )["p50"],
        f"chain of {args.hops}: a step's start to its child's, median (ms)": lambda u: chain(
            u, amqp_url, args.hops
        ),
        f"enqueue_many of {args.group:,} tasks, 1 tx (s)": lambda u: enqueue_plain(u, args.group),
        f"enqueue_workflow of a group of {args.group:,} and a join, 1 tx (s)": lambda u: (
            enqueue_group(u, args.group)
        ),
        f"{args.group:,} plain tasks: commit to the last one's outcome committed (s)": lambda u: (
            drain_plain(u, amqp_url, args.group)
        ),
        f"a group of {args.group:,}: commit to the join's start (s)": lambda u: fan_in(
            u, amqp_url, args.group
        ),
    }
    runs: dict[str, list[float]] = {}
    for run in range(args.runs):
        print(f"run {run + 1} of {args.runs}", flush=True)
        with bench.scratch_db(admin_url) as db_url:
            for name, fn in scenarios.items():
                if args.only and not re.search(args.only, name):
                    continue
                runs.setdefault(name, []).append(fn(db_url))
                print(f"  {name}: {runs[name][-1]}", flush=True)
            bench.reset(db_url, amqp_url)
    print("medians:")
    for name, values in runs.items():
        print(f"  {name}: {statistics.median(values)}")


if __name__ == "__main__":
    main()
