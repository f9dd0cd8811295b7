"""What the management calls on one task do, written once as plans (``plans``) that
``manage`` runs on a sync or an asyncio connection: read a task or a page of them, retry
one, retry every failed one, cancel one; with the errors they raise and the wake-ups of
the tasks they make ready."""

from __future__ import annotations

import uuid
from typing import Any

from ..core.stored import TaskInfo
from ..core.task import CANCELLED, FAILED, RUNNING
from ..errors import TaskNotFoundError, TaskStateError
from ..outbox import wakeup
from ..outbox.client import Delivery, wakeups_of, waking
from ..store.bound import AsyncBound, Bound
from ..store.plans import Plan, call
from ..store.protocols import Manage
from ..store.records import Inserted, Moved
from .bulk import check_by

RETRY_BATCH = 1000
"""Failed tasks ``retry_failed`` moves per statement."""

Either = Bound[Any] | AsyncBound


def getting(tid: uuid.UUID) -> Plan[TaskInfo]:
    """The task ``tid``; TaskNotFoundError if there is none."""
    info: TaskInfo | None = yield call(Manage.get_task, tid)
    if info is None:
        raise TaskNotFoundError(f"no task {tid} (never enqueued, rolled back, or pruned)")
    return info


def listing(
    state: str | None, queue: str | None, name: str | None, limit: int
) -> Plan[list[TaskInfo]]:
    """The newest ``limit`` tasks matching every filter given."""
    found: list[TaskInfo] = yield call(
        Manage.list_tasks, state=state, queue=queue, name=name, limit=limit
    )
    return found


def retrying(
    bound: Either, tid: uuid.UUID, by: str | None, delivery: Delivery | None
) -> Plan[None]:
    """Retry the task ``tid``, failed or cancelled; TaskStateError if it is neither, or
    a workflow's step its parents hold back."""
    moved: list[Moved] = yield call(Manage.retry_ids, [tid], check_by(by))
    if not moved:
        info = yield from getting(tid)
        raise _not_retried(info)
    yield from waking(bound, wakeups(moved), delivery)


def retrying_failed(
    bound: Either, queue: str | None, by: str | None, delivery: Delivery | None
) -> Plan[int]:
    """Retry every failed task (of ``queue``, or of all), ``RETRY_BATCH`` at a time, each
    batch's wake-ups sent as it goes; how many."""
    total, after = 0, uuid.UUID(int=0)
    while True:
        moved: list[Moved] = yield call(Manage.retry_failed, queue, after, RETRY_BATCH, by)
        yield from waking(bound, wakeups(moved), delivery)
        total += len(moved)
        if len(moved) < RETRY_BATCH:
            return total
        after = max(tid for tid, _, _ in moved)


def cancelling(
    bound: Either, tid: uuid.UUID, by: str | None, delivery: Delivery | None
) -> Plan[str]:
    """Cancel the task ``tid``: the state it is in after (``cancelled``, or ``running``
    when its handler is asked to stop); TaskStateError if it had finished. The workflow
    steps its end readied are woken."""
    readied: list[tuple[str, Inserted]] = []
    state: str | None = yield call(Manage.cancel, tid, check_by(by), readied)
    if state is None:
        info = yield from getting(tid)
        raise TaskStateError(f"task {info.id} already finished: it is {info.state}", info.state)
    assert state in (RUNNING, CANCELLED), state
    yield from waking(bound, wakeups_of(readied), delivery)
    return state


def _not_retried(info: TaskInfo) -> TaskStateError:
    if info.state in (FAILED, CANCELLED):  # a workflow's step, blocked by a parent
        return TaskStateError(
            f"task {info.id} is a workflow's step whose parents have not all succeeded:"
            " retry the parent that failed, and this step runs after it",
            info.state,
        )
    return TaskStateError(
        f"task {info.id} is {info.state}: only failed or cancelled tasks can be retried",
        info.state,
    )


def wakeups(moved: list[Moved]) -> list[tuple[str, bytes]]:
    return [(queue, wakeup.encode(tid, xid)) for tid, queue, xid in moved]
