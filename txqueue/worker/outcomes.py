"""An attempt: the context its handler sees, and its outcome from what the handler
returned or raised (whatever the exception does, the task gets an outcome that a store
can keep). Shared by the worker's handler threads and ``txqueue.testing``'s inline
runner."""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable
from typing import Any

from ..core.failures import failure
from ..core.fields import encode_json
from ..core.lifecycle import after_failure
from ..core.task import (
    CANCELLED,
    DEFAULT_BACKOFF,
    FAILED,
    PARKED,
    PENDING,
    SUCCEEDED,
    backoff_delay,
)
from ..errors import StepError, TaskArgumentsError, TaskExpiredError
from ..observability import reporting
from ..store.records import Claimed, Outcome
from ..tasks.codecs import jsonable
from ..tasks.context import TaskContext
from ..tasks.definition import TaskDefinition
from ..tasks.registry import FailedTask
from ..tasks.steps import Journal, Parked, Steps

log = logging.getLogger("txqueue.worker")

ARGUMENTS = "its arguments do not fit the handler"
"""Why a task failed for good on its first attempt, for ``on_failed``."""
EXHAUSTED = "attempts exhausted"
"""Why a task failed for good after its last attempt, for ``on_failed``."""
STEPS = "its steps do not fit those recorded"
"""Why a task failed for good at a step (``StepError``), for ``on_failed``."""
EXPIRED = "expired"
"""Why a task failed for good without running: claimed past its start deadline."""


def context(
    task: Claimed,
    worker_id: str,
    heartbeat: Callable[[], bool],
    cancelled: threading.Event | None = None,
    report: Callable[[str], None] | None = None,
    journal: Journal | None = None,
) -> TaskContext:
    """What the handler of ``task``'s attempt is told about it; ``report`` is given its
    progress (``progress.encode``'s text) each time it says it; ``journal`` keeps its
    steps."""
    ctx = TaskContext(
        id=task.id,
        name=task.name,
        queue=task.queue,
        attempt=task.attempts,
        max_attempts=task.max_attempts,
        worker_id=worker_id,
        _heartbeat=heartbeat,
        _cancelled=cancelled or threading.Event(),
        _steps=Steps(journal, task.name, task.attempts),
    )
    if report is not None:
        ctx._report = report
    return ctx


def failed_task(task: Claimed, reason: str, error: dict[str, Any] | None) -> FailedTask:
    """What ``on_failed`` is told of ``task``, once its failure for good is written."""
    return FailedTask(task.id, task.name, task.queue, task.payload, task.attempts, reason, error)


def succeeded(task: Claimed, worker_id: str, result: Any) -> Outcome:
    """Raises InvalidValueError if the result cannot be stored as JSON."""
    text = None if result is None else encode_json(jsonable(result), "result")
    return Outcome(task.id, task.attempts, worker_id, SUCCEEDED, text, step=task.step)


def parked(task: Claimed, worker_id: str, park: Parked) -> Outcome:
    """The attempt parked its task (``ctx.sleep``, ``ctx.wait_for``): not an error."""
    log.info("task %s %s parked: %s", task.name, task.id, park)
    return Outcome(
        task.id,
        task.attempts,
        worker_id,
        PARKED,
        retry_in=park.run_in,
        step=task.step,
        wait_key=park.key,
    )


def failed(
    task: Claimed,
    worker_id: str,
    definition: TaskDefinition[Any, Any] | None,
    exc: BaseException,
    cancelled: bool,
    progress: str | None = None,
    reported: bool = False,
) -> Outcome:
    """Cancelled (the handler stopped on a cancel), failed for good, or a retry after the
    task's backoff; logged. ``progress``: the last its handler reported, kept with it.
    ``reported``: error trackers were told of ``exc`` (its log line says so)."""
    kind, text = type(exc), message(exc)
    extra = {reporting.REPORTED: reported}
    tb = formatted_traceback(exc)
    error = failure(worker_id, task.attempts, kind, text, tb).as_json()

    def ended(state: str, retry_in: float = 0.0) -> Outcome:
        return Outcome(
            task.id,
            task.attempts,
            worker_id,
            state,
            error=error,
            retry_in=retry_in,
            step=task.step,
            progress=progress,
        )

    if cancelled:
        log.info("task %s %s stopped on cancellation: %s", task.name, task.id, text)
        return ended(CANCELLED)
    # Arguments that do not fit the handler will not fit it on a retry either, steps that
    # do not fit those recorded will not either, and a deadline passed stays passed.
    final = isinstance(exc, TaskArgumentsError | TaskExpiredError | StepError)
    if after_failure(task.attempts, task.max_attempts, final) == FAILED:
        log.error(
            "task %s %s failed for good, attempt %d/%d: %s: %s",
            task.name,
            task.id,
            task.attempts,
            task.max_attempts,
            kind.__name__,
            text,
            extra=extra,
        )
        return ended(FAILED)
    delay = backoff_delay(definition.backoff if definition else DEFAULT_BACKOFF, task.attempts)
    log.warning(
        "task %s %s failed, attempt %d/%d, retry in %.1fs: %s: %s",
        task.name,
        task.id,
        task.attempts,
        task.max_attempts,
        delay,
        kind.__name__,
        text,
        extra=extra,
    )
    return ended(PENDING, delay)


def expired(task: Claimed) -> TaskExpiredError:
    """The error of ``task``, claimed ``task.late`` seconds past its start deadline."""
    return TaskExpiredError(
        f"not started by its start deadline (expires): claimed {task.late:.3f}s after it"
    )


def storable(text: str) -> str:
    """Text any store can hold: NUL and lone surrogates shown escaped instead."""
    text = text.replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


MESSAGE_LIMIT = 10_000
"""Characters of an exception's message kept in the task's errors and the log: one that
quotes a large payload must not write it again at every attempt."""


def message(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # a broken __str__ must not cost the task its outcome
        return f"<str() of the {type(exc).__name__} failed>"
    if len(text) > MESSAGE_LIMIT:
        text = f"{text[:MESSAGE_LIMIT]}… ({len(text) - MESSAGE_LIMIT:,} more characters)"
    return storable(text)


def formatted_traceback(exc: BaseException) -> str | None:
    try:
        return storable("".join(traceback.format_exception(exc)))
    except Exception:
        return None
