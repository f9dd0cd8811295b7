"""The PostgreSQL store: one small function per operation, each taking a psycopg connection.

Only this module issues SQL. Connections opened here are in autocommit mode: each
statement is its own short transaction, and nothing holds a row lock while a task runs.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import fields, replace
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

from ..config import redact, scrub
from ..errors import StoreError
from ..task import Task, TaskInfo, uuid7
from .base import (
    WORKER_ALIVE_WITHIN,
    ClaimDefaults,
    Claimed,
    Inserted,
    Moved,
    Outcome,
    Recovered,
    StatusRow,
    Unhandled,
    Why,
    migrations,
    schema_text,
)


@contextmanager
def errors(action: str, url: str | None = None) -> Iterator[None]:
    """Translate driver exceptions into StoreError, naming what failed and never a password."""
    try:
        yield
    except psycopg.errors.UndefinedTable as exc:
        raise StoreError(
            f"{action}: the txqueue tables do not exist; run `txqueue init` first"
        ) from exc
    except psycopg.Error as exc:
        detail = scrub(str(exc).strip().splitlines()[0] if str(exc).strip() else "", url)
        where = f" ({redact(url)})" if url else ""
        raise StoreError(f"{action}{where}: {detail or type(exc).__name__}") from exc


_READ_COMMITTED = "-c default_transaction_isolation=read\\ committed"


def connect(
    url: str, *, application_name: str = "txqueue", create: bool = False
) -> psycopg.Connection[Any]:
    """An autocommit connection for txqueue's own statements (``create``: for SQLite's sake;
    a PostgreSQL database is created by its administrator).

    READ COMMITTED whatever the server's default: the commit check reads a transaction's
    status, then looks for its row in a later statement, which must see the commit; and
    under REPEATABLE READ claims that meet would fail with serialization errors.
    """
    with errors("cannot connect to PostgreSQL", url):
        given = conninfo_to_dict(url).get("options")
        conn = psycopg.connect(
            url,
            autocommit=True,
            connect_timeout=10,
            application_name=application_name,
            options=f"{given or ''} {_READ_COMMITTED}".strip(),  # the URL's own come first
        )
    conn.isolation_level = psycopg.IsolationLevel.READ_COMMITTED
    return conn


def is_connection_error(exc: BaseException) -> bool:
    """True when a StoreError came from a lost or refused connection (worth retrying)."""
    cause = exc.__cause__
    return isinstance(cause, psycopg.OperationalError | psycopg.InterfaceError)


def is_closed(conn: psycopg.Connection[Any]) -> bool:
    return conn.closed or conn.broken


def transaction(conn: psycopg.Connection[Any]) -> AbstractContextManager[Any]:
    """A transaction on the caller's connection; a savepoint inside one already open."""
    return conn.transaction()


# --- schema ----------------------------------------------------------------------------


def apply_schema(conn: psycopg.Connection[Any]) -> list[int]:
    """Apply the migrations not yet recorded; returns the versions applied now."""
    preamble, numbered = migrations(schema_text("schema.sql"))
    applied: list[int] = []
    with errors("applying schema.sql"), conn.transaction():
        # Transaction-scoped, so it needs no session state (works behind PgBouncer).
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('txqueue_migrations'))")
        conn.execute(preamble.encode())
        done = {r[0] for r in conn.execute("SELECT version FROM txqueue_migrations")}
        for version, body in numbered:
            if version in done:
                continue
            conn.execute(body.encode())
            conn.execute("INSERT INTO txqueue_migrations (version) VALUES (%s)", (version,))
            applied.append(version)
    return applied


# --- enqueue ---------------------------------------------------------------------------

_INSERT = """
INSERT INTO txqueue_tasks (id, queue, name, payload, priority, run_at, max_attempts,
                           timeout, unique_key)
VALUES (%(id)s, %(queue)s, %(name)s, %(payload)s::jsonb, %(priority)s,
        coalesce(%(run_at)s, now() + make_interval(secs => coalesce(%(delay)s, 0))),
        %(max_attempts)s, %(timeout)s, %(unique_key)s)
{conflict}
RETURNING id, pg_current_xact_id()::text
"""
_ON_CONFLICT = "ON CONFLICT (unique_key) WHERE state IN ('pending', 'running') DO NOTHING"
INSERT_ONE = _INSERT.format(conflict="")
INSERT_ONE_UNIQUE = _INSERT.format(conflict=_ON_CONFLICT)

