"""The registry: task names mapped to handlers and their per-task defaults."""

from __future__ import annotations

import inspect
import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, overload

from .codecs import jsonable
from .definition import (
    App,
    Handler,
    Registering,
    RegisteringWithContext,
    TaskDefinition,
    check_app,
)
from .errors import ConfigError, InvalidTypeError, InvalidValueError, TaskArgumentsError
from .fields import (
    MAX_ATTEMPTS_LIMIT,
    check_expires,
    check_name,
    check_positive,
    check_queue,
    check_time_limit,
    check_timeout,
)
from .lifecycle import ABANDON, RETRY
from .limits import check_concurrency, key_text, parse_rate
from .periodic import Schedule
from .task import DEFAULT_BACKOFF, DEFAULT_MAX_ATTEMPTS, DEFAULT_QUEUE, DEFAULT_TIMEOUT, Backoff


@dataclass(frozen=True, slots=True)
class FailedTask:
    """What the registry's ``on_failed`` hook is told about a task that failed for good.

    Example:

    ```python
    @registry.on_failed
    def alert(failed: txqueue.FailedTask) -> None:
        print(f"{failed.name} {failed.id} failed for good: {failed.reason}")
    ```
    """

    id: uuid.UUID
    name: str
    queue: str
    payload: Any
    attempts: int
    reason: str  # "attempts exhausted", "lease expired: abandoned", ...
    error: dict[str, Any] | None


FailureHook = Callable[[FailedTask], None]


log = logging.getLogger("txqueue.registry")


