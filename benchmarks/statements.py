"""The server time of a task's three hot statements, one at a time on one connection.

    python benchmarks/statements.py [--tasks 2000] [--label new]

Each task is enqueued (the INSERT), claimed by id, and its outcome written, each statement
timed from send to reply on a connection set up as the worker's (txqueue's own
``connect_args``), so the plans are the ones that run. No broker, no worker threads, no
other client: what is left is the statement and its planning. To compare two checkouts,
run it from each with ``PYTHONPATH`` set to that checkout, interleaved.

Against TXQUEUE_BENCH_DATABASE_URL (an admin URL; a scratch database is made and dropped),
defaulting to the local server.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

# Appended, not put first: the txqueue measured is the one PYTHONPATH names.
sys.path.append(str(Path(__file__).resolve().parents[1]))

from benchmarks.bench import scratch_db
from txqueue.store.postgres.connection import QUERIES, connect_args

WARM = 200
INSERT = "INSERT INTO txqueue_tasks (id, queue, name, payload) VALUES (%s, 'q', 'n', '{}')"
CLAIM = {
    "names": ["n"],
    "worker_id": "w",
    "default_timeout": 60.0,
    "default_max_attempts": 3,
    "defaults": "{}",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=2000)
    parser.add_argument("--label", default="this checkout")
    args = parser.parse_args()
    admin = os.environ.get(
        "TXQUEUE_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    with scratch_db(admin) as url:
        times = measure(url, args.tasks)
    medians = " ".join(f"{k} {statistics.median(v) * 1000:.3f}" for k, v in times.items())
    print(f"{args.label}: median ms per statement: {medians}")


def measure(url: str, n: int) -> dict[str, list[float]]:
    conninfo, options = connect_args(url, "txqueue-bench-statements")
    times: dict[str, list[float]] = {"enqueue": [], "claim by id": [], "outcome": []}
    with psycopg.connect(conninfo, **options) as c:
        for i in range(WARM + n):
            task = uuid.uuid4()
            t0 = time.perf_counter()
            c.execute(INSERT, (task,), prepare=True)
            t1 = time.perf_counter()
            claimed = c.execute(QUERIES["claim_ids"], {"ids": [task], **CLAIM}, prepare=True)
            assert claimed.fetchall(), "the task was not claimed"
            t2 = time.perf_counter()
            c.execute(*outcome(task), prepare=True).fetchall()
            t3 = time.perf_counter()
            if i >= WARM:
                for key, spent in zip(times, (t1 - t0, t2 - t1, t3 - t2), strict=True):
                    times[key].append(spent)
    return times


def outcome(task: uuid.UUID) -> tuple[str, Any]:
    """The outcome write of this checkout: the transitions' statement, or the one before."""
    if "apply" in QUERIES:
        from txqueue.store.postgres.claims import FINISHED, transitions_doc
        from txqueue.store.records import Outcome
        from txqueue.store.transitions import ended

        doc = transitions_doc([ended(Outcome(task, 1, "w", "succeeded"))])
        # As the worker sends it, whichever flag this checkout's statement takes.
        flags = {"follows": False, "alone": True}
        return QUERIES["apply"], {"transitions": doc, "finished": FINISHED, **flags}
    entry: dict[str, Any] = {
        "id": str(task),
        "attempt": 1,
        "worker_id": "w",
        "state": "succeeded",
        "if_cancelled": "cancelled",
        "result": None,
        "error": None,
        "retry_in": None,
    }
    return QUERIES["record_outcomes"], (json.dumps([entry]),)


if __name__ == "__main__":
    main()
