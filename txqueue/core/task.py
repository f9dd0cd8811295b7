"""Tasks as the application builds them: fields, defaults, validation, ids and backoff."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final

from ..errors import InvalidTypeError, InvalidValueError
from .fields import (
    CONCURRENCY_KEY_MAX,
    MAX_ATTEMPTS_LIMIT,
    PRIORITY_RANGE,
    UNIQUE_KEY_MAX,
    check_expires,
    check_int,
    check_name,
    check_queue,
    check_time_limit,
    check_timeout,
    encode_json,
)


class TaskState(StrEnum):
    """A task's state. Each is the string the stores keep, and compares equal to it.

    Example:

    ```python
    state = txqueue.get_task(conn, task_id).state
    if state == txqueue.TaskState.FAILED:  # equal to the string "failed" too
        txqueue.retry(conn, task_id)
    ```
    """

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    WAITING = "waiting"  # a workflow's step whose parents have not all ended
    PARKED = "parked"  # its handler sleeps or waits for a signal (ctx.sleep, ctx.wait_for)


PENDING: Final = TaskState.PENDING
RUNNING: Final = TaskState.RUNNING
SUCCEEDED: Final = TaskState.SUCCEEDED
FAILED: Final = TaskState.FAILED
CANCELLED: Final = TaskState.CANCELLED
WAITING: Final = TaskState.WAITING
PARKED: Final = TaskState.PARKED
STATES: Final = tuple(TaskState)

DEFAULT_QUEUE: Final = "default"
DEFAULT_MAX_ATTEMPTS: Final = 5
DEFAULT_TIMEOUT: Final = 300.0
"""Lease length in seconds: a task whose worker stops heartbeating is recovered after this."""


@dataclass(frozen=True, slots=True)
class Task:
    """A task to enqueue. Unset fields take the registry's per-task defaults at run time.

    ``concurrency_key``: the key a fair-share queue rotates on (docs/how-to/flow-control.md);
    a registered task's ``task()`` and ``enqueue`` fill it in from its ``concurrency_key``
    argument.

    Example:

    ```python
    task = txqueue.Task("send_receipt", {"order": 42}, queue="emails", delay=60)
    task_id = txqueue.enqueue(conn, task)  # by name: for a handler this code does not import
    ```
    """

    name: str
    payload: Any = None  # None: no arguments, ``{}``
    _: KW_ONLY
    queue: str = DEFAULT_QUEUE
    priority: int = 0
    run_at: datetime | None = None
    delay: timedelta | float | None = None
    unique_key: str | None = None
    max_attempts: int | None = None
    timeout: float | None = None
    concurrency_key: str | None = None
    expires: datetime | timedelta | float | None = None
    time_limit: float | None = None
    parent_id: uuid.UUID | None = field(default=None, init=False, repr=False, compare=False)
    """The task whose handler waits for this one's end, set by ``ctx.start_child`` alone
    (``child_of``): when it finishes, it keeps the signal ``task:<its id>``."""
    # The payload as validated, encoded once: what enqueue stores.
    payload_json: str = field(init=False, repr=False, compare=False)
    # Every field matches by position in a ``case``, as before the options became keyword-only.
    # fmt: off
    __match_args__ = ("name", "payload", "queue", "priority", "run_at", "delay", "unique_key",
                      "max_attempts", "timeout", "concurrency_key", "expires", "time_limit")
    # fmt: on

    def __post_init__(self) -> None:
        if self.payload is None:
            object.__setattr__(self, "payload", {})
        object.__setattr__(self, "payload_json", validate(self))

    @property
    def delay_seconds(self) -> float | None:
        if isinstance(self.delay, timedelta):
            return self.delay.total_seconds()
        return None if self.delay is None else float(self.delay)

    @property
    def start_by(self) -> datetime | None:
        """The start deadline, when ``expires`` is an instant."""
        return self.expires if isinstance(self.expires, datetime) else None

    @property
    def expires_seconds(self) -> float | None:
        """The start deadline, when ``expires`` is a duration: seconds after it is due."""
        if self.expires is None or isinstance(self.expires, datetime):
            return None
        if isinstance(self.expires, timedelta):
            return self.expires.total_seconds()
        return float(self.expires)


def child_of(task: Task, parent: uuid.UUID) -> Task:
    """``task`` as a child of task ``parent``, whose wait its end wakes."""
    child = replace(task)
    object.__setattr__(child, "parent_id", parent)
    return child


def validate(task: Task) -> str:
    """Raise a ValidationError naming the first bad field; return the payload's JSON."""
    check_name(task.name)
    payload_json = encode_json(task.payload, "payload")
    check_queue(task.queue)
    check_int("priority", task.priority, *PRIORITY_RANGE)
    if task.run_at is not None:
        if not isinstance(task.run_at, datetime):
            kind = type(task.run_at).__name__
            raise InvalidTypeError("run_at", f"must be a datetime, not {kind}")
        if task.run_at.tzinfo is None or task.run_at.utcoffset() is None:
            raise InvalidValueError("run_at", "must be timezone-aware, not naive")
    if task.delay is not None:
        if task.run_at is not None:
            raise InvalidValueError("delay", "give run_at or delay, not both")
        if isinstance(task.delay, bool) or not isinstance(task.delay, timedelta | int | float):
            raise InvalidTypeError("delay", "must be a timedelta or a number of seconds")
        seconds = task.delay_seconds
        if seconds is None or not 0 <= seconds < float("inf"):
            raise InvalidValueError("delay", f"must not be negative, got {task.delay}")
    if task.unique_key is not None:
        if not isinstance(task.unique_key, str):
            raise InvalidTypeError("unique_key", "must be a str")
        if not task.unique_key or len(task.unique_key) > UNIQUE_KEY_MAX:
            raise InvalidValueError("unique_key", f"must be 1 to {UNIQUE_KEY_MAX} characters")
    if task.concurrency_key is not None:
        if not isinstance(task.concurrency_key, str):
            raise InvalidTypeError("concurrency_key", "must be a str")
        if not task.concurrency_key or len(task.concurrency_key) > CONCURRENCY_KEY_MAX:
            raise InvalidValueError(
                "concurrency_key", f"must be 1 to {CONCURRENCY_KEY_MAX} characters"
            )
    if task.max_attempts is not None:
        check_int("max_attempts", task.max_attempts, 1, MAX_ATTEMPTS_LIMIT)
    if task.timeout is not None:
        check_timeout(task.timeout)
    if task.expires is not None:
        check_expires(task.expires)
        if task.start_by is not None and task.run_at is not None and task.start_by <= task.run_at:
            raise InvalidValueError("expires", "must be after run_at: it would never start")
    if task.time_limit is not None:
        check_time_limit(task.time_limit)
    return payload_json


Backoff = float | Callable[[int], float]
"""Seconds for the first retry (doubling each time), or a callable ``attempt -> seconds``."""

DEFAULT_BACKOFF: Final = 1.0
BACKOFF_CAP: Final = 3600.0


def backoff_delay(backoff: Backoff, attempt: int) -> float:
    """Delay before retrying after failed attempt number ``attempt`` (1-based).

    Exponential from the base, capped at an hour, with ±50% jitter so that tasks that
    failed together (a database blip) do not all retry in the same instant.
    """
    if callable(backoff):
        return max(0.0, float(backoff(attempt)))
    base = float(backoff) * 2 ** min(attempt - 1, 30)
    return float(min(base, BACKOFF_CAP) * random.uniform(0.5, 1.5))