INSERT_MANY = f"""
INSERT INTO txqueue_tasks (id, queue, name, payload, priority, run_at, max_attempts,
                           timeout, unique_key)
SELECT id, queue, name, payload, priority,
       coalesce(run_at, now() + make_interval(secs => coalesce(delay, 0))),
       max_attempts, timeout, unique_key
FROM unnest(%s::uuid[], %s::text[], %s::text[], %s::jsonb[], %s::smallint[],
            %s::timestamptz[], %s::float8[], %s::int[], %s::float8[], %s::text[])
     AS t(id, queue, name, payload, priority, run_at, delay, max_attempts, timeout, unique_key)
{_ON_CONFLICT}
RETURNING id, pg_current_xact_id()::text
"""

LIVE_BY_UNIQUE_KEY = """
SELECT unique_key, id FROM txqueue_tasks
WHERE unique_key = ANY(%s) AND state IN ('pending', 'running')
"""


def _row(task: Task, task_id: uuid.UUID) -> dict[str, Any]:
    return {
        "id": task_id,
        "queue": task.queue,
        "name": task.name,
        "payload": task.payload_json,
        "priority": task.priority,
        "run_at": task.run_at,
        "delay": task.delay_seconds,
        "max_attempts": task.max_attempts,
        "timeout": task.timeout,
        "unique_key": task.unique_key,
    }


def insert_task(conn: psycopg.Connection[Any], task: Task) -> Inserted:
    """Insert one task in the caller's transaction: one round trip unless its key is taken."""
    with errors("enqueue"):
        if task.unique_key is None:
            row = conn.execute(INSERT_ONE, _row(task, uuid7()), prepare=True).fetchone()
            assert row is not None
            return Inserted(row[0], True, row[1])
        for _ in range(10):
            row = conn.execute(INSERT_ONE_UNIQUE, _row(task, uuid7()), prepare=True).fetchone()
            if row is not None:
                return Inserted(row[0], True, row[1])
            # A live task holds the key. This is a new statement, so under READ COMMITTED it
            # sees a holder that committed while our INSERT waited on it.
            found = conn.execute(LIVE_BY_UNIQUE_KEY, ([task.unique_key],)).fetchone()
            if found is not None:
                return Inserted(found[1], False)
            # The holder finished in between: the key is free again, insert once more.
    raise StoreError(f"enqueue: unique_key {task.unique_key!r} kept changing hands; try again")


COPY_TASKS = """
COPY txqueue_tasks (id, queue, name, payload, priority, max_attempts, timeout) FROM STDIN
"""
CURRENT_XID = "SELECT pg_current_xact_id()::text"


def _plain(task: Task) -> bool:
    """Nothing for the database to work out: no unique key to check, no time to compute."""
    return task.unique_key is None and task.run_at is None and task.delay is None


def insert_tasks(conn: psycopg.Connection[Any], tasks: Sequence[Task]) -> list[Inserted]:
    """Insert many tasks in the caller's transaction: plain ones by COPY (about twice the
    rate of an INSERT), the others in one INSERT; a task whose unique key is live gets the
    holder's id."""
    ids = [uuid7() for _ in tasks]
    # COPY cannot run in a caller's pipeline: there the INSERT takes every task.
    bulk = not conn.pgconn.pipeline_status
    copied = [bulk and _plain(t) for t in tasks]
    plain = [i for i, c in enumerate(copied) if c]
    other = [i for i, c in enumerate(copied) if not c]
    out: dict[int, Inserted] = {}
    # In autocommit, a block of its own keeps the call all-or-nothing and gives it one xid.
    block = conn.transaction() if conn.autocommit and tasks else nullcontext()
    with errors("enqueue_many"), block:
        if plain:
            with conn.cursor() as cursor, cursor.copy(COPY_TASKS) as copy:
                for i in plain:
                    t = tasks[i]
                    row = (
                        ids[i],
                        t.queue,
                        t.name,
                        t.payload_json,
                        t.priority,
                        t.max_attempts,
                        t.timeout,
                    )
                    copy.write_row(row)
            xid = conn.execute(CURRENT_XID).fetchone()
            assert xid is not None
            out.update((i, Inserted(ids[i], True, xid[0])) for i in plain)
        if other:
            inserted = _insert_many(conn, [tasks[i] for i in other], [ids[i] for i in other])
            out.update(zip(other, inserted, strict=True))
    return [out[i] for i in range(len(tasks))]


