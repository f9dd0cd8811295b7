"""The workers running now, kept in txqueue_workers for status."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import psycopg

from ..base import (
    WORKER_ALIVE_WITHIN,
    WORKER_FORGOTTEN_AFTER,
    Unhandled,
)
from .connection import errors

WORKER_SEEN = """
INSERT INTO txqueue_workers (worker_id, queues, names) VALUES (%s, %s::jsonb, %s::jsonb)
ON CONFLICT (worker_id) DO UPDATE
SET queues = excluded.queues, names = excluded.names, seen_at = now()
"""

FORGET_WORKERS = "DELETE FROM txqueue_workers WHERE seen_at < now() - make_interval(secs => %s)"
WORKER_GONE = "DELETE FROM txqueue_workers WHERE worker_id = %s"

LIVE_WORKERS = """
SELECT count(*)::int FROM txqueue_workers WHERE seen_at > now() - make_interval(secs => %s)
"""

UNHANDLED = """
SELECT t.queue, t.name, count(*)::int
FROM txqueue_tasks t
WHERE t.state = 'pending' AND NOT EXISTS (
    SELECT 1 FROM txqueue_workers w
    WHERE w.seen_at > now() - make_interval(secs => %s)
      AND w.queues ? t.queue AND w.names ? t.name)
GROUP BY t.queue, t.name
ORDER BY t.queue, t.name
"""


def worker_seen(
    conn: psycopg.Connection[Any], worker_id: str, queues: Sequence[str], names: Sequence[str]
) -> None:
    """A running worker says it is alive, and which queues and task names it serves."""
    with errors("worker presence"), conn.transaction():
        conn.execute(FORGET_WORKERS, (WORKER_FORGOTTEN_AFTER,))
        conn.execute(WORKER_SEEN, (worker_id, json.dumps(list(queues)), json.dumps(list(names))))


def worker_gone(conn: psycopg.Connection[Any], worker_id: str) -> None:
    """A worker that stops deletes its row."""
    with errors("worker presence"):
        conn.execute(WORKER_GONE, (worker_id,))


def unhandled(conn: psycopg.Connection[Any]) -> Unhandled:
    """The workers alive now, and the pending tasks none of them has a handler for."""
    with errors("status"):
        live = conn.execute(LIVE_WORKERS, (WORKER_ALIVE_WITHIN,)).fetchone()
        rows = conn.execute(UNHANDLED, (WORKER_ALIVE_WITHIN,)).fetchall()
    return (live[0] if live else 0), [(r[0], r[1], r[2]) for r in rows]
