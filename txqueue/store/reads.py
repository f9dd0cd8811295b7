"""The task statements whose code is the same on both stores (look-ups, ``list_tasks``,
``browse``, searches by ``TaskFilter``, a page of workflows, a bulk operation's batches,
and the reads a cancel or a retry by hand locks its rows with): each store gives what
differs in a ``Dialect``.

The reads the asyncio stores make too are written once without I/O, as ``follow``'s
steps are: each yields (a statement's name, its parameters) and is sent its rows;
``TaskReads`` runs them on a sync connection, ``aio.AsyncStore`` awaits them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Generator, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Protocol, TypeVar

from ..core.stored import TaskInfo
from ..core.task import STATES, TaskState
from ..operations.filters import TaskFilter
from ..workflows.graph import (
    FLOW_STATES,
    WorkflowSearch,
    WorkflowSummary,
    flow_code_state,
    flow_state,
    state_codes,
)
from . import follow
from .reports import Page
from .sql import Queries

NEWEST = uuid.UUID(int=(1 << 128) - 1)
"""Above every task's id: a page that starts before it starts at the newest task."""

R = TypeVar("R")
Reads = Generator[tuple[str, Any], list[Any], R]
"""A read without I/O: it yields (a statement's name, its parameters), is sent the rows."""


class _Rows(Protocol):
    def fetchall(self) -> list[Any]: ...
    def fetchone(self) -> Any: ...


class Executes(Protocol):
    """A connection as these reads use one: psycopg's, or sqlite3's."""

    def execute(self, query: str, params: Any, /) -> _Rows: ...


@dataclass(frozen=True, slots=True)
class Dialect:
    """What the shared reads need to know of a store: its statements, its driver errors
    raised as StoreError naming an action, how it reads a task's row and takes a filter
    (its states given apart), how its driver takes an id, a list of them, and returns
    one (as txqueue's callers get it), and how it takes a time and returns one."""

    queries: Queries
    errors: Callable[[str], AbstractContextManager[None]]
    task_info: Callable[[Sequence[Any]], TaskInfo]
    filter_params: Callable[[TaskFilter, Sequence[TaskState] | None], dict[str, Any]]
    id_param: Callable[[uuid.UUID], object]
    ids_param: Callable[[Sequence[uuid.UUID]], object]
    id_value: Callable[[Any], uuid.UUID]
    time_param: Callable[[datetime | None], object]
    time_value: Callable[[Any], datetime]


def get_task(d: Dialect, task_id: uuid.UUID) -> Reads[TaskInfo | None]:
    rows = yield "get_task", (d.id_param(task_id),)
    return d.task_info(rows[0]) if rows else None


def find_tasks(
    d: Dialect, where: TaskFilter, before: uuid.UUID | None, limit: int
) -> Reads[list[TaskInfo]]:
    params = d.filter_params(where, where.states)
    params |= {"before": d.id_param(before or NEWEST), "limit": limit}
    rows = yield "find_tasks", params
    return [d.task_info(r) for r in rows]


def count_tasks(d: Dialect, where: TaskFilter, cap: int | None) -> Reads[int]:
    rows = yield "count_tasks", d.filter_params(where, where.states) | {"cap": cap}
    return int(rows[0][0])


def list_workflows(
    d: Dialect, search: WorkflowSearch, before: uuid.UUID | None, limit: int
) -> Reads[list[WorkflowSummary]]:
    codes = None if search.states is None else json.dumps(state_codes(search.states))
    params = {
        "before": d.id_param(before or NEWEST),
        "name": search.name,
        "created_after": d.time_param(search.created_after),
        "created_before": d.time_param(search.created_before),
        "codes": codes,
        "limit": limit,
    }
    rows = yield "list_workflows", params
    return [_summary(d, r) for r in rows]


def _summary(d: Dialect, row: Sequence[Any]) -> WorkflowSummary:
    """A row of ``list_workflows``: id, name, created_at, the state's code, when its last
    step ended, and how many steps are in each state, in STATES' order."""
    wid, name, created_at, code, last, *counts = row
    steps = {str(s): int(n) for s, n in zip(STATES, counts, strict=True)}
    finished = None if code & 4 or last is None else d.time_value(last)
    state = flow_code_state(code)
    return WorkflowSummary(d.id_value(wid), name, state, steps, d.time_value(created_at), finished)


def list_tasks(d: Dialect, params: dict[str, Any]) -> Reads[list[TaskInfo]]:
    rows = yield "list_tasks", params
    return [d.task_info(r) for r in rows]


def lock_state(d: Dialect, task_id: uuid.UUID) -> Reads[TaskState | None]:
    rows = yield "lock_task", (d.id_param(task_id),)
    return TaskState(rows[0][0]) if rows else None


def failed_page(d: Dialect, page: tuple[str | None, uuid.UUID, int]) -> Reads[list[uuid.UUID]]:
    queue, after, limit = page
    rows = yield "failed_page", {"queue": queue, "after": d.id_param(after), "limit": limit}
    return [d.id_value(r[0]) for r in rows]


def open_steps(d: Dialect, workflow_id: uuid.UUID) -> Reads[list[tuple[uuid.UUID, TaskState]]]:
    rows = yield "open_steps", (d.id_param(workflow_id),)
    return [(d.id_value(i), TaskState(state)) for i, state in rows]


def steps_of(d: Dialect, ids: Sequence[uuid.UUID]) -> Reads[list[tuple[Any, ...]]]:
    rows = yield "steps_of", {"ids": d.ids_param(ids)}
    return [(d.id_value(i), s, move, parents, d.id_value(w)) for i, s, move, parents, w in rows]


