"""The task statements whose code is the same on both stores (``list_tasks``, ``browse``,
searches by ``TaskFilter`` and a bulk operation's batches): each store gives what differs,
its statements, how it reads a row and an id, how it takes a filter, and its errors."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, ClassVar, Protocol

from ..filters import TaskFilter
from ..task import TaskInfo, TaskState
from .reports import Page
from .sql import Queries

NEWEST = uuid.UUID(int=(1 << 128) - 1)
"""Above every task's id: a page that starts before it starts at the newest task."""


class _Rows(Protocol):
    def fetchall(self) -> list[Any]: ...
    def fetchone(self) -> Any: ...


class Executes(Protocol):
    """A connection as these reads use one: psycopg's, or sqlite3's."""

    def execute(self, query: str, params: Any, /) -> _Rows: ...


class TaskReads:
    """The shared reads; a store says the rest by overriding the four hooks below."""

    queries: ClassVar[Queries]

    def _errors(self, action: str) -> AbstractContextManager[None]:
        """The store's driver errors raised as StoreError naming ``action``."""
        raise NotImplementedError

    def _task_info(self, row: Sequence[Any]) -> TaskInfo:
        raise NotImplementedError

    def _id_param(self, task_id: uuid.UUID) -> object:
        """An id as the driver takes it."""
        raise NotImplementedError

    def _id_value(self, value: Any) -> uuid.UUID:
        """An id as the driver returns it, as txqueue's callers get it."""
        raise NotImplementedError

    def _filter_params(
        self, where: TaskFilter, states: Sequence[TaskState] | None
    ) -> dict[str, Any]:
        """The ``task_filter`` part's parameters for ``where``, its states as ``states``."""
        raise NotImplementedError

    def _ids_param(self, ids: Sequence[uuid.UUID]) -> object:
        """Ids as the driver takes a list of them."""
        raise NotImplementedError

    def _filtered(self, conn: Executes, name: str, params: dict[str, Any]) -> _Rows:
        """Run a statement of the ``task_filter`` part."""
        return conn.execute(self.queries[name], params)

    def find_tasks(
        self, conn: Executes, where: TaskFilter, before: uuid.UUID | None, limit: int
    ) -> list[TaskInfo]:
        """Up to ``limit`` tasks matching ``where``, newest first, below ``before``."""
        params = self._filter_params(where, where.states)
        params |= {"before": self._id_param(before or NEWEST), "limit": limit}
        with self._errors("search"):
            rows = self._filtered(conn, "find_tasks", params).fetchall()
        return [self._task_info(r) for r in rows]

    def count_tasks(self, conn: Executes, where: TaskFilter, cap: int | None = None) -> int:
        """How many tasks match ``where``, counted up to ``cap`` (None: all)."""
        params = self._filter_params(where, where.states) | {"cap": cap}
        with self._errors("count"):
            row = self._filtered(conn, "count_tasks", params).fetchone()
        return int(row[0])

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
        params = self._filter_params(where, states)
        params |= {
            "after": self._id_param(after),
            "upto": self._id_param(upto),
            "limit": limit,
            "retrying": retrying,
        }
        rows = self._filtered(conn, "pick_tasks", params).fetchall()
        return [(self._id_value(i), TaskState(s), bool(step), key) for i, s, step, key in rows]

    def delete_tasks(self, conn: Executes, ids: Sequence[uuid.UUID]) -> int:
        """Delete those of ``ids`` that have finished; how many."""
        cursor = conn.execute(self.queries["delete_tasks"], {"ids": self._ids_param(ids)})
        return int(getattr(cursor, "rowcount", 0))

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
        with self._errors("list"):
            rows = conn.execute(self.queries["list_tasks"], params).fetchall()
        return [self._task_info(r) for r in rows]

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
        params = {
            "before": self._id_param(before or NEWEST),
            "window": window,
            "state": state,
            "queue": queue,
            "name": name,
            "limit": limit,
        }
        with self._errors("dashboard"):
            rows = conn.execute(self.queries["browse"], params).fetchall()
            tasks = [self._task_info(r) for r in rows]
            if len(tasks) == limit:
                return Page(tasks, tasks[-1].id)
            row = conn.execute(self.queries["window_end"], params).fetchone()
        # A short page: the next one starts below the window, if there is more below it.
        return Page(tasks, None if row is None else self._id_value(row[0]))
