"""The cleaner's statements: stale pending tasks to re-notify, expired leases to recover,
finished tasks to prune."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import psycopg

from ...task import Task
from ..base import (
    Moved,
    Recovered,
)
from .claims import _error_entry
from .connection import errors
from .enqueue import insert_task

_STALE = """
    state = 'pending' AND run_at <= now() - make_interval(secs => %(grace)s)
    AND (notified_at IS NULL OR notified_at <= now() - make_interval(secs => %(grace)s))
"""
STALE_QUEUES = f"SELECT DISTINCT queue FROM txqueue_tasks WHERE {_STALE}"


def stale_queues(conn: psycopg.Connection[Any], grace: float) -> list[str]:
    """Queues holding ripe tasks left pending longer than ``grace`` (and not re-notified
    within it)."""
    with errors("re-notify"):
        return [r[0] for r in conn.execute(STALE_QUEUES, {"grace": grace}).fetchall()]


RENOTIFY = f"""
WITH stale AS (
    SELECT id FROM txqueue_tasks
    WHERE {_STALE} AND queue = ANY(%(queues)s)
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE txqueue_tasks AS t SET notified_at = now()
FROM stale WHERE t.id = stale.id
RETURNING t.id, t.queue, pg_current_xact_id()::text
"""


def renotify(
    conn: psycopg.Connection[Any], grace: float, queues: Sequence[str], limit: int
) -> list[Moved]:
    """Mark up to ``limit`` stale tasks of ``queues`` as re-notified now; returns their
    (id, queue, xid of this marking). Rows another cleaner holds are skipped."""
    params = {"grace": grace, "queues": list(queues), "limit": limit}
    with errors("re-notify"):
        rows = conn.execute(RENOTIFY, params).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


# The UPDATE re-checks `state = 'running' AND expires_at < now()` itself, so a task whose
# outcome was written a moment ago is never overwritten (River #1302). The rows stay
# locked from the SELECT to the commit, so `next` is decided on what is written.
RECOVER_EXPIRED = f"""
WITH expired AS (
    SELECT id, coalesce(on_lease_expired ->> 'policy', 'retry') AS policy,
           CASE WHEN cancel_requested THEN 'cancelled'
                WHEN coalesce(on_lease_expired ->> 'policy', 'retry') = 'retry'
                     AND attempts < coalesce(max_attempts, %(default_max_attempts)s)
                THEN 'pending'
                ELSE 'failed' END AS next
    FROM txqueue_tasks
    WHERE state = 'running' AND expires_at < now()
    ORDER BY expires_at
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE txqueue_tasks AS t
SET state = e.next,
    run_at = CASE WHEN e.next = 'pending' THEN now() ELSE t.run_at END,
    finished_at = CASE WHEN e.next = 'pending' THEN NULL ELSE now() END,
    expires_at = NULL,
    errors = t.errors || jsonb_build_array({
    _error_entry(
        "txqueue.LeaseExpired",
        "format('lease expired, worker lost: %%s stopped heartbeating', t.worker_id)",
    )
}),
    updated_at = now()
FROM expired AS e
WHERE t.id = e.id AND t.state = 'running' AND t.expires_at < now()
RETURNING t.id, t.queue, t.name, t.payload, t.state, t.attempts, e.policy, t.worker_id,
          pg_current_xact_id()::text, t.on_lease_expired
"""


def recover_expired(
    conn: psycopg.Connection[Any], limit: int, default_max_attempts: int
) -> list[Recovered]:
    """Take back up to ``limit`` running tasks whose lease expired, each by its policy:
    retry (back to pending, the lost attempt counted), abandon (failed), or compensate
    (failed, and the compensating task enqueued in the same transaction)."""
    params = {"limit": limit, "default_max_attempts": default_max_attempts}
    out = []
    with errors("recover expired leases"), conn.transaction():
        rows = conn.execute(RECOVER_EXPIRED, params).fetchall()
        for *row, spec in rows:
            recovered = Recovered(*row)
            if recovered.policy == "compensate" and recovered.state == "failed":
                lost = {"task_id": str(recovered.id), "name": recovered.name}
                comp = Task(
                    spec["name"], {**lost, "payload": recovered.payload}, queue=spec["queue"]
                )
                recovered = replace(recovered, compensation=(comp.queue, insert_task(conn, comp)))
            out.append(recovered)
    return out


PRUNE = """
WITH old AS (
    SELECT id FROM txqueue_tasks
    WHERE state = %(state)s AND finished_at < now() - make_interval(secs => %(age)s)
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM txqueue_tasks AS t USING old WHERE t.id = old.id
"""


def prune(conn: psycopg.Connection[Any], state: str, age: float, limit: int) -> int:
    """Delete up to ``limit`` tasks in ``state`` finished more than ``age`` seconds ago."""
    with errors("prune"):
        return conn.execute(PRUNE, {"state": state, "age": age, "limit": limit}).rowcount
