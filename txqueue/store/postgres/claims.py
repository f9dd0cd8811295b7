"""The worker's statements: claims, the commit check for a wake-up the claim missed,
outcomes, leases, release and cancellation flags."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg

from ..base import (
    ClaimDefaults,
    Claimed,
    Outcome,
    Why,
)
from .connection import errors
from .waiting import FINISHED_CHANNEL

# Returned in the order the tasks are to start: a worker runs a claim's tasks in turn.
_CLAIM_SET = """, claimed AS (
UPDATE txqueue_tasks AS t
SET state = 'running',
    start_time = now(),
    attempts = t.attempts + 1,
    worker_id = %(worker_id)s,
    expires_at = now() + make_interval(secs => coalesce(
        t.timeout, (d.v ->> 'timeout')::float8, %(default_timeout)s)),
    max_attempts = coalesce(t.max_attempts, (d.v ->> 'max_attempts')::int,
                            %(default_max_attempts)s),
    on_lease_expired = d.v -> 'on_lease_expired',
    updated_at = now()
FROM picked LEFT JOIN jsonb_each(%(defaults)s::jsonb) AS d(name, v) ON d.name = picked.name
WHERE t.id = picked.id
RETURNING t.id, t.queue, t.name, t.payload::text AS payload, t.attempts, t.max_attempts,
          extract(epoch FROM t.expires_at - now())::float8 AS lease, t.priority, t.run_at,
          extract(epoch FROM now() - greatest(t.created_at, t.run_at))::float8 AS waited,
          t.trace_context::text AS trace_context
)
SELECT id, queue, name, payload, attempts, max_attempts, lease, waited, trace_context
FROM claimed
ORDER BY priority DESC, run_at, id
"""

# The rows are found by id alone: with `state = 'pending'` here, a table filled faster than
# autovacuum analyzes it (a burst, a backlog) gets its partial indexes, which the planner
# believes tiny, scanned whole on every claim. So rows in any state are locked, and waiting
# for one that another worker's outcome write holds could deadlock with it: locked rows are
# skipped instead, and the worker asks about their wake-ups again as it does for a commit
# it has not seen yet. The state is checked on what the lock returns, the row's latest
# version, so a row another worker just claimed is dropped.
CLAIM_IDS = (
    """
WITH locked AS (
    SELECT id, name, state, run_at FROM txqueue_tasks
    WHERE id = ANY(%(ids)s)
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT id, name FROM locked
    WHERE state = 'pending' AND run_at <= now() AND name = ANY(%(names)s)
)"""
    + _CLAIM_SET
)

# One queue per statement: with `queue = ANY(...)` PostgreSQL cannot read the index in
# priority order and sorts every pending row instead (guarded by test_plans.py).
CLAIM_RIPE = (
    """
