"""A handler's durable steps (``ctx.step``): a named step's function runs once and its
result is kept with the task, so that a later attempt (after a crash, a lost lease, a
retry) gets the result back instead of running the function again.

The worker gives each attempt a ``Journal``, where its steps are written and read on a
connection of the worker's. ``Steps`` is the handler's side of it: the order and the names
checked, the results turned to JSON and back with the codecs that task results use.

A sleep and a wait for a signal are steps too: a sleep records when it ends, a wait its
deadline and then the signal it took (or that it timed out). Until then the attempt ends
by raising ``Parked``, which the worker turns into the ``parked`` outcome: the task leaves
the worker and comes back at its time, or with its signal, and replays its steps. A child
is a step that enqueues a task (or a workflow) and a wait for the signal its end keeps.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

from ..core.fields import CHILD_KEYS, check_signal_key, encode_json
from ..core.lifecycle import FOREVER
from ..errors import InvalidValueError, StepError, TaskError, ValidationError
from .codecs import jsonable
from .hints import codec_for, type_hints

NAME_MAX: Final = 200
"""Characters of a step's name at most."""
MAX_STEPS: Final = 1_000
"""Steps one attempt records at most: each rewrites the task's list of them."""
MAX_WAIT: Final = 366 * 86400.0
"""The longest timeout a wait takes; None waits for its signal however long."""


class SignalTimeoutError(TaskError, TimeoutError):
    """``ctx.wait_for`` reached its timeout before a signal of its key came: the handler
    may catch it (``except txqueue.SignalTimeoutError: answer = None``), and every later
    attempt of the task gets it again at the same place.

    Example:

    ```python
    error = txqueue.SignalTimeoutError("no signal 'approval:42' came before the timeout")
    print(isinstance(error, TimeoutError), error)  # True no signal 'approval:42' came ...
    ```
    """


class ChildFailedError(TaskError):
    """The child task a handler waited for (``ctx.wait_child``, ``ctx.run_child``) failed
    or was cancelled: ``task_id``, ``state`` and ``reason`` say which and why. The handler
    may catch it; every later attempt of the task gets it again at the same place.

    Example:

    ```python
    @registry.task(context=True)
    def confirm(ctx: txqueue.TaskContext, order: int) -> bool:
        try:
            ctx.run_child(send_receipt.task(order=order))
        except txqueue.ChildFailedError as exc:  # it failed, or was cancelled
            print(exc.task_id, exc.state, exc.reason)
            return False
        return True
    ```
    """

    def __init__(self, task_id: uuid.UUID, state: str, reason: str | None) -> None:
        super().__init__(f"child task {task_id} ended {state}" + (f": {reason}" if reason else ""))
        self.task_id = task_id
        self.state = state
        self.reason = reason


class Parked(BaseException):
    """The attempt ends here, its task parked for ``run_in`` seconds or until a signal of
    ``key``: not an error (a BaseException, so that a handler's ``except Exception`` lets it
    through), turned into the ``parked`` outcome by the worker."""

    def __init__(self, run_in: float, key: str | None = None) -> None:
        super().__init__(f"parked for {run_in:.3f}s" + (f" or signal {key!r}" if key else ""))
        self.run_in = run_in
        self.key = key


