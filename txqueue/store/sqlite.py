"""The SQLite store: the same operations as the PostgreSQL store, for one database file
shared by the processes of one machine.

SQLite has one writer at a time, so every claim, outcome and recovery is one short
``BEGIN IMMEDIATE`` transaction: it takes the write lock first, reads, decides, writes and
commits, and no other process can claim the same row in between. Connections opened
here are in autocommit mode, in WAL (readers never wait for the writer), with
``synchronous=NORMAL`` and a busy timeout, so a process waiting for the lock waits
instead of failing with "database is locked". Times are Unix seconds from this
machine's clock.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields, replace
from datetime import UTC, datetime
from itertools import count
from typing import Any

from ..config import redact
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

BUSY_TIMEOUT = 30.0
"""Seconds a statement waits for another process's write lock before failing."""

_TRANSIENT = ("locked", "busy", "unable to open", "disk i/o")


def path(url: str) -> str:
    """The file of a ``sqlite:///relative.db`` or ``sqlite:////absolute.db`` URL."""
    return url.removeprefix("sqlite:///")


@contextmanager
def errors(action: str, url: str | None = None) -> Iterator[None]:
    """Translate sqlite3 exceptions into StoreError, naming what failed."""
    try:
        yield
    except sqlite3.Error as exc:
        detail = str(exc).strip() or type(exc).__name__
        if "no such table" in detail:
            raise StoreError(
                f"{action}: the txqueue tables do not exist; run `txqueue init` first"
            ) from exc
        if isinstance(exc, sqlite3.IntegrityError) and "unique_key" in detail:
            detail = "a pending or running task holds the same unique_key"
        where = f" ({redact(url)})" if url else ""
        raise StoreError(f"{action}{where}: {detail}") from exc


def connect(
    url: str, *, application_name: str = "txqueue", create: bool = False
) -> sqlite3.Connection:
    """An autocommit connection in WAL mode for txqueue's own statements. The file must
    exist unless ``create`` (`txqueue init`): a typo'd path is an error, not a new file."""
    file = path(url)
    folder = os.path.dirname(os.path.abspath(file))
    if not os.path.isdir(folder):
        raise StoreError(
            f"no SQLite database at {file!r}: its directory {folder!r} does not exist"
            + ("" if create else "; create it, then run `txqueue init`")
        )
    if not create and not os.path.exists(file):
        raise StoreError(f"no SQLite database at {file!r}: run `txqueue init` to create it there")
    with errors("cannot open the SQLite database", url):
        conn = sqlite3.connect(file, timeout=BUSY_TIMEOUT, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
        except sqlite3.Error:
            conn.close()
            raise
    return conn


def is_connection_error(exc: BaseException) -> bool:
    """True when a StoreError is worth retrying: the file is locked, busy or unreachable."""
    cause = exc.__cause__
    if isinstance(cause, sqlite3.ProgrammingError):
        return "closed" in str(cause)
    return isinstance(cause, sqlite3.OperationalError) and any(
        word in str(cause).lower() for word in _TRANSIENT
    )


def is_closed(conn: sqlite3.Connection) -> bool:
    try:
        conn.total_changes  # noqa: B018 - raises once the connection is closed
    except sqlite3.ProgrammingError:
        return True
    return False


_savepoints = count()


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """A transaction on the caller's connection, committed when the block ends; a
    savepoint inside one already open."""
    name = f"txqueue_{next(_savepoints)}"
    conn.execute(f"SAVEPOINT {name}")
    try:
        yield conn
    except BaseException:
        conn.execute(f"ROLLBACK TO {name}")
        conn.execute(f"RELEASE {name}")
        raise
    conn.execute(f"RELEASE {name}")


def _begin(conn: sqlite3.Connection) -> None:
    """BEGIN IMMEDIATE, retried every few milliseconds while another connection writes.

    SQLite's own busy handler sleeps up to 100 ms between tries, which adds that much to
    a claim's latency behind a 1 ms write; here the wait is ours, so it is switched off
    for the BEGIN and restored for the caller-style statements the connection also runs.
    """
    conn.execute("PRAGMA busy_timeout = 0")
    try:
        delay, deadline = 0.0005, time.monotonic() + BUSY_TIMEOUT
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.004)
    finally:
        conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT * 1000)}")


@contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction on txqueue's own connection, the lock taken up front."""
    _begin(conn)
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _ids(ids: Iterable[uuid.UUID]) -> str:
    """Ids as one JSON array parameter, read back in SQL with ``json_each``."""
    return json.dumps([str(i) for i in ids])


def _moved(rows: list[Any]) -> list[Moved]:
    """(id, queue) rows as tasks put back to pending; SQLite has no xid for their wake-ups."""
    return [(uuid.UUID(r[0]), r[1], None) for r in rows]


def _time(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def _error_entry(attempt: int, worker_id: str | None, kind: str, message: str) -> str:
    """One error-history entry written by txqueue itself (no traceback), as JSON text."""
    return json.dumps(
        {
            "at": datetime.now(UTC).isoformat(),
            "attempt": attempt,
            "worker_id": worker_id,
            "type": kind,
            "message": message,
            "traceback": None,
        }
    )


_APPEND_ERROR = "json_insert(errors, '$[#]', json(:error))"


# --- schema ----------------------------------------------------------------------------


def _statements(script: str) -> Iterator[str]:
    statement = ""
    for line in script.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            yield statement
            statement = ""


def apply_schema(conn: sqlite3.Connection) -> list[int]:
    """Apply the migrations not yet recorded; returns the versions applied now."""
    preamble, numbered = migrations(schema_text("schema.sqlite.sql"))
    applied: list[int] = []
    with errors("applying schema.sqlite.sql"), _immediate(conn):
        for statement in _statements(preamble):
            conn.execute(statement)
        done = {r[0] for r in conn.execute("SELECT version FROM txqueue_migrations")}
        for version, body in numbered:
            if version in done:
                continue
            for statement in _statements(body):
                conn.execute(statement)
            conn.execute(
                "INSERT INTO txqueue_migrations (version, applied_at) VALUES (?, ?)",
                (version, time.time()),
            )
            applied.append(version)
    return applied


# --- enqueue ---------------------------------------------------------------------------

INSERT = """
INSERT INTO txqueue_tasks (id, queue, name, payload, priority, run_at, max_attempts,
                           timeout, unique_key, created_at, updated_at)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (unique_key) WHERE state IN ('pending', 'running') DO NOTHING
RETURNING id
"""
LIVE_BY_UNIQUE_KEY = """
SELECT id FROM txqueue_tasks WHERE unique_key = ? AND state IN ('pending', 'running')
"""


def insert_task(conn: sqlite3.Connection, task: Task) -> Inserted:
    """Insert one task in the caller's transaction; with its unique key live, the holder's id.

    SQLite has one writer, so no other transaction can take or free the key meanwhile.
    """
    now = time.time()
    if task.run_at is not None:
        run_at = task.run_at.timestamp()
    else:
        run_at = now + (task.delay_seconds or 0.0)
    row = (
        str(uuid7()),
        task.queue,
        task.name,
        task.payload_json,
        task.priority,
        run_at,
        task.max_attempts,
        task.timeout,
        task.unique_key,
        now,
        now,
    )
    with errors("enqueue"):
        inserted = conn.execute(INSERT, row).fetchone()
        if inserted is not None:
            return Inserted(uuid.UUID(inserted[0]), True)
        holder = conn.execute(LIVE_BY_UNIQUE_KEY, (task.unique_key,)).fetchone()
    if holder is None:
        raise StoreError(f"enqueue: unique_key {task.unique_key!r} changed hands; try again")
    return Inserted(uuid.UUID(holder[0]), False)


def insert_tasks(conn: sqlite3.Connection, tasks: Sequence[Task]) -> list[Inserted]:
    """Insert many tasks in the caller's transaction (in process, so one by one is cheap)."""
    return [insert_task(conn, task) for task in tasks]


# --- claims ----------------------------------------------------------------------------

_PICK_COLUMNS = "id, queue, name, payload, attempts, max_attempts, timeout"
PICK_IDS = f"""
SELECT {_PICK_COLUMNS} FROM txqueue_tasks
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'pending' AND run_at <= :now
  AND name IN (SELECT key FROM json_each(:defaults))
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
        now = time.time()
        params = {**params, "now": now, "defaults": defaults.per_name_json}
        picked = conn.execute(pick, params).fetchall()
        for task_id, queue, name, payload, attempts, max_attempts, timeout in picked:
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
    now = time.time()
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
        now = time.time()
        for o in outcomes:
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
            if row is not None:
                written[o.id] = row[0]
    return written


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
        now = time.time()
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
        now = time.time()
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


# --- the cleaner -----------------------------------------------------------------------

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
        return [r[0] for r in conn.execute(STALE_QUEUES, {"before": time.time() - grace})]


def renotify(
    conn: sqlite3.Connection, grace: float, queues: Sequence[str], limit: int
) -> list[Moved]:
    """Mark up to ``limit`` stale tasks of ``queues`` as re-notified now; returns them."""
    now = time.time()
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
        now = time.time()
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
        return conn.execute(PRUNE, (state, time.time() - age, limit)).rowcount


# --- task management -------------------------------------------------------------------

_RETRY_SET = """
UPDATE txqueue_tasks
SET state = 'pending', run_at = :now, finished_at = NULL, expires_at = NULL,
    cancel_requested = 0, notified_at = NULL,
    max_attempts = CASE WHEN max_attempts IS NOT NULL
                        THEN max(max_attempts, attempts + 1) END,
    updated_at = :now
"""
RETRY_IDS = (
    _RETRY_SET
    + """WHERE id IN (SELECT value FROM json_each(:ids)) AND state IN ('failed', 'cancelled')
RETURNING id, queue
"""
)
RETRY_FAILED = (
    _RETRY_SET
    + """WHERE id IN (
    SELECT id FROM txqueue_tasks AS f
    WHERE state = 'failed' AND queue = coalesce(:queue, queue) AND id > :after
      AND (unique_key IS NULL OR NOT EXISTS (
          SELECT 1 FROM txqueue_tasks AS live
          WHERE live.unique_key = f.unique_key AND live.state IN ('pending', 'running')))
    ORDER BY id
    LIMIT :limit
)
RETURNING id, queue
"""
)


def retry_ids(conn: sqlite3.Connection, ids: Sequence[uuid.UUID]) -> list[Moved]:
    """Failed or cancelled tasks back to pending now; returns those moved."""
    params = {"now": time.time(), "ids": _ids(ids)}
    with errors("retry"):
        return _moved(conn.execute(RETRY_IDS, params).fetchall())


def retry_failed(
    conn: sqlite3.Connection, queue: str | None, after: uuid.UUID, limit: int
) -> list[Moved]:
    """Up to ``limit`` failed tasks (of ``queue``, or all) with ids above ``after`` back to
    pending now, in id order."""
    params = {"now": time.time(), "queue": queue, "after": str(after), "limit": limit}
    with errors("retry"):
        return _moved(conn.execute(RETRY_FAILED, params).fetchall())


CANCEL = """
UPDATE txqueue_tasks
SET state = CASE WHEN state = 'pending' THEN 'cancelled' ELSE state END,
    finished_at = CASE WHEN state = 'pending' THEN :now ELSE finished_at END,
    cancel_requested = (state = 'running'),
    updated_at = :now
WHERE id = :id AND state IN ('pending', 'running')
RETURNING state
"""


def cancel(conn: sqlite3.Connection, task_id: uuid.UUID) -> str | None:
    """Pending: cancelled now. Running: flagged for its handler. Returns the state after,
    or None when the task is not pending or running."""
    with errors("cancel"):
        row = conn.execute(CANCEL, {"now": time.time(), "id": str(task_id)}).fetchone()
    return None if row is None else str(row[0])


_INFO_COLUMNS = ", ".join(f.name for f in fields(TaskInfo))
_INFO_TIMES = {"run_at", "start_time", "expires_at", "finished_at", "created_at", "updated_at"}
_INFO_JSON = {"payload", "result", "errors"}


def _info(row: tuple[Any, ...]) -> TaskInfo:
    values = []
    for f, value in zip(fields(TaskInfo), row, strict=True):
        if f.name == "id":
            value = uuid.UUID(value)
        elif f.name in _INFO_TIMES:
            value = _time(value)
        elif f.name in _INFO_JSON:
            value = None if value is None else json.loads(value)
        elif f.name == "cancel_requested":
            value = bool(value)
        values.append(value)
    return TaskInfo(*values)


def get_task(conn: sqlite3.Connection, task_id: uuid.UUID) -> TaskInfo | None:
    with errors("show"):
        row = conn.execute(
            f"SELECT {_INFO_COLUMNS} FROM txqueue_tasks WHERE id = ?", (str(task_id),)
        ).fetchone()
    return None if row is None else _info(row)


LIST_TASKS = f"""
SELECT {_INFO_COLUMNS} FROM txqueue_tasks
WHERE state = coalesce(:state, state)
  AND queue = coalesce(:queue, queue)
  AND name = coalesce(:name, name)
ORDER BY id DESC
LIMIT :limit
"""


def list_tasks(
    conn: sqlite3.Connection,
    *,
    state: str | None,
    queue: str | None,
    name: str | None,
    limit: int,
) -> list[TaskInfo]:
    """The newest tasks matching every filter given."""
    params = {"state": state, "queue": queue, "name": name, "limit": limit}
    with errors("list"):
        return [_info(r) for r in conn.execute(LIST_TASKS, params).fetchall()]


def delete_queue(conn: sqlite3.Connection, queue: str) -> int:
    """Delete every task of ``queue``, whatever its state (the demo's, when it is done)."""
    with errors("delete queue"):
        return conn.execute("DELETE FROM txqueue_tasks WHERE queue = ?", (queue,)).rowcount


# --- inspection ------------------------------------------------------------------------

STATUS = """
SELECT queue, state, count(*),
       :now - min(CASE WHEN state = 'pending' AND run_at <= :now THEN run_at END)
FROM txqueue_tasks
GROUP BY queue, state
ORDER BY queue, state
"""


def status(conn: sqlite3.Connection) -> list[StatusRow]:
    """(queue, state, count, age in seconds of the oldest ripe pending task) per group."""
    with errors("status"):
        rows = conn.execute(STATUS, {"now": time.time()}).fetchall()
    return [(r[0], r[1], r[2], r[3]) for r in rows]


WORKER_SEEN = """
INSERT INTO txqueue_workers (worker_id, queues, names, started_at, seen_at)
VALUES (:id, :queues, :names, :now, :now)
ON CONFLICT (worker_id) DO UPDATE SET seen_at = excluded.seen_at
"""

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
    now = time.time()
    params = {"id": worker_id, "queues": json.dumps(list(queues)), "names": json.dumps(list(names))}
    with errors("worker presence"), _immediate(conn):
        # Rows of workers that died without deleting theirs, kept an hour for whoever looks.
        conn.execute("DELETE FROM txqueue_workers WHERE seen_at < ?", (now - 3600,))
        conn.execute(WORKER_SEEN, {**params, "now": now})


def worker_gone(conn: sqlite3.Connection, worker_id: str) -> None:
    with errors("worker presence"), _immediate(conn):
        conn.execute("DELETE FROM txqueue_workers WHERE worker_id = ?", (worker_id,))


def unhandled(conn: sqlite3.Connection) -> Unhandled:
    since = time.time() - WORKER_ALIVE_WITHIN
    with errors("status"):
        live = conn.execute("SELECT count(*) FROM txqueue_workers WHERE seen_at > ?", (since,))
        count_live = live.fetchone()[0]
        rows = conn.execute(UNHANDLED, {"since": since}).fetchall()
    return count_live, [(r[0], r[1], r[2]) for r in rows]
