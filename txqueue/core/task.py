"""Tasks as the application builds them: fields, defaults, validation, ids and backoff."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field, fields
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
from .times import instant, iso


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


PENDING: Final = TaskState.PENDING
RUNNING: Final = TaskState.RUNNING
SUCCEEDED: Final = TaskState.SUCCEEDED
FAILED: Final = TaskState.FAILED
CANCELLED: Final = TaskState.CANCELLED
WAITING: Final = TaskState.WAITING
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


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of a task's history: a state change as it was made (by whom, why).

    Example:

    ```python
    for event in txqueue.get_task(conn, task_id).events:  # oldest first
        print(event.at, event.move, event.from_state, event.to_state, event.by, event.reason)
    ```
    """

    at: datetime
    attempt: int
    move: str
    from_state: TaskState
    to_state: TaskState
    by: str | None
    reason: str | None

    @classmethod
    def of_json(cls, entry: dict[str, Any]) -> Event:
        """An entry as ``as_json`` writes it, or as the stores keep it: times in Unix seconds,
        without ``move`` where it is ``to``, ``from`` where ``running``, ``by`` where it is
        ``worker`` (null there where no one made it; docs/reference/tables.md)."""
        return cls(
            instant(entry["at"]),
            int(entry["attempt"]),
            str(entry.get("move", entry["to"])),
            TaskState(entry.get("from", RUNNING)),
            TaskState(entry["to"]),
            entry["by"] if "by" in entry else entry.get("worker"),
            entry.get("reason"),
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "at": iso(self.at),
            "attempt": self.attempt,
            "move": str(self.move),
            "from": str(self.from_state),
            "to": str(self.to_state),
            "by": self.by,
            "reason": self.reason,
        }


def timeline(
    stored: list[dict[str, Any]],
    state: str,
    attempt: int,
    started: datetime | None,
    worker_id: str | None,
) -> list[Event]:
    """A task's history from its stored events and its row: a claim writes no event of its
    own (the hot path stays one write lighter), so each attempt's ``claimed`` comes from the
    first change of that attempt (its ``started`` and ``worker``), or, while the attempt is
    still running unchanged, from the row."""
    out: list[Event] = []
    for entry in stored:
        if entry.get("started") is not None:
            at, number, by = instant(entry["started"]), int(entry["attempt"]), entry.get("worker")
            if not _claimed(out, number, at):
                out.append(Event(at, number, "claimed", PENDING, RUNNING, by, None))
        out.append(Event.of_json(entry))
    if state == RUNNING and started is not None and not _claimed(out, attempt, started):
        out.append(Event(started, attempt, "claimed", PENDING, RUNNING, worker_id, None))
    return out


def _claimed(events: list[Event], attempt: int, started: datetime) -> bool:
    # On SQLite one claim's two times differ by up to 10 us (JSON keeps 15 digits); two by more.
    times = [e.at for e in events if e.move == "claimed" and e.attempt == attempt]
    return any(abs(at - started) < timedelta(microseconds=10) for at in times)


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a task's handler said it was: ``done`` of ``total`` (None: unknown), with an
    optional ``message``, reported ``at``.

    Example:

    ```python
    progress = txqueue.get_task(conn, task_id).progress  # None: its handler reported none
    if progress is not None:
        print(progress.done, progress.total, progress.fraction, progress.describe())
    ```
    """

    done: float
    total: float | None
    message: str | None
    at: datetime

    @property
    def fraction(self) -> float | None:
        """``done / total``, at most 1 (1 of a total of 0), or None without a total."""
        if self.total is None:
            return None
        return 1.0 if self.done >= self.total else self.done / self.total

    def describe(self) -> str:
        """``3/10 (30%): copying``, ``3``, or ``3: copying``."""
        done = _shown(self.done)
        if self.total is not None:
            done = f"{done}/{_shown(self.total)} ({self.fraction:.0%})"
        return done if self.message is None else f"{done}: {self.message}"

    def as_json(self) -> dict[str, Any]:
        return {
            "done": self.done,
            "total": self.total,
            "message": self.message,
            "at": iso(self.at),
        }


def _shown(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


@dataclass(frozen=True, slots=True)
class TaskEvent:
    """An event of ``txqueue.history``: what happened, to which task.

    Example:

    ```python
    for entry in txqueue.history(conn, name="charge", limit=20):  # newest first
        print(entry.task_id, entry.name, entry.queue, entry.event.move, entry.event.reason)
    ```
    """

    task_id: uuid.UUID
    name: str
    queue: str
    event: Event


@dataclass(frozen=True, slots=True)
class TaskInfo:
    """A task as stored: what ``txqueue show`` and ``txqueue list`` print.

    Example:

    ```python
    info = txqueue.get_task(conn, task_id)
    print(info.name, info.queue, info.state, info.attempts, info.max_attempts, info.payload)
    print(info.errors[-1]["traceback"])
    ```
    """

    id: uuid.UUID
    queue: str
    name: str
    payload: Any
    state: TaskState
    priority: int
    run_at: datetime
    start_time: datetime | None
    expires_at: datetime | None
    finished_at: datetime | None
    attempts: int
    max_attempts: int | None
    timeout: float | None
    unique_key: str | None
    worker_id: str | None
    result: Any
    errors: list[dict[str, Any]]
    created_at: datetime
    updated_at: datetime
    cancel_requested: bool
    progress: Progress | None = None  # as its handler last reported it (``ctx.progress``)
    start_by: datetime | None = None  # its start deadline (``expires``): not started after
    time_limit: float | None = None  # seconds an attempt may run (``time_limit``), if set here
    events: list[Event] = field(default_factory=list)  # its history, oldest first
    workflow_id: uuid.UUID | None = None  # the workflow it is a step of

    def __post_init__(self) -> None:
        object.__setattr__(self, "state", TaskState(self.state))

    def as_dict(self) -> dict[str, Any]:
        """As ``txqueue show --json`` prints it: ids as strings, times in ISO 8601 in UTC;
        ``expires_at`` (the lease's end) as ``lease_expires_at`` and ``start_by`` as
        ``expires``, the ``expires`` option it was enqueued with, made a time."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, uuid.UUID):
                value = str(value)
            elif f.name == "events":
                value = [e.as_json() for e in value]
            elif f.name == "errors":
                value = [{**e, "at": iso(instant(e["at"]))} if "at" in e else e for e in value]
            elif f.name == "progress" and value is not None:
                value = value.as_json()
            elif isinstance(value, datetime):
                value = iso(value)
            out[PRESENTED.get(f.name, f.name)] = value
        return out


# Shown renamed: "expires_at" alone would read as the expires option's deadline (start_by).
PRESENTED: Final = {"expires_at": "lease_expires_at", "start_by": "expires"}


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


def info_timeline(stored: list[dict[str, Any]], info: TaskInfo) -> list[Event]:
    """``timeline`` for a task as read."""
    return timeline(stored, info.state, info.attempts, info.start_time, info.worker_id)
