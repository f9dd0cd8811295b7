"""A task's error history, one entry per attempt that failed or that txqueue ended: the
one shape the worker, the cleaner and the stores write, and ``on_failed`` receives."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final


@dataclass(frozen=True, slots=True)
class ErrorEntry:
    """One entry of a task's error history: an attempt that failed, or that txqueue ended."""

    at: datetime
    attempt: int
    worker_id: str | None
    type: str
    message: str
    traceback: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The entry as the stores keep it, and as ``on_failed`` receives it."""
        return {
            "at": self.at.isoformat(),
            "attempt": self.attempt,
            "worker_id": self.worker_id,
            "type": self.type,
            "message": self.message,
            "traceback": self.traceback,
        }


def type_name(kind: type) -> str:
    """An exception type as an error entry names it: ``module.QualifiedName``."""
    return f"{kind.__module__}.{kind.__qualname__}"


def failure(
    worker_id: str,
    attempt: int,
    kind: type,
    message: str,
    traceback: str | None = None,
    at: datetime | None = None,
) -> ErrorEntry:
    """The entry for an attempt that raised (or that the worker failed on its behalf)."""
    return ErrorEntry(
        at or datetime.now(UTC), attempt, worker_id, type_name(kind), message, traceback
    )


WORKER_STOPPED: Final = "txqueue.WorkerStopped"
WORKER_STOPPED_MESSAGE: Final = "the worker stopped before the task finished; released"
LEASE_EXPIRED: Final = "txqueue.LeaseExpired"


def worker_stopped(attempt: int, worker_id: str | None, at: datetime) -> ErrorEntry:
    """The entry a release writes: the attempt ended with its worker, not by its handler."""
    return ErrorEntry(at, attempt, worker_id, WORKER_STOPPED, WORKER_STOPPED_MESSAGE)


def lease_expired_message(worker_id: str | None) -> str:
    return f"lease expired, worker lost: {worker_id} stopped heartbeating"


def lease_expired(attempt: int, worker_id: str | None, at: datetime) -> ErrorEntry:
    """The entry the cleaner writes for an attempt whose worker stopped heartbeating."""
    return ErrorEntry(at, attempt, worker_id, LEASE_EXPIRED, lease_expired_message(worker_id))
