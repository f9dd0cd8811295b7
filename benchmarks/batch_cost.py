"""What a claim and an outcome cost per task in the batches a draining worker makes.

    python benchmarks/batch_cost.py [--batch 1000] [--rounds 10]

Each round commits ``--batch`` no-op tasks, claims them with the idle poll
(``claim_ripe``, as many at once as it gives), then writes their successes in one
``record_outcomes``, as a worker's recorder does when outcomes pile up during a drain.
Both are timed from the call to its return on txqueue's own connection: the statement,
its round trip, the commit and Python's share (building the transitions, reading the rows
back). No broker, no worker: run it on an otherwise idle machine. Medians over the rounds,
in microseconds a task.

Against TXQUEUE_BENCH_DATABASE_URL (an admin URL; a scratch database is made and dropped),
defaulting to the local server.
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
from benchmarks.bench import QUEUE, scratch_db
from benchmarks.noop import part
from txqueue.core.task import SUCCEEDED
from txqueue.store.postgres.store import PostgresStore
from txqueue.store.records import ClaimDefaults, Outcome, Poll


def measure(url: str, batch: int, rounds: int) -> dict[str, list[float]]:
    """Seconds per task of the claims and of the outcome write, one entry per round."""
    store = PostgresStore()
    defaults = ClaimDefaults({"part": {}}, 300.0, 3)
    times: dict[str, list[float]] = {"claim": [], "outcome": []}
    conn = store.connect(url)
    try:
        for _ in range(rounds):
            with psycopg.connect(url) as c:
                txqueue.enqueue_many(c, [part.task(i) for i in range(batch)])
            began = time.perf_counter()
            claimed = []
            while len(claimed) < batch:
                claimed += store.claim_ripe(conn, Poll(QUEUE, batch, "w", defaults)).claimed
            ended = time.perf_counter()
            written = store.record_outcomes(
                conn, [Outcome(t.id, t.attempts, "w", SUCCEEDED, "1") for t in claimed]
            )
            times["claim"].append((ended - began) / batch)
            times["outcome"].append((time.perf_counter() - ended) / batch)
            assert len(written) == batch, "an outcome was fenced out"
    finally:
        conn.close()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    admin = os.environ.get(
        "TXQUEUE_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    with scratch_db(admin) as url:
        times = measure(url, args.batch, args.rounds)
    medians = ", ".join(f"{k} {statistics.median(v) * 1e6:.1f}" for k, v in times.items())
    print(f"batch of {args.batch}, median µs a task over {args.rounds} rounds: {medians}")


if __name__ == "__main__":
    main()
