"""One fleet of workers serving 1, 3 and 6 named databases on this machine.

    python benchmarks/databases.py [--runs 3] [--tasks 20000] [--backlog 100000] [--counts 1,3,6]
                                   [--only drain,starts,fairness,cost]

For each count of databases (scratch databases on TXQUEUE_BENCH_DATABASE_URL's server,
named by ``App.init``; RabbitMQ at TXQUEUE_AMQP_URL), a fleet of 2 `txqueue worker`
processes given TXQUEUE_DATABASES, each with 8 threads per database:

- **drain**: ``--tasks`` noop tasks split evenly over the databases (enqueue_many, a wake-up
  per 1,000), then the fleet started; tasks/s from the first start to the last finish;
- **commit-to-start**: 400 tasks committed one per transaction, 20 a second, in the
  databases in turn, each woken through its database's queue; from commit to the
  handler's start, p50 and p99;
- **fairness** (3 databases and more): the same paced tasks in all databases but the
  first, from the fleet's start, while the first drains a ``--backlog``-task backlog
  enqueued before it started (those committed before its last task finished counted);
- **cost**: the idle fleet's connections to the databases, its resident memory and its
  CPU over 10 s, per process.

Each line the median of ``--runs`` runs.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, closing, contextmanager
from pathlib import Path

import pika
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import txqueue
from benchmarks.bench import QUEUE, ROOT, paced, rss_kib, scratch_db, serving
from benchmarks.pressure import pct
from txqueue import App, Task, broker
from txqueue.outbox.wakeup import queue_name, routed

PROCESSES, THREADS = 2, 8
NAMES = [f"db{i}" for i in range(6)]
PACED, RATE = 400, 20.0


def reset(databases: dict[str, str], amqp_url: str) -> None:
    for name, url in databases.items():
        broker.delete_queue(amqp_url, routed(QUEUE, name))
        with psycopg.connect(url, autocommit=True) as c:
            c.execute("TRUNCATE txqueue_tasks, txqueue_queues, txqueue_starts")


def consumers(amqp_url: str, databases: dict[str, str]) -> int:
    """The fewest consumers of a database's queue."""
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        channel = conn.channel()
        return min(
            int(
                channel.queue_declare(
                    queue_name(routed(QUEUE, n)), durable=True
                ).method.consumer_count
            )
            for n in databases
        )
    finally:
        conn.close()


