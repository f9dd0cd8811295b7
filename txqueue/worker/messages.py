"""The messages the worker's parts pass each other, and the queues they pass them on:
each part reads its own queue on its own thread, and the others only ``put`` to it."""

from __future__ import annotations

import queue
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from ..store.records import Claimed, Outcome

T = TypeVar("T")
M_contra = TypeVar("M_contra", contravariant=True)


class Inbox(Protocol[M_contra]):
    """Where a part sends another part its messages: the receiving part's queue, which
    only its own thread reads."""

    def put(self, item: M_contra) -> None: ...


def drain(inbox: queue.SimpleQueue[T | None]) -> list[T]:
    """What ``inbox`` holds now, taken without waiting; the ``None`` wake-ups among it
    (look again, or stop) are dropped: the caller is looking already."""
    taken: list[T] = []
    while True:
        try:
            item = inbox.get_nowait()
        except queue.Empty:
            return taken
        if item is not None:
            taken.append(item)


@dataclass(frozen=True, slots=True)
class Done:
    """An attempt's outcome on its way to the recorder, with the task it belongs to."""

    outcome: Outcome
    task: Claimed
    reason: str = "attempts exhausted"  # for on_failed, should the outcome be a failure


@dataclass(frozen=True, slots=True)
class Unstarted:
    """Tasks claimed ahead and never started, on their way back to ``pending`` (a stopping
    worker gives them up at once: no attempt of theirs began)."""

    tasks: list[Claimed]


@dataclass(frozen=True, slots=True)
class Freed:
    """A handler thread is free again, on its way to the claimer: claim what fits now."""


@dataclass(frozen=True, slots=True)
class Ripe:
    """A wake-up by NOTIFY, on its way to the claimer: a task of its queues is ripe at
    ``at`` (monotonic): poll by then."""

    at: float


@dataclass(frozen=True, slots=True)
class Written:
    """Outcomes written, on their way to the claimer: tasks ended, so a queue whose
    concurrency limit held tasks back may have room now; and when the retries among them
    are ripe (``ripe_at``, monotonic), for a poll by then."""

    ripe_at: frozenset[float] = frozenset()


@dataclass(frozen=True, slots=True)
class Beat:
    """``ctx.heartbeat()`` on its way to the lease keeper: extend this lease now, and
    answer whether this worker still holds it."""

    task: Claimed
    answer: Future[bool] = field(default_factory=Future)
