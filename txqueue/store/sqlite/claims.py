"""The worker's statements: claims, the look at a wake-up the claim missed, outcomes,
leases, release and cancellation flags."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ...errors import StoreError
from ..base import (
    ClaimDefaults,
    Claimed,
    Outcome,
    Why,
)
from .connection import (
    _APPEND_ERROR,
    _error_entry,
    _ids,
    _immediate,
    _time,
    clock,
    errors,
)

_PICK_COLUMNS = """
id, queue, name, payload, attempts, max_attempts, timeout, max(created_at, run_at), trace_context
"""
PICK_IDS = f"""
SELECT {_PICK_COLUMNS} FROM txqueue_tasks
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'pending' AND run_at <= :now
  AND name IN (SELECT key FROM json_each(:defaults))
ORDER BY priority DESC, run_at, id
"""
PICK_RIPE = f"""
SELECT {_PICK_COLUMNS} FROM txqueue_tasks
WHERE state = 'pending' AND queue = :queue AND run_at <= :now
  AND name IN (SELECT key FROM json_each(:defaults))
ORDER BY priority DESC, run_at, id
LIMIT :limit
"""
CLAIM = """
UPDATE txqueue_tasks
SET state = 'running', start_time = ?, attempts = ?, worker_id = ?, expires_at = ?,
    max_attempts = ?, on_lease_expired = ?, updated_at = ?
WHERE id = ?
"""


def _first(*values: Any) -> Any:
    return next(v for v in values if v is not None)


def _claim(
    conn: sqlite3.Connection,
    action: str,
    pick: str,
    params: dict[str, Any],
    worker_id: str,
    defaults: ClaimDefaults,
) -> list[Claimed]:
    claimed, updates = [], []
    with errors(action), _immediate(conn):
        now = clock.now()
        params = {**params, "now": now, "defaults": defaults.per_name_json}
        picked = conn.execute(pick, params).fetchall()
        for task_id, queue, name, payload, attempts, max_attempts, timeout, ripe, trace in picked:
            mine = defaults.per_name.get(name, {})
            timeout = _first(timeout, mine.get("timeout"), defaults.timeout)
            max_attempts = _first(max_attempts, mine.get("max_attempts"), defaults.max_attempts)
            policy = mine.get("on_lease_expired")
            updates.append(
                (
                    now,
                    attempts + 1,
                    worker_id,
                    now + timeout,
                    max_attempts,
                    None if policy is None else json.dumps(policy),
                    now,
                    task_id,
                )
            )
            claimed.append(
                Claimed(
                    uuid.UUID(task_id),
                    queue,
                    name,
                    json.loads(payload),
                    attempts + 1,
                    max_attempts,
                    timeout,
                    now - ripe,
                    trace,
                )
            )
        conn.executemany(CLAIM, updates)
    return claimed


def claim_ids(
    conn: sqlite3.Connection,
    ids: Sequence[uuid.UUID],
    worker_id: str,
    defaults: ClaimDefaults,
) -> list[Claimed]:
    """Claim the given tasks that are pending, ripe and known to this worker (named in
    ``defaults``), in one transaction."""
    params = {"ids": _ids(ids)}
    return _claim(conn, "claim", PICK_IDS, params, worker_id, defaults)


def claim_ripe(
    conn: sqlite3.Connection,
    queue: str,
    limit: int,
    worker_id: str,
    defaults: ClaimDefaults,
) -> list[Claimed]:
    """The idle poll: claim up to ``limit`` ripe tasks of a queue that this worker knows,
    best priority first."""
    params = {"queue": queue, "limit": limit}
    return _claim(conn, "poll", PICK_RIPE, params, worker_id, defaults)


ROWS_BY_ID = """
SELECT id, state, run_at, name FROM txqueue_tasks WHERE id IN (SELECT value FROM json_each(?))
"""


def why_unclaimed(
    conn: sqlite3.Connection, items: Sequence[tuple[uuid.UUID, str | None]]
) -> dict[uuid.UUID, Why]:
    """The rows of ids a claim did not get. SQLite keeps no transaction status, so an
    invisible row reads as not committed yet, and the worker waits for it a while."""
    with errors("claim check"):
        rows = conn.execute(ROWS_BY_ID, (_ids(i for i, _ in items),)).fetchall()
    now = clock.now()
    found = {uuid.UUID(r[0]): (r[1], r[2], r[3]) for r in rows}
    out = {}
    for task_id, _ in items:
        state, run_at, name = found.get(task_id, (None, None, None))
        ripe = run_at is not None and run_at <= now
        out[task_id] = Why(None, state, _time(run_at), ripe, name)
    return out


# --- outcomes and leases ---------------------------------------------------------------

# A retry of a task whose cancellation was requested meanwhile ends it `cancelled` instead.
RECORD_OUTCOME = f"""
UPDATE txqueue_tasks
SET state = CASE WHEN :state = 'pending' AND cancel_requested THEN 'cancelled'
                 ELSE :state END,
    result = CASE WHEN :state = 'succeeded' THEN :result ELSE result END,
    errors = CASE WHEN :error IS NULL THEN errors ELSE {_APPEND_ERROR} END,
    run_at = CASE WHEN :state = 'pending' AND NOT cancel_requested
                  THEN :now + :retry_in ELSE run_at END,
    finished_at = CASE WHEN :state = 'pending' AND NOT cancel_requested THEN NULL
                       ELSE :now END,
    expires_at = NULL,
    updated_at = :now