@contextmanager
def fleet(databases: dict[str, str], amqp_url: str) -> Iterator[list[subprocess.Popen[bytes]]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXQUEUE_")}
    env["TXQUEUE_AMQP_URL"] = amqp_url
    env["TXQUEUE_DATABASES"] = " ".join(f"{n}={u}" for n, u in databases.items())
    argv = [sys.executable, "-m", "txqueue", "worker", "--app", "benchmarks.noop:registry"]
    argv += ["--concurrency", str(THREADS)]
    procs = [
        subprocess.Popen(
            argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        for _ in range(PROCESSES)
    ]
    with serving(procs, lambda: consumers(amqp_url, databases) >= PROCESSES, 60):
        yield procs


def left(databases: dict[str, str]) -> int:
    total = 0
    for url in databases.values():
        with psycopg.connect(url, autocommit=True) as c:
            row = c.execute(
                "SELECT count(*) FROM txqueue_tasks WHERE state IN ('pending', 'running')"
            ).fetchone()
            total += row[0] if row else 0
    return total


def wait_done(databases: dict[str, str], procs: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + 900
    while left(databases):
        if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
            raise SystemExit("the fleet did not finish its tasks")
        time.sleep(0.1)


def enqueue_backlog(app: App, url: str, n: int) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        for start in range(0, n, 1000):
            app.enqueue_many(c, [Task("noop", queue=QUEUE)] * min(1000, n - start))
    if not app.flush(120):
        raise SystemExit("RabbitMQ did not confirm the backlog's wake-ups")


def drain(app: App, databases: dict[str, str], amqp_url: str, tasks: int) -> float:
    reset(databases, amqp_url)
    for url in databases.values():
        enqueue_backlog(app, url, tasks // len(databases))
    with fleet(databases, amqp_url) as procs:
        wait_done(databases, procs)
    first, last, done = float("inf"), 0.0, 0
    for url in databases.values():
        with psycopg.connect(url) as c:
            row = c.execute(
                "SELECT count(*), extract(epoch FROM min(start_time))::float8, "
                "extract(epoch FROM max(finished_at))::float8 FROM txqueue_tasks "
                "WHERE state = 'succeeded'"
            ).fetchone()
        assert row is not None
        done, first, last = done + row[0], min(first, row[1]), max(last, row[2])
    return done / (last - first)


def paced_starts(app: App, targets: dict[str, str], warm: int) -> list[tuple[float, float]]:
    """Commit to start of ``PACED`` tasks enqueued at ``RATE`` in ``targets`` in turn, after
    ``warm`` more not counted: each one's commit (Unix time) and milliseconds to its start."""
    committed: dict[uuid.UUID, tuple[str, float]] = {}
    with ExitStack() as stack:
        conns = {n: stack.enter_context(closing(psycopg.connect(u))) for n, u in targets.items()}
        names = list(targets)
        for i in paced(range(PACED + warm), RATE):
            name = names[i % len(names)]
            with txqueue.transaction(conns[name]):
                task_id = app.enqueue(conns[name], Task("stamp", {"i": i}, queue=QUEUE))
            if i >= warm:
                committed[task_id] = (name, time.time())
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        started: dict[uuid.UUID, float] = {}
        for url in targets.values():
            with psycopg.connect(url) as c:
                started.update(
                    c.execute(
                        "SELECT id, (result #>> '{}')::float8 FROM txqueue_tasks "
                        "WHERE name = 'stamp' AND state = 'succeeded'"
                    ).fetchall()
                )
        if all(i in started for i in committed):
            return [(at, (started[i] - at) * 1000) for i, (_, at) in committed.items()]
        time.sleep(0.2)
    raise SystemExit("the paced tasks did not all start within a minute")


def starts(app: App, databases: dict[str, str], amqp_url: str, backlog: int) -> dict[str, float]:
    """Commit to start in every database; with a ``backlog`` in the first, in the others,
    of the tasks committed before the backlog's last task finished."""
    reset(databases, amqp_url)
    targets = dict(databases)
    first = next(iter(databases))
    if backlog:
        enqueue_backlog(app, databases[first], backlog)
        del targets[first]
    with fleet(databases, amqp_url) as procs:
        # Beside a backlog, from the first: its drain is the window measured.
        measured = paced_starts(app, targets, 0 if backlog else 50)
        wait_done(databases, procs)
    if backlog:
        with psycopg.connect(databases[first]) as c:
            row = c.execute(
                "SELECT extract(epoch FROM max(finished_at))::float8 FROM txqueue_tasks"
            ).fetchone()
        assert row is not None
        measured = [(at, ms) for at, ms in measured if at < row[0]]
    ms = [ms for _, ms in measured]
    return {"p50": round(pct(ms, 0.50), 2), "p99": round(pct(ms, 0.99), 2), "tasks": len(ms)}


def cost(databases: dict[str, str], amqp_url: str) -> dict[str, float]:
    """An idle fleet process's connections, memory and CPU over 10 s."""
    reset(databases, amqp_url)
    with fleet(databases, amqp_url) as procs:
        time.sleep(3)  # each part connected
        pid = procs[0].pid
        before = cpu_seconds(pid)
        time.sleep(10)
        cpu = (cpu_seconds(pid) - before) / 10
        connections = 0
        for url in databases.values():
            with psycopg.connect(url, autocommit=True) as c:
                row = c.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND application_name LIKE 'txqueue%%' AND pid <> pg_backend_pid()"
                ).fetchone()
                connections += row[0] if row else 0
        return {
            "connections_per_process": connections / PROCESSES,
            "rss_mib": round(rss_kib(pid) / 1024, 1),
            "idle_cpu_pct": round(cpu * 100, 2),
        }


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--backlog", type=int, default=100_000)
    parser.add_argument("--counts", default="1,3,6")
    parser.add_argument("--only", default="drain,starts,fairness,cost", help="comma-separated")
    args = parser.parse_args()
    admin = os.environ.get(
        "TXQUEUE_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    amqp_url = os.environ.setdefault("TXQUEUE_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
    counts = [int(c) for c in args.counts.split(",")]
    with ExitStack() as stack:
        urls = [stack.enter_context(scratch_db(admin)) for _ in range(max(counts))]
        every = dict(zip(NAMES, urls, strict=False))
        with App(databases=every, amqp_url=amqp_url) as app:
            app.init()
            for count in counts:
                report(count, measure(app, dict(list(every.items())[:count]), amqp_url, args))
            reset(every, amqp_url)


def measure(
    app: App, databases: dict[str, str], amqp_url: str, args: argparse.Namespace
) -> dict[str, object]:
    only = set(args.only.split(","))
    drains: list[float] = []
    runs: dict[str, list[dict[str, float]]] = {"starts": [], "fairness": []}
    for _ in range(args.runs):
        if "drain" in only:
            drains.append(drain(app, databases, amqp_url, args.tasks))
        if "starts" in only:
            runs["starts"].append(starts(app, databases, amqp_url, 0))
        if "fairness" in only and len(databases) >= 3:
            runs["fairness"].append(starts(app, databases, amqp_url, args.backlog))
    out: dict[str, object] = {}
    if drains:
        out.update(drain=drains, drain_median=statistics.median(drains))
    for key in ("starts", "fairness"):
        if runs[key]:
            out[key] = runs[key]
            out[f"{key}_p50_median"] = statistics.median(r["p50"] for r in runs[key])
            out[f"{key}_p99_median"] = statistics.median(r["p99"] for r in runs[key])
    if "cost" in only:
        out["cost"] = cost(databases, amqp_url)
    return out


def report(count: int, measured: dict[str, object]) -> None:
    print(f"{count} database{'s' * (count > 1)}:")
    for key, value in measured.items():
        print(f"  {key}: {value}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