WITH picked AS (
    SELECT id, name FROM txqueue_tasks
    WHERE state = 'pending' AND queue = %(queue)s AND run_at <= now()
      AND name = ANY(%(names)s)
    ORDER BY priority DESC, run_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)"""
    + _CLAIM_SET
)


def _claimed(rows: Iterable[tuple[Any, ...]]) -> list[Claimed]:
    # The payload comes as text: json.loads of a str skips psycopg's per-value bytes path.
    return [Claimed(i, q, n, json.loads(p), a, m, t, w, c) for i, q, n, p, a, m, t, w, c in rows]


def _claim_params(worker_id: str, defaults: ClaimDefaults) -> dict[str, Any]:
    return {
        "worker_id": worker_id,
        "names": defaults.names,
        "defaults": defaults.per_name_json,
        "default_timeout": defaults.timeout,
        "default_max_attempts": defaults.max_attempts,
    }


def claim_ids(
    conn: psycopg.Connection[Any],
    ids: Sequence[uuid.UUID],
    worker_id: str,
    defaults: ClaimDefaults,
) -> list[Claimed]:
    """Claim the given tasks that are pending, ripe and known to this worker (named in
    ``defaults``), in one statement."""
    params = {"ids": list(ids), **_claim_params(worker_id, defaults)}
    with errors("claim"):
        return _claimed(conn.execute(CLAIM_IDS, params, prepare=True).fetchall())


def claim_ripe(
    conn: psycopg.Connection[Any],
    queue: str,
    limit: int,
    worker_id: str,
    defaults: ClaimDefaults,
) -> list[Claimed]:
    """The idle poll: claim up to ``limit`` ripe tasks of a queue that this worker knows,
    best priority first, skipping rows other workers hold."""
    params = {"queue": queue, "limit": limit, **_claim_params(worker_id, defaults)}
    with errors("poll"):
        return _claimed(conn.execute(CLAIM_RIPE, params, prepare=True).fetchall())


XACT_STATUS = """
SELECT x.xid, pg_xact_status(x.xid::xid8) FROM unnest(%s::text[]) AS x(xid)
"""

ROWS_BY_ID = """
SELECT id, state, run_at, run_at <= now(), name FROM txqueue_tasks WHERE id = ANY(%s)
"""


def why_unclaimed(
    conn: psycopg.Connection[Any], items: Sequence[tuple[uuid.UUID, str | None]]
) -> dict[uuid.UUID, Why]:
    """For ids a claim did not get: the enqueuing transaction's status, then the row.

    Two statements in one pipelined round trip, status first: a commit that lands
    between them then shows as a visible row, never as "committed but absent".
    """
    xids = sorted({x for _, x in items if x is not None and x.isdigit()})
    ids = [i for i, _ in items]
    with errors("claim check"):
        try:
            with conn.pipeline():
                status_cur = conn.execute(XACT_STATUS, (xids,))
                rows_cur = conn.execute(ROWS_BY_ID, (ids,))
            status = dict(status_cur.fetchall())
        except psycopg.errors.InvalidParameterValue:
            # A transaction id from the future (a forged or foreign message) fails the
            # whole statement: ask one by one, the bad ones reading as unknown.
            status = {x: _one_status(conn, x) for x in xids}
            rows_cur = conn.execute(ROWS_BY_ID, (ids,))
        rows = {r[0]: r[1:] for r in rows_cur.fetchall()}
    out = {}
    for task_id, xid in items:
        state, run_at, ripe, name = rows.get(task_id, (None, None, False, None))
        out[task_id] = Why(status.get(xid) if xid else None, state, run_at, bool(ripe), name)
    return out


def _one_status(conn: psycopg.Connection[Any], xid: str) -> str | None:
    try:
        row = conn.execute(XACT_STATUS, ([xid],)).fetchone()
    except psycopg.errors.InvalidParameterValue:
        return None
    return None if row is None else row[1]


# --- outcomes and leases ---------------------------------------------------------------

# A retry of a task whose cancellation was requested meanwhile ends it `cancelled` instead.
# The ids of the tasks it finishes go to `txqueue.wait` callers as notifications, 200 ids
# to one (a payload holds at most 8,000 bytes), sent by PostgreSQL when the write commits;
# the condition on `notified` makes them go out before the rows are returned.
RECORD_OUTCOMES = f"""
WITH written AS (
UPDATE txqueue_tasks AS t
SET state = CASE WHEN o.state = 'pending' AND t.cancel_requested THEN 'cancelled'
                 ELSE o.state END,
    result = CASE WHEN o.state = 'succeeded' THEN o.result ELSE t.result END,
    errors = CASE WHEN o.error IS NULL THEN t.errors
                  ELSE t.errors || jsonb_build_array(o.error) END,
    run_at = CASE WHEN o.state = 'pending' AND NOT t.cancel_requested
                  THEN now() + make_interval(secs => o.retry_in) ELSE t.run_at END,
    finished_at = CASE WHEN o.state = 'pending' AND NOT t.cancel_requested THEN NULL
                       ELSE now() END,
    expires_at = NULL,
    updated_at = now()
FROM jsonb_to_recordset(%s::jsonb)
     AS o(id uuid, attempt int, worker_id text, state text, result jsonb, error jsonb,
          retry_in float8)
WHERE t.id = o.id AND t.attempts = o.attempt AND t.worker_id = o.worker_id
  AND t.state = 'running'
RETURNING t.id, t.state
), notified AS (
    SELECT pg_notify('{FINISHED_CHANNEL}', string_agg(id::text, ','))
    FROM (SELECT id, (row_number() OVER () - 1) / 200 AS part
          FROM written WHERE state <> 'pending') AS finished
    GROUP BY part
)
SELECT id, state FROM written WHERE (SELECT count(*) FROM notified) >= 0
"""


def record_outcomes(
    conn: psycopg.Connection[Any], outcomes: Sequence[Outcome]
) -> dict[uuid.UUID, str]:
    """Write outcomes in one statement, fenced on (id, attempt, worker, running).

    Returns the state written for each id; an outcome missing from it was fenced out
    (its lease was lost).
    """
    doc = [
        {
            "id": str(o.id),
            "attempt": o.attempt,
            "worker_id": o.worker_id,
            "state": o.state,
            "result": None if o.result is None else json.loads(o.result),
            "error": o.error,
            "retry_in": o.retry_in,
        }
        for o in outcomes
    ]
    with errors("record outcome"):
        rows = conn.execute(RECORD_OUTCOMES, (json.dumps(doc),), prepare=True).fetchall()
    return dict(rows)


@contextmanager
def atomic(conn: psycopg.Connection[Any]) -> Iterator[None]:
    """The transaction of an atomic task, on a connection of the worker's: the handler's
    work and the task's success commit together. psycopg refuses a ``commit()`` or
    ``rollback()`` of the handler's inside it. A failed statement of the handler's is
    raised as it is, its work rolled back; a failed BEGIN or COMMIT as a StoreError."""
    handler = False
    try:
        with conn.transaction():
            handler = True
            yield
            handler = False
    except psycopg.Error:
        if handler:
            raise
        with errors("atomic task"):
            raise


def record_atomic(conn: psycopg.Connection[Any], outcome: Outcome) -> bool:
    """Write an atomic task's success in its open transaction, fenced as every outcome is;
    False if the fence failed (the lease was lost): the caller must roll back."""
    return outcome.id in record_outcomes(conn, [outcome])


# A row locked by someone else is skipped, not waited for: it is being finished (this
# worker's own outcome, a slow write) or recovered (the cleaner), and waiting would hold
# up the extension of every other lease in the batch.
EXTEND_LEASES = """
UPDATE txqueue_tasks AS t
SET expires_at = now() + make_interval(secs => l.timeout), updated_at = now()
FROM (
    SELECT x.id, l.timeout
    FROM unnest(%s::uuid[], %s::int[], %s::float8[]) AS l(id, attempt, timeout)
    JOIN txqueue_tasks AS x ON x.id = l.id
    WHERE x.attempts = l.attempt AND x.worker_id = %s AND x.state = 'running'
    FOR UPDATE OF x SKIP LOCKED
) AS l
WHERE t.id = l.id
RETURNING t.id
"""


def extend_leases(
    conn: psycopg.Connection[Any],
    worker_id: str,
    leases: Sequence[tuple[uuid.UUID, int, float]],
) -> set[uuid.UUID]:
    """Heartbeat: push back the lease of each (id, attempt, timeout) this worker still holds."""
    if not leases:
        return set()
    ids, attempts, timeouts = (list(col) for col in zip(*leases, strict=True))
    with errors("heartbeat"):
        rows = conn.execute(EXTEND_LEASES, (ids, attempts, timeouts, worker_id)).fetchall()
    return {r[0] for r in rows}


def _error_entry(kind: str, message: str) -> str:
    """SQL for one error-history entry written by txqueue itself (no traceback)."""
    return f"""jsonb_build_object('at', now(), 'attempt', t.attempts, 'worker_id', t.worker_id,
                         'type', '{kind}', 'message', {message}, 'traceback', NULL)"""


# Only tasks whose policy is to retry go back to pending: for `abandon` and `compensate`
# the lease is ended now instead, and the cleaner applies the policy on its next run.
_STOPPED = _error_entry(
    "txqueue.WorkerStopped", "'the worker stopped before the task finished; released'"
)
RELEASE = f"""
UPDATE txqueue_tasks AS t
SET state = r.next,
    run_at = CASE WHEN r.next = 'pending' THEN now() ELSE t.run_at END,
    finished_at = CASE WHEN r.next = 'cancelled' THEN now() END,
    expires_at = CASE WHEN r.next = 'running' THEN now() END,
    errors = CASE WHEN r.next = 'running' THEN t.errors
                  ELSE t.errors || jsonb_build_array({_STOPPED}) END,
    updated_at = now()
