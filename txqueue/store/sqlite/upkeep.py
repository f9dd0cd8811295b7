"""The cleaner's statements: stale pending tasks to re-notify, expired leases to recover,
finished tasks to prune."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Sequence
from dataclasses import replace

from ...task import Task
from ..base import (
    Moved,
    Recovered,
)
from .connection import _APPEND_ERROR, _error_entry, _immediate, _moved, clock, errors
from .enqueue import insert_task

_STALE = """
    state = 'pending' AND run_at <= :before
    AND (notified_at IS NULL OR notified_at <= :before)
"""
STALE_QUEUES = f"SELECT DISTINCT queue FROM txqueue_tasks WHERE {_STALE}"
RENOTIFY = f"""
UPDATE txqueue_tasks SET notified_at = :now
WHERE id IN (
    SELECT id FROM txqueue_tasks
    WHERE {_STALE} AND queue IN (SELECT value FROM json_each(:queues))
    LIMIT :limit
)
RETURNING id, queue
"""


def stale_queues(conn: sqlite3.Connection, grace: float) -> list[str]:
    """Queues holding ripe tasks left pending longer than ``grace`` (and not re-notified
    within it)."""
    with errors("re-notify"):
        return [r[0] for r in conn.execute(STALE_QUEUES, {"before": clock.now() - grace})]


def renotify(
    conn: sqlite3.Connection, grace: float, queues: Sequence[str], limit: int
) -> list[Moved]:
    """Mark up to ``limit`` stale tasks of ``queues`` as re-notified now; returns them."""
    now = clock.now()
    params = {"now": now, "before": now - grace, "queues": json.dumps(list(queues)), "limit": limit}
    with errors("re-notify"):
        return _moved(conn.execute(RENOTIFY, params).fetchall())


EXPIRED = """
SELECT id, queue, name, payload, attempts, worker_id, cancel_requested,
       coalesce(max_attempts, ?), on_lease_expired
FROM txqueue_tasks
WHERE state = 'running' AND expires_at < ?
ORDER BY expires_at
LIMIT ?
"""
RECOVER = f"""
UPDATE txqueue_tasks
SET state = :next,
    run_at = CASE WHEN :next = 'pending' THEN :now ELSE run_at END,
    finished_at = CASE WHEN :next = 'pending' THEN NULL ELSE :now END,
    expires_at = NULL,
    errors = {_APPEND_ERROR},
    updated_at = :now
WHERE id = :id AND state = 'running' AND expires_at < :now
"""
# Each UPDATE re-checks what the SELECT found, as on PostgreSQL, though the write lock held
# since BEGIN IMMEDIATE already keeps other writers out: the fence must not rest on that.


def recover_expired(
    conn: sqlite3.Connection, limit: int, default_max_attempts: int
) -> list[Recovered]:
    """Take back up to ``limit`` running tasks whose lease expired, each by its policy:
    retry (back to pending, the lost attempt counted), abandon (failed), or compensate
    (failed, and the compensating task enqueued in the same transaction)."""
    out = []
    with errors("recover expired leases"), _immediate(conn):
        now = clock.now()
        rows = conn.execute(EXPIRED, (default_max_attempts, now, limit)).fetchall()
        for task_id, queue, name, payload, attempts, worker, cancelled, most, spec in rows:
            policy_spec = json.loads(spec) if spec else {}
            policy = policy_spec.get("policy", "retry")
            if cancelled:
                nxt = "cancelled"
            elif policy == "retry" and attempts < most:
                nxt = "pending"
            else:
                nxt = "failed"
            message = f"lease expired, worker lost: {worker} stopped heartbeating"
            entry = _error_entry(attempts, worker, "txqueue.LeaseExpired", message)
            params = {"next": nxt, "now": now, "error": entry, "id": task_id}
            if not conn.execute(RECOVER, params).rowcount:
                continue
            recovered = Recovered(
                uuid.UUID(task_id),
                queue,
                name,
                json.loads(payload),
                nxt,
                attempts,
                policy,
                worker,
                None,
            )
            if policy == "compensate" and nxt == "failed":
                lost = {"task_id": task_id, "name": name, "payload": recovered.payload}
                comp = Task(policy_spec["name"], lost, queue=policy_spec["queue"])
                recovered = replace(recovered, compensation=(comp.queue, insert_task(conn, comp)))
            out.append(recovered)
    return out


PRUNE = """
DELETE FROM txqueue_tasks WHERE id IN (
    SELECT id FROM txqueue_tasks WHERE state = ? AND finished_at < ? LIMIT ?
)
"""


def prune(conn: sqlite3.Connection, state: str, age: float, limit: int) -> int:
    """Delete up to ``limit`` tasks in ``state`` finished more than ``age`` seconds ago."""
    with errors("prune"):
        return conn.execute(PRUNE, (state, clock.now() - age, limit)).rowcount
