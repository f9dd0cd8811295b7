"""Writing tasks: one row, or many in one statement (COPY when they are plain), in the
caller's transaction."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Generator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, TypeVar

import psycopg

from ...core.ids import uuid7
from ...core.task import Task
from ...errors import StoreError
from ...outbox import notes as wakeups
from ..columns import TASK, arrays, copied, maker, per_row
from ..follow import drive
from ..records import Inserted
from .connection import QUERIES, Caller, as_uuid, errors, savepoint

R = TypeVar("R")

task_params: Callable[[Task, uuid.UUID, str | None], dict[str, Any]] = maker(
    ("obj", TASK), into="dict"
)
"""``task_params(task, id, trace)``: the parameters of ``insert_one`` for ``task``, but its
wake-up (``one_params``), enqueued in the trace ``trace``."""

copy_row: Callable[[Task, uuid.UUID, str | None], tuple[Any, ...]] = maker(
    ("obj", copied(TASK)), into="tuple"
)
"""``copy_row(task, id, trace)``: the columns of ``copy_tasks`` for ``task``."""

_ARRAYS = per_row(TASK)


def notes(tasks: Sequence[Task], notify: bool) -> list[str]:
    """The wake-ups of ``tasks`` by NOTIFY, if the caller ``notify``s (``notes.note``)."""
    return wakeups.notes_for((t.queue, t.run_at, t.delay_seconds) for t in tasks) if notify else []


def one_params(task: Task, trace: str | None, notify: bool) -> dict[str, Any]:
    """The parameters of ``insert_one`` and ``insert_one_unique`` (the asyncio store's too)."""
    params = task_params(task, uuid7(), trace)
    params["note"] = notes([task], True)[0] if notify else None
    return params


def columns(rows: Sequence[dict[str, Any]], trace: str | None, woken: list[str]) -> dict[str, Any]:
    """The parameters of ``insert_many``: the rows as the arrays it unnests, the trace
    they share, and the wake-ups it sends (``notes``)."""
    params: dict[str, Any] = arrays(_ARRAYS, rows)
    params["trace_context"] = trace
    params["notes"] = woken
    return params


def _plain(task: Task) -> bool:
    """Nothing for the database to work out: no unique key to check, no time to compute."""
    return task.unique_key is None and task.run_at is None and task.delay is None


Steps = Generator[tuple[str, Any], list[Sequence[Any]], R]
"""An insert without I/O: it yields (a statement's name, its parameters), is sent the rows
(none for ``free_unique_keys``). ``Enqueue`` runs it on a sync connection, the asyncio
store awaits it."""


def unique_steps(task: Task, trace: str | None, notify: bool) -> Steps[Inserted]:
    """``insert_task`` of a task with a unique key: its row, or the key's live holder."""
    for _ in range(10):
        rows = yield "insert_one_unique", one_params(task, trace, notify)
        if rows:
            return Inserted(as_uuid(rows[0][0]), True, rows[0][1])
        # A live task holds the key. This is a new statement, so under READ COMMITTED it
        # sees a holder that committed while our INSERT waited on it.
        held = yield "live_by_unique_key", ([task.unique_key],)
        if held:
            return Inserted.held(task, as_uuid(held[0][1]), held[0][2])
        # The holder finished in between, or ended without giving the key back.
        yield "free_unique_keys", {"keys": [task.unique_key], "ids": []}
    raise StoreError(f"enqueue: unique_key {task.unique_key!r} kept changing hands; try again")


def many_steps(
    tasks: Sequence[Task], ids: Sequence[uuid.UUID], trace: str | None, woken: list[str]
) -> Steps[list[Inserted]]:
    """``insert_many`` of ``tasks``: each inserted, or its unique key's live holder."""
    rows = [task_params(t, i, trace) for t, i in zip(tasks, ids, strict=True)]
    xid_by_id: dict[uuid.UUID, str] = {}
    holders: dict[str, tuple[uuid.UUID, str]] = {}
    todo = rows
    for _ in range(10):
        # Each try sends them, PostgreSQL once: one that wrote nothing may not have.
        returned = yield "insert_many", columns(todo, trace, woken)
        xid_by_id.update((as_uuid(r[0]), r[1]) for r in returned)
        todo = [r for r in todo if r["id"] not in xid_by_id]
        if not todo:
            break
        held = yield "live_by_unique_key", ([r["unique_key"] for r in todo],)
        holders.update((key, (as_uuid(holder), name)) for key, holder, name in held)
        # Those whose key no live task holds: its holder ended in between, or without
        # giving it back; the key is freed and they go again.
        todo = [r for r in todo if r["unique_key"] not in holders]
        if not todo:
            break
        yield "free_unique_keys", {"keys": sorted({r["unique_key"] for r in todo}), "ids": []}
    out = []
    for task, row in zip(tasks, rows, strict=True):
        if row["id"] in xid_by_id:
            out.append(Inserted(row["id"], True, xid_by_id[row["id"]]))
        elif task.unique_key in holders:
            out.append(Inserted.held(task, *holders[task.unique_key]))
        else:
            raise StoreError(f"enqueue_many: unique_key {task.unique_key!r} changed hands; retry")
    return out


def run(conn: Caller, steps: Steps[R]) -> R:
    """``steps`` on the caller's sync connection."""

    def answer(name: str, params: Any) -> list[Any]:
        cursor = conn.execute(QUERIES[name], params, prepare=name in _PREPARED or None)
        return [] if name == "free_unique_keys" else cursor.fetchall()

    return drive(steps, answer)


_PREPARED = frozenset({"insert_one_unique"})


class Enqueue:
    """Writing tasks in the caller's transaction, never committing it."""

    def insert_task(
        self, conn: Caller, task: Task, trace: str | None = None, notify: bool = False
    ) -> Inserted:
        """Insert one task in the caller's transaction: one round trip unless its key is taken.
        ``trace``: the trace context to store with it (see ``tracing``); ``notify``: wake
        the workers by NOTIFY when the transaction commits (``notes.note``)."""
        with errors("enqueue"):
            if task.unique_key is not None:
                return run(conn, unique_steps(task, trace, notify))
            row = conn.execute(
                QUERIES["insert_one"], one_params(task, trace, notify), prepare=True
            ).fetchone()
            assert row is not None
            return Inserted(row[0], True, row[1])

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
                        copy.write_row(copy_row(tasks[i], ids[i], trace))
                woken = notes([tasks[i] for i in plain], notify)
                xid = conn.execute(QUERIES["current_xid_woken"], {"notes": woken}).fetchone()
                assert xid is not None
                out.update((i, Inserted(ids[i], True, xid[0])) for i in plain)
            if other:
                rest = [tasks[i] for i in other]
                steps = many_steps(rest, [ids[i] for i in other], trace, notes(rest, notify))
                inserted = run(conn, steps)
                out.update(zip(other, inserted, strict=True))
        return [out[i] for i in range(len(tasks))]
