"""One operation, two colours: an operation on the application's connection (enqueue,
retry, cancel, a read) is written once, as a plan — a generator that yields the store
calls it needs and is sent their answers — and run by ``run`` on a connection ``bind``
bound, or by ``run_async`` on one ``bind_async`` bound, which awaits each answer.

A plan holds the operation's logic (its checks, its errors, its wake-ups); the drivers
hold none, so that the sync and the asyncio forms of one call cannot drift apart. A call
that fails is thrown into the plan where it asked, as if the plan had made it itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

from .bound import AsyncBound, Bound, Call, call

Q = TypeVar("Q")
R = TypeVar("R")

__all__ = ["Plan", "call", "drive", "drive_async", "run", "run_async"]

Plan = Generator[Call, Any, R]
"""An operation: the store calls it yields (``call``), each sent its answer; what it
returns."""


def run(plan: Plan[R], bound: Bound[Any]) -> R:
    """Run ``plan`` on ``bound``'s connection and store; what it returns."""
    return drive(plan, bound.answer)


async def run_async(plan: Plan[R], bound: AsyncBound) -> R:
    """``run`` on an asyncio connection: each store call awaited."""
    return await drive_async(plan, bound.answer)


def drive(steps: Generator[Q, Any, R], answer: Callable[[Q], Any]) -> R:
    """Run ``steps``, each request answered by ``answer``; what ``steps`` returns.

    It runs ``drive_async``'s loop to its end at once: with answers that are never
    awaited, that coroutine has nothing to wait for."""
    runner = _drive(steps, answer, awaits=False)
    try:
        runner.send(None)
    except StopIteration as done:
        out: R = done.value
        return out
    runner.close()
    raise RuntimeError("a plan run without awaiting was suspended")


async def drive_async(steps: Generator[Q, Any, R], answer: Callable[[Q], Awaitable[Any]]) -> R:
    """``drive``, each answer awaited."""
    return await _drive(steps, answer, awaits=True)


async def _drive(steps: Generator[Q, Any, R], answer: Callable[[Q], Any], awaits: bool) -> R:
    reply: Any = None
    error: BaseException | None = None
    while True:
        try:
            request = steps.send(reply) if error is None else steps.throw(error)
        except StopIteration as done:
            out: R = done.value
            return out
        try:
            reply, error = answer(request), None
            if awaits:
                reply = await reply
        except BaseException as exc:  # the plan's to handle, or to let through
            reply, error = None, exc
