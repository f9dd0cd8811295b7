"""The registry: task names mapped to handlers and their per-task defaults."""

from __future__ import annotations

import inspect
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from .errors import ConfigError, InvalidTypeError, InvalidValueError
from .lifecycle import ABANDON, COMPENSATE, RETRY
from .periodic import Schedule
from .task import (
    DEFAULT_BACKOFF,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_QUEUE,
    DEFAULT_TIMEOUT,
    MAX_ATTEMPTS_LIMIT,
    Backoff,
    Task,
    check_name,
    check_positive,
    check_queue,
    check_timeout,
)


@dataclass(slots=True)
class TaskContext:
    """What a handler taking ``(payload, ctx)`` learns about the attempt it runs."""

    id: uuid.UUID
    name: str
    queue: str
    attempt: int
    max_attempts: int
    worker_id: str
    _heartbeat: Callable[[], bool] = field(repr=False)
    _cancelled: threading.Event = field(default_factory=threading.Event, repr=False)
    conn: Any = field(default=None, repr=False)
    """An atomic task's connection (psycopg, or sqlite3 on SQLite), in the transaction that
    commits the task's success: do the database work on it, never commit or roll it back.
    None for other tasks."""

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


@dataclass(frozen=True, slots=True)
class FailedTask:
    """What the registry's ``on_failed`` hook is told about a task that failed for good."""

    id: uuid.UUID
    name: str
    queue: str
    payload: Any
    attempts: int
    reason: str  # "attempts exhausted", "lease expired: abandoned", ...
    error: dict[str, Any] | None


Handler = Callable[..., Any]
FailureHook = Callable[[FailedTask], None]


log = logging.getLogger("txqueue.registry")


class TaskDefinition:
    """A registered handler. Call it like the function; ``.task(payload)`` builds its Task."""

    def __init__(
        self,
        fn: Handler,
        name: str,
        *,
        queue: str,
        max_attempts: int,
        timeout: float,
        backoff: Backoff,
        on_lease_expired: str = RETRY,
        compensate: str | None = None,
        atomic: bool = False,
    ) -> None:
        self.fn = fn
        self.name = name
        self.queue = queue
        self.max_attempts = max_attempts
        self.timeout = timeout
        self.backoff = backoff
        self.on_lease_expired = COMPENSATE if compensate is not None else on_lease_expired
        self.compensate = compensate
        self.is_async = inspect.iscoroutinefunction(fn)
        self.wants_context = _wants_context(fn, name)
        self.atomic = atomic
        if atomic and (self.is_async or not self.wants_context):
            raise ConfigError(
                f"task {name!r}: an atomic handler is a plain def taking (payload, ctx): "
                "ctx.conn is the connection its work commits on"
            )
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<TaskDefinition {self.name!r} queue={self.queue!r}>"

    def task(
        self,
        payload: Any = None,
        *,
        priority: int = 0,
        run_at: datetime | None = None,
        delay: timedelta | float | None = None,
        unique_key: str | None = None,
        max_attempts: int | None = None,
        timeout: float | None = None,
    ) -> Task:
        """A Task for this handler, on its queue, so a caller cannot pick the wrong one."""
        return Task(
            self.name,
            payload,
            queue=self.queue,
            priority=priority,
            run_at=run_at,
            delay=delay,
            unique_key=unique_key,
            max_attempts=max_attempts,
            timeout=timeout,
        )


def _wants_context(fn: Handler, name: str) -> bool:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    variadic = any(p.kind == p.VAR_POSITIONAL for p in params)
    if variadic or len(positional) >= 2:
        return True
    if len(positional) == 1:
        return False
    raise ConfigError(f"task {name!r}: the handler must take (payload) or (payload, ctx)")


