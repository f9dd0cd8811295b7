"""One attempt at a claimed task, run to its outcome: the run path a worker's handler
threads and ``txqueue.testing``'s inline runner share, so a feature of it (an atomic
task's commit, a retry, a failure for good, its span and log fields) is built once.

What the two differ in comes in as arguments: where an atomic task's transaction runs,
how a coroutine is run, and what escapes instead of failing the attempt.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from typing import Any

from ..core.failures import failure
from ..core.lifecycle import after_failure
from ..core.task import PARKED, SUCCEEDED
from ..errors import StepError, TaskArgumentsError, TaskError, TaskExpiredError
from ..observability import logs, reporting, tracing
from ..observability.telemetry import LEASE_LOST
from ..store.records import Claimed, Inserted, Outcome
from ..tasks.context import DriverConnection, TaskContext, reported
from ..tasks.definition import TaskDefinition
from ..tasks.steps import Parked
from .atomic import FencedOut, Ready
from .outcomes import ARGUMENTS, EXHAUSTED, EXPIRED, STEPS, expired, failed, parked, succeeded
from .stats import ending

log = logging.getLogger("txqueue.worker")

AtomicRunner = Callable[[Callable[[Any], Outcome]], tuple[Outcome, Ready]]
"""Calls ``attempt(conn)`` in a transaction, writes the success it returns there and
commits both, then returns it with the workflow steps it readied; raises what ``attempt``
raised after the rollback, and FencedOut if the lease was lost (rolled back too)."""


@dataclass(frozen=True, slots=True)
class Ended:
    """An attempt's outcome, for the caller to record."""

    outcome: Outcome
    reason: str = EXHAUSTED  # for on_failed, should the outcome be a failure


@dataclass(frozen=True, slots=True)
class Settled:
    """An atomic task's attempt, nothing left to record: its success written with its work
    (``outcome``), or both rolled back since the lease was lost (None); and the workflow
    steps that success readied, to wake."""

    outcome: Outcome | None
    ready: tuple[tuple[str, Inserted], ...] = ()


def run_attempt(
    definition: TaskDefinition[Any, Any] | None,
    task: Claimed,
    ctx: TaskContext,
    *,
    atomic: AtomicRunner,
    run_async: Callable[[Coroutine[Any, Any, Any]], Any],
    escapes: tuple[type[BaseException], ...] = (),
    started: Callable[[Claimed, float], None] | None = None,
    waited: float = 0.0,
    guard: Callable[[], AbstractContextManager[object]] = nullcontext,
) -> Ended | Settled:
    """Run ``task``'s handler in its span and log scope, and say how the attempt ended.
    Whatever the handler raises (SystemExit too) becomes its outcome, except ``escapes``.
    ``started(task, waited)`` is told first, in the span. A task claimed past its start
    deadline fails for good, its handler not called. ``guard()`` is entered around the
    handler's call alone (a child's time limit)."""
    worker_id = ctx.worker_id
    try:
        with (
            tracing.processing(task) as span,
            logs.task_scope(ctx),
            reporting.attempt(task, worker_id),
        ):
            try:
                if task.expired:
                    raise expired(task)
                if started is not None:
                    started(task, waited)
                if definition is not None and definition.atomic:
                    settled = _run_atomic(definition, task, ctx, atomic, guard)
                    span.ended(SUCCEEDED if settled.outcome else LEASE_LOST)
                    return settled
                with guard():
                    result = _call(definition, task, ctx, run_async)
                outcome = _with_progress(succeeded(task, worker_id, result), ctx)
                span.ended(SUCCEEDED)
                return Ended(outcome)
            except Parked as park:
                span.ended(PARKED)
                return Ended(_with_progress(parked(task, worker_id, park), ctx))
            except escapes:
                raise
            except BaseException as exc:
                return _raised(definition, task, ctx, exc, span)
    except escapes:
        raise
    except BaseException as exc:  # building the failure failed: the task still gets one
        log.exception("task %s: could not describe its failure", task.id)
        text = f"unreportable: {exc!r:.200}"
        error = failure(worker_id, task.attempts, TaskError, text).as_json()
        state = after_failure(task.attempts, task.max_attempts)
        return Ended(Outcome(task.id, task.attempts, worker_id, state, error=error, step=task.step))


def _raised(
    definition: TaskDefinition[Any, Any] | None,
    task: Claimed,
    ctx: TaskContext,
    exc: BaseException,
    span: tracing.Attempt,
) -> Ended:
    """The attempt's end when its handler raised ``exc``: logged, traced and reported."""
    # A handler stopped on a cancel, or a task past its deadline, is no error of the
    # handler's to track.
    report = not ctx.cancelled and not isinstance(exc, TaskExpiredError)
    outcome = _with_progress(
        failed(task, ctx.worker_id, definition, exc, ctx.cancelled, reported=report), ctx
    )
    span.failed(ending(outcome.state), outcome.error)
    if report:
        reporting.failed(task, ctx.worker_id, exc)
    if isinstance(exc, TaskArgumentsError):
        return Ended(outcome, ARGUMENTS)
    if isinstance(exc, StepError):
        return Ended(outcome, STEPS)
    if isinstance(exc, TaskExpiredError):
        return Ended(outcome, EXPIRED)
    return Ended(outcome)


def _with_progress(outcome: Outcome, ctx: TaskContext) -> Outcome:
    text = reported(ctx)
    return outcome if text is None else replace(outcome, progress=text)


def _run_atomic(
    definition: TaskDefinition[Any, Any],
    task: Claimed,
    ctx: TaskContext,
    atomic: AtomicRunner,
    guard: Callable[[], AbstractContextManager[object]],
) -> Settled:
    def attempt(conn: DriverConnection) -> Outcome:
        ctx.conn = conn
        try:
            with guard():
                result = definition.call(task.payload, ctx)
            return _with_progress(succeeded(task, ctx.worker_id, result), ctx)
        finally:
            ctx.conn = None  # the connection is the runner's again

    try:
        outcome, ready = atomic(attempt)
        return Settled(outcome, tuple(ready))
    except FencedOut:
        log.warning(
            "task %s %s: its lease was lost before its success was written: its work "
            "is rolled back (the task was recovered, to run elsewhere)",
            task.name,
            task.id,
        )
        return Settled(None)


def _call(
    definition: TaskDefinition[Any, Any] | None,
    task: Claimed,
    ctx: TaskContext,
    run_async: Callable[[Coroutine[Any, Any, Any]], Any],
) -> Any:
    if definition is None:  # claims take known names only; a registry changed under us
        raise TaskError(f"no handler for task {task.name!r} in this worker's registry")
    if not definition.is_async:
        return definition.call(task.payload, ctx)
    return run_async(definition.call(task.payload, ctx))
