"""The registry: task names mapped to handlers and their per-task defaults."""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from .errors import ConfigError, InvalidTypeError, InvalidValueError
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

    def heartbeat(self) -> bool:
        """Extend this attempt's lease by its timeout; False if the lease was already lost."""
        return self._heartbeat()


Handler = Callable[..., Any]


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
    ) -> None:
        self.fn = fn
        self.name = name
        self.queue = queue
        self.max_attempts = max_attempts
        self.timeout = timeout
        self.backoff = backoff
        self.is_async = inspect.iscoroutinefunction(fn)
        self.wants_context = _wants_context(fn, name)
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
    """Maps task names to handlers; a worker runs the tasks its registry knows."""

    def __init__(self) -> None:
        self._tasks: dict[str, TaskDefinition] = {}

    def task(
        self,
        name: str | None = None,
        *,
        queue: str = DEFAULT_QUEUE,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        timeout: float = DEFAULT_TIMEOUT,
        backoff: Backoff = DEFAULT_BACKOFF,
    ) -> Callable[[Handler], TaskDefinition]:
        """Register the decorated function as the handler of ``name`` (default: its name)."""
        check_queue(queue)
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int):
            raise InvalidTypeError("max_attempts", "must be an int")
        if not 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT:
            raise InvalidValueError("max_attempts", f"must be between 1 and {MAX_ATTEMPTS_LIMIT}")
        check_positive("timeout", timeout)
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
            )
            self._tasks[task_name] = definition
            return definition

        return register

    def get(self, name: str) -> TaskDefinition | None:
        return self._tasks.get(name)

    def queues(self) -> list[str]:
        """The queues of the registered tasks, in registration order."""
        return list(dict.fromkeys(d.queue for d in self._tasks.values()))

    def timeouts(self) -> dict[str, float]:
        return {name: d.timeout for name, d in self._tasks.items()}

    def __iter__(self) -> Iterator[TaskDefinition]:
        return iter(self._tasks.values())

    def __len__(self) -> int:
        return len(self._tasks)
