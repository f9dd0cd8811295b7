"""What ``@registry.task`` may set for a task (``TaskSettings``), checked once when the
module that registers it is imported, and made into its ``TaskDefinition``."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypedDict

from ..core.fields import (
    MAX_ATTEMPTS_LIMIT,
    check_expires,
    check_positive,
    check_queue,
    check_time_limit,
    check_timeout,
)
from ..core.lifecycle import ABANDON, RETRY
from ..core.limits import check_concurrency, key_text, parse_rate
from ..core.task import (
    DEFAULT_BACKOFF,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_QUEUE,
    DEFAULT_TIMEOUT,
    Backoff,
)
from ..errors import ConfigError, InvalidTypeError, InvalidValueError
from .codecs import jsonable
from .definition import Handler, TaskDefinition


class TaskSettings(TypedDict, total=False):
    """What ``@registry.task`` sets for every task of a handler, every one optional.

    Example:

    ```python
    settings: txqueue.TaskSettings = {"queue": "emails", "max_attempts": 3, "timeout": 30}


    @registry.task("welcome_mail", **settings)
    def welcome_mail(user: int) -> None: ...
    ```
    """

    queue: str
    """The queue its tasks go to (default ``"default"``)."""
    max_attempts: int
    """Attempts before it fails for good (default 5)."""
    timeout: float
    """Seconds of an attempt's lease, extended while it runs (default 300)."""
    backoff: Backoff
    """Seconds before a retry: a base for exponential backoff with jitter, or a function of
    the attempt number."""
    on_lease_expired: str
    """What the cleaner does with a task whose worker died (or froze, or was cut off)
    mid-run: ``"retry"`` (the default) runs it again, counting the lost attempt, so a task
    that keeps killing its worker ends ``failed`` after ``max_attempts``; ``"abandon"``
    fails it at once and calls ``on_failed`` (for work that must never run twice)."""
    compensate: str | None
    """A task's name: a task lost with its worker fails, and that task is enqueued in the
    same transaction with ``{"task_id", "name", "payload"}`` of the lost one."""
    atomic: bool
    """With ``context=True``: the handler does its database work on ``ctx.conn``, in a
    transaction of the worker's that also writes the task's success, fenced like every
    outcome: the work commits exactly once, with the success, or not at all."""
    concurrency_key: str | None
    """An argument's name: with ``concurrency_limit``, at most that many run at once per
    value of it (and with every other task keyed on an argument of the same name); in a
    fair-share queue, its values take turns."""
    concurrency_limit: int | None
    """At most this many of its tasks run at once, across every worker; tasks held back
    wait ``pending``, at no cost in attempts (docs/how-to/flow-control.md)."""
    rate_limit: str | None
    """At most this many starts per period (``"10/s"``), paced."""
    rate_limit_key: str | None
    """An argument's name: the rate limit counts per value of it."""
    expires: timedelta | float | None
    """A task not started this long after it is due is not run: it fails, reason
    ``expired``."""
    time_limit: float | None
    """Seconds an attempt may run; a process pool's child past it is stopped, and the
    attempt fails (docs/how-to/workers.md)."""


@dataclass(frozen=True, slots=True)
class Checked:
    """A registration's settings, checked, with the defaults in."""

    queue: str
    max_attempts: int
    timeout: float
    backoff: Backoff
    on_lease_expired: str
    compensate: str | None
    atomic: bool
    context: bool
    expires: float | None
    time_limit: float | None
    key: str | None  # the concurrency key's argument
    keyed: bool  # a concurrency key or limit was given
    limits: dict[str, dict[str, Any]] = field(default_factory=dict)

    def define(self, fn: Handler, task_name: str, run: Handler) -> TaskDefinition[Any, Any]:
        """The handler's definition under these settings (``run``: what a worker calls)."""
        definition: TaskDefinition[Any, Any] = TaskDefinition(
            fn,
            task_name,
            queue=self.queue,
            max_attempts=self.max_attempts,
            timeout=self.timeout,
            backoff=self.backoff,
            on_lease_expired=self.on_lease_expired,
            compensate=self.compensate,
            atomic=self.atomic,
            context=self.context,
            run=run,
        )
        definition.expires, definition.time_limit = self.expires, self.time_limit
        keyed_on = self.key or any(spec["arg"] for spec in self.limits.values())
        if keyed_on and definition.signature.whole is not None:
            raise ConfigError(
                f"task {task_name!r}: a handler given the payload whole has no "
                "arguments to key limits on: declare its arguments"
            )
        definition.limits = {
            kind: {**spec, "default": _key_default(fn, task_name, spec["arg"])}
            for kind, spec in self.limits.items()
        }
        if self.keyed:
            definition.key = (self.key, _key_default(fn, task_name, self.key))
        return definition


