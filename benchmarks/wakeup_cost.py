"""What a wake-up costs the enqueue: one task per transaction from 1 and from 8 threads,
each with a connection of its own, by each transport, against no wake-up at all.

    python benchmarks/wakeup_cost.py [--runs 5] [--tasks 3000] [--only notify]
                                     [--writers 1,8] [--no-listener]

Every round runs each way once, in turn, on one scratch database (TXQUEUE_BENCH_DATABASE_URL,
an admin URL) and TXQUEUE_BENCH_AMQP_URL, so that each way's ratio to no wake-up is taken in
the same minutes; the table gives the medians of those ratios, and of the rates. A process
of its own LISTENs and reads the notifications meanwhile, as a worker's listener would
(``--no-listener``: none, to tell what the reading costs a 2-core machine from what the
sending costs). The disk's flushes swing from minute to minute on a small machine: many
short runs (``--runs 15 --tasks 1200``) give steadier ratios than a few long ones.

The ways:

- ``none``: the task's row and nothing else (the yardstick);
- ``notify``: txqueue's NOTIFY, sent by the statement that inserts the task, in the
  caller's transaction;
- ``notify after the commit, elsewhere``: an experiment, not a way txqueue offers: no
  NOTIFY in the transaction; once it commits, this script's own thread sends one on a
  connection of its own, with those of every commit since its last (what a notifier
  thread would do where txqueue sees the commit);
- ``rabbitmq, before the commit``: ``with conn.transaction()``, a block txqueue does not
  see commit: the message leaves at once, naming the transaction, and the worker that gets
  it first waits for the commit;
- ``rabbitmq, after the commit``: ``with txqueue.transaction(conn)``: the message leaves
  once the block has committed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import txqueue  # noqa: E402
from benchmarks.bench import QUEUE, Silent, Through, reset, scratch_db  # noqa: E402
from txqueue import Task, broker  # noqa: E402

Block = Callable[[psycopg.Connection[Any]], AbstractContextManager[Any]]
WAYS: dict[str, tuple[str | None, Block]] = {  # the broker ("": none; None: NOTIFY), the block
    "none": ("", lambda c: c.transaction()),
    "notify": (None, lambda c: c.transaction()),
    "notify after the commit, elsewhere": ("", lambda c: c.transaction()),
    "rabbitmq, before the commit": ("amqp", lambda c: c.transaction()),
    "rabbitmq, after the commit": ("amqp", txqueue.transaction),
}


LISTENER = """
import sys, psycopg
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    conn.execute("LISTEN txqueue_wakeup")
    print("listening", flush=True)
    for _ in conn.notifies():
        pass
"""


@contextmanager
def listening(db_url: str) -> Iterator[None]:
    """A process LISTENing on the wake-ups' channel and reading them, as a worker's
    listener (in a process of its own: in the writers' it would take their CPU)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", LISTENER, db_url], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "listening"
        yield
    finally:
        proc.terminate()
        proc.wait()


class Elsewhere:
    """The experiment's notifier: ``committed`` asks for a NOTIFY; its thread sends one on
    its own autocommit connection, for every request since its last."""

    def __init__(self, db_url: str) -> None:
        self._conn = psycopg.connect(db_url, autocommit=True)
        self._asked = threading.Condition()
        self._waiting = self._stopped = False
        self.sent = 0
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def committed(self) -> None:
        with self._asked:
            self._waiting = True
            self._asked.notify()

    def _run(self) -> None:
        while True:
            with self._asked:
                while not (self._waiting or self._stopped):
                    self._asked.wait()
                if not self._waiting:
                    return
                self._waiting = False
            self._conn.execute("SELECT pg_notify('txqueue_wakeup', %s)", (QUEUE,))
            self.sent += 1

    def close(self) -> None:
        with self._asked:
            self._stopped = True
            self._asked.notify()
        self._thread.join()
        self._conn.close()


def enqueue(db_url: str, amqp_url: str, way: str, writers: int, n: int) -> float:
    """Tasks a second, ``n`` in all, one per transaction, from ``writers`` threads."""
    kind, block = WAYS[way]
    calls = Through(Silent(None) if kind == "" else None)
    txqueue.configure(amqp_url=amqp_url if kind else None)
    elsewhere = Elsewhere(db_url) if way.endswith("elsewhere") else None
    share = n // writers

    def produce() -> None:
        with psycopg.connect(db_url) as c:
            for i in range(share):
                with block(c):
                    calls.enqueue(c, Task("noop", {"i": i}, queue=QUEUE))
                if elsewhere is not None:
                    elsewhere.committed()

    pool = [threading.Thread(target=produce) for _ in range(writers)]
    started = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - started
    txqueue.flush(60)
    if elsewhere is not None:
        elsewhere.close()
        print(f"  ({elsewhere.sent:,} notifications for {share * writers:,} commits)")
    return share * writers / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--only", default="", help="the ways whose name contains this")
    parser.add_argument("--writers", default="1,8", help="the numbers of writers, each in turn")
    parser.add_argument(
        "--no-listener", dest="listener", action="store_false", help="no process LISTENs"
    )
    args = parser.parse_args()
    admin_url = os.environ.get(
        "TXQUEUE_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    amqp_url = os.environ.get("TXQUEUE_BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
    ways = ["none"] + [w for w in WAYS if w != "none" and args.only in w]
    writers_each = [int(n) for n in args.writers.split(",")]
    rates: dict[tuple[str, int], list[float]] = {}
    ratios: dict[tuple[str, int], list[float]] = {}
    with scratch_db(admin_url) as db_url, listening(db_url) if args.listener else nullcontext():
        for run in range(args.runs):
            for writers in writers_each:
                for way in ways:
                    reset(db_url, amqp_url)
                    rate = enqueue(db_url, amqp_url, way, writers, args.tasks)
                    rates.setdefault((way, writers), []).append(rate)
                    base = rates[("none", writers)][-1]
                    ratios.setdefault((way, writers), []).append(rate / base)
                    print(f"run {run + 1}, {writers} writers, {way}: {rate:,.0f}/s", flush=True)
        reset(db_url, amqp_url)
    broker.delete_queue(amqp_url, QUEUE)
    print(f"\nmedians of {args.runs} runs of {args.tasks:,} tasks, one per transaction:")
    heads = " | ".join(f"{w} writer" + "s" * (w > 1) for w in writers_each)
    print(f"| way | {heads} |")
    print(f"|---|{'---|' * len(writers_each)}")
    for way in ways:
        cells = []
        for writers in writers_each:
            rate = statistics.median(rates[(way, writers)])
            cost = (statistics.median(ratios[(way, writers)]) - 1) * 100
            cells.append(f"{rate:,.0f}/s" + ("" if way == "none" else f" ({cost:+.0f}%)"))
        print(f"| {way} | {' | '.join(cells)} |")


if __name__ == "__main__":
    main()
