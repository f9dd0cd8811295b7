"""Helpers for integration tests: a worker on a thread, waiting for a condition, reading rows."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg

import txqueue


def wait_until(predicate: Callable[[], bool], timeout: float = 15.0, every: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(every)


@contextlib.contextmanager
def running(worker: txqueue.Worker) -> Iterator[txqueue.Worker]:
    """Run ``worker`` on a thread until the block ends; re-raise what the worker raised."""
    failure: list[BaseException] = []

    def target() -> None:
        try:
            worker.run()
        except BaseException as exc:  # handed to the test thread
            failure.append(exc)

    thread = threading.Thread(target=target, name="test-worker")
    thread.start()
    try:
        assert worker.wait_consuming(10), "worker did not start consuming"
        yield worker
    finally:
        worker.stop()
        thread.join(30)
    assert not thread.is_alive(), "worker did not stop"
    if failure:
        raise failure[0]


def rows(db_url: str, where: str = "true", params: tuple[Any, ...] = ()) -> list[dict[str, Any]]:
    with psycopg.connect(db_url, row_factory=psycopg.rows.dict_row) as c:
        return c.execute(
            f"SELECT * FROM txqueue_tasks WHERE {where} ORDER BY created_at, id", params
        ).fetchall()


def count(db_url: str, where: str = "true") -> int:
    with psycopg.connect(db_url) as c:
        row = c.execute(f"SELECT count(*) FROM txqueue_tasks WHERE {where}").fetchone()
    assert row is not None
    return int(row[0])
