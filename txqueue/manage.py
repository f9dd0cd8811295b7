"""Task management on the application's connection: retry, cancel, look up, list, the
history; each
with its asyncio form (``retry_async``, …) for the connections ``enqueue_async`` takes.

Like ``enqueue``, each call runs in the caller's transaction and never commits for it;
wake-ups for retried tasks go out after the commit where txqueue can see it.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from . import wakeup
from .client import deliver, wake
from .errors import InvalidTypeError, InvalidValueError, TaskNotFoundError, TaskStateError
from .store.connections import AsyncResolved, resolve, resolve_async
from .store.records import HistoryFilter, Moved
from .task import CANCELLED, RUNNING, STATES, TaskEvent, TaskInfo, check_queue

_RETRY_BATCH = 1000


def task_id_of(value: object) -> uuid.UUID:
    if isinstance(value, uuid.UUID):
        return value
    if not isinstance(value, str):
        raise InvalidTypeError("id", f"must be a UUID or a str, not {type(value).__name__}")
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidValueError("id", f"{value[:64]!r} is not a task id (a UUID)") from None


def get_task(conn: Any, task_id: uuid.UUID | str) -> TaskInfo:
    """The task as stored, with its error history; TaskNotFoundError if there is none."""
    tid = task_id_of(task_id)
    resolved = resolve(conn)
    return _found(tid, resolved.store.get_task(resolved.conn, tid))


async def get_task_async(conn: Any, task_id: uuid.UUID | str) -> TaskInfo:
    """``get_task`` on an asyncio connection."""
    tid = task_id_of(task_id)
    resolved = await resolve_async(conn)
    return _found(tid, await resolved.store.get_task(resolved.conn, tid))


def _found(tid: uuid.UUID, info: TaskInfo | None) -> TaskInfo:
    if info is None:
        raise TaskNotFoundError(f"no task {tid} (never enqueued, rolled back, or pruned)")
    return info


def list_tasks(
    conn: Any,
    *,
    state: str | None = None,
    queue: str | None = None,
    name: str | None = None,
    limit: int = 50,
) -> list[TaskInfo]:
    """The newest tasks matching every filter given, newest first."""
    _check_filters(state, queue, name, limit)
    resolved = resolve(conn)
    return resolved.store.list_tasks(
        resolved.conn, state=state, queue=queue, name=name, limit=limit
    )


async def list_tasks_async(
    conn: Any,
    *,
    state: str | None = None,
    queue: str | None = None,
    name: str | None = None,
    limit: int = 50,
) -> list[TaskInfo]:
    """``list_tasks`` on an asyncio connection."""
    _check_filters(state, queue, name, limit)
    resolved = await resolve_async(conn)
    return await resolved.store.list_tasks(
        resolved.conn, state=state, queue=queue, name=name, limit=limit
    )


def history(
    conn: Any,
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
    name or queue) on a database that keeps many tasks."""
    _check_filters(state, queue, name, limit)
    if by is not None and not isinstance(by, str):
        raise InvalidTypeError("by", "must be a str")
    for field, when in (("since", since), ("until", until)):
        if when is not None and (not isinstance(when, datetime) or when.tzinfo is None):
            raise InvalidValueError(field, f"must be an aware datetime, got {when!r}")
    filters = HistoryFilter(name, queue, state, by, since, until, limit)
    resolved = resolve(conn)
    return resolved.store.history(resolved.conn, filters)


def _check_filters(state: object, queue: object, name: object, limit: object) -> None:
    if state is not None and state not in STATES:
        raise InvalidValueError("state", f"must be one of {', '.join(STATES)}, got {state!r}")
    if queue is not None:
        check_queue(queue)
    if name is not None and not isinstance(name, str):
        raise InvalidTypeError("name", "must be a str")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100_000:
        raise InvalidValueError("limit", f"must be an int from 1 to 100000, got {limit!r}")


def retry(conn: Any, task_id: uuid.UUID | str, *, by: str | None = None) -> None:
    """Run a failed or cancelled task again, now, with at least one more attempt allowed.

    Its attempts and history are kept; ``by`` names who asked, in the history. TaskStateError
    if it is not failed or cancelled; StoreError if its unique_key is held by a live task.
    """
    tid = task_id_of(task_id)
    resolved = resolve(conn)
    moved = resolved.store.retry_ids(resolved.conn, [tid], _by(by))
    if not moved:
        raise _not_retried(get_task(conn, tid))
    _wake(conn, moved)


