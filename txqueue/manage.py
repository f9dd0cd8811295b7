"""Task management on the application's connection: retry, cancel, look up, list.

Like ``enqueue``, each call runs in the caller's transaction and never commits for it;
wake-ups for retried tasks go out after the commit where txqueue can see it.
"""

from __future__ import annotations

import uuid
from typing import Any

from . import wakeup
from .client import wake
from .errors import InvalidTypeError, InvalidValueError, TaskNotFoundError, TaskStateError
from .store.connections import resolve
from .store.records import Moved
from .task import RUNNING, STATES, TaskInfo, check_queue

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
    info = resolved.store.get_task(resolved.conn, tid)
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
    if state is not None and state not in STATES:
        raise InvalidValueError("state", f"must be one of {', '.join(STATES)}, got {state!r}")
    if queue is not None:
        check_queue(queue)
    if name is not None and not isinstance(name, str):
        raise InvalidTypeError("name", "must be a str")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 100_000:
        raise InvalidValueError("limit", f"must be an int from 1 to 100000, got {limit!r}")
    resolved = resolve(conn)
    return resolved.store.list_tasks(
        resolved.conn, state=state, queue=queue, name=name, limit=limit
    )


def retry(conn: Any, task_id: uuid.UUID | str) -> None:
    """Run a failed or cancelled task again, now, with at least one more attempt allowed.

    Its attempts and error history are kept. TaskStateError if it is not failed or
    cancelled; StoreError if its unique_key is held by a live task.
    """
    tid = task_id_of(task_id)
    resolved = resolve(conn)
    moved = resolved.store.retry_ids(resolved.conn, [tid])
    if not moved:
        info = get_task(conn, tid)
        raise TaskStateError(
            f"task {tid} is {info.state}: only failed or cancelled tasks can be retried",
            info.state,
        )
    _wake(conn, moved)


def retry_failed(conn: Any, *, queue: str | None = None) -> int:
    """Run every failed task (of ``queue``, or of all queues) again; returns how many.

    A task whose unique_key a pending or running task holds is left failed.
    """
    if queue is not None:
        check_queue(queue)
    resolved = resolve(conn)
    total, after = 0, uuid.UUID(int=0)
    while True:
        moved = resolved.store.retry_failed(resolved.conn, queue, after, _RETRY_BATCH)
        _wake(conn, moved)
        total += len(moved)
        if len(moved) < _RETRY_BATCH:
            return total
        after = max(tid for tid, _, _ in moved)


def cancel(conn: Any, task_id: uuid.UUID | str) -> str:
    """Cancel a task. Pending: it becomes ``cancelled`` and never runs; returns "cancelled".
    Running: its handler sees ``ctx.cancelled`` within about a second and the task ends
    ``cancelled`` if the handler then raises; returns "running". TaskStateError if it has
    already finished."""
    tid = task_id_of(task_id)
    resolved = resolve(conn)
    state = resolved.store.cancel(resolved.conn, tid)
    if state is None:
        info = get_task(conn, tid)
        raise TaskStateError(f"task {tid} already finished: it is {info.state}", info.state)
    assert state in (RUNNING, "cancelled"), state
    return state


def _wake(conn: Any, moved: list[Moved]) -> None:
    wake(conn, [(queue, wakeup.encode(tid, xid)) for tid, queue, xid in moved])