WHERE id = :id AND attempts = :attempt AND worker_id = :worker_id AND state = 'running'
RETURNING state
"""


def record_outcomes(conn: sqlite3.Connection, outcomes: Sequence[Outcome]) -> dict[uuid.UUID, str]:
    """Write outcomes in one transaction, each fenced on (id, attempt, worker, running).

    Returns the state written for each id; an outcome missing from it was fenced out.
    """
    written = {}
    with errors("record outcome"), _immediate(conn):
        now = clock.now()
        for o in outcomes:
            state = _record(conn, o, now)
            if state is not None:
                written[o.id] = state
    return written


def _record(conn: sqlite3.Connection, o: Outcome, now: float) -> str | None:
    row = conn.execute(
        RECORD_OUTCOME,
        {
            "id": str(o.id),
            "attempt": o.attempt,
            "worker_id": o.worker_id,
            "state": o.state,
            "result": o.result,
            "error": None if o.error is None else json.dumps(o.error),
            "retry_in": o.retry_in,
            "now": now,
        },
    ).fetchone()
    return None if row is None else str(row[0])


@contextmanager
def atomic(conn: sqlite3.Connection) -> Iterator[None]:
    """The transaction of an atomic task, on a connection of the worker's: the handler's
    work and the task's success commit together. The write lock is taken first, as for
    every write of txqueue's (a deferred one could not always be upgraded), and held until
    the commit: while an atomic task runs, the database's other writers wait."""
    handler = False
    try:
        with _immediate(conn):
            handler = True
            yield
            handler = False
    except sqlite3.Error:
        if handler:  # the handler's own statement: raised as it is, its work rolled back
            raise
        with errors("atomic task"):
            raise


def record_atomic(conn: sqlite3.Connection, outcome: Outcome) -> bool:
    """Write an atomic task's success in its open transaction, fenced as every outcome is;
    False if the fence failed (the lease was lost): the caller must roll back."""
    if not conn.in_transaction:
        raise StoreError(
            "atomic task: the handler ended the transaction on ctx.conn itself; "
            "its success was not written"
        )
    with errors("record outcome"):
        return _record(conn, outcome, clock.now()) is not None


EXTEND_LEASE = """
UPDATE txqueue_tasks SET expires_at = ?, updated_at = ?
WHERE id = ? AND attempts = ? AND worker_id = ? AND state = 'running'
RETURNING id
"""


def extend_leases(
    conn: sqlite3.Connection,
    worker_id: str,
    leases: Sequence[tuple[uuid.UUID, int, float]],
) -> set[uuid.UUID]:
    """Heartbeat: push back the lease of each (id, attempt, timeout) this worker still holds."""
    if not leases:
        return set()
    held = set()
    with errors("heartbeat"), _immediate(conn):
        now = clock.now()
        for task_id, attempt, timeout in leases:
            params = (now + timeout, now, str(task_id), attempt, worker_id)
            if conn.execute(EXTEND_LEASE, params).fetchone() is not None:
                held.add(task_id)
    return held


