"""Wake-ups by PostgreSQL's NOTIFY, as their payload says them: written by the store's
statements that make tasks ripe, read by a worker's listener.

One per queue and time, not per task: a worker told of a queue claims what is ripe in it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from datetime import datetime


def note(queue: str, due: float | None = None) -> str:
    """A wake-up's payload: the queue, and, for a task not due yet, when it is (Unix
    time), so that a worker looks again then rather than at its next poll."""
    return queue if due is None else f"{queue} {due:.3f}"


def notes_for(tasks: Iterable[tuple[str, datetime | None, float | None]]) -> list[str]:
    """The ``note``s for tasks (queue, run_at, delay) enqueued now: per queue, one if a
    task is due now and one for the soonest of the others (those after it are found by the
    workers' polls, at most a poll interval past their time)."""
    now = time.time()
    due: dict[str, float | None] = {}
    later: dict[str, float] = {}
    for queue, run_at, delay in tasks:
        at = due_at(run_at, delay, now)
        if at <= now:
            due[queue] = None
        elif at < later.get(queue, math.inf):
            later[queue] = at
    return [note(q) for q in due] + [note(q, at) for q, at in later.items()]


def due_at(run_at: datetime | None, delay: float | None, now: float) -> float:
    """When a task enqueued at ``now`` with ``run_at`` or ``delay`` is due (Unix time)."""
    return run_at.timestamp() if run_at is not None else now + delay if delay else now


def read_note(payload: str) -> tuple[str, float | None]:
    """A ``note``'s queue and due time; ValueError if it is not one."""
    queue, _, due = payload.partition(" ")
    if not queue or " " in due:
        raise ValueError(f"not a wake-up: {payload[:64]!r}")
    try:
        return queue, float(due) if due else None
    except ValueError:
        raise ValueError(f"not a wake-up: {payload[:64]!r}") from None
