"""A registered task, typed by its handler's signature: what ``Registry.task`` returns.

``TaskDefinition`` enqueues, waits for and calls one handler; ``TaskOptions`` is the same
task with the options of its enqueues set; the ``Registering`` decorators give mypy the
definition's types from the handler's.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Callable, Coroutine
from datetime import datetime, timedelta
from typing import (
    Any,
    Concatenate,
    Generic,
    ParamSpec,
    Protocol,
    TypeVar,
    cast,
    overload,
    runtime_checkable,
)

from ..core.fields import CONCURRENCY_KEY_MAX
from ..core.lifecycle import COMPENSATE, RETRY, LeasePolicy
from ..core.limits import task_key
from ..core.stored import TaskInfo
from ..core.task import SUCCEEDED, Backoff, Task
from ..errors import (
    ConfigError,
    InvalidTypeError,
    InvalidValueError,
    TaskArgumentsError,
    TaskFailedError,
)
from ..operations import waiting
from ..outbox.calls import Enqueuing
from ..store.protocols import AnyStore
from .arguments import Signature
from .context import TaskContext

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

_DEFAULTS = Enqueuing()
"""A typed task's enqueues without an App: the process's defaults. ``Enqueuing`` holds no
state but the store and Delivery an App sets, so that this one and ``txqueue.app.DEFAULTS``
(which the layers keep out of reach here) enqueue alike."""

Handler = Callable[..., Any]


@runtime_checkable
class App(Protocol):
    """What a typed task enqueues and waits through: a ``txqueue.App`` (whose module
    imports this one)."""

    @property
    def store(self) -> AnyStore: ...
    def enqueue(self, conn: object, task: Task) -> uuid.UUID: ...
    async def enqueue_async(self, conn: object, task: Task) -> uuid.UUID: ...


class TaskDefinition(Generic[P, R]):
    """A registered handler, typed by its signature: ``enqueue(conn, *args, **kwargs)``
    takes the handler's own arguments (mypy checks them; so does txqueue, before anything
    is written), and ``wait`` returns what the handler returns. ``options(...)`` sets the
    options of one enqueue. Calling the definition calls the handler.

    Example:

    ```python
    from txqueue.testing import run_tasks

    task_id = send_receipt.enqueue(conn, order=42)  # checked against the handler, by mypy too
    conn.commit()
    run_tasks(registry, url)
    print(send_receipt.wait(url, task_id, timeout=5))  # receipt 42 sent
    ```
    """

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
        context: bool = False,
        run: Handler | None = None,
    ) -> None:
        self.fn = fn
        self.name = name
        self.queue = queue
        self.max_attempts = max_attempts
        self.timeout = timeout
        self.backoff = backoff
        self.on_lease_expired = (
            COMPENSATE if compensate is not None else LeasePolicy(on_lease_expired)
        )
        self.compensate = compensate
        self.is_async = inspect.iscoroutinefunction(fn)
        self.signature = Signature(fn, name, context=context)
        self.wants_context = self.signature.context is not None
        self.atomic = atomic
        if atomic and (self.is_async or not self.wants_context):
            raise ConfigError(
                f"task {name!r}: an atomic handler is a plain def taking the TaskContext "
                "(context=True): ctx.conn is the connection its work commits on"
            )
        # Its concurrency and rate limits, as claims read them (Registry.claim_defaults),
        # and its concurrency key's argument (None: the task's name) and default, if it has one.
        self.limits: dict[str, dict[str, Any]] = {}
        # Its default start deadline (seconds after due) and hard time limit, if any.
        self.expires: float | None = None
        self.time_limit: float | None = None
        self.key: tuple[str | None, str | None] | None = None
        self._run = fn if run is None else run
        self.app: App | None = None  # Registry.bind's: what enqueues and waits go through
        self.plain = TaskOptions(self)  # its options as registered
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<TaskDefinition {self.name!r} queue={self.queue!r}>"

    def call(self, payload: Any, ctx: TaskContext) -> Any:
        """Run the handler on a stored payload (a coroutine, for an ``async def``): the
        arguments rebuilt from their annotations, the context where it asked for it.
        Raises TaskArgumentsError when the payload does not fit."""
        args, kwargs = self.signature.load(payload)
        if self.signature.context is not None:
            args.insert(self.signature.context, ctx)
        return self._run(*args, **kwargs)

    def concurrency_key(self, payload: Any) -> str | None:
        """The key of a task of these arguments (their stored form), as claims compute it:
        ``account_id:42``, ``task:<name>``, or None for a task that declares none."""
        return None if self.key is None else task_key(*self.key, self.name, payload)

    def options(
        self,
        *,
        queue: str | None = None,
        priority: int = 0,
        run_at: datetime | None = None,
        delay: timedelta | float | None = None,
        unique_key: str | None = None,
        max_attempts: int | None = None,
        timeout: float | None = None,
        expires: datetime | timedelta | float | None = None,
        time_limit: float | None = None,
        app: App | None = None,
    ) -> TaskOptions[P, R]:
        """This task with options for the enqueues made through what it returns:
        ``send.options(delay=60, unique_key="r-42").enqueue(conn, order=42)``. ``queue``
        overrides the registered one (a worker must consume it); ``app`` sends them
        through that App's store and wake-ups instead of the registry's bound one."""
        return TaskOptions(
            self,
            queue,
            priority,
            run_at,
            delay,
            unique_key,
            max_attempts,
            timeout,
            app,
            expires=expires,
            time_limit=time_limit,
        )

    def task(self, *args: P.args, **kwargs: P.kwargs) -> Task:
        """The Task an enqueue of these arguments inserts (for ``enqueue_many``, or an
        App's ``enqueue``)."""
        return self.plain.task(*args, **kwargs)

    def enqueue(self, conn: object, /, *args: P.args, **kwargs: P.kwargs) -> uuid.UUID:
        """``txqueue.enqueue`` of this task with these arguments, in the caller's
        transaction on ``conn``; the task's id."""
        return self.plain.enqueue(conn, *args, **kwargs)

    async def enqueue_async(self, conn: object, /, *args: P.args, **kwargs: P.kwargs) -> uuid.UUID:
        """``txqueue.enqueue_async`` of this task with these arguments."""
        return await self.plain.enqueue_async(conn, *args, **kwargs)

    def wait(
        self,
        conn_or_url: Any,
        task_id: uuid.UUID | str,
        timeout: float | None = None,
        *,
        on_progress: waiting.OnProgress | None = None,
    ) -> R:
        """``txqueue.wait`` for this task, then its result as the handler returned it
        (rebuilt from the return annotation). Raises TaskFailedError if it failed or was
        cancelled."""
        store = None if self.app is None else self.app.store
        info = waiting.wait_by(conn_or_url, task_id, timeout, store, on_progress=on_progress)
        return self._result(info)

    async def wait_async(
        self,
        conn_or_url: Any,
        task_id: uuid.UUID | str,
        timeout: float | None = None,
        *,
        on_progress: waiting.OnProgress | None = None,
    ) -> R:
        """``wait`` for asyncio."""
        store = None if self.app is None else self.app.store
        info = await waiting.wait_async_by(
            conn_or_url, task_id, timeout, store, on_progress=on_progress
        )
        return self._result(info)

    def _result(self, info: TaskInfo) -> R:
        if info.name != self.name:
            raise InvalidValueError("task_id", f"is a task {info.name!r}, not {self.name!r}")
        if info.state != SUCCEEDED:
            last = info.errors[-1]["message"] if info.errors else "no error recorded"
            raise TaskFailedError(f"task {self.name} {info.id} is {info.state}: {last}", info)
        try:
            return cast(R, self.signature.result(info.result))
        except (InvalidTypeError, InvalidValueError) as exc:
            raise TaskArgumentsError(exc.field, str(exc).split(": ", 1)[-1]) from None


class TaskOptions(Generic[P, R]):
    """A task with the options of its enqueues set: ``TaskDefinition.options``.

    Example:

    ```python
    later = send_receipt.options(delay=60, priority=10, unique_key="receipt-42")
    later.enqueue(conn, order=42)
    later.enqueue(conn, order=42)  # the key's task is pending: nothing more written
    ```
    """

    def __init__(
        self,
        definition: TaskDefinition[P, R],
        queue: str | None = None,
        priority: int = 0,
        run_at: datetime | None = None,
        delay: timedelta | float | None = None,
        unique_key: str | None = None,
        max_attempts: int | None = None,
        timeout: float | None = None,
        app: App | None = None,
        *,
        expires: datetime | timedelta | float | None = None,
        time_limit: float | None = None,
    ) -> None:
        self.definition = definition
        if app is not None:
            check_app(app)
        self._app = app
        self._options: dict[str, Any] = {
            "queue": definition.queue if queue is None else queue,
            "priority": priority,
            "run_at": run_at,
            "delay": delay,
            "unique_key": unique_key,
            "max_attempts": max_attempts,
            "timeout": timeout,
            "expires": expires,
            "time_limit": time_limit,
        }

    def task(self, *args: P.args, **kwargs: P.kwargs) -> Task:
        """The Task an enqueue of these arguments inserts."""
        return self.task_of(self.definition.signature.dump(args, kwargs))

    def task_of(self, payload: Any) -> Task:
        """The Task of arguments already dumped (``Signature.dump``)."""
        signature = self.definition.signature
        try:
            key = self.definition.concurrency_key(payload)
            return Task(self.definition.name, payload, concurrency_key=key, **self._options)
        except InvalidValueError as exc:
            if exc.field == "payload":
                signature.culprit(payload)  # name the argument, if one is at fault
            arg = self.definition.key[0] if self.definition.key else None
            if exc.field == "concurrency_key" and arg is not None:
                raise InvalidValueError(
                    arg, f"makes a concurrency key longer than {CONCURRENCY_KEY_MAX} characters"
                ) from None
            raise

    def enqueue(self, conn: object, /, *args: P.args, **kwargs: P.kwargs) -> uuid.UUID:
        """``txqueue.enqueue`` of this task, with these options and arguments (through
        its App, if it has one)."""
        app = self._app or self.definition.app
        task = self.task(*args, **kwargs)
        return (app or _DEFAULTS).enqueue(conn, task)

    async def enqueue_async(self, conn: object, /, *args: P.args, **kwargs: P.kwargs) -> uuid.UUID:
        """``txqueue.enqueue_async`` of this task, with these options and arguments."""
        app = self._app or self.definition.app
        task = self.task(*args, **kwargs)
        return await (app or _DEFAULTS).enqueue_async(conn, task)


def check_app(app: object) -> None:
    if not isinstance(app, App):
        raise InvalidTypeError("app", f"must be a txqueue.App, not {type(app).__name__}")


class _Registering:
    """``Registry.task``'s decorator: registers what it decorates."""

    def __init__(self, register: Callable[[Handler], TaskDefinition[Any, Any]]) -> None:
        self._register = register


class Registering(_Registering):
    """Registers a handler whose arguments are all the task's (or ``(payload, ctx)``)."""

    @overload
    def __call__(
        self, fn: Callable[[T, TaskContext], Coroutine[Any, Any, R]], /
    ) -> TaskDefinition[[T], R]: ...
    @overload
    def __call__(self, fn: Callable[[T, TaskContext], R], /) -> TaskDefinition[[T], R]: ...
    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, R]], /) -> TaskDefinition[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, R], /) -> TaskDefinition[P, R]: ...
    def __call__(self, fn: Handler, /) -> TaskDefinition[Any, Any]:
        return self._register(fn)


class RegisteringWithContext(_Registering):
    """Registers a handler that takes the TaskContext first (``context=True``)."""

    @overload
    def __call__(
        self, fn: Callable[Concatenate[TaskContext, P], Coroutine[Any, Any, R]], /
    ) -> TaskDefinition[P, R]: ...
    @overload
    def __call__(self, fn: Callable[Concatenate[TaskContext, P], R], /) -> TaskDefinition[P, R]: ...
    def __call__(self, fn: Handler, /) -> TaskDefinition[Any, Any]:
        return self._register(fn)