class Journal(Protocol):
    """Where an attempt's steps are kept: written by the attempt that holds the task
    (fenced as an outcome is) and read back by a later one. ``thread_bound``: its
    connection is used only on the thread that made it (sqlite3's, by default)."""

    thread_bound: bool

    def recorded(self) -> list[dict[str, Any]]:
        """The steps earlier attempts recorded, in their order (``{name, result, ...}``)."""
        ...

    def record(self, name: str, result: str, took: float) -> None:
        """Keep step ``name``'s result (JSON); TaskError if the lease was lost."""
        ...

    def transaction(self, name: str, work: Callable[[Any], tuple[str, float]]) -> None:
        """Call ``work(conn)`` in a transaction, keep the step with the result and the
        seconds it returns, and commit both; TaskError, all rolled back, if the lease was
        lost."""
        ...

    def now(self) -> float:
        """The store's time, in Unix seconds: the one parked tasks are woken by."""
        ...

    def enqueue(self, name: str, child: Any) -> str:
        """In one transaction: enqueue ``child`` (a Task, or a Workflow) as a child of this
        attempt's task (its end, or the ends of a workflow's last steps, signalled to it:
        ``task:<id>``) and record step ``name`` with what was made; wake it once
        committed. The record (JSON): the task's id, or ``{"workflow": id, "ends": [[step,
        id], ...]}``. StepError if a task's unique key is held."""
        ...

    def receive(self, name: str, key: str, timed_out: bool) -> str | None:
        """In one transaction: take the oldest signal of ``key`` and record step ``name``
        as ``{"signal": payload}``, or with none, ``{"timed_out": true}`` if ``timed_out``;
        the step's result as recorded, or None (nothing recorded: the wait parks)."""
        ...