FROM (
    SELECT u.id, u.attempt,
           CASE WHEN x.cancel_requested THEN 'cancelled'
                WHEN coalesce(x.on_lease_expired ->> 'policy', 'retry') = 'retry' THEN 'pending'
                ELSE 'running' END
    FROM unnest(%s::uuid[], %s::int[]) AS u(id, attempt)
    JOIN txqueue_tasks AS x ON x.id = u.id
) AS r(id, attempt, next)
WHERE t.id = r.id AND t.attempts = r.attempt AND t.worker_id = %s AND t.state = 'running'
RETURNING t.id, t.state
"""


def release(
    conn: psycopg.Connection[Any], worker_id: str, held: Sequence[tuple[uuid.UUID, int]]
) -> dict[uuid.UUID, str]:
    """Give up the (id, attempt) tasks a stopping worker will not finish: back to `pending`
    by the retry policy, or to the cleaner at once for the others. Returns id -> state."""
    if not held:
        return {}
    ids, attempts = (list(col) for col in zip(*held, strict=True))
    with errors("release"):
        return dict(conn.execute(RELEASE, (ids, attempts, worker_id)).fetchall())


GIVE_BACK = """
UPDATE txqueue_tasks AS t
SET state = CASE WHEN t.cancel_requested THEN 'cancelled' ELSE 'pending' END,
    finished_at = CASE WHEN t.cancel_requested THEN now() END,
    attempts = t.attempts - 1,
    start_time = CASE WHEN t.attempts = 1 THEN NULL ELSE t.start_time END,
    worker_id = NULL,
    expires_at = NULL,
    updated_at = now()
FROM unnest(%s::uuid[], %s::int[]) AS u(id, attempt)
WHERE t.id = u.id AND t.attempts = u.attempt AND t.worker_id = %s AND t.state = 'running'
"""


def give_back(
    conn: psycopg.Connection[Any], worker_id: str, held: Sequence[tuple[uuid.UUID, int]]
) -> int:
    """Return the (id, attempt) tasks a worker claimed and never started to the state they
    were claimed from: no attempt began, so none is counted. Returns how many."""
    if not held:
        return 0
    ids, attempts = (list(col) for col in zip(*held, strict=True))
    with errors("give back"):
        return conn.execute(GIVE_BACK, (ids, attempts, worker_id)).rowcount


CANCEL_REQUESTED = """
SELECT id FROM txqueue_tasks
WHERE id = ANY(%s) AND worker_id = %s AND state = 'running' AND cancel_requested
"""


def cancel_requested(
    conn: psycopg.Connection[Any], worker_id: str, ids: Sequence[uuid.UUID]
) -> set[uuid.UUID]:
    """Which of this worker's running tasks someone asked to cancel."""
    with errors("cancel check"):
        return {r[0] for r in conn.execute(CANCEL_REQUESTED, (list(ids), worker_id)).fetchall()}