def check(settings: TaskSettings, context: object) -> Checked:
    """``settings`` (and ``context``) checked, each error naming its field."""
    unknown = [name for name in settings if name not in TaskSettings.__annotations__]
    if unknown:  # as Python says it of a keyword a signature does not have
        raise TypeError(f"Registry.task() got an unexpected keyword argument {unknown[0]!r}")
    s = settings
    queue = check_queue(s.get("queue", DEFAULT_QUEUE))
    on_lease_expired = s.get("on_lease_expired", RETRY)
    if on_lease_expired not in (RETRY, ABANDON):
        raise InvalidValueError(
            "on_lease_expired", f"must be 'retry' or 'abandon', got {on_lease_expired!r}"
        )
    atomic = s.get("atomic", False)
    for flag, value in (("atomic", atomic), ("context", context)):
        if not isinstance(value, bool):
            raise InvalidTypeError(flag, "must be a bool")
    compensate = s.get("compensate")
    if compensate is not None and (not isinstance(compensate, str) or not compensate.strip()):
        raise InvalidValueError("compensate", "must be the name of a registered task")
    max_attempts = _max_attempts(s.get("max_attempts", DEFAULT_MAX_ATTEMPTS))
    timeout = s.get("timeout", DEFAULT_TIMEOUT)
    check_timeout(timeout)
    expires = _expires(s.get("expires"))
    time_limit = s.get("time_limit")
    time_limit = None if time_limit is None else check_time_limit(time_limit)
    backoff = s.get("backoff", DEFAULT_BACKOFF)
    if not callable(backoff) and check_positive("backoff", backoff + 1) < 1:
        raise InvalidValueError("backoff", "must not be negative")
    key = _key_arg("concurrency_key", s.get("concurrency_key"))
    return Checked(
        queue=queue,
        max_attempts=max_attempts,
        timeout=float(timeout),
        backoff=backoff,
        on_lease_expired=on_lease_expired,
        compensate=compensate,
        atomic=atomic,
        context=bool(context),
        expires=expires,
        time_limit=time_limit,
        key=key,
        keyed=s.get("concurrency_key") is not None or s.get("concurrency_limit") is not None,
        limits=_limits(s, key),
    )


def _max_attempts(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidTypeError("max_attempts", "must be an int")
    if not 1 <= value <= MAX_ATTEMPTS_LIMIT:
        raise InvalidValueError("max_attempts", f"must be between 1 and {MAX_ATTEMPTS_LIMIT}")
    return value


def _expires(value: timedelta | float | None) -> float | None:
    deadline = None if value is None else check_expires(value)
    if isinstance(deadline, datetime):
        raise InvalidTypeError("expires", "must be a duration here: a task's own may be a time")
    return deadline


def _limits(s: TaskSettings, key: str | None) -> dict[str, dict[str, Any]]:
    """The concurrency and rate limits, as claims read them, without their defaults."""
    limits: dict[str, dict[str, Any]] = {}
    concurrency_limit = s.get("concurrency_limit")
    if concurrency_limit is not None:
        limit = check_concurrency(concurrency_limit, "concurrency_limit")
        limits["concurrency"] = {"arg": key, "limit": limit}
    rate_limit, rate_limit_key = s.get("rate_limit"), s.get("rate_limit_key")
    if rate_limit is not None:
        starts, period = parse_rate(rate_limit)
        arg = _key_arg("rate_limit_key", rate_limit_key)
        limits["rate"] = {"arg": arg, "limit": starts, "period": period}
    elif rate_limit_key is not None:
        raise ConfigError("rate_limit_key needs a rate_limit")
    return limits


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
