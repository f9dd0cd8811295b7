"""What this machine allows before txqueue adds anything: the two costs under every
commit-to-start latency with RabbitMQ. Run by hand, never in CI:

    .venv/bin/python benchmarks/floor.py [--messages 1000] [--commits 1000] [--runs 3]

- hop: pika alone, one process publishing persistent messages at 50/s to a durable queue,
  another consuming it (prefetch, manual acks, as a worker does); publish call to the
  consumer's callback, with publisher confirms (as txqueue's publisher) and without (as
  Dramatiq's default);
- commit: one row inserted and committed on PostgreSQL at 100/s, with synchronous_commit
  on (as every claim) and off.

Prints p50 and p99 in ms for each, per run, interleaved; needs TXQUEUE_TEST_DATABASE_URL
and TXQUEUE_TEST_AMQP_URL (or the defaults of this repository's tests).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import time
import uuid

import pika
import psycopg

DATABASE_URL = os.environ.get(
    "TXQUEUE_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
AMQP_URL = os.environ.get("TXQUEUE_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
PERSISTENT = pika.BasicProperties(delivery_mode=2, content_type="application/json")


def _consume(queue: str, n: int, ready: multiprocessing.Event, out: multiprocessing.Queue) -> None:
    conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    channel = conn.channel()
    channel.basic_qos(prefetch_count=32)
    seen: dict[int, float] = {}

    def on_message(ch: object, method: object, properties: object, body: bytes) -> None:
        seen[int(body)] = time.time()
        channel.basic_ack(method.delivery_tag)  # type: ignore[attr-defined]

    channel.basic_consume(queue, on_message)
    ready.set()
    deadline = time.monotonic() + n / 50 + 30
    while len(seen) < n and time.monotonic() < deadline:
        conn.process_data_events(time_limit=0.1)
    conn.close()
    out.put(seen)


def hop(n: int, confirms: bool) -> list[float]:
    """Milliseconds from each publish call to the consumer's callback."""
    queue = f"txqueue.floor_{uuid.uuid4().hex[:8]}"
    conn = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    channel = conn.channel()
    channel.queue_declare(queue, durable=True)
    if confirms:
        channel.confirm_delivery()
    ready, out = multiprocessing.Event(), multiprocessing.Queue()
    consumer = multiprocessing.Process(target=_consume, args=(queue, n, ready, out))
    consumer.start()
    try:
        ready.wait(10)
        sent = {}
        next_at = time.monotonic()
        for i in range(n):
            sent[i] = time.time()
            channel.basic_publish("", queue, str(i).encode(), PERSISTENT)
            next_at += 1 / 50
            time.sleep(max(0.0, next_at - time.monotonic()))
        seen = out.get(timeout=n / 50 + 40)
    finally:
        consumer.join(10)
        channel.queue_delete(queue)
        conn.close()
    return [(seen[i] - sent[i]) * 1000 for i in sent if i in seen]


def commits(n: int, synchronous: bool) -> list[float]:
    """Milliseconds for each one-row INSERT committed on its own."""
    table = f"txqueue_floor_{uuid.uuid4().hex[:8]}"  # not TEMP: those write no WAL
    with psycopg.connect(DATABASE_URL, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (i int)")
        try:
            conn.execute(f"SET synchronous_commit = {'on' if synchronous else 'off'}")
            taken = []
            for i in range(n):
                start = time.perf_counter()
                conn.execute(f"INSERT INTO {table} VALUES (%s)", (i,))
                taken.append((time.perf_counter() - start) * 1000)
                time.sleep(0.01)
        finally:
            conn.execute(f"DROP TABLE {table}")
    return taken


def quantiles(ms: list[float]) -> str:
    cuts = statistics.quantiles(ms, n=100)
    return f"p50 {cuts[49]:.2f} p99 {cuts[98]:.2f} ms"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--commits", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    for run in range(1, args.runs + 1):
        print(f"run {run}", flush=True)
        print(f"  hop, confirms:       {quantiles(hop(args.messages, True))}", flush=True)
        print(f"  hop, no confirms:    {quantiles(hop(args.messages, False))}", flush=True)
        print(f"  commit, synchronous: {quantiles(commits(args.commits, True))}", flush=True)
        print(f"  commit, not:         {quantiles(commits(args.commits, False))}", flush=True)


if __name__ == "__main__":
    main()
