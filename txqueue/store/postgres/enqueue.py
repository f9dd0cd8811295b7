"""Writing tasks: one row, or many in one statement (COPY when they are plain), in the
caller's transaction."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any

import psycopg

from ...errors import StoreError
from ...task import Task, uuid7
from ..base import (
    Inserted,
)
from .connection import Caller, errors

_INSERT = """
INSERT INTO txqueue_tasks (id, queue, name, payload, priority, run_at, max_attempts,
                           timeout, unique_key, trace_context)
VALUES (%(id)s, %(queue)s, %(name)s, %(payload)s::jsonb, %(priority)s,
        coalesce(%(run_at)s, now() + make_interval(secs => coalesce(%(delay)s::float8, 0))),
        %(max_attempts)s, %(timeout)s, %(unique_key)s, %(trace_context)s::jsonb)
{conflict}
RETURNING id, pg_current_xact_id()::text
"""
_ON_CONFLICT = "ON CONFLICT (unique_key) WHERE state IN ('pending', 'running') DO NOTHING"
INSERT_ONE = _INSERT.format(conflict="")
INSERT_ONE_UNIQUE = _INSERT.format(conflict=_ON_CONFLICT)

INSERT_MANY = f"""
INSERT INTO txqueue_tasks (id, queue, name, payload, priority, run_at, max_attempts,
                           timeout, unique_key, trace_context)
SELECT id, queue, name, payload, priority,
       coalesce(run_at, now() + make_interval(secs => coalesce(delay, 0))),
       max_attempts, timeout, unique_key, trace_context
FROM unnest(%s::uuid[], %s::text[], %s::text[], %s::jsonb[], %s::smallint[],
            %s::timestamptz[], %s::float8[], %s::int[], %s::float8[], %s::text[], %s::jsonb[])
     AS t(id, queue, name, payload, priority, run_at, delay, max_attempts, timeout, unique_key,
          trace_context)
{_ON_CONFLICT}
RETURNING id, pg_current_xact_id()::text
"""

LIVE_BY_UNIQUE_KEY = """
SELECT unique_key, id FROM txqueue_tasks
WHERE unique_key = ANY(%s) AND state IN ('pending', 'running')
"""


def task_params(task: Task, task_id: uuid.UUID, trace: str | None) -> dict[str, Any]:
    """The parameters of INSERT_ONE for ``task``, enqueued in the trace ``trace``."""
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
        "trace_context": trace,
    }


_COLUMNS = (
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
    "trace_context",
)


def columns(rows: Sequence[dict[str, Any]]) -> list[list[Any]]:
    """Rows as the column arrays INSERT_MANY unnests, in its order."""
    return [[r[c] for r in rows] for c in _COLUMNS]


def insert_task(conn: Caller, task: Task, trace: str | None = None) -> Inserted:
    """Insert one task in the caller's transaction: one round trip unless its key is taken.
    ``trace``: the trace context to store with it (see ``tracing``)."""
    with errors("enqueue"):
        if task.unique_key is None:
            row = conn.execute(
                INSERT_ONE, task_params(task, uuid7(), trace), prepare=True
            ).fetchone()
            assert row is not None
            return Inserted(row[0], True, row[1])
        for _ in range(10):
            row = conn.execute(
                INSERT_ONE_UNIQUE, task_params(task, uuid7(), trace), prepare=True
            ).fetchone()
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
COPY txqueue_tasks (id, queue, name, payload, priority, max_attempts, timeout, trace_context)
FROM STDIN
"""
CURRENT_XID = "SELECT pg_current_xact_id()::text"


def _plain(task: Task) -> bool:
    """Nothing for the database to work out: no unique key to check, no time to compute."""
    return task.unique_key is None and task.run_at is None and task.delay is None


def insert_tasks(conn: Caller, tasks: Sequence[Task], trace: str | None = None) -> list[Inserted]:
    """Insert many tasks in the caller's transaction: plain ones by COPY (about twice the
    rate of an INSERT), the others in one INSERT; a task whose unique key is live gets the
    holder's id."""
    ids = [uuid7() for _ in tasks]
    # COPY is psycopg's, and cannot run in a caller's pipeline: there the INSERT takes every
    # task.
    copier = conn if isinstance(conn, psycopg.Connection) else None
    if copier is not None and copier.pgconn.pipeline_status:
        copier = None
    copied = [copier is not None and _plain(t) for t in tasks]
    plain = [i for i, c in enumerate(copied) if c]
    other = [i for i, c in enumerate(copied) if not c]
    out: dict[int, Inserted] = {}
    # In autocommit, a block of its own keeps the call all-or-nothing and gives it one xid.
    block = conn.transaction() if conn.autocommit and tasks else nullcontext()
    with errors("enqueue_many"), block:
        if plain and copier is not None:
            with copier.cursor() as cursor, cursor.copy(COPY_TASKS) as copy:
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
                        trace,
                    )
                    copy.write_row(row)
            xid = conn.execute(CURRENT_XID).fetchone()
            assert xid is not None
            out.update((i, Inserted(ids[i], True, xid[0])) for i in plain)
        if other:
            inserted = _insert_many(conn, [tasks[i] for i in other], [ids[i] for i in other], trace)
            out.update(zip(other, inserted, strict=True))
    return [out[i] for i in range(len(tasks))]


def _insert_many(
    conn: Caller, tasks: Sequence[Task], ids: Sequence[uuid.UUID], trace: str | None
) -> list[Inserted]:
    rows = [task_params(t, i, trace) for t, i in zip(tasks, ids, strict=True)]
    returned = conn.execute(INSERT_MANY, columns(rows)).fetchall()
    xid_by_id = {r[0]: r[1] for r in returned}
    missing = [r["unique_key"] for r in rows if r["id"] not in xid_by_id]
    holders = dict(conn.execute(LIVE_BY_UNIQUE_KEY, (missing,)).fetchall()) if missing else {}
    return in_order(tasks, rows, xid_by_id, holders)


def in_order(
    tasks: Sequence[Task],
    rows: Sequence[dict[str, Any]],
    xid_by_id: dict[uuid.UUID, str],
    holders: dict[str, uuid.UUID],
) -> list[Inserted]:
    """What became of each task of INSERT_MANY: inserted, or its unique key's holder."""
    out = []
    for task, row in zip(tasks, rows, strict=True):
        if row["id"] in xid_by_id:
            out.append(Inserted(row["id"], True, xid_by_id[row["id"]]))
        elif task.unique_key in holders:
            out.append(Inserted(holders[task.unique_key], False))
        else:
            raise StoreError(f"enqueue_many: unique_key {task.unique_key!r} changed hands; retry")
    return out
