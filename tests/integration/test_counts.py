"""A worker's counts are exact: many threads count at once, and none of their additions
is lost."""

from __future__ import annotations

import itertools
from contextlib import closing
from typing import Any

import txqueue
from txqueue import Task

from .helpers import connect, count

TASKS = 20_000
THREADS = 32


def test_a_drain_of_20000_tasks_on_32_threads_counts_every_one(pg_url: str, queue: str) -> None:
    registry = txqueue.Registry()
    runs = itertools.count()  # next() on it is atomic: the handlers' own tally

    # Every 40th task fails for good, the one after it fails once and then succeeds.
    @registry.task("t", queue=queue, max_attempts=2, backoff=0)
    def handle(payload: dict[str, Any], ctx: txqueue.TaskContext) -> None:
        next(runs)
        kind = payload["i"] % 40
        if kind == 0 or (kind == 1 and ctx.attempt == 1):
            raise ValueError("planned")

    with closing(connect(pg_url)) as conn:
        tasks = [
            Task("t", {"i": i}, queue=queue, max_attempts=1 if i % 40 == 0 else None)
            for i in range(TASKS)
        ]
        txqueue.enqueue_many(conn, tasks)
        conn.commit()

    worker = txqueue.Worker(registry, database_url=pg_url, amqp_url=None, concurrency=THREADS)
    worker.run(burst=True)

    failing = TASKS // 40
    assert count(pg_url, "state = 'succeeded'") == TASKS - failing
    assert next(runs) == TASKS + failing  # the planned retries ran once more each
    stats = worker.stats
    assert stats["claimed"] == TASKS + failing
    assert stats["succeeded"] == TASKS - failing
    assert stats["retried"] == failing
    assert stats["failed"] == failing
    assert stats["fenced_out"] == stats["unrecorded"] == stats["released"] == 0
