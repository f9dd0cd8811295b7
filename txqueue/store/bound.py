"""The application's connection bound once to its store: ``bound(Manage.get_task, tid)``
is ``store.get_task(conn, tid)``, so that no caller pairs a store with a connection again.

A call names the store protocol's method, so that mypy checks its name, its arguments
and what it returns, and that a ``Bound`` typed by the protocol its holder needs refuses
a method of another. ``connections.bind`` makes one for each kind of connection an
application may hold; ``plans`` runs a whole operation on one.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar

from .aio import AsyncStore

P = ParamSpec("P")
R = TypeVar("R")
S = TypeVar("S", covariant=True)

AfterCommit = Callable[[Callable[[], None]], None]
"""Registers a callback to run once the caller's transaction has committed."""

Call = tuple[str, tuple[Any, ...], dict[str, Any]]
"""A store method's name, and its arguments after the connection."""


def call(
    method: Callable[Concatenate[Any, Any, P], Any], *args: P.args, **kwargs: P.kwargs
) -> Call:
    """The request of ``store.method(conn, *args, **kwargs)``, for a plan to yield and a
    ``Bound`` or an ``AsyncBound`` to answer, each by the method's name."""
    return method.__name__, args, kwargs


@dataclass(frozen=True, slots=True)
class _Binding:
    conn: Any  # what the store's methods take: the driver's connection, or its adapter
    after_commit: AfterCommit | None  # None: the library cannot see the commit
    key: Any  # the driver's connection itself: one per transaction in progress
    managed: bool  # SQLAlchemy's or Django's: their own blocks own the transaction


@dataclass(frozen=True, slots=True)
class Bound(_Binding, Generic[S]):
    """A sync store ``S`` and the application's connection it takes."""

    store: S

    def __call__(
        self, method: Callable[Concatenate[S, Any, P], R], *args: P.args, **kwargs: P.kwargs
    ) -> R:
        out: R = self.answer(call(method, *args, **kwargs))
        return out

    def answer(self, request: Call) -> Any:
        name, args, kwargs = request
        return getattr(self.store, name)(self.conn, *args, **kwargs)


@dataclass(frozen=True, slots=True)
class AsyncBound(_Binding):
    """An asyncio store and the application's connection it takes: each call awaited."""

    store: AsyncStore[Any]

    def __call__(
        self, method: Callable[Concatenate[Any, Any, P], R], *args: P.args, **kwargs: P.kwargs
    ) -> Awaitable[R]:
        out: Awaitable[R] = self.answer(call(method, *args, **kwargs))
        return out

    def answer(self, request: Call) -> Awaitable[Any]:
        name, args, kwargs = request
        out: Awaitable[Any] = getattr(self.store, name)(self.conn, *args, **kwargs)
        return out