def _insert_many(
    conn: psycopg.Connection[Any], tasks: Sequence[Task], ids: Sequence[uuid.UUID]
) -> list[Inserted]:
    rows = [_row(t, i) for t, i in zip(tasks, ids, strict=True)]
    columns = (
        "id",
        "queue",
        "name",
        "payload",
        "priority",
        "run_at",
        "delay",
        "max_attempts",
        "timeout",
        "unique_key",
    )
    returned = conn.execute(INSERT_MANY, [[r[c] for r in rows] for c in columns]).fetchall()
    xid_by_id = {r[0]: r[1] for r in returned}
    missing = [r["unique_key"] for r in rows if r["id"] not in xid_by_id]
    holders = dict(conn.execute(LIVE_BY_UNIQUE_KEY, (missing,)).fetchall()) if missing else {}
    out = []
    for task, row in zip(tasks, rows, strict=True):
        if row["id"] in xid_by_id:
            out.append(Inserted(row["id"], True, xid_by_id[row["id"]]))
        elif task.unique_key in holders:
            out.append(Inserted(holders[task.unique_key], False))
        else:
            raise StoreError(f"enqueue_many: unique_key {task.unique_key!r} changed hands; retry")
    return out


# --- claims ----------------------------------------------------------------------------

_CLAIM_SET = """
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
RETURNING t.id, t.queue, t.name, t.payload::text, t.attempts, t.max_attempts,
          extract(epoch FROM t.expires_at - now())::float8
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
    return [Claimed(i, q, n, json.loads(p), a, m, t) for i, q, n, p, a, m, t in rows]


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
RECORD_OUTCOMES = """
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


EXTEND_LEASES = """
UPDATE txqueue_tasks AS t
SET expires_at = now() + make_interval(secs => l.timeout), updated_at = now()
FROM unnest(%s::uuid[], %s::int[], %s::float8[]) AS l(id, attempt, timeout)
WHERE t.id = l.id AND t.attempts = l.attempt AND t.worker_id = %s AND t.state = 'running'
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


# --- the cleaner -----------------------------------------------------------------------

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


# --- task management -------------------------------------------------------------------

_RETRY_SET = """
UPDATE txqueue_tasks AS t
SET state = 'pending', run_at = now(), finished_at = NULL, expires_at = NULL,
    cancel_requested = false, notified_at = NULL,
    max_attempts = CASE WHEN t.max_attempts IS NOT NULL
                        THEN greatest(t.max_attempts, t.attempts + 1) END,
    updated_at = now()
"""
RETRY_IDS = (
    _RETRY_SET
    + """WHERE t.id = ANY(%s) AND t.state IN ('failed', 'cancelled')
RETURNING t.id, t.queue, pg_current_xact_id()::text
"""
)
# Pages through failed tasks by id, so tasks that fail again during a long run are not
# retried twice; a task whose unique key a live task holds is left failed.
RETRY_FAILED = (
    _RETRY_SET
    + """FROM (
    SELECT id FROM txqueue_tasks AS f
    WHERE state = 'failed' AND queue = coalesce(%(queue)s::text, queue) AND id > %(after)s
      AND (unique_key IS NULL OR NOT EXISTS (
          SELECT 1 FROM txqueue_tasks AS live
          WHERE live.unique_key = f.unique_key AND live.state IN ('pending', 'running')))
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) AS f
WHERE t.id = f.id
RETURNING t.id, t.queue, pg_current_xact_id()::text
"""
)


@contextmanager
def _key_taken(action: str) -> Iterator[None]:
    try:
        yield
    except psycopg.errors.UniqueViolation:
        raise StoreError(
            f"{action}: a pending or running task holds the same unique_key; nothing was retried"
        ) from None


def retry_ids(conn: psycopg.Connection[Any], ids: Sequence[uuid.UUID]) -> list[Moved]:
    """Failed or cancelled tasks back to pending now; returns (id, queue, xid) of those moved."""
    with errors("retry"), _key_taken("retry"):
        rows = conn.execute(RETRY_IDS, (list(ids),)).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def retry_failed(
    conn: psycopg.Connection[Any], queue: str | None, after: uuid.UUID, limit: int
) -> list[Moved]:
    """Up to ``limit`` failed tasks (of ``queue``, or all) with ids above ``after`` back to
    pending now, in id order."""
    params = {"queue": queue, "after": after, "limit": limit}
    with errors("retry"), _key_taken("retry"):
        rows = conn.execute(RETRY_FAILED, params).fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


CANCEL = """
UPDATE txqueue_tasks
SET state = CASE WHEN state = 'pending' THEN 'cancelled' ELSE state END,
    finished_at = CASE WHEN state = 'pending' THEN now() ELSE finished_at END,
    cancel_requested = (state = 'running'),
    updated_at = now()
