"""Writing tasks: one row, or many in one statement (COPY when they are plain), in the
caller's transaction."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import psycopg

from ... import notes as wakeups
from ...errors import StoreError
from ...ids import uuid7
from ...task import Task
from ..columns import TASK, Reader, arrays, copied, per_row
from ..records import Inserted
from .connection import QUERIES, Caller, errors, savepoint

_TASK = Reader(TASK)
_COPIED = Reader(copied(TASK))
_ARRAYS = per_row(TASK)


def task_params(task: Task, task_id: uuid.UUID, trace: str | None) -> dict[str, Any]:
    """The parameters of ``insert_one`` for ``task``, enqueued in the trace ``trace``."""
    params = _TASK.mapping(task)
    params["id"] = task_id
    params["trace_context"] = trace
    params["note"] = None
    return params


def notes(tasks: Sequence[Task], notify: bool) -> list[str]:
    """The wake-ups of ``tasks`` by NOTIFY, if the caller ``notify``s (``notes.note``)."""
    return wakeups.notes_for((t.queue, t.run_at, t.delay_seconds) for t in tasks) if notify else []


def one_params(task: Task, trace: str | None, notify: bool) -> dict[str, Any]:
    """The parameters of ``insert_one`` and ``insert_one_unique`` (the asyncio store's too)."""
    params = task_params(task, uuid7(), trace)
    if notify:
        params["note"] = notes([task], True)[0]
    return params


def columns(rows: Sequence[dict[str, Any]], trace: str | None, woken: list[str]) -> dict[str, Any]:
    """The parameters of ``insert_many``: the rows as the arrays it unnests, the trace
    they share, and the wake-ups it sends (``notes``)."""
    params: dict[str, Any] = arrays(_ARRAYS, rows)
    params["trace_context"] = trace
    params["notes"] = woken
    return params


def copy_row(task_id: uuid.UUID, t: Task, trace: str | None) -> tuple[Any, ...]:
    """The columns of ``copy_tasks`` for task ``t``: the call's, then the task's."""
    return (task_id, trace, *_COPIED.values(t))


def _plain(task: Task) -> bool:
    """Nothing for the database to work out: no unique key to check, no time to compute."""
    return task.unique_key is None and task.run_at is None and task.delay is None


def in_order(
    tasks: Sequence[Task],
    rows: Sequence[dict[str, Any]],
    xid_by_id: dict[uuid.UUID, str],
    holders: dict[str, tuple[uuid.UUID, str]],
) -> list[Inserted]:
    """What became of each task of ``insert_many``: inserted, or its unique key's holder."""
    out = []
    for task, row in zip(tasks, rows, strict=True):
        if row["id"] in xid_by_id:
            out.append(Inserted(row["id"], True, xid_by_id[row["id"]]))
        elif task.unique_key in holders:
            out.append(Inserted.held(task, *holders[task.unique_key]))
        else:
            raise StoreError(f"enqueue_many: unique_key {task.unique_key!r} changed hands; retry")
    return out


def unheld(
    rows: Sequence[dict[str, Any]], holders: Mapping[str, object]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows of ``insert_many`` whose unique key no live task holds (its holder ended in
    between, or without giving it back), and those keys, to free and insert again."""
    todo = [r for r in rows if r["unique_key"] not in holders]
    return todo, sorted({r["unique_key"] for r in todo})


class Enqueue:
    """Writing tasks in the caller's transaction, never committing it."""

    def insert_task(
        self, conn: Caller, task: Task, trace: str | None = None, notify: bool = False
    ) -> Inserted:
        """Insert one task in the caller's transaction: one round trip unless its key is taken.
        ``trace``: the trace context to store with it (see ``tracing``); ``notify``: wake
        the workers by NOTIFY when the transaction commits (``notes.note``)."""
        with errors("enqueue"):
            if task.unique_key is None:
                row = conn.execute(
                    QUERIES["insert_one"], one_params(task, trace, notify), prepare=True
                ).fetchone()
                assert row is not None
                return Inserted(row[0], True, row[1])
            for _ in range(10):
                row = conn.execute(
                    QUERIES["insert_one_unique"], one_params(task, trace, notify), prepare=True
                ).fetchone()
                if row is not None:
                    return Inserted(row[0], True, row[1])
                # A live task holds the key. This is a new statement, so under READ COMMITTED it
                # sees a holder that committed while our INSERT waited on it.
                found = conn.execute(QUERIES["live_by_unique_key"], ([task.unique_key],)).fetchone()
                if found is not None:
                    return Inserted.held(task, found[1], found[2])
                # The holder finished in between, or ended without giving the key back.
                conn.execute(QUERIES["free_unique_keys"], {"keys": [task.unique_key], "ids": []})
        raise StoreError(f"enqueue: unique_key {task.unique_key!r} kept changing hands; try again")

    def insert_tasks(
        self, conn: Caller, tasks: Sequence[Task], trace: str | None = None, notify: bool = False
    ) -> list[Inserted]:
        """Insert many tasks in the caller's transaction: plain ones by COPY (about twice the
        rate of an INSERT), the others in one INSERT; a task whose unique key is live gets the
        holder's id. ``notify``: as ``insert_task``'s, one per queue."""
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
        block: AbstractContextManager[object] = nullcontext()
        if conn.autocommit and tasks:
            block = conn.transaction()
        elif any(t.unique_key is not None for t in tasks):
            block = savepoint(conn)  # a key refused (Inserted.held) undoes the whole call
        with errors("enqueue_many"), block:
            if plain and copier is not None:
                with copier.cursor() as cursor, cursor.copy(QUERIES["copy_tasks"]) as copy:
                    for i in plain:
                        copy.write_row(copy_row(ids[i], tasks[i], trace))
                woken = notes([tasks[i] for i in plain], notify)
                xid = conn.execute(QUERIES["current_xid_woken"], {"notes": woken}).fetchone()
                assert xid is not None
                out.update((i, Inserted(ids[i], True, xid[0])) for i in plain)
            if other:
                rest = [tasks[i] for i in other]
                inserted = self._insert_many(
                    conn, rest, [ids[i] for i in other], trace, notes(rest, notify)
                )
                out.update(zip(other, inserted, strict=True))
        return [out[i] for i in range(len(tasks))]

    def _insert_many(
        self,
        conn: Caller,
        tasks: Sequence[Task],
        ids: Sequence[uuid.UUID],
        trace: str | None,
        woken: list[str],
    ) -> list[Inserted]:
        rows = [task_params(t, i, trace) for t, i in zip(tasks, ids, strict=True)]
        xid_by_id: dict[uuid.UUID, str] = {}
        holders: dict[str, tuple[uuid.UUID, str]] = {}
        todo = rows
        for _ in range(10):
            # Each try sends them, PostgreSQL once: one that wrote nothing may not have.
            returned = conn.execute(QUERIES["insert_many"], columns(todo, trace, woken)).fetchall()
            xid_by_id.update((r[0], r[1]) for r in returned)
            todo = [r for r in todo if r["id"] not in xid_by_id]
            if not todo:
                break
            keys = [r["unique_key"] for r in todo]
            held = conn.execute(QUERIES["live_by_unique_key"], (keys,)).fetchall()
            holders.update((key, (holder, name)) for key, holder, name in held)
            todo, stale = unheld(todo, holders)
            if not todo:
                break
            conn.execute(QUERIES["free_unique_keys"], {"keys": stale, "ids": []})
        return in_order(tasks, rows, xid_by_id, holders)
