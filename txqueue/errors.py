"""txqueue's exceptions. Users catch these, never a driver's.

TxQueueError
├── ConfigError            bad URL, unknown --app, invalid worker settings
├── ValidationError        bad input at the API edge; ``field`` names the culprit
│   ├── InvalidTypeError   (also a TypeError)
│   ├── InvalidValueError  (also a ValueError)
│   └── WorkflowError      a workflow declared wrong: a cycle, a foreign step, too big
├── StoreError             the database refused or could not be reached
│   └── SchemaError        txqueue's tables missing or too old (permanent)
├── BrokerError            RabbitMQ refused or could not be reached
│   └── BrokerLoginError   RabbitMQ refused the URL's user or password (permanent)
├── TaskError              a task's own failure as recorded (result not JSON, unstorable)
│   └── TaskArgumentsError stored arguments that do not fit the handler (no retry)
├── WorkerError            a part of the worker kept dying: it stopped (exit non-zero)
├── TaskNotFoundError      no task has that id (also a LookupError)
├── TaskStateError         the task's state does not allow it (retry a running task, ...)
│   └── TaskFailedError    a typed ``wait`` found the task failed or cancelled
└── WaitTimeoutError       ``wait`` gave up before the task finished (also a TimeoutError)

PermanentError marks those that no retry mends (the ones marked permanent above): a
worker part that raises one is given up on at once, and a command fails on one where it
would only warn of an outage.
"""

from __future__ import annotations

from typing import Any


class TxQueueError(Exception):
    """Root of every exception txqueue raises."""


class ConfigError(TxQueueError):
    """Configuration that cannot work: a bad URL, an app that cannot be imported."""


class ValidationError(TxQueueError):
    """Input rejected before anything was written."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class InvalidTypeError(ValidationError, TypeError):
    """A field of the wrong type."""


class InvalidValueError(ValidationError, ValueError):
    """A field of the right type with a value out of range or malformed."""


class WorkflowError(ValidationError, ValueError):
    """A workflow that cannot be written: a cycle, an edge to another workflow's step, an
    empty one, or one past the size limits (``txqueue.workflow.MAX_STEPS``, ``MAX_EDGES``)."""

    def __init__(self, message: str) -> None:
        super().__init__("workflow", message)


class StoreError(TxQueueError):
    """The database failed or could not be reached."""


class PermanentError(TxQueueError):
    """A refusal that retrying does not mend: the configuration or the database must be
    changed first. A marker, also inherited by the errors marked permanent."""


class SchemaError(StoreError, PermanentError):
    """txqueue's tables are missing or older than this txqueue: ``txqueue init`` (or
    ``App.init()``) creates or upgrades them. Retrying does not help."""


class BrokerError(TxQueueError):
    """RabbitMQ failed or could not be reached."""


class BrokerLoginError(BrokerError, PermanentError):
    """RabbitMQ refused the AMQP URL's user or password (ACCESS_REFUSED)."""


class TaskError(TxQueueError):
    """Recorded as a task attempt's error when the failure is txqueue's to report."""


class WorkerError(TxQueueError):
    """A part of the worker died again and again and was given up on: the worker stopped,
    for its service manager to start it afresh."""


class TaskNotFoundError(TxQueueError, LookupError):
    """No task has that id (it never existed, or was pruned)."""


class ScheduleNotFoundError(TxQueueError, LookupError):
    """No periodic schedule has that name."""


class TaskStateError(TxQueueError):
    """The task's state does not allow the operation; ``state`` says what it is."""

    def __init__(self, message: str, state: str) -> None:
        super().__init__(message)
        self.state = state


class WaitTimeoutError(TxQueueError, TimeoutError):
    """``txqueue.wait`` ran out of time; ``state`` is the task's state when it gave up."""

    def __init__(self, message: str, state: str) -> None:
        super().__init__(message)
        self.state = state


class TaskArgumentsError(TaskError):
    """A task's stored arguments do not fit its handler (a producer sent a wrong one, or
    the handler's signature changed): recorded as the attempt's error, and the task fails
    without retrying. ``field`` names the argument."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class TaskExpiredError(TaskError):
    """Recorded as the error of a task claimed past its start deadline (``expires``): it
    fails for good without running."""


class TimeLimitError(TaskError):
    """Recorded as the error of an attempt stopped at its ``time_limit``; the task is
    retried as after any failure."""


class TaskFailedError(TaskStateError):
    """A typed ``wait`` found the task failed or cancelled: it has no result. ``info`` is
    the task as stored, its error history included."""

    def __init__(self, message: str, info: Any) -> None:
        super().__init__(message, info.state)
        self.info = info
