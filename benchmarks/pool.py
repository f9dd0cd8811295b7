"""The process pool under the handlers it is for. Run by hand, never in CI:

    .venv/bin/python -m benchmarks.pool timelimit [--runs 3]
    .venv/bin/python -m benchmarks.pool memory [--calls 2000] [--limit 200MB]

- timelimit: one `txqueue worker --pool processes --concurrency 2`; a task that loops
  forever with ``time_limit=2`` (two attempts, 1 s apart), and meanwhile a task every 50 ms
  that sleeps 10 ms. Reports when each attempt of the looping task ended after it started,
  when its second attempt started after the first ended, and the other tasks' commit to
  start (median, max) beside it, and for as many without it, first.
- memory: one `txqueue worker --pool processes --concurrency 2 --max-memory-per-child
  LIMIT`; ``--calls`` tasks that each keep one more MiB; the worker's resident memory
  (parent and children, from /proc) sampled every 0.1 s. Reports its peak beside the limit
  times the children plus the parent's own.

Each run gets a scratch PostgreSQL database (dropped after) and no broker: wake-ups by
NOTIFY. The tasks are in benchmarks/pool_tasks.py.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg

import txqueue
from benchmarks import pool_tasks
from txqueue import config, units

ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
ROOT = Path(__file__).resolve().parents[1]


@contextmanager
def scratch() -> Iterator[str]:
    name = f"bench_pool_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    url = ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    try:
        subprocess.run(
            [sys.executable, "-m", "txqueue", "init", "--database-url", url],
            check=True,
            capture_output=True,
        )
        yield url
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as c:
            c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextmanager
def worker(url: str, *flags: str) -> Iterator[subprocess.Popen[bytes]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TXQUEUE_")}
    env[config.DATABASE_ENV] = url
    argv = [sys.executable, "-m", "txqueue", "worker", "--app", "benchmarks.pool_tasks:registry"]
    proc = subprocess.Popen(
        [*argv, "--pool", "processes", "--concurrency", "2", *flags],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(2.0)  # its children import the application
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def timelimit(runs: int) -> None:
    for run in range(runs):
        with scratch() as url, worker(url), closing(psycopg.connect(url, autocommit=True)) as c:
            alone = _stamps(c, lambda n: n < 100)
            spinning = pool_tasks.spin.enqueue(c)
            beside = _stamps(c, functools.partial(_running, c, spinning))
            info = txqueue.get_task(c, spinning)
        first, second = (datetime.fromisoformat(e["at"]) for e in info.errors)
        assert info.start_time is not None  # the last attempt's
        print(
            f"run {run + 1}: attempt 1 ended {(first - info.created_at).total_seconds():.2f}s "
            f"after its enqueue, attempt 2 started {(info.start_time - first).total_seconds():.2f}"
            f"s after that (backoff 1 s) and ended "
            f"{(second - info.start_time).total_seconds():.2f}s after its start; commit to "
            f"start of the other tasks: {_spread(beside)} beside it ({len(beside)}), "
            f"{_spread(alone)} without it ({len(alone)})"
        )


def _stamps(c: psycopg.Connection[Any], going: Callable[[int], bool]) -> list[float]:
    """Enqueue a ``stamp`` task every 50 ms while ``going(count)``; each one's commit to
    start, in ms."""
    sent: list[tuple[uuid.UUID, float]] = []
    while going(len(sent)):
        sent.append((pool_tasks.stamp.enqueue(c), time.time()))
        time.sleep(0.05)
    return [(txqueue.wait(c, i, timeout=30).result - at) * 1000 for i, at in sent]


def _running(c: psycopg.Connection[Any], task_id: uuid.UUID, _: int) -> bool:
    return txqueue.get_task(c, task_id).state not in ("failed", "succeeded")


def _spread(ms: list[float]) -> str:
    return f"median {statistics.median(ms):.1f} ms, max {max(ms):.1f} ms"


def rss(pid: int) -> int:
    """Resident bytes of ``pid`` and its children."""
    total = 0
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, ValueError, IndexError):
            continue
        if entry.name == str(pid) or int(stat[1]) == pid:
            total += int(stat[21]) * os.sysconf("SC_PAGE_SIZE")
    return total


def memory(calls: int, limit: str) -> None:
    with scratch() as url, worker(url, "--max-memory-per-child", limit) as proc:
        parent_alone = rss(proc.pid) - sum(
            rss(int(p.name)) for p in Path("/proc").iterdir() if _child_of(p, proc.pid)
        )
        with closing(psycopg.connect(url)) as c, txqueue.transaction(c):
            txqueue.enqueue_many(c, [pool_tasks.leak.task() for _ in range(calls)])
        peak, samples = 0, 0
        with closing(psycopg.connect(url, autocommit=True)) as c:
            while True:
                peak = max(peak, rss(proc.pid))
                samples += 1
                left = c.execute(
                    "SELECT count(*) FROM txqueue_tasks WHERE state <> 'succeeded'"
                ).fetchone()
                if left is not None and left[0] == 0:
                    break
                time.sleep(0.1)
            children = {
                r[0] for r in c.execute("SELECT DISTINCT (result)::text FROM txqueue_tasks")
            }
    bound = 2 * units.size(limit, "--limit") + parent_alone
    print(
        f"{calls} calls keeping 1 MiB each, --max-memory-per-child {limit}: {len(children)} "
        f"children in all; the worker's peak resident memory {peak / 2**20:.0f} MiB over "
        f"{samples} samples, against 2 x {limit} + the parent's {parent_alone / 2**20:.0f} MiB "
        f"= {bound / 2**20:.0f} MiB"
    )


def _child_of(entry: Path, pid: int) -> bool:
    try:
        return int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == pid
    except (OSError, ValueError, IndexError):
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", choices=["timelimit", "memory"])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--limit", default="200MB")
    args = parser.parse_args()
    if args.what == "timelimit":
        timelimit(args.runs)
    else:
        memory(args.calls, args.limit)


if __name__ == "__main__":
    main()