class Registry:
    """Maps task names to handlers; a worker runs the tasks its registry knows.

    ``on_failed`` is called (in the worker, or in a cleaner given this registry) for each
    task that fails for good; see :meth:`on_failed`.
    """

    def __init__(self, *, on_failed: FailureHook | None = None) -> None:
        self._tasks: dict[str, TaskDefinition] = {}
        self._schedules: dict[str, Schedule] = {}
        self._on_failed = on_failed

    def on_failed(self, hook: FailureHook) -> FailureHook:
        """Set, as a decorator, the alert hook for tasks that fail for good: attempts
        exhausted, or a lease expired under the ``abandon`` or ``compensate`` policy.

        It runs after the failure is committed; exceptions it raises are logged and
        otherwise ignored. Keep it quick (send an alert, do not do the work).
        """
        self._on_failed = hook
        return hook

    def alert(self, failure: FailedTask) -> None:
        """Call the ``on_failed`` hook, if any, never letting it raise."""
        if self._on_failed is None:
            return
        try:
            self._on_failed(failure)
        except Exception:
            log.exception("on_failed hook raised for task %s %s", failure.name, failure.id)

    def task(
        self,
        name: str | None = None,
        *,
        queue: str = DEFAULT_QUEUE,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        timeout: float = DEFAULT_TIMEOUT,
        backoff: Backoff = DEFAULT_BACKOFF,
        on_lease_expired: str = RETRY,
        compensate: str | None = None,
        atomic: bool = False,
    ) -> Callable[[Handler], TaskDefinition]:
        """Register the decorated function as the handler of ``name`` (default: its name).

        ``on_lease_expired``: what the cleaner does with a task whose worker died (or froze,
        or was cut off) mid-run. ``"retry"`` runs it again, counting the lost attempt, so a
        task that keeps killing its worker ends ``failed`` after ``max_attempts``;
        ``"abandon"`` fails it at once and calls ``on_failed`` (for work that must never
        run twice). ``compensate="task_name"`` fails it and enqueues that task, in the same
        transaction, with ``{"task_id", "name", "payload"}`` of the lost one.

        ``atomic=True``: the handler, a ``def (payload, ctx)``, does its database work on
        ``ctx.conn``, in a transaction of the worker's that also writes the task's success,
        fenced like every outcome: the work commits exactly once, with the success, or not
        at all.
        """
        check_queue(queue)
        if on_lease_expired not in (RETRY, ABANDON):
            raise InvalidValueError(
                "on_lease_expired", f"must be 'retry' or 'abandon', got {on_lease_expired!r}"
            )
        if not isinstance(atomic, bool):
            raise InvalidTypeError("atomic", "must be a bool")
        if compensate is not None and (not isinstance(compensate, str) or not compensate.strip()):
            raise InvalidValueError("compensate", "must be the name of a registered task")
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int):
            raise InvalidTypeError("max_attempts", "must be an int")
        if not 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT:
            raise InvalidValueError("max_attempts", f"must be between 1 and {MAX_ATTEMPTS_LIMIT}")
        check_timeout(timeout)
        if not callable(backoff) and check_positive("backoff", backoff + 1) < 1:
            raise InvalidValueError("backoff", "must not be negative")

        def register(fn: Handler) -> TaskDefinition:
            task_name = check_name(name if name is not None else fn.__name__)
            if task_name in self._tasks:
                raise ConfigError(f"task {task_name!r} is registered twice")
            definition = TaskDefinition(
                fn,
                task_name,
                queue=queue,
                max_attempts=max_attempts,
                timeout=float(timeout),
                backoff=backoff,
                on_lease_expired=on_lease_expired,
                compensate=compensate,
                atomic=atomic,
            )
            self._tasks[task_name] = definition
            return definition

        return register

    def periodic(
        self,
        cron: str,
        *,
        payload: Any = None,
        queue: str | None = None,
        timezone: str = "UTC",
        catch_up: bool = False,
        name: str | None = None,
    ) -> Callable[[Handler | TaskDefinition], TaskDefinition]:
        """Enqueue the decorated task at each slot of ``cron``, once per slot across every
        worker that keeps this registry.

        ``cron`` has five fields (``"*/5 * * * *"``: every five minutes) or six, seconds
        first (``"*/10 * * * * *"``), read in ``timezone``. Decorating a plain function
        registers it as a task too (on ``queue``, else the default queue); decorating what
        ``@registry.task`` returned keeps its options. The schedule is named ``name`` (by
        default the task's name; for a plain function, ``name`` names the task too): a
        task with two schedules names the second.

        A slot missed while no worker ran is enqueued once, when one starts; with
        ``catch_up=True`` each missed slot is (the newest 1,000). A new schedule starts at
        its next slot. Needs the ``periodic`` extra (cronsim).
        """

        def register(fn: Handler | TaskDefinition) -> TaskDefinition:
            if isinstance(fn, TaskDefinition):
                definition = fn
            else:
                definition = self.task(name, queue=queue or DEFAULT_QUEUE)(fn)
            schedule = Schedule(
                name if name is not None else definition.name,
                cron,
                definition.name,
                queue or definition.queue,
                payload,
                timezone,
                catch_up,
            )
            if schedule.name in self._schedules:
                raise ConfigError(
                    f"schedule {schedule.name!r} is declared twice: give the second a name="
                )
            self._schedules[schedule.name] = schedule
            return definition

        return register

    def schedules(self) -> list[Schedule]:
        """The periodic tasks declared with ``periodic``, in declaration order."""
        return list(self._schedules.values())

    def get(self, name: str) -> TaskDefinition | None:
        return self._tasks.get(name)

    def queues(self) -> list[str]:
        """The queues of the registered tasks, in registration order."""
        return list(dict.fromkeys(d.queue for d in self._tasks.values()))

    def claim_defaults(self) -> dict[str, dict[str, Any]]:
        """Per task name, what a worker's claim writes into rows that leave it unset.

        Raises ConfigError if a ``compensate`` names a task this registry does not know:
        the cleaner needs its queue.
        """
        out = {}
        for name, d in self._tasks.items():
            policy: dict[str, Any] = {"policy": d.on_lease_expired}
            if d.compensate is not None:
                target = self._tasks.get(d.compensate)
                if target is None:
                    raise ConfigError(
                        f"task {name!r}: compensate={d.compensate!r} is not a registered task"
                    )
                policy.update(name=target.name, queue=target.queue)
            out[name] = {
                "timeout": d.timeout,
                "max_attempts": d.max_attempts,
                "on_lease_expired": policy,
            }
        return out

    def __iter__(self) -> Iterator[TaskDefinition]:
        return iter(self._tasks.values())

    def __len__(self) -> int:
        return len(self._tasks)
