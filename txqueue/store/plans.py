"""One operation, two colours: an operation on the application's connection (enqueue,
retry, cancel, a read) is written once, as a plan — a generator that yields the store
calls it needs and is sent their answers — and run by ``run`` on a connection ``resolve``
took, or by ``run_async`` on one ``resolve_async`` took, which awaits each answer.

A plan holds the operation's logic (its checks, its errors, its wake-ups); the drivers
hold none, so that the sync and the asyncio forms of one call cannot drift apart. A call
that fails is thrown into the plan where it asked, as if the plan had made it itself.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, Concatenate, ParamSpec, TypeVar

from .connections import AsyncResolved, Resolved

P = ParamSpec("P")
Q = TypeVar("Q")
R = TypeVar("R")

Call = tuple[str, tuple[Any, ...], dict[str, Any]]
"""A store method's name, and its arguments after the connection."""

Plan = Generator[Call, Any, R]
"""An operation: the store calls it yields, each sent its answer; what it returns."""


def call(
    method: Callable[Concatenate[Any, Any, P], Any], *args: P.args, **kwargs: P.kwargs
) -> Call:
    """The request of ``store.method(conn, *args, **kwargs)``, for a plan to yield. ``method``
    is the store protocol's (``Manage.get_task``), so that mypy checks its name and its
    arguments; a sync and an asyncio store both answer it by that name."""
    return method.__name__, args, kwargs


def run(plan: Plan[R], resolved: Resolved) -> R:
    """Run ``plan`` on ``resolved``'s connection and store; what it returns."""
    store, conn = resolved.store, resolved.conn
    return drive(plan, lambda c: getattr(store, c[0])(conn, *c[1], **c[2]))


async def run_async(plan: Plan[R], resolved: AsyncResolved) -> R:
    """``run`` on an asyncio connection: each store call awaited."""
    store, conn = resolved.store, resolved.conn
    return await drive_async(plan, lambda c: getattr(store, c[0])(conn, *c[1], **c[2]))


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