class Steps:
    """An attempt's steps: the names used, the recorded ones by name (read at the first
    step of an attempt after the first: the first has none to read), the place of the last
    one replayed, and whether one is running."""

    def __init__(self, journal: Journal | None, task: str, attempt: int) -> None:
        self._journal = journal
        self._task = task
        self._done: dict[str, tuple[int, Any]] | None = {} if attempt <= 1 else None
        self._names: set[str] = set()
        self._sleeps = 0
        self._children = 0
        # The children started (by id), each workflow's with its last steps ([name, id]).
        self._started: dict[str, list[list[str]] | None] = {}
        self._last: tuple[int, str] | None = None  # the last step replayed: place, name
        self._running = False

    def run(self, name: str, fn: Callable[..., Any], args: Any, kwargs: Any, atomic: Any) -> Any:
        """``fn(*args, **kwargs)``'s result, recorded as step ``name``, or the one recorded
        before. ``atomic``: the atomic task's connection if the attempt is one (None)."""
        journal = self._start(name, atomic)
        try:
            found, value = self._replayed(name, fn, self._recorded(journal))
            if not found:
                started = time.monotonic()
                value = fn(*args, **kwargs)
                journal.record(name, _encoded(name, value), time.monotonic() - started)
            return value
        finally:
            self._running = False

    async def run_async(
        self, name: str, fn: Callable[..., Awaitable[Any]], args: Any, kwargs: Any, atomic: Any
    ) -> Any:
        """``run`` for an async function, the journal's reads and writes off the loop."""
        journal = self._start(name, atomic)
        try:
            if self._done is None:
                self._done = _by_name(await self.off_loop(journal.recorded))
            found, value = self._replayed(name, fn, self._done)
            if not found:
                started = time.monotonic()
                value = await fn(*args, **kwargs)
                text = _encoded(name, value)
                await self.off_loop(journal.record, name, text, time.monotonic() - started)
            return value
        finally:
            self._running = False

    def run_atomic(
        self, name: str, fn: Callable[..., Any], args: Any, kwargs: Any, atomic: Any
    ) -> Any:
        """``fn(conn, *args, **kwargs)`` in a transaction that commits its work with the
        step's record: run once, or its recorded result."""
        journal = self._start(name, atomic)
        try:
            found, value = self._replayed(name, fn, self._recorded(journal))
            if found:
                return value
            made: list[Any] = []

            def work(conn: Any) -> tuple[str, float]:
                started = time.monotonic()
                made.append(fn(conn, *args, **kwargs))
                return _encoded(name, made[0]), time.monotonic() - started

            journal.transaction(name, work)
            return made[0]
        finally:
            self._running = False

    async def off_loop(self, call: Callable[..., Any], *args: Any) -> Any:
        """``call(*args)`` on a thread of its own, so that an async handler's event loop goes
        on while it waits on the database (on the loop's thread where the journal's
        connection must stay on it)."""
        if self._journal is None or self._journal.thread_bound:
            return call(*args)
        return await asyncio.to_thread(call, *args)

    def sleep(self, seconds: float, when: float | None, name: str | None, atomic: Any) -> None:
        """Step ``name`` (else ``sleep N``, the attempt's Nth sleep) records when the sleep
        ends (``when``, else ``seconds`` from now; Unix seconds on the store's clock, by
        which parked tasks are woken) the first time; until then, the attempt parks."""
        if name is None:
            self._sleeps += 1
            name = f"sleep {self._sleeps}"
        until = self.run(name, self._moment, (seconds, when), {}, atomic)
        left = until - self._now()
        if left > 0:
            raise Parked(left)

    def wait_for(self, key: str, timeout: float | None, name: str | None, atomic: Any) -> Any:
        """Step ``name`` (else ``wait <key>``): the payload of a signal of ``key``, taken
        and recorded in one transaction, or SignalTimeoutError once its deadline (recorded
        at its first call, as step ``<name> until``) has passed; until either, it parks."""
        _check_key(key)
        return self._wait(key, timeout, name, atomic)

    def _wait(self, key: str, timeout: float | None, name: str | None, atomic: Any) -> Any:
        name = f"wait {key}" if name is None else name
        seconds = FOREVER if timeout is None else _timeout(timeout)
        until = self.run(f"{name} until", self._moment, (seconds, None), {}, atomic)
        journal = self._start(name, atomic)
        try:
            found, got = self._replayed(name, _received, self._recorded(journal))
            if not found:
                left = until - journal.now()
                text = journal.receive(name, key, timed_out=left <= 0)
                if text is None:
                    raise Parked(left, key)
                got = json.loads(text)
        finally:
            self._running = False
        if "signal" not in got:
            raise SignalTimeoutError(f"no signal {key!r} came before the wait's timeout")
        return got["signal"]

    def start_child(self, child: Any, name: str | None, atomic: Any) -> uuid.UUID:
        """Step ``name`` (else ``child N``, the attempt's Nth): ``child``, a Task or a
        Workflow, enqueued as a child of this task, exactly once (the insert and the record
        commit together); its id (a workflow's)."""
        if name is None:
            self._children += 1
            name = f"child {self._children}"
        journal = self._start(name, atomic)
        try:
            found, got = self._replayed(name, _started, self._recorded(journal))
            if not found:
                got = json.loads(journal.enqueue(name, child))
        finally:
            self._running = False
        if isinstance(got, dict):  # a workflow: the steps that end it, by name
            self._started[got["workflow"]] = got["ends"]
            return uuid.UUID(got["workflow"])
        self._started[got] = None
        return uuid.UUID(got)

    def wait_child(
        self, child: uuid.UUID, timeout: float | None, name: str | None, atomic: Any
    ) -> Any:
        """The result of task ``child`` (started by ``start_child``) once it succeeds,
        parking until it ends, as ``wait_for`` its signal ``task:<id>``; ChildFailedError
        if it failed or was cancelled. A workflow's: the results of the steps that end it,
        by name, each waited for in turn (``<name> <step>``), each with ``timeout``."""
        if not isinstance(child, uuid.UUID):
            raise StepError("wait_child", f"task_id: must be a UUID, not {child!r}")
        if str(child) not in self._started:
            raise StepError("wait_child", f"task_id: {child} is no child this task started")
        ends = self._started[str(child)]
        if ends is None:
            return _result(child, self._wait(f"{CHILD_KEYS}{child}", timeout, name, atomic))
        results = {}
        for step, end in ends:
            named = None if name is None else f"{name} {step}"
            got = self._wait(f"{CHILD_KEYS}{end}", timeout, named, atomic)
            results[step] = _result(uuid.UUID(end), got)
        return results

    def _now(self) -> float:
        if self._journal is None:
            raise TaskError("only a worker's attempt sleeps or waits")
        return self._journal.now()

    def _moment(self, seconds: float, when: float | None) -> float:
        return self._now() + seconds if when is None else when

    def _start(self, name: str, atomic: Any) -> Journal:
        """The journal, once ``name`` is found fit for a step that may start now."""
        if not isinstance(name, str):
            raise StepError(repr(name), f"a step's name must be a str, not {type(name).__name__}")
        if not name or len(name) > NAME_MAX:
            raise StepError(name, f"a step's name must be 1 to {NAME_MAX} characters")
        try:
            encode_json(name, "name")  # NUL and lone surrogates, which no store keeps
        except InvalidValueError as exc:
            raise StepError(name, str(exc)) from None
        if atomic is not None:
            raise StepError(name, "an atomic task commits as one: steps need a task that is not")
        if self._journal is None:
            raise TaskError(f"step {name!r}: only a worker's attempt records steps")
        if self._running:
            raise StepError(name, "another step is running: steps neither nest nor overlap")
        if name in self._names:
            raise StepError(name, "two steps of one attempt have this name: each needs its own")
        if len(self._names) >= MAX_STEPS:
            raise StepError(name, f"a task records at most {MAX_STEPS:,} steps")
        self._names.add(name)
        self._running = True
        return self._journal

    def _recorded(self, journal: Journal) -> dict[str, tuple[int, Any]]:
        if self._done is None:
            self._done = _by_name(journal.recorded())
        return self._done

    def _replayed(
        self, name: str, fn: Callable[..., Any], done: dict[str, tuple[int, Any]]
    ) -> tuple[bool, Any]:
        """(True, the result) if step ``name`` was recorded; (False, None) if it is new.
        StepError if it was recorded before a step this attempt replayed already: the
        handler's steps come in another order than they did."""
        if name not in done:
            return False, None
        at, result = done[name]
        if self._last is not None and at < self._last[0]:
            raise StepError(
                name,
                f"was recorded before step {self._last[1]!r}, which this attempt replayed "
                "first: a handler's steps must come in the same order on every attempt",
            )
        self._last = (at, name)
        hint = type_hints(fn, self._task).get("return", Any)
        return True, codec_for(hint, self._task).load(result, f"step {name!r}")


