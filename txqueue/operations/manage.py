"""Task management on the application's connection: retry, cancel, look up, list, the
history; each with its asyncio form (``retry_async``, …) for the connections
``enqueue_async`` takes.

Like ``enqueue``, each call runs in the caller's transaction and never commits for it;
wake-ups for retried tasks go out after the commit where txqueue can see it.

``Management`` does the work through one configuration's store and wake-ups: an App's
(it is one), or the process-wide defaults behind the module-level functions.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from ..core.fields import check_queue
from ..core.stored import TaskEvent, TaskInfo
from ..core.task import STATES
from ..errors import InvalidTypeError, InvalidValueError
from ..outbox.client import Delivery
from ..store.connections import bind, bind_async
from ..store.plans import run, run_async
from ..store.protocols import AnyStore, Manage
from ..store.records import HistoryFilter
from .bulk import BulkOperations, check_by
from .one import cancelling, getting, listing, retrying, retrying_failed


class Management(BulkOperations):
    """The management calls, through ``_store`` and ``_delivery`` (None: the process's
    defaults, the store of the connection's kind and ``configure``'s broker). Each runs
    its plan (``one``), whose checks follow those made here, before the
    connection is looked at."""

    _store: AnyStore | None = None
    _delivery: Delivery | None = None

    def get_task(self, conn: object, task_id: uuid.UUID | str) -> TaskInfo:
        """The task as stored, with its error history; TaskNotFoundError if there is none.

        Example:

        ```python
        info = txqueue.get_task(conn, task_id)
        print(info.state, info.errors[-1]["traceback"])
        ```
        """
        return run(getting(task_id_of(task_id)), bind(conn, self._store))

    async def get_task_async(self, conn: object, task_id: uuid.UUID | str) -> TaskInfo:
        """``get_task`` on an asyncio connection.

        Example:

        ```python
        info = await txqueue.get_task_async(conn, task_id)
        ```
        """
        return await run_async(getting(task_id_of(task_id)), await bind_async(conn, self._store))

    def list_tasks(
        self,
        conn: object,
        *,
        state: str | None = None,
        queue: str | None = None,
        name: str | None = None,
        limit: int = 50,
    ) -> list[TaskInfo]:
        """The newest tasks matching every filter given, newest first.

        Example:

        ```python
        for task in txqueue.list_tasks(conn, state="failed", queue="payments", limit=20):
            print(task.id, task.name, task.errors[-1]["message"])
        ```
        """
        _check_filters(state, queue, name, limit)
        return run(listing(state, queue, name, limit), bind(conn, self._store))

    async def list_tasks_async(
        self,
        conn: object,
        *,
        state: str | None = None,
        queue: str | None = None,
        name: str | None = None,
        limit: int = 50,
    ) -> list[TaskInfo]:
        """``list_tasks`` on an asyncio connection.

        Example:

        ```python
        failed = await txqueue.list_tasks_async(conn, state="failed")
        ```
        """
        _check_filters(state, queue, name, limit)
        bound = await bind_async(conn, self._store)
        return await run_async(listing(state, queue, name, limit), bound)

    def history(
        self,
        conn: object,
        *,
        name: str | None = None,
        queue: str | None = None,
        state: str | None = None,
        by: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 100,
    ) -> list[TaskEvent]:
        """Events of the tasks kept (a finished task's until the cleaner prunes it), newest
        first, matching every filter given: the task's ``name`` and ``queue``, the ``state`` an
        event moved it to, who made the change (``by``: a worker's id, ``cleaner``, or who
        asked by hand), and when (``since`` included, ``until`` not; aware datetimes).

        It reads every event of the tasks that changed since ``since``: give ``since`` (or a
        name or queue) on a database that keeps many tasks.

        Example:

        ```python
        from datetime import UTC, datetime, timedelta

        since = datetime.now(UTC) - timedelta(hours=1)
        for event in txqueue.history(conn, queue="payments", since=since):
            print(event.task_id, event.name, event.event.move, event.event.by)
        ```
        """
        _check_filters(state, queue, name, limit)
        if by is not None and not isinstance(by, str):
            raise InvalidTypeError("by", "must be a str")
        for field, when in (("since", since), ("until", until)):
            if when is not None and (not isinstance(when, datetime) or when.tzinfo is None):
                raise InvalidValueError(field, f"must be an aware datetime, got {when!r}")
        filters = HistoryFilter(name, queue, state, by, since, until, limit)
        bound = bind(conn, self._store)
        return bound(Manage.history, filters)

    def retry(self, conn: object, task_id: uuid.UUID | str, *, by: str | None = None) -> None:
        """Run a failed or cancelled task again, now, with at least one more attempt allowed.

        Its attempts and history are kept; ``by`` names who asked, in the history. TaskStateError
        if it is not failed or cancelled; StoreError if its unique_key is held by a live task.

        Example:

        ```python
        txqueue.retry(conn, task_id, by="ops: the card processor is back")  # pending again, now
        ```
        """
        tid = task_id_of(task_id)
        bound = bind(conn, self._store)
        run(retrying(bound, tid, by, self._delivery), bound)

    async def retry_async(
        self, conn: object, task_id: uuid.UUID | str, *, by: str | None = None
    ) -> None:
        """``retry`` on an asyncio connection.

        Example:

        ```python
        await txqueue.retry_async(conn, task_id)
        ```
        """
        tid = task_id_of(task_id)
        bound = await bind_async(conn, self._store)
        await run_async(retrying(bound, tid, by, self._delivery), bound)

    def retry_failed(self, conn: object, *, queue: str | None = None, by: str | None = None) -> int:
        """Run every failed task (of ``queue``, or of all queues) again; returns how many.

        A task whose unique_key a pending or running task holds is left failed. ``by`` names
        who asked, in each task's history.

        Example:

        ```python
        print(txqueue.retry_failed(conn, queue="payments"))  # 1
        ```
        """
        by = _queue_and_by(queue, by)
        bound = bind(conn, self._store)
        return run(retrying_failed(bound, queue, by, self._delivery), bound)

    async def retry_failed_async(
        self, conn: object, *, queue: str | None = None, by: str | None = None
    ) -> int:
        """``retry_failed`` on an asyncio connection.

        Example:

        ```python
        retried = await txqueue.retry_failed_async(conn, queue="payments")
        ```
        """
        by = _queue_and_by(queue, by)
        bound = await bind_async(conn, self._store)
        return await run_async(retrying_failed(bound, queue, by, self._delivery), bound)

    def cancel(self, conn: object, task_id: uuid.UUID | str, *, by: str | None = None) -> str:
        """Cancel a task. Pending: it becomes ``cancelled`` and never runs; returns "cancelled".
        Running: its handler sees ``ctx.cancelled`` within about a second and the task ends
        ``cancelled`` if the handler then raises; returns "running". TaskStateError if it has
        already finished. ``by`` names who asked, in the task's history.

        Example:

        ```python
        task_id = send_receipt.enqueue(conn, order=42)
        print(txqueue.cancel(conn, task_id, by="ops"))  # cancelled: it never runs
        ```
        """
        tid = task_id_of(task_id)
        bound = bind(conn, self._store)
        return run(cancelling(bound, tid, by, self._delivery), bound)

    async def cancel_async(
        self, conn: object, task_id: uuid.UUID | str, *, by: str | None = None
    ) -> str:
        """``cancel`` on an asyncio connection.

        Example:

        ```python
        task_id = await send_receipt.enqueue_async(conn, order=42)
        await txqueue.cancel_async(conn, task_id)
        ```
        """
        tid = task_id_of(task_id)
        bound = await bind_async(conn, self._store)
        return await run_async(cancelling(bound, tid, by, self._delivery), bound)


def task_id_of(value: object) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    if not isinstance(value, str):
        raise InvalidTypeError("id", f"must be a UUID or a str, not {type(value).__name__}")
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidValueError("id", f"{value[:64]!r} is not a task id (a UUID)") from None


def _check_filters(state: object, queue: object, name: object, limit: object) -> None:
    if state is not None and state not in STATES:
        raise InvalidValueError("state", f"must be one of {', '.join(STATES)}, got {state!r}")
    if queue is not None:
        check_queue(queue)
    if name is not None and not isinstance(name, str):
        raise InvalidTypeError("name", "must be a str")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100_000:
        raise InvalidValueError("limit", f"must be an int from 1 to 100000, got {limit!r}")


def _queue_and_by(queue: object, by: object) -> str | None:
    if queue is not None:
        check_queue(queue)
    return check_by(by)
