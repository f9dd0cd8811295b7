"""What synchronous replication costs an enqueue: one task per transaction, committed from one
connection, on a primary with a streaming standby of its own (both on this machine, fsync on),
with the standby asynchronous, then synchronous with ``synchronous_commit`` ``on`` and
``remote_apply``. Interleaved rounds; medians of the per-round medians.

    python -m benchmarks.replication [--transactions 1000] [--rounds 3]

Run it as root (the clusters run as the postgres user) on an otherwise idle machine. On one
machine the standby is a loopback round trip away; across hosts or zones add their round
trip to every synchronous commit.
"""

from __future__ import annotations

import argparse
import statistics
import time
from contextlib import closing

import psycopg

import txqueue
from tests.integration.cluster import cluster, standby
from txqueue import Task
from txqueue.store import POSTGRES

MODES = {
    "asynchronous": ("", "on"),
    "synchronous, synchronous_commit=on": ("standby1", "on"),
    "synchronous, synchronous_commit=remote_apply": ("standby1", "remote_apply"),
}


def round_trip(url: str, transactions: int) -> float:
    """The median milliseconds of an enqueue and its commit."""
    took = []
    with closing(psycopg.connect(url)) as c:
        for _ in range(transactions):
            began = time.perf_counter()
            txqueue.enqueue(c, Task("bench", {"n": 1}))
            c.commit()
            took.append(time.perf_counter() - began)
    return statistics.median(took) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transactions", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    settings = {"wal_level": "replica", "max_wal_senders": "5"}
    txqueue.configure(amqp_url=None)
    results: dict[str, list[float]] = {mode: [] for mode in MODES}
    with cluster(**settings) as primary, standby(primary, "standby1", **settings):
        with closing(POSTGRES.connect(primary.url())) as c:
            POSTGRES.apply_schema(c)
        for _ in range(args.rounds):
            for mode, (names, commit) in MODES.items():
                with closing(psycopg.connect(primary.url(), autocommit=True)) as c:
                    c.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{names}'")
                    c.execute(f"ALTER SYSTEM SET synchronous_commit = '{commit}'")
                    c.execute("SELECT pg_reload_conf()")
                    expected = ("sync",) if names else ("async",)
                    query = "SELECT sync_state FROM pg_stat_replication"
                    while c.execute(query).fetchone() != expected:
                        time.sleep(0.01)
                results[mode].append(round_trip(primary.url(), args.transactions))
    for mode, medians in results.items():
        print(f"{mode}: {statistics.median(medians):.2f} ms per enqueue and commit")


if __name__ == "__main__":
    main()
