"""What a handler learns about the attempt it runs: ``TaskContext``."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Concatenate, ParamSpec, Protocol, TypeAlias, TypeVar

from ..core.task import Task
from ..errors import StepError
from . import progress
from .steps import MAX_WAIT, Steps

P = ParamSpec("P")
R = TypeVar("R")

DriverConnection: TypeAlias = Any
"""The database driver's own connection (psycopg's, or sqlite3's on SQLite), as the
database URL chosen at run time makes it: a handler's code knows which, txqueue's types
cannot (no module outside ``store`` imports a driver)."""


class Planned(Protocol):
    """A ``txqueue.Workflow``, as a handler starts one as its child (this module cannot
    name the class: the workflows stand on the tasks)."""

    def plan(self) -> Any: ...


@dataclass(slots=True)
class TaskContext:
    """The attempt a handler runs: given to a handler registered with ``context=True`` as
    its first argument (and to a ``(payload, ctx)`` handler as its second).

    Example:

    ```python
    @registry.task(context=True)
    def import_file(ctx: txqueue.TaskContext, path: str) -> None:
        for line in range(100):
            if ctx.cancelled:  # `txqueue cancel` was run on it
                raise RuntimeError("cancelled")
            ctx.progress(line + 1, 100, f"attempt {ctx.attempt} of {ctx.max_attempts}")
    ```
    """

    id: uuid.UUID
    name: str
    queue: str
    attempt: int
    max_attempts: int
    worker_id: str
    _heartbeat: Callable[[], bool] = field(repr=False)
    _cancelled: threading.Event = field(default_factory=threading.Event, repr=False)
    conn: DriverConnection = field(default=None, repr=False)
    """An atomic task's connection (psycopg, or sqlite3 on SQLite), in the transaction that
    commits the task's success: do the database work on it, never commit or roll it back.
    None for other tasks."""
    _report: Callable[[str], None] = field(default=lambda text: None, repr=False)
    _progress: str | None = field(default=None, repr=False)
    _steps: Steps = field(default_factory=lambda: Steps(None, "", 1), repr=False)

    def step(self, name: str, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """``fn(*args, **kwargs)``, run once for this task: its result is recorded with the
        task as step ``name``, and on any later attempt (after a crash, a lost lease, a
        retry) returned from the record without calling ``fn``. The result must be JSON
        (the codecs of task results: dataclasses, datetimes, ... come back as ``fn``'s
        return annotation says). A step finds its record by its name, unique within the
        task; steps come in the same order on every attempt and one at a time (StepError
        otherwise, and the task fails). A step is recorded once ``fn`` returns: ``fn``
        runs again on a later attempt if it raised, or if the worker died before the
        record was written; for exactly once, use ``atomic_step``."""
        return self._steps.run(name, fn, args, kwargs, self.conn)  # type: ignore[no-any-return]

    async def step_async(
        self, name: str, fn: Callable[P, Awaitable[R]], /, *args: P.args, **kwargs: P.kwargs
    ) -> R:
        """``step`` for an async function: ``await ctx.step_async("fetch", fetch, url)``."""
        return await self._steps.run_async(name, fn, args, kwargs, self.conn)  # type: ignore[no-any-return]

    def atomic_step(
        self,
        name: str,
        fn: Callable[Concatenate[DriverConnection, P], R],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R:
        """``step`` for database work, exactly once: ``fn(conn, *args, **kwargs)`` runs in a
        transaction on a connection of the worker's (psycopg, or sqlite3 on SQLite) that
        commits its work and the step's record together, or neither. Do the work on
        ``conn``, never commit or roll it back."""
        return self._steps.run_atomic(name, fn, args, kwargs, self.conn)  # type: ignore[no-any-return]

    def sleep(self, seconds: float, *, name: str | None = None) -> None:
        """Sleep ``seconds`` (at most a year) without holding the worker: the attempt ends
        here and the task is ``parked`` (an attempt added to its budget) until its time,
        then runs again from the top, its steps replayed, and this returns. A step (named
        ``name``, else ``sleep 1``, ``sleep 2``, ... in call order) that records when the
        sleep ends, so a retry does not sleep again. It wakes within about 2 s of its time."""
        self._steps.sleep(_seconds(seconds), None, name, self.conn)

    def sleep_until(self, when: datetime, *, name: str | None = None) -> None:
        """``sleep`` until ``when`` (an aware datetime); returns at once if it has passed."""
        if not isinstance(when, datetime) or when.tzinfo is None:
            raise StepError("sleep_until", f"when: must be an aware datetime, not {when!r}")
        _seconds(max(when.timestamp() - time.time(), 0.0))  # at most a year ahead
        self._steps.sleep(0.0, when.timestamp(), name, self.conn)

    def wait_for(self, key: str, *, timeout: float | None = None, name: str | None = None) -> Any:
        """The payload of the next signal of ``key`` (``txqueue.signal``), parking the
        task until it comes, as ``sleep`` does; one sent before the wait is kept for it.
        After ``timeout`` seconds (at most a year; None: no limit) without one,
        SignalTimeoutError, which the handler may catch. A step named ``name`` (else
        ``wait <key>``), so a retry gets the same payload, or the same timeout, again."""
        return self._steps.wait_for(key, timeout, name, self.conn)

    async def sleep_async(self, seconds: float, *, name: str | None = None) -> None:
        """``sleep`` in an async handler: ``await ctx.sleep_async(3600)``."""
        await self._steps.off_loop(self._steps.sleep, _seconds(seconds), None, name, self.conn)

    async def wait_for_async(
        self, key: str, *, timeout: float | None = None, name: str | None = None
    ) -> Any:
        """``wait_for`` in an async handler: ``await ctx.wait_for_async("approval:42")``. The
        wait for the key's lock (a sender's transaction may hold it) leaves the loop free."""
        return await self._steps.off_loop(self._steps.wait_for, key, timeout, name, self.conn)

    def start_child(self, task: Task | Planned, *, name: str | None = None) -> uuid.UUID:
        """Enqueue ``task`` (or a ``Workflow``) as a child of this task, exactly once: a
        step (named ``name``, else ``child 1``, ``child 2``, ... in call order) whose insert
        and record commit together, so a later attempt gets the same id back and enqueues
        nothing. Its id (a workflow's), for ``wait_child``; the child runs as any task, on
        any worker."""
        return self._steps.start_child(task, name, self.conn)

    def wait_child(
        self, task_id: uuid.UUID, *, timeout: float | None = None, name: str | None = None
    ) -> Any:
        """The result (as JSON: dicts, lists, ...) of the child ``task_id`` once it
        succeeds, parking this task until it ends, as ``wait_for`` does (a wait for the
        signal ``task:<id>`` its end sends, named ``name``, else ``wait task:<id>``).
        ChildFailedError if it failed or was cancelled; SignalTimeoutError after
        ``timeout`` seconds. Both may be caught, and come again on every later attempt.
        A child workflow's: the results of its last steps (those no step comes after), by
        step name, each waited for in turn (``<name> <step>``), ChildFailedError for the
        first of them that did not succeed."""
        return self._steps.wait_child(task_id, timeout, name, self.conn)

    def run_child(
        self, task: Task | Planned, *, timeout: float | None = None, name: str | None = None
    ) -> Any:
        """``wait_child(start_child(task))``: run ``task`` as a child and return its result,
        without holding this worker while it runs. ``name`` names the start step (its wait
        is ``<name> ended``)."""
        child = self._steps.start_child(task, name, self.conn)
        ended = None if name is None else f"{name} ended"
        return self._steps.wait_child(child, timeout, ended, self.conn)

    async def start_child_async(
        self, task: Task | Planned, *, name: str | None = None
    ) -> uuid.UUID:
        """``start_child`` in an async handler, its transaction off the event loop."""
        child: uuid.UUID = await self._steps.off_loop(
            self._steps.start_child, task, name, self.conn
        )
        return child

    async def wait_child_async(
        self, task_id: uuid.UUID, *, timeout: float | None = None, name: str | None = None
    ) -> Any:
        """``wait_child`` in an async handler."""
        return await self._steps.off_loop(self._steps.wait_child, task_id, timeout, name, self.conn)

    async def run_child_async(
        self, task: Task | Planned, *, timeout: float | None = None, name: str | None = None
    ) -> Any:
        """``run_child`` in an async handler: ``await ctx.run_child_async(report.task(7))``."""
        child = await self.start_child_async(task, name=name)
        ended = None if name is None else f"{name} ended"
        return await self.wait_child_async(child, timeout=timeout, name=ended)

    def progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """Say how far this attempt is: ``done`` of ``total`` (None: unknown), with an
        optional ``message`` (at most 500 characters). Returns at once: the worker writes
        the last value at most once a second, and with the attempt's outcome; ``get_task``,
        ``txqueue show`` and ``txqueue.wait(on_progress=...)`` see it. InvalidTypeError or
        InvalidValueError if ``done`` or ``total`` is not a finite number >= 0, or the
        message is not a str of at most 500 characters."""
        self._progress = progress.encode(done, total, message)
        self._report(self._progress)

    def heartbeat(self) -> bool:
        """Extend this attempt's lease by its timeout; False if the lease was already lost."""
        return self._heartbeat()

    @property
    def cancelled(self) -> bool:
        """True once ``txqueue cancel`` asked for this task (seen within about a second).

        A handler that sees it should stop and raise: the task then ends ``cancelled``
        instead of being retried. One that returns normally ends ``succeeded``.
        """
        return self._cancelled.is_set()


def reported(ctx: TaskContext) -> str | None:
    """The progress ``ctx``'s handler reported last (``progress.encode``'s text), if any:
    kept with the attempt's outcome."""
    return ctx._progress


def _seconds(seconds: object) -> float:
    """A sleep's length; a bad one, a bug every attempt would meet again: StepError."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise StepError("sleep", f"seconds: must be a number, not {type(seconds).__name__}")
    if not 0 <= seconds <= MAX_WAIT:
        raise StepError("sleep", f"seconds: must be 0 to {MAX_WAIT:,.0f} (a year): {seconds!r}")
    return float(seconds)