class Registry:
    """Maps task names to handlers; a worker runs the tasks its registry knows.

    ``on_failed`` is called (in the worker, or in a cleaner given this registry) for each
    task that fails for good; see ``on_failed``.

    Example:

    ```python
    registry = txqueue.Registry()


    @registry.task(queue="emails", max_attempts=3, timeout=30)
    def send_welcome(user: int) -> None: ...


    send_welcome.enqueue(conn, user=7)
    ```
    """

    def __init__(self, *, on_failed: FailureHook | None = None) -> None:
        self._tasks: dict[str, TaskDefinition[Any, Any]] = {}
        self._schedules: dict[str, Schedule] = {}
        self._on_failed = on_failed
        self._app: App | None = None
        # ``module:attribute`` it was imported from by ``txqueue worker --app``: where a
        # process pool's children import it from too.
        self.loaded_from: str | None = None

    def on_failed(self, hook: FailureHook) -> FailureHook:
        """Set, as a decorator, the alert hook for tasks that fail for good: attempts
        exhausted, or a lease expired under the ``abandon`` or ``compensate`` policy.

        It runs after the failure is committed; exceptions it raises are logged and
        otherwise ignored. Keep it quick (send an alert, do not do the work).
        """
        self._on_failed = hook
        return hook

    def bind(self, app: App | None) -> None:
        """Send the enqueues of this registry's typed tasks (``send.enqueue(conn, …)``,
        ``send.options(…).enqueue``, and their async forms) through ``app``'s store,
        clock and wake-ups, and their ``wait`` through its store; None: through the
        module-level defaults again. Bind at start-up, once: it holds for every thread
        and for the tasks registered after it."""
        if app is not None:
            check_app(app)
        self._app = app
        for definition in self._tasks.values():
            definition.app = app

    def alert(self, failure: FailedTask) -> None:
        """Call the ``on_failed`` hook, if any, never letting it raise."""
        if self._on_failed is None:
            return
        try:
            self._on_failed(failure)
        except Exception:
            log.exception("on_failed hook raised for task %s %s", failure.name, failure.id)

    @overload
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
        concurrency_key: str | None = None,
        concurrency_limit: int | None = None,
        rate_limit: str | None = None,
        rate_limit_key: str | None = None,
        expires: timedelta | float | None = None,
        time_limit: float | None = None,
        context: Literal[False] = False,
    ) -> Registering: ...
    @overload
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
        concurrency_key: str | None = None,
        concurrency_limit: int | None = None,
        rate_limit: str | None = None,
        rate_limit_key: str | None = None,
        expires: timedelta | float | None = None,
        time_limit: float | None = None,
        context: Literal[True],
    ) -> RegisteringWithContext: ...
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
        concurrency_key: str | None = None,
        concurrency_limit: int | None = None,
        rate_limit: str | None = None,
        rate_limit_key: str | None = None,
        expires: timedelta | float | None = None,
        time_limit: float | None = None,
        context: bool = False,
    ) -> Registering | RegisteringWithContext:
        """Register the decorated function as the handler of ``name`` (default: its name).

        Its signature is the task's: ``send.enqueue(conn, order=42)`` stores the
        arguments as JSON (see ``txqueue.codecs`` for the types that round-trip), and
        the worker calls ``send(order=42)``. ``context=True``: the handler's first
        argument is the attempt's ``TaskContext``, which enqueues do not give.

        ``on_lease_expired``: what the cleaner does with a task whose worker died (or froze,
        or was cut off) mid-run. ``"retry"`` runs it again, counting the lost attempt, so a
        task that keeps killing its worker ends ``failed`` after ``max_attempts``;
        ``"abandon"`` fails it at once and calls ``on_failed`` (for work that must never
        run twice). ``compensate="task_name"`` fails it and enqueues that task, in the same
        transaction, with ``{"task_id", "name", "payload"}`` of the lost one.

        ``atomic=True`` (with ``context=True``): the handler does its database work on
        ``ctx.conn``, in a transaction of the worker's that also writes the task's success,
        fenced like every outcome: the work commits exactly once, with the success, or not
        at all.

        ``concurrency_limit=N``: at most N of its tasks run at once, across every worker;
        with ``concurrency_key="account_id"``, at most N per value of that argument (and
        with every other task whose key is an argument of the same name). ``rate_limit=
        "10/s"``: at most that many starts per period, paced, likewise per value of
        ``rate_limit_key``. Tasks held back wait ``pending``, at no cost in attempts
        (docs/how-to/flow-control.md). In a fair-share queue, the values of
        ``concurrency_key`` (given alone, or with a limit) take turns.

        ``expires``: a task not started this long after it is due is not run: it fails,
        reason ``expired``. ``time_limit``: seconds an attempt may run; a process pool's
        child past it is stopped, and the attempt fails (docs/how-to/workers.md).
        """
        check_queue(queue)
        if on_lease_expired not in (RETRY, ABANDON):
            raise InvalidValueError(
                "on_lease_expired", f"must be 'retry' or 'abandon', got {on_lease_expired!r}"
            )
        for flag, value in (("atomic", atomic), ("context", context)):
            if not isinstance(value, bool):
                raise InvalidTypeError(flag, "must be a bool")
        if compensate is not None and (not isinstance(compensate, str) or not compensate.strip()):
            raise InvalidValueError("compensate", "must be the name of a registered task")
        if isinstance(max_attempts, bool) or not isinstance(max_attempts, int):
            raise InvalidTypeError("max_attempts", "must be an int")
        if not 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT:
            raise InvalidValueError("max_attempts", f"must be between 1 and {MAX_ATTEMPTS_LIMIT}")
        check_timeout(timeout)
        deadline = None if expires is None else check_expires(expires)
        if isinstance(deadline, datetime):
            raise InvalidTypeError("expires", "must be a duration here: a task's own may be a time")
        hard_limit = None if time_limit is None else check_time_limit(time_limit)
        if not callable(backoff) and check_positive("backoff", backoff + 1) < 1:
            raise InvalidValueError("backoff", "must not be negative")
        limits: dict[str, dict[str, Any]] = {}
        key_arg = _key_arg("concurrency_key", concurrency_key)
        if concurrency_limit is not None:
            limits["concurrency"] = {
                "arg": key_arg,
                "limit": check_concurrency(concurrency_limit, "concurrency_limit"),
            }
        if rate_limit is not None:
            starts, period = parse_rate(rate_limit)
            arg = _key_arg("rate_limit_key", rate_limit_key)
            limits["rate"] = {"arg": arg, "limit": starts, "period": period}
        elif rate_limit_key is not None:
            raise ConfigError("rate_limit_key needs a rate_limit")

        def register(fn: Handler) -> TaskDefinition[Any, Any]:
            task_name = check_name(name if name is not None else fn.__name__)
            if task_name in self._tasks:
                raise ConfigError(f"task {task_name!r} is registered twice")
            definition: TaskDefinition[Any, Any] = TaskDefinition(
                fn,
                task_name,
                queue=queue,
                max_attempts=max_attempts,
                timeout=float(timeout),
                backoff=backoff,
                on_lease_expired=on_lease_expired,
                compensate=compensate,
                atomic=atomic,
                context=context,
                run=self.around(fn),
            )
            definition.app = self._app
            definition.expires, definition.time_limit = deadline, hard_limit
            keyed_on = key_arg or any(spec["arg"] for spec in limits.values())
            if keyed_on and definition.signature.whole is not None:
                raise ConfigError(
                    f"task {task_name!r}: a handler given the payload whole has no "
                    "arguments to key limits on: declare its arguments"
                )
            definition.limits = {
                kind: {**spec, "default": _key_default(fn, task_name, spec["arg"])}
                for kind, spec in limits.items()
            }
            if concurrency_key is not None or concurrency_limit is not None:
                definition.key = (key_arg, _key_default(fn, task_name, key_arg))
            self._tasks[task_name] = definition
            return definition

        return RegisteringWithContext(register) if context else Registering(register)

    def around(self, fn: Handler) -> Handler:
        """What a worker calls to run ``fn``: ``fn`` itself here; a registry for a
        framework wraps it (Django's closes stale connections around it)."""
        return fn

    def periodic(
        self,
        cron: str,
        *,
        payload: Any = None,
        queue: str | None = None,
        timezone: str = "UTC",
        catch_up: bool = False,
        name: str | None = None,
    ) -> Callable[[Handler | TaskDefinition[Any, Any]], TaskDefinition[Any, Any]]:
        """Enqueue the decorated task at each slot of ``cron``, once per slot across every
        worker that keeps this registry.

        ``cron`` has five fields (``"*/5 * * * *"``: every five minutes) or six, seconds
        first (``"*/10 * * * * *"``), read in ``timezone``. Decorating a plain function
        registers it as a task too (on ``queue``, else the default queue); decorating what
        ``@registry.task`` returned keeps its options. The schedule is named ``name`` (by
        default the task's name; for a plain function, ``name`` names the task too): a
        task with two schedules names the second.

        ``payload`` is the task's arguments by name, in their stored (JSON) form, checked
        against the handler here. A slot missed while no worker ran is enqueued once, when
        one starts; with
        ``catch_up=True`` each missed slot is (the newest 1,000). A new schedule starts at
        its next slot. Needs the ``periodic`` extra (cronsim).
        """

        def register(fn: Handler | TaskDefinition[Any, Any]) -> TaskDefinition[Any, Any]:
            if isinstance(fn, TaskDefinition):
                definition = fn
            else:
                definition = self.task(name, queue=queue or DEFAULT_QUEUE)(fn)
            try:  # each slot's task would fail at once on arguments that do not fit
                definition.signature.load({} if payload is None else payload)
            except TaskArgumentsError as exc:
                raise ConfigError(f"periodic {definition.name!r}: payload: {exc}") from None
            schedule = Schedule(
                name if name is not None else definition.name,
                cron,
                definition.name,
                queue or definition.queue,
                payload,
                timezone,
                catch_up,
                definition.concurrency_key(payload),
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

    def get(self, name: str) -> TaskDefinition[Any, Any] | None:
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
        shared: dict[tuple[str, str], tuple[str, Any]] = {}
        for name, d in self._tasks.items():
            specs = dict(d.limits)
            if d.key is not None and "concurrency" not in specs:
                specs["concurrency"] = {"arg": d.key[0], "limit": None}  # a key alone
            for kind, spec in specs.items():
                # Keys on arguments of one name are one count: one limit for all of them.
                if spec["arg"] is None:
                    continue
                limit = (spec["limit"], spec.get("period"))
                first = shared.setdefault((kind, spec["arg"]), (name, limit))
                if first[1] != limit:
                    said = [str(x[0]) if x[0] is not None else "none" for x in (first[1], limit)]
                    raise ConfigError(
                        f"tasks {first[0]!r} and {name!r} share the {kind} key "
                        f"{spec['arg']!r} with different limits ({' and '.join(said)}): a "
                        "limit counts every task with the key, so give them one"
                    )
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
                **d.limits,
            }
            if d.expires is not None:
                out[name]["expires"] = d.expires
            if d.time_limit is not None:
                out[name]["time_limit"] = d.time_limit
        return out

    def __iter__(self) -> Iterator[TaskDefinition[Any, Any]]:
        return iter(self._tasks.values())

    def __len__(self) -> int:
        return len(self._tasks)


def _key_arg(field: str, value: object) -> str | None:
    if value is not None and (not isinstance(value, str) or not value.isidentifier()):
        raise InvalidValueError(field, f"must name one of the handler's arguments, got {value!r}")
    return value


def _key_default(fn: Handler, task: str, arg: str | None) -> str | None:
    """The key's value as text when the argument is not given: its default's."""
    if arg is None:
        return None
    try:
        param = inspect.signature(fn).parameters.get(arg)
    except (TypeError, ValueError):
        param = None
    if param is None or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
        raise ConfigError(f"task {task!r}: its key {arg!r} is not an argument of its handler")
    if param.default is param.empty or param.default is None:
        return None
    default = jsonable(param.default)
    if not isinstance(default, str | int | float | bool):
        raise ConfigError(
            f"task {task!r}: its key {arg!r} defaults to {type(param.default).__name__}: "
            "a key is a str, int, float or bool"
        )
    return key_text(default)