HELD = """
SELECT cancel_requested, coalesce(json_extract(on_lease_expired, '$.policy'), 'retry')
FROM txqueue_tasks
WHERE id = ? AND attempts = ? AND worker_id = ? AND state = 'running'
"""
RELEASE = f"""
UPDATE txqueue_tasks
SET state = :next,
    run_at = CASE WHEN :next = 'pending' THEN :now ELSE run_at END,
    finished_at = CASE WHEN :next = 'cancelled' THEN :now END,
    expires_at = CASE WHEN :next = 'running' THEN :now END,
    errors = CASE WHEN :next = 'running' THEN errors ELSE {_APPEND_ERROR} END,
    updated_at = :now
WHERE id = :id AND attempts = :attempt AND worker_id = :worker_id AND state = 'running'
"""


def release(
    conn: sqlite3.Connection, worker_id: str, held: Sequence[tuple[uuid.UUID, int]]
) -> dict[uuid.UUID, str]:
    """Give up the (id, attempt) tasks a stopping worker will not finish: back to `pending`
    by the retry policy, or to the cleaner at once for the others. Returns id -> state."""
    out: dict[uuid.UUID, str] = {}
    if not held:
        return out
    message = "the worker stopped before the task finished; released"
    with errors("release"), _immediate(conn):
        now = clock.now()
        for task_id, attempt in held:
            row = conn.execute(HELD, (str(task_id), attempt, worker_id)).fetchone()
            if row is None:
                continue
            cancelled, policy = row
            # Only the retry policy goes back to pending: abandon and compensate leave the
            # lease ended now, and the cleaner applies the policy on its next run.
            nxt = "cancelled" if cancelled else "pending" if policy == "retry" else "running"
            entry = _error_entry(attempt, worker_id, "txqueue.WorkerStopped", message)
            params = {
                "next": nxt,
                "now": now,
                "error": entry,
                "id": str(task_id),
                "attempt": attempt,
                "worker_id": worker_id,
            }
            if conn.execute(RELEASE, params).rowcount:
                out[task_id] = nxt
    return out


GIVE_BACK = """
UPDATE txqueue_tasks
SET state = CASE WHEN cancel_requested THEN 'cancelled' ELSE 'pending' END,
    finished_at = CASE WHEN cancel_requested THEN :now END,
    attempts = attempts - 1,
    start_time = CASE WHEN attempts = 1 THEN NULL ELSE start_time END,
    worker_id = NULL,
    expires_at = NULL,
    updated_at = :now
WHERE id = :id AND attempts = :attempt AND worker_id = :worker_id AND state = 'running'
"""


def give_back(
    conn: sqlite3.Connection, worker_id: str, held: Sequence[tuple[uuid.UUID, int]]
) -> int:
    """Return the (id, attempt) tasks a worker claimed and never started to the state they
    were claimed from: no attempt began, so none is counted. Returns how many."""
    if not held:
        return 0
    with errors("give back"), _immediate(conn):
        now = clock.now()
        rows = [{"now": now, "id": str(i), "attempt": a, "worker_id": worker_id} for i, a in held]
        return conn.executemany(GIVE_BACK, rows).rowcount  # summed over the rows


CANCEL_REQUESTED = """
SELECT id FROM txqueue_tasks
WHERE id IN (SELECT value FROM json_each(?)) AND worker_id = ? AND state = 'running'
  AND cancel_requested
"""


def cancel_requested(
    conn: sqlite3.Connection, worker_id: str, ids: Sequence[uuid.UUID]
) -> set[uuid.UUID]:
    """Which of this worker's running tasks someone asked to cancel."""
    params = (_ids(ids), worker_id)
    with errors("cancel check"):
        return {uuid.UUID(r[0]) for r in conn.execute(CANCEL_REQUESTED, params)}