WHERE id = %s AND state IN ('pending', 'running')
RETURNING state
"""


def cancel(conn: psycopg.Connection[Any], task_id: uuid.UUID) -> str | None:
    """Pending: cancelled now. Running: flagged for its handler. Returns the state after,
    or None when the task is not pending or running."""
    with errors("cancel"):
        row = conn.execute(CANCEL, (task_id,)).fetchone()
    return None if row is None else str(row[0])


_INFO_COLUMNS = ", ".join(f.name for f in fields(TaskInfo))


def get_task(conn: psycopg.Connection[Any], task_id: uuid.UUID) -> TaskInfo | None:
    with errors("show"):
        row = conn.execute(
            f"SELECT {_INFO_COLUMNS} FROM txqueue_tasks WHERE id = %s", (task_id,)
        ).fetchone()
    return None if row is None else TaskInfo(*row)


LIST_TASKS = f"""
SELECT {_INFO_COLUMNS} FROM txqueue_tasks
WHERE state = coalesce(%(state)s::text, state)
  AND queue = coalesce(%(queue)s::text, queue)
  AND name = coalesce(%(name)s::text, name)
ORDER BY id DESC
LIMIT %(limit)s
"""


def list_tasks(
    conn: psycopg.Connection[Any],
    *,
    state: str | None,
    queue: str | None,
    name: str | None,
    limit: int,
) -> list[TaskInfo]:
    """The newest tasks matching every filter given."""
    params = {"state": state, "queue": queue, "name": name, "limit": limit}
    with errors("list"):
        return [TaskInfo(*r) for r in conn.execute(LIST_TASKS, params).fetchall()]


def delete_queue(conn: psycopg.Connection[Any], queue: str) -> int:
    """Delete every task of ``queue``, whatever its state (the demo's, when it is done)."""
    with errors("delete queue"):
        return conn.execute("DELETE FROM txqueue_tasks WHERE queue = %s", (queue,)).rowcount


# --- inspection ------------------------------------------------------------------------

STATUS = """
SELECT queue, state, count(*)::int,
       extract(epoch FROM now() - min(run_at) FILTER (WHERE state = 'pending'
                                                     AND run_at <= now()))::float8
FROM txqueue_tasks
GROUP BY queue, state
ORDER BY queue, state
"""


def status(conn: psycopg.Connection[Any]) -> list[StatusRow]:
    """(queue, state, count, age in seconds of the oldest ripe pending task) per group."""
    with errors("status"):
        return [(r[0], r[1], r[2], r[3]) for r in conn.execute(STATUS).fetchall()]


WORKER_SEEN = """
INSERT INTO txqueue_workers (worker_id, queues, names) VALUES (%s, %s::jsonb, %s::jsonb)
ON CONFLICT (worker_id) DO UPDATE SET seen_at = now()
"""

# Rows of workers that died without deleting theirs, kept an hour for whoever looks.
FORGET_WORKERS = "DELETE FROM txqueue_workers WHERE seen_at < now() - interval '1 hour'"

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
        conn.execute(FORGET_WORKERS)
        conn.execute(WORKER_SEEN, (worker_id, json.dumps(list(queues)), json.dumps(list(names))))


def worker_gone(conn: psycopg.Connection[Any], worker_id: str) -> None:
    with errors("worker presence"):
        conn.execute("DELETE FROM txqueue_workers WHERE worker_id = %s", (worker_id,))


def unhandled(conn: psycopg.Connection[Any]) -> Unhandled:
    with errors("status"):
        live = conn.execute(LIVE_WORKERS, (WORKER_ALIVE_WITHIN,)).fetchone()
        rows = conn.execute(UNHANDLED, (WORKER_ALIVE_WITHIN,)).fetchall()
    return (live[0] if live else 0), [(r[0], r[1], r[2]) for r in rows]
