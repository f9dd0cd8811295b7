"""The workers running now, kept in txqueue_workers for status."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from ..base import (
    WORKER_ALIVE_WITHIN,
    WORKER_FORGOTTEN_AFTER,
    Unhandled,
)
from .connection import _immediate, clock, errors

WORKER_SEEN = """
INSERT INTO txqueue_workers (worker_id, queues, names, started_at, seen_at)
VALUES (:id, :queues, :names, :now, :now)
ON CONFLICT (worker_id) DO UPDATE
SET queues = excluded.queues, names = excluded.names, seen_at = excluded.seen_at
"""

FORGET_WORKERS = "DELETE FROM txqueue_workers WHERE seen_at < ?"
WORKER_GONE = "DELETE FROM txqueue_workers WHERE worker_id = ?"
LIVE_WORKERS = "SELECT count(*) FROM txqueue_workers WHERE seen_at > ?"

UNHANDLED = """
SELECT t.queue, t.name, count(*)
FROM txqueue_tasks t
WHERE t.state = 'pending' AND NOT EXISTS (
    SELECT 1 FROM txqueue_workers w
    WHERE w.seen_at > :since
      AND EXISTS (SELECT 1 FROM json_each(w.queues) WHERE value = t.queue)
      AND EXISTS (SELECT 1 FROM json_each(w.names) WHERE value = t.name))
GROUP BY t.queue, t.name
ORDER BY t.queue, t.name
"""


def worker_seen(
    conn: sqlite3.Connection, worker_id: str, queues: Sequence[str], names: Sequence[str]
) -> None:
    """A running worker says it is alive, and which queues and task names it serves."""
    now = clock.now()
    params = {"id": worker_id, "queues": json.dumps(list(queues)), "names": json.dumps(list(names))}
    with errors("worker presence"), _immediate(conn):
        conn.execute(FORGET_WORKERS, (now - WORKER_FORGOTTEN_AFTER,))
        conn.execute(WORKER_SEEN, {**params, "now": now})


def worker_gone(conn: sqlite3.Connection, worker_id: str) -> None:
    """A worker that stops deletes its row."""
    with errors("worker presence"), _immediate(conn):
        conn.execute(WORKER_GONE, (worker_id,))


def unhandled(conn: sqlite3.Connection) -> Unhandled:
    """The workers alive now, and the pending tasks none of them has a handler for."""
    since = clock.now() - WORKER_ALIVE_WITHIN
    with errors("status"):
        live = conn.execute(LIVE_WORKERS, (since,))
        count_live = live.fetchone()[0]
        rows = conn.execute(UNHANDLED, {"since": since}).fetchall()
    return count_live, [(r[0], r[1], r[2]) for r in rows]