async def retry_async(conn: Any, task_id: uuid.UUID | str, *, by: str | None = None) -> None:
    """``retry`` on an asyncio connection."""
    tid = task_id_of(task_id)
    resolved = await resolve_async(conn)
    moved = await resolved.store.retry_ids(resolved.conn, [tid], _by(by))
    if not moved:
        raise _not_retried(await get_task_async(conn, tid))
    _wake_async(resolved, moved)


BY_LIMIT = 200
"""Characters of ``by`` a history keeps."""


def _by(by: str | None) -> str | None:
    if by is not None and (not isinstance(by, str) or not by.strip()):
        raise InvalidValueError("by", f"must be a non-empty str naming who asked, got {by!r}")
    return None if by is None else by[:BY_LIMIT]


def _not_retried(info: TaskInfo) -> TaskStateError:
    return TaskStateError(
        f"task {info.id} is {info.state}: only failed or cancelled tasks can be retried",
        info.state,
    )


def retry_failed(conn: Any, *, queue: str | None = None, by: str | None = None) -> int:
    """Run every failed task (of ``queue``, or of all queues) again; returns how many.

    A task whose unique_key a pending or running task holds is left failed. ``by`` names
    who asked, in each task's history.
    """
    if queue is not None:
        check_queue(queue)
    by = _by(by)
    resolved = resolve(conn)
    total, after = 0, uuid.UUID(int=0)
    while True:
        moved = resolved.store.retry_failed(resolved.conn, queue, after, _RETRY_BATCH, by)
        _wake(conn, moved)
        total += len(moved)
        if len(moved) < _RETRY_BATCH:
            return total
        after = max(tid for tid, _, _ in moved)


async def retry_failed_async(conn: Any, *, queue: str | None = None, by: str | None = None) -> int:
    """``retry_failed`` on an asyncio connection."""
    if queue is not None:
        check_queue(queue)
    by = _by(by)
    resolved = await resolve_async(conn)
    total, after = 0, uuid.UUID(int=0)
    while True:
        moved = await resolved.store.retry_failed(resolved.conn, queue, after, _RETRY_BATCH, by)
        _wake_async(resolved, moved)
        total += len(moved)
        if len(moved) < _RETRY_BATCH:
            return total
        after = max(tid for tid, _, _ in moved)


def cancel(conn: Any, task_id: uuid.UUID | str, *, by: str | None = None) -> str:
    """Cancel a task. Pending: it becomes ``cancelled`` and never runs; returns "cancelled".
    Running: its handler sees ``ctx.cancelled`` within about a second and the task ends
    ``cancelled`` if the handler then raises; returns "running". TaskStateError if it has
    already finished. ``by`` names who asked, in the task's history."""
    tid = task_id_of(task_id)
    resolved = resolve(conn)
    state = resolved.store.cancel(resolved.conn, tid, _by(by))
    if state is None:
        raise _finished(get_task(conn, tid))
    assert state in (RUNNING, CANCELLED), state
    return state


async def cancel_async(conn: Any, task_id: uuid.UUID | str, *, by: str | None = None) -> str:
    """``cancel`` on an asyncio connection."""
    tid = task_id_of(task_id)
    resolved = await resolve_async(conn)
    state = await resolved.store.cancel(resolved.conn, tid, _by(by))
    if state is None:
        raise _finished(await get_task_async(conn, tid))
    assert state in (RUNNING, CANCELLED), state
    return state


def _finished(info: TaskInfo) -> TaskStateError:
    return TaskStateError(f"task {info.id} already finished: it is {info.state}", info.state)


def _wakeups(moved: list[Moved]) -> list[tuple[str, bytes]]:
    return [(queue, wakeup.encode(tid, xid)) for tid, queue, xid in moved]


def _wake(conn: Any, moved: list[Moved]) -> None:
    wake(conn, _wakeups(moved))


def _wake_async(resolved: AsyncResolved, moved: list[Moved]) -> None:
    deliver(resolved.after_commit, resolved.key, _wakeups(moved))
