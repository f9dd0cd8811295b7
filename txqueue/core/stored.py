"""A task as stored, as the management calls read it back: ``TaskInfo``, its history
(``Event``s; ``timeline`` adds the claims, and ``info_timeline`` the steps, that the row
says without an entry of their own), the progress its handler reported and the steps it
recorded (``RecordedStep``)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, Final

from .task import PENDING, RUNNING, TaskState
from .times import instant, iso


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
class RecordedStep:
    """A step a task's handler recorded (``ctx.step``): its ``result`` as stored (JSON),
    when it was recorded, how long its function ran, and by which attempt.

    Example:

    ```python
    for step in txqueue.get_task(conn, task_id).steps:  # in the order they ran
        print(step.name, step.result, step.attempt, f"{step.took * 1000:.1f} ms")
    ```
    """

    name: str
    result: Any
    at: datetime
    took: float
    attempt: int

    @classmethod
    def of_json(cls, entry: dict[str, Any]) -> RecordedStep:
        """An entry as the stores keep it: ``{name, result, at, took, attempt}``, times in
        Unix seconds."""
        return cls(
            str(entry["name"]),
            entry.get("result"),
            instant(entry["at"]),
            float(entry["took"]),
            int(entry["attempt"]),
        )

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "result": self.result,
            "at": iso(self.at),
            "took": self.took,
            "attempt": self.attempt,
        }


def recorded(text: str | None) -> list[RecordedStep]:
    """The steps column as read (JSON text, or NULL before a first step)."""
    return [] if text is None else [RecordedStep.of_json(e) for e in json.loads(text)]


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
    steps: list[RecordedStep] = field(default_factory=list)  # its handler's, in their order

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
            elif f.name == "steps":
                value = [step.as_json() for step in value]
            elif isinstance(value, datetime):
                value = iso(value)
            out[PRESENTED.get(f.name, f.name)] = value
        return out


# Shown renamed: "expires_at" alone would read as the expires option's deadline (start_by).
PRESENTED: Final = {"expires_at": "lease_expires_at", "start_by": "expires"}


def info_timeline(stored: list[dict[str, Any]], info: TaskInfo) -> list[Event]:
    """``timeline`` for a task as read, with a ``step`` event for each step it recorded
    (the step's name as its reason): a step keeps its record in the row's steps alone."""
    events = timeline(stored, info.state, info.attempts, info.start_time, info.worker_id)
    steps = [Event(s.at, s.attempt, "step", RUNNING, RUNNING, None, s.name) for s in info.steps]
    return sorted(events + steps, key=lambda e: e.at) if steps else events
