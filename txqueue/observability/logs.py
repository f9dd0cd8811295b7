"""Logs that say which task they are about: while a handler runs, every record logged on
its thread (or in its coroutine) can carry the task's id, name, queue and attempt; and the
two formats of the long-running commands, text and one JSON object per line."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime

from ..tasks.context import TaskContext

_current: ContextVar[TaskContext | None] = ContextVar("txqueue_task", default=None)

_FIELDS = ("task_id", "task_name", "queue", "attempt", "worker_id")


@contextmanager
def task_scope(ctx: TaskContext) -> Iterator[None]:
    """Records logged in this block are about ``ctx``'s task."""
    token = _current.set(ctx)
    try:
        yield
    finally:
        _current.reset(token)


class TaskLogFilter(logging.Filter):
    """Sets ``task_id``, ``task_name``, ``queue``, ``attempt`` and ``worker_id`` on each
    record: the running task's, or None outside a handler (``worker_id``: this worker's).

    Add it to a logging handler to use them in its format, as ``txqueue worker`` does.

    Example:

    ```python
    import logging

    handler = logging.StreamHandler()
    handler.addFilter(txqueue.TaskLogFilter())  # task_id, task_name, ... on every record
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s [%(task_name)s %(task_id)s]"))
    logging.getLogger("shop").addHandler(handler)
    ```
    """

    def __init__(self, worker_id: str | None = None) -> None:
        super().__init__()
        self.worker_id = worker_id

    def filter(self, record: logging.LogRecord) -> bool:
        ctx = _current.get()
        values = (
            (str(ctx.id), ctx.name, ctx.queue, ctx.attempt, ctx.worker_id)
            if ctx is not None
            else (None, None, None, None, self.worker_id)
        )
        for name, value in zip(_FIELDS, values, strict=True):
            if getattr(record, name, None) is None:  # a value given with ``extra=`` stays
                setattr(record, name, value)
        return True


class TextFormatter(logging.Formatter):
    """One line per record; a task's records end with ``[task <name> <id> attempt <n>]``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:  # before any traceback
        text = super().formatMessage(record)
        task_id = getattr(record, "task_id", None)
        if task_id is None:
            return text
        name, attempt = getattr(record, "task_name", None), getattr(record, "attempt", None)
        return f"{text} [task {name} {task_id} attempt {attempt}]"


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time (UTC, ISO 8601), level, logger, message, the task
    fields that have a value, and the exception's traceback if there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                entry[name] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str, ensure_ascii=False)


def configure(level: int, fmt: str) -> TaskLogFilter:
    """Log to stderr at ``level`` in format ``fmt`` (text or json), every record through a
    ``TaskLogFilter``, which is returned (to set its ``worker_id``)."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    task_filter = TaskLogFilter()
    handler.addFilter(task_filter)
    logging.basicConfig(level=level, handlers=[handler])
    return task_filter
