"""The registry: task names mapped to handlers and their per-task defaults."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, Unpack, overload

from ..core.fields import check_name
from ..core.task import DEFAULT_QUEUE
from ..errors import ConfigError, TaskArgumentsError
from ..schedules.periodic import Schedule
from . import registration
from .definition import App, Handler, Registering, RegisteringWithContext, TaskDefinition, check_app
from .registration import TaskSettings


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
        context: Literal[False] = False,
        **settings: Unpack[TaskSettings],
    ) -> Registering: ...
    @overload
    def task(
        self, name: str | None = None, *, context: Literal[True], **settings: Unpack[TaskSettings]
    ) -> RegisteringWithContext: ...
    def task(
        self, name: str | None = None, *, context: bool = False, **settings: Unpack[TaskSettings]
    ) -> Registering | RegisteringWithContext:
        """Register the decorated function as the handler of ``name`` (default: its name),
        its tasks set by ``settings`` (``TaskSettings``: queue, max_attempts, timeout,
        backoff, on_lease_expired, compensate, atomic, concurrency_key, concurrency_limit,
        rate_limit, rate_limit_key, expires, time_limit).

        Its signature is the task's: ``send.enqueue(conn, order=42)`` stores the
        arguments as JSON (see ``txqueue.tasks.codecs`` for the types that round-trip), and
        the worker calls ``send(order=42)``. ``context=True``: the handler's first
        argument is the attempt's ``TaskContext``, which enqueues do not give.
        """
        checked = registration.check(settings, context)

        def register(fn: Handler) -> TaskDefinition[Any, Any]:
            task_name = check_name(name if name is not None else fn.__name__)
            if task_name in self._tasks:
                raise ConfigError(f"task {task_name!r} is registered twice")
            definition = checked.define(fn, task_name, self.around(fn))
            definition.app = self._app
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
