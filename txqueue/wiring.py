"""What an App hands the workers and cleaners it makes, and a worker its own cleaner,
besides their options: the store (with the App's clock), the wake-ups' delivery, the
vacuum horizon's watch. It is given for the block that makes them rather than as
parameters, so that no public signature shows it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .observability.horizon import Watch
    from .outbox.client import Delivery
    from .store.protocols import AnyStore


@dataclass(frozen=True, slots=True)
class Wiring:
    store: AnyStore | None = None
    delivery: Delivery | None = None
    horizon: Watch | None = None
    within_worker: bool = False  # a worker's cleaner: the worker reports outages itself


_NONE = Wiring()
_given: ContextVar[Wiring | None] = ContextVar("txqueue_wiring", default=None)


@contextmanager
def given(wiring: Wiring) -> Iterator[None]:
    """Workers and cleaners made in this block take ``wiring``."""
    token = _given.set(wiring)
    try:
        yield
    finally:
        _given.reset(token)


def current() -> Wiring:
    """What the block making a worker or cleaner gave it (nothing, made by hand)."""
    return _given.get() or _NONE
