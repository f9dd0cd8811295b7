"""Which tasks a search or a bulk operation takes: ``TaskFilter``, checked where it is made."""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ..core.fields import check_queue, check_states
from ..core.task import STATES, TaskState
from ..errors import InvalidTypeError, InvalidValueError

Scalar = str | int | float | bool | None
ERROR_MAX = 1000
"""Characters of ``error`` a filter takes."""


@dataclass(frozen=True)
class TaskFilter:
    """The tasks matching every field given (None: any), live and finished alike.

    ``state``: one state or several. ``created_after`` / ``created_before`` and
    ``finished_after`` / ``finished_before``: aware datetimes, the first bound included, the
    second not. ``error``: an attempt that failed with this exception type (its name, or
    ``module.Name``) or with this text in its message (any case). ``payload``: top-level
    keys of the task's arguments with these values (str, int, float, bool or None).
    ``workflow``: the steps of this workflow. ``failed_with``: the last error's type, its
    name (after any module) or, dotted, whole: ``module.Name``, as dead letters are grouped.

    Example:

    ```python
    where = txqueue.TaskFilter(name="charge", state="failed", error="RuntimeError")
    for task in txqueue.find_tasks(conn, where, limit=50):
        print(task.id, task.errors[-1]["message"])
    ```
    """

    name: str | None = None
    queue: str | None = None
    state: str | Sequence[str] | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    finished_after: datetime | None = None
    finished_before: datetime | None = None
    error: str | None = None
    payload: Mapping[str, Scalar] | None = None
    workflow: uuid.UUID | str | None = None
    failed_with: str | None = None

    def __post_init__(self) -> None:
        if self.name is not None and not (isinstance(self.name, str) and self.name.strip()):
            raise InvalidValueError("name", f"must be a non-empty str, got {self.name!r}")
        if self.queue is not None:
            check_queue(self.queue)
        if self.state is not None and not isinstance(self.state, str):
            # Copied, as the payload below: a list changed later would pass unchecked.
            object.__setattr__(self, "state", tuple(self.state))
        self.states  # noqa: B018 - checked here, where the filter is made
        for field in ("created_after", "created_before", "finished_after", "finished_before"):
            when = getattr(self, field)
            if when is not None and (not isinstance(when, datetime) or when.tzinfo is None):
                raise InvalidValueError(field, f"must be an aware datetime, got {when!r}")
        for field in ("error", "failed_with"):
            text = getattr(self, field)
            if text is None:
                continue
            if not isinstance(text, str) or not text.strip():
                raise InvalidValueError(field, f"must be a non-empty str, got {text!r}")
            if len(text) > ERROR_MAX:
                raise InvalidValueError(field, f"must be at most {ERROR_MAX} characters")
        if self.payload is not None:
            _check_payload(self.payload)
            object.__setattr__(self, "payload", dict(self.payload))
        if self.workflow is not None and not isinstance(self.workflow, uuid.UUID):
            try:
                object.__setattr__(self, "workflow", uuid.UUID(str(self.workflow)))
            except ValueError:
                raise InvalidValueError(
                    "workflow", f"must be a workflow's id, got {self.workflow!r}"
                ) from None

    @property
    def states(self) -> tuple[TaskState, ...] | None:
        """The states asked for; None: any."""
        states = check_states(self.state, STATES)
        return None if states is None else tuple(TaskState(s) for s in states)

    def within(self, eligible: Sequence[TaskState]) -> tuple[TaskState, ...]:
        """The states of ``eligible`` this filter takes (an operation's, in order)."""
        asked = self.states
        return tuple(s for s in eligible if asked is None or s in asked)

    def payload_json(self) -> str | None:
        return None if self.payload is None else json.dumps(dict(self.payload))

    def describe(self) -> str:
        """The fields given, as a CLI user would write them (``name=x state=failed``)."""
        parts = []
        for field in self.__dataclass_fields__:
            value = getattr(self, field)
            if value is None:
                continue
            if field == "state":
                value = ",".join(self.states or ())
            elif field == "payload":
                value = ",".join(f"{k}={json.dumps(v)}" for k, v in value.items())
            elif isinstance(value, datetime):
                value = value.isoformat()
            parts.append(f"{field}={value}")
        return " ".join(parts) or "every task"


def _check_payload(payload: Any) -> None:
    if not isinstance(payload, Mapping) or not payload:
        raise InvalidValueError("payload", f"must be a non-empty dict, got {payload!r}")
    for key, value in payload.items():
        if not isinstance(key, str) or not key:
            raise InvalidValueError("payload", f"keys must be non-empty strs, got {key!r}")
        if value is not None and not isinstance(value, str | int | float | bool):
            raise InvalidTypeError(
                f"payload[{key!r}]",
                f"must be a str, int, float, bool or None, not {type(value).__name__}",
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidValueError(f"payload[{key!r}]", f"must be a finite number, got {value}")


@dataclass(frozen=True)
class DeadLetterGroup:
    """Tasks failed for good, of one name, whose last error was of one type: how many, the
    first and the last to fail, and the newest one's message. ``where`` finds the group's
    tasks, for ``find_tasks``, ``retry_tasks`` or ``delete_tasks``.

    Example:

    ```python
    for group in txqueue.dead_letters(conn):
        print(group.name, group.error, group.count, group.last_seen, group.message)
        # charge builtins.RuntimeError 1 2026-... card declined
    ```
    """

    name: str
    error: str
    count: int
    first_seen: datetime
    last_seen: datetime
    message: str | None
    queue: str | None = None  # the queue it was listed for (None: every queue)

    @property
    def where(self) -> TaskFilter:
        return TaskFilter(name=self.name, queue=self.queue, state="failed", failed_with=self.error)
