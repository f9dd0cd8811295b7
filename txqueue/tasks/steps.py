"""A handler's durable steps (``ctx.step``): a named step's function runs once and its
result is kept with the task, so that a later attempt (after a crash, a lost lease, a
retry) gets the result back instead of running the function again.

The worker gives each attempt a ``Journal``, where its steps are written and read on a
connection of the worker's. ``Steps`` is the handler's side of it: the order and the names
checked, the results turned to JSON and back with the codecs that task results use.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

from ..core.fields import encode_json
from ..errors import InvalidTypeError, InvalidValueError, StepError, TaskError
from .codecs import jsonable
from .hints import codec_for, type_hints

NAME_MAX: Final = 200
"""Characters of a step's name at most."""


class Journal(Protocol):
    """Where an attempt's steps are kept: written by the attempt that holds the task
    (fenced as an outcome is) and read back by a later one."""

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


class Steps:
    """An attempt's steps: the next one's place, the names used, the recorded ones (read
    at the first step of an attempt after the first: the first has none to read)."""

    def __init__(self, journal: Journal | None, task: str, attempt: int) -> None:
        self._journal = journal
        self._task = task
        self._done: list[dict[str, Any]] | None = [] if attempt <= 1 else None
        self._names: set[str] = set()
        self._next = 0

    def run(self, name: str, fn: Callable[..., Any], args: Any, kwargs: Any, atomic: Any) -> Any:
        """``fn(*args, **kwargs)``'s result, recorded as step ``name``, or the one recorded
        before. ``atomic``: the atomic task's connection if the attempt is one (None)."""
        journal = self._place(name, atomic)
        found, value = self._replayed(name, fn)
        if found:
            return value
        started = time.monotonic()
        value = fn(*args, **kwargs)
        journal.record(name, _encoded(name, value), time.monotonic() - started)
        return value

    async def run_async(
        self, name: str, fn: Callable[..., Awaitable[Any]], args: Any, kwargs: Any, atomic: Any
    ) -> Any:
        """``run`` for an async function: the journal's reads and writes, which block, run
        on a thread of their own, so the event loop's other handlers go on meanwhile."""
        journal = self._place(name, atomic)
        if self._done is None:
            self._done = await asyncio.to_thread(journal.recorded)
        found, value = self._replayed(name, fn)
        if found:
            return value
        started = time.monotonic()
        value = await fn(*args, **kwargs)
        text = _encoded(name, value)
        await asyncio.to_thread(journal.record, name, text, time.monotonic() - started)
        return value

    def run_atomic(
        self, name: str, fn: Callable[..., Any], args: Any, kwargs: Any, atomic: Any
    ) -> Any:
        """``fn(conn, *args, **kwargs)`` in a transaction that commits its work with the
        step's record: run once, or its recorded result."""
        journal = self._place(name, atomic)
        found, value = self._replayed(name, fn)
        if found:
            return value
        made: list[Any] = []

        def work(conn: Any) -> tuple[str, float]:
            started = time.monotonic()
            made.append(fn(conn, *args, **kwargs))
            return _encoded(name, made[0]), time.monotonic() - started

        journal.transaction(name, work)
        return made[0]

    def _place(self, name: str, atomic: Any) -> Journal:
        """The journal, once ``name`` is found fit for the next step."""
        if not isinstance(name, str):
            raise InvalidTypeError(
                "name", f"a step's name must be a str, not {type(name).__name__}"
            )
        if not name or len(name) > NAME_MAX:
            raise InvalidValueError("name", f"a step's name must be 1 to {NAME_MAX} characters")
        if atomic is not None:
            raise StepError(name, "an atomic task commits as one: steps need a task that is not")
        if self._journal is None:
            raise TaskError(f"step {name!r}: only a worker's attempt records steps")
        if name in self._names:
            raise StepError(name, "two steps of one attempt have this name: each needs its own")
        self._names.add(name)
        return self._journal

    def _replayed(self, name: str, fn: Callable[..., Any]) -> tuple[bool, Any]:
        """(True, the result) if step ``name`` was recorded where it comes now; (False,
        None) if it is new. StepError if another was recorded there."""
        if self._done is None:
            assert self._journal is not None  # _place checked it
            self._done = self._journal.recorded()
        at, self._next = self._next, self._next + 1
        if at >= len(self._done):
            return False, None
        entry = self._done[at]
        if entry["name"] != name:
            raise StepError(
                name,
                f"came where the recorded step {entry['name']!r} did: a handler's steps must "
                "come in the same order on every attempt",
            )
        hint = type_hints(fn, self._task).get("return", Any)
        return True, codec_for(hint, self._task).load(entry.get("result"), f"step {name!r}")


def _encoded(name: str, value: Any) -> str:
    """A step's result as JSON: InvalidValueError naming the step if it is not JSON."""
    return encode_json(jsonable(value), f"step {name!r}")
