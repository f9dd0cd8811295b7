"""The CPU an enqueue costs its caller: one task per transaction, wake-ups on.

    python benchmarks/enqueue_cpu.py [--tasks 3000] [--label new]

Wall-clock rates of one-row transactions swing by a quarter between runs on this machine
(the commit's fsync), which hides a change in txqueue's own cost; the process's CPU time
per enqueue (its publisher thread included) does not. To compare two checkouts, run it
from each with ``PYTHONPATH`` set to that checkout, interleaved.

Against TXQUEUE_BENCH_DATABASE_URL (an admin URL; a scratch database is made and dropped)
and TXQUEUE_BENCH_AMQP_URL, defaulting to the local services.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import pika
import psycopg

import txqueue
from txqueue import Task

WARM = 200


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--label", default="this checkout")
    args = parser.parse_args()
    admin = os.environ.get(
        "TXQUEUE_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    amqp = os.environ.get("TXQUEUE_BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
    name, queue = f"enqueue_cpu_{uuid.uuid4().hex[:8]}", f"enqueue_cpu_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f"CREATE DATABASE {name}")
    url = urlunsplit(urlsplit(admin)._replace(path=f"/{name}"))
    try:
        cpu, rate = measure(url, amqp, queue, args.tasks)
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        broker = pika.BlockingConnection(pika.URLParameters(amqp))
        broker.channel().queue_delete(f"txqueue.{queue}")
        broker.close()
    print(f"{args.label}: {cpu * 1e6:.0f} us CPU per enqueue, {rate:.0f} tasks/s")


def measure(url: str, amqp: str, queue: str, n: int) -> tuple[float, float]:
    """CPU seconds per enqueue and tasks per second, after a warm-up."""
    init_schema(url)
    txqueue.configure(amqp_url=amqp)
    with psycopg.connect(url) as conn:
        for i in range(WARM):
            txqueue.enqueue(conn, Task("t", {"i": i}, queue=queue))
            conn.commit()
        cpu, wall = time.process_time(), time.perf_counter()
        for i in range(n):
            txqueue.enqueue(conn, Task("t", {"i": i}, queue=queue))
            conn.commit()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    txqueue.flush()
    return cpu / n, n / wall


def init_schema(url: str) -> None:
    """``txqueue init``, in this process, by whichever store API this checkout has."""
    import txqueue.store as stores

    store = stores.for_url(url)
    with store.connect(url) as conn:
        store.apply_schema(conn)


if __name__ == "__main__":
    main()
