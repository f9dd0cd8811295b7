"""The previous release's producer, run with its code on ``PYTHONPATH``: each task is enqueued
in a business transaction that also writes a row of ``upgrade_orders`` (the order the task
is for), so the orders are the committed tasks, whatever the producer saw.

    python -m tests.upgrade.produce fill         the tasks in every state, before the upgrade
    python -m tests.upgrade.produce stream STOP  a task every few ms until the file STOP is
                                                 there; prints "<committed> <failed>"
    python -m tests.upgrade.produce unique KEY   one task with a unique key; prints its id
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

import txqueue
from txqueue import Task

from .apps import NEW_QUEUE, OLD_QUEUE

STREAM_LIMIT = 120.0  # seconds: a stream whose stop never comes ends by itself
UNIQUE_KEY_TASK = "upgrade.parked"


def _connect() -> psycopg.Connection[Any]:
    return psycopg.connect(os.environ["TXQUEUE_DATABASE_URL"])


def _order(conn: psycopg.Connection[Any], kind: str, task: Task) -> uuid.UUID:
    task_id = txqueue.enqueue(conn, task)
    conn.execute("INSERT INTO upgrade_orders (task_id, kind) VALUES (%s, %s)", (task_id, kind))
    return task_id


def fill() -> None:
    """Tasks meant to be, at the upgrade, succeeded, failed for good, retried, running,
    pending (ripe, and due later), and cancelled; and one holding a unique key."""
    with _connect() as conn:
        for n in range(5):
            _order(conn, "done", Task("upgrade.record", {"n": n}, queue=OLD_QUEUE))
        _order(conn, "doomed", Task("upgrade.fail", queue=OLD_QUEUE))
        _order(conn, "flaky", Task("upgrade.flaky", queue=OLD_QUEUE))
        _order(conn, "stubborn", Task("upgrade.stubborn", queue=OLD_QUEUE))
        _order(conn, "slow", Task("upgrade.slow", queue=OLD_QUEUE))
        for n in range(3):
            _order(conn, "delayed", Task("upgrade.record", {"n": n}, queue=OLD_QUEUE, delay=15.0))
            _order(conn, "parked", Task("upgrade.parked", {"n": n}, queue=NEW_QUEUE))
        _order(conn, "held", Task(UNIQUE_KEY_TASK, queue=NEW_QUEUE, unique_key="upgrade-key"))
        doomed = _order(conn, "cancelled", Task("upgrade.record", queue=OLD_QUEUE, delay=3600.0))
        conn.commit()
        txqueue.cancel(conn, doomed)
        conn.commit()


def stream(stop: Path) -> None:
    committed = failed = 0
    deadline = time.monotonic() + STREAM_LIMIT
    with _connect() as conn:
        while not stop.exists() and time.monotonic() < deadline:
            try:
                _order(conn, "stream", Task("upgrade.record", {"n": committed}, queue=OLD_QUEUE))
                conn.commit()
                committed += 1
            except Exception as exc:  # the promise under test: say so, and go on
                conn.rollback()
                failed += 1
                print(f"enqueue failed: {exc!r}", file=sys.stderr, flush=True)
            time.sleep(0.05)
    print(committed, failed, flush=True)


def unique(key: str) -> None:
    with _connect() as conn:
        task_id = txqueue.enqueue(conn, Task(UNIQUE_KEY_TASK, queue=NEW_QUEUE, unique_key=key))
        conn.commit()
    print(task_id, flush=True)


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    if command == "fill":
        fill()
    elif command == "stream":
        stream(Path(args[0]))
    else:
        unique(args[0])