def _started() -> Any:
    """Stands for a child's start step where a step's function would: its record (a
    task's id, or a workflow's and its end steps') comes back as plain JSON."""
    raise AssertionError("never called")


def _result(child: uuid.UUID, got: dict[str, Any]) -> Any:
    """A child's result, from the signal its end sent; ChildFailedError if it failed or
    was cancelled."""
    if got["state"] != "succeeded":
        raise ChildFailedError(child, got["state"], got["reason"])
    return got["result"]


def _received(got: dict[str, Any]) -> dict[str, Any]:
    """Stands for a wait's step where a step's function would: its return annotation is
    how the recorded result is read back (a JSON object)."""
    return got


def _check_key(key: object) -> None:
    """A bad key, a bug that every attempt would meet again: StepError, no retry."""
    try:
        check_signal_key(key)
    except ValidationError as exc:
        raise StepError("wait_for", str(exc)) from None


def _timeout(timeout: object) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise StepError("wait_for", f"timeout: must be a number of seconds >= 0: {timeout!r}")
    if timeout > MAX_WAIT:
        raise StepError("wait_for", f"timeout: at most {MAX_WAIT:,.0f} s (a year), or None")
    return float(timeout)


def _by_name(entries: list[dict[str, Any]]) -> dict[str, tuple[int, Any]]:
    return {e["name"]: (i, e.get("result")) for i, e in enumerate(entries)}


def _encoded(name: str, value: Any) -> str:
    """A step's result as JSON; StepError if it is not JSON (no retry: the function would
    run again for a result that could not be kept either)."""
    try:
        return encode_json(jsonable(value), "its result")
    except InvalidValueError as exc:
        raise StepError(name, str(exc)) from None
