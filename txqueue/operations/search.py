"""Tasks searched by ``TaskFilter`` on the application's connection: a page of them
(``find_tasks``), how many (``count_tasks``), and the groups of those failed for good
(``dead_letters``); the checks of a filter and of a page's size."""

from __future__ import annotations

import uuid

from ..core.fields import check_queue
from ..core.stored import TaskInfo
from ..errors import InvalidTypeError, InvalidValueError
from ..store.connections import bind, bind_async
from ..store.plans import Plan, call, run, run_async
from ..store.protocols import AnyStore, Manage
from .filters import DeadLetterGroup, TaskFilter

SEARCH_LIMIT = 1000


class TaskSearch:
    """The searches through one configuration's store: an App's, or the process's
    defaults (the store of the connection's kind)."""

    _store: AnyStore | None = None

    def find_tasks(
        self,
        conn: object,
        where: TaskFilter | None = None,
        *,
        limit: int = 50,
        before: uuid.UUID | str | None = None,
    ) -> list[TaskInfo]:
        """Tasks matching ``where`` (live and finished, within retention), newest first: up to
        ``limit``, below the task ``before`` (the last id of the page before).

        Example:

        ```python
        where = txqueue.TaskFilter(name="charge", failed_with="RuntimeError")
        page = txqueue.find_tasks(conn, where, limit=50)
        while page:
            for task in page:
                print(task.id, task.errors[-1]["message"])
            page = txqueue.find_tasks(conn, where, limit=50, before=page[-1].id)
        ```
        """
        return run(finding(*_search(where, limit, before), limit), bind(conn, self._store))

    async def find_tasks_async(
        self,
        conn: object,
        where: TaskFilter | None = None,
        *,
        limit: int = 50,
        before: uuid.UUID | str | None = None,
    ) -> list[TaskInfo]:
        """``find_tasks`` on an asyncio connection.

        Example:

        ```python
        tasks = await txqueue.find_tasks_async(conn, txqueue.TaskFilter(queue="payments"))
        ```
        """
        plan = finding(*_search(where, limit, before), limit)
        return await run_async(plan, await bind_async(conn, self._store))

    def count_tasks(
        self, conn: object, where: TaskFilter | None = None, *, cap: int | None = None
    ) -> int:
        """How many tasks match ``where``, counted in full: on a large table that reads every
        match. There is no default cap. With ``cap=N`` counting stops at ``N`` matches, so
        ``N`` means "``N`` or more" (what lets a page show "10,000+" and read no further).

        Example:

        ```python
        failed = txqueue.count_tasks(conn, txqueue.TaskFilter(state="failed"), cap=10_000)
        print(failed)  # 1
        ```
        """
        _check_cap(cap)
        return run(counting(where, cap), bind(conn, self._store))

    async def count_tasks_async(
        self, conn: object, where: TaskFilter | None = None, *, cap: int | None = None
    ) -> int:
        """``count_tasks`` on an asyncio connection.

        Example:

        ```python
        pending = await txqueue.count_tasks_async(conn, txqueue.TaskFilter(state="pending"))
        ```
        """
        _check_cap(cap)
        return await run_async(counting(where, cap), await bind_async(conn, self._store))

    def dead_letters(
        self, conn: object, *, queue: str | None = None, limit: int = 100
    ) -> list[DeadLetterGroup]:
        """The tasks failed for good (within retention), grouped by task name and the type of
        the error they failed with last, the biggest group first; each group's ``where`` finds
        its tasks to retry or delete.

        Example:

        ```python
        for group in txqueue.dead_letters(conn, queue="payments"):
            print(group.name, group.error, group.count)  # charge builtins.RuntimeError 1
        ```
        """
        if queue is not None:
            check_queue(queue)
        check_limit(limit)
        bound = bind(conn, self._store)
        return bound(Manage.dead_letters, queue, limit)


def finding(where: TaskFilter, before: uuid.UUID | None, limit: int) -> Plan[list[TaskInfo]]:
    """Up to ``limit`` tasks matching ``where``, below the task ``before``, newest first."""
    found: list[TaskInfo] = yield call(Manage.find_tasks, where, before, limit)
    return found


def counting(where: object, cap: int | None) -> Plan[int]:
    """How many tasks match ``where`` (a TaskFilter, or None: all), up to ``cap``."""
    count: int = yield call(Manage.count_tasks, check_filter(where), cap)
    return count


def check_filter(where: object, required: bool = False) -> TaskFilter:
    """``where`` as a TaskFilter: None is every task, unless a filter is ``required``."""
    if where is None and not required:
        return TaskFilter()
    if not isinstance(where, TaskFilter):
        kind = type(where).__name__
        raise InvalidTypeError("where", f"must be a txqueue.TaskFilter, not {kind}")
    return where


def _check_cap(cap: object) -> None:
    if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap < 1):
        raise InvalidValueError("cap", f"must be a positive int or None, got {cap!r}")


def check_limit(limit: object) -> None:
    """``limit``: a page's size, from 1 to SEARCH_LIMIT."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= SEARCH_LIMIT:
        raise InvalidValueError("limit", f"must be an int from 1 to {SEARCH_LIMIT}, got {limit!r}")


def _search(
    where: TaskFilter | None, limit: int, before: uuid.UUID | str | None
) -> tuple[TaskFilter, uuid.UUID | None]:
    check_limit(limit)
    return check_filter(where), page_start(before)


def page_start(before: uuid.UUID | str | None, of: str = "task") -> uuid.UUID | None:
    """``before``, the last id of the page before (of a ``of``), as a UUID."""
    if before is None or isinstance(before, uuid.UUID):
        return before
    try:
        return uuid.UUID(str(before))
    except ValueError:
        raise InvalidValueError("before", f"must be a {of} id, got {before!r}") from None