class TaskReads:
    """The shared reads on a sync connection; a store gives its ``dialect``."""

    dialect: ClassVar[Dialect]

    def _rows(self, conn: Executes, name: str, params: Any) -> list[Any]:
        """The rows of the statement ``name``."""
        return conn.execute(self.dialect.queries[name], params).fetchall()

    def _read(self, conn: Executes, reads: Reads[R]) -> R:
        """Run ``reads`` on ``conn``."""
        return follow.drive(reads, lambda name, params: self._rows(conn, name, params))

    def get_task(self, conn: Executes, task_id: uuid.UUID) -> TaskInfo | None:
        with self.dialect.errors("show"):
            return self._read(conn, get_task(self.dialect, task_id))

    def find_tasks(
        self, conn: Executes, where: TaskFilter, before: uuid.UUID | None, limit: int
    ) -> list[TaskInfo]:
        """Up to ``limit`` tasks matching ``where``, newest first, below ``before``."""
        with self.dialect.errors("search"):
            return self._read(conn, find_tasks(self.dialect, where, before, limit))

    def count_tasks(self, conn: Executes, where: TaskFilter, cap: int | None = None) -> int:
        """How many tasks match ``where``, counted up to ``cap`` (None: all)."""
        with self.dialect.errors("count"):
            return self._read(conn, count_tasks(self.dialect, where, cap))

    def list_tasks(
        self,
        conn: Executes,
        *,
        state: str | None,
        queue: str | None,
        name: str | None,
        limit: int,
    ) -> list[TaskInfo]:
        """The newest tasks matching every filter given."""
        params = {"state": state, "queue": queue, "name": name, "limit": limit}
        with self.dialect.errors("list"):
            return self._read(conn, list_tasks(self.dialect, params))

    def lock_state(self, conn: Executes, task_id: uuid.UUID) -> TaskState | None:
        """The task's state, locked where the store can."""
        return self._read(conn, lock_state(self.dialect, task_id))

    def _failed_page(
        self, conn: Executes, page: tuple[str | None, uuid.UUID, int]
    ) -> list[uuid.UUID]:
        return self._read(conn, failed_page(self.dialect, page))

    def _open_steps(
        self, conn: Executes, workflow_id: uuid.UUID
    ) -> list[tuple[uuid.UUID, TaskState]]:
        return self._read(conn, open_steps(self.dialect, workflow_id))

    def _steps_of(self, conn: Executes, ids: Sequence[uuid.UUID]) -> list[tuple[Any, ...]]:
        return self._read(conn, steps_of(self.dialect, ids))

    def list_workflows(
        self, conn: Executes, search: WorkflowSearch, before: uuid.UUID | None, limit: int
    ) -> list[WorkflowSummary]:
        """Up to ``limit`` workflows matching ``search``, newest first, below ``before``."""
        with self.dialect.errors("list workflows"):
            return self._read(conn, list_workflows(self.dialect, search, before, limit))

    def workflow_counts(self, conn: Executes, cap: int) -> dict[str, int]:
        """The newest ``cap`` workflows, counted by state (``WorkflowInfo.state``)."""
        counts = dict.fromkeys(FLOW_STATES, 0)
        with self.dialect.errors("count workflows"):
            for running, failed, cancelled in self._rows(conn, "workflow_flags", {"cap": cap}):
                counts[flow_state(bool(running), bool(failed), bool(cancelled))] += 1
        return counts

    def pick_tasks(
        self,
        conn: Executes,
        where: TaskFilter,
        states: Sequence[TaskState],
        after: uuid.UUID,
        upto: uuid.UUID,
        limit: int,
        retrying: bool = False,
    ) -> list[tuple[uuid.UUID, TaskState, bool, str | None]]:
        """A bulk operation's next batch in id order between ``after`` and ``upto``: (id,
        state, whether it is a workflow's step, unique key), locked until the transaction
        ends where the store can; ``retrying``: none whose unique key a live task holds."""
        d = self.dialect
        params = d.filter_params(where, states)
        params |= {
            "after": d.id_param(after),
            "upto": d.id_param(upto),
            "limit": limit,
            "retrying": retrying,
        }
        rows = self._rows(conn, "pick_tasks", params)
        return [(d.id_value(i), TaskState(s), bool(step), key) for i, s, step, key in rows]

    def delete_tasks(self, conn: Executes, ids: Sequence[uuid.UUID]) -> int:
        """Delete those of ``ids`` that have finished; how many."""
        query = self.dialect.queries["delete_tasks"]
        cursor = conn.execute(query, {"ids": self.dialect.ids_param(ids)})
        return int(getattr(cursor, "rowcount", 0))

    def browse(
        self,
        conn: Executes,
        *,
        state: str | None,
        queue: str | None,
        name: str | None,
        before: uuid.UUID | None,
        window: int,
        limit: int,
    ) -> Page:
        """Tasks newest first from ``before``: at most ``limit`` of the ``window`` tasks
        below it that match the filters, and where the next page starts."""
        d = self.dialect
        params = {
            "before": d.id_param(before or NEWEST),
            "window": window,
            "state": state,
            "queue": queue,
            "name": name,
            "limit": limit,
        }
        with d.errors("dashboard"):
            rows = conn.execute(d.queries["browse"], params).fetchall()
            tasks = [d.task_info(r) for r in rows]
            if len(tasks) == limit:
                return Page(tasks, tasks[-1].id)
            row = conn.execute(d.queries["window_end"], params).fetchone()
        # A short page: the next one starts below the window, if there is more below it.
        return Page(tasks, None if row is None else d.id_value(row[0]))
