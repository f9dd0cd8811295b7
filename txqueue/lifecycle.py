"""Every decision about a task's next state, made once, as pure functions.

The stores apply what these decide instead of deciding again in SQL or Python: SQLite's
store calls them row by row, and PostgreSQL's statements, which must stay one statement
each, receive them as decision tables in their parameters (``*_decisions``), built here
from the same functions.

A task moves ``pending → running`` by a claim, then out of ``running`` by one of:

- an attempt's outcome: ``after_outcome`` (succeeded, failed, or a retry, which a cancel
  requested meanwhile turns into ``cancelled``);
- a release by a stopping worker: ``after_release`` (the retry policy goes back to
  ``pending``; the others keep the lease, ended now, for the cleaner's policy);
- a give-back of a task claimed ahead and never started: ``after_give_back``;
- the cleaner's recovery of an expired lease: ``after_lease_expired``, with its error
  entry (``lease_expired``) and, under the compensate policy, ``compensation``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from functools import cache
from typing import Any, Final

from .task import CANCELLED, FAILED, PENDING, RUNNING, SUCCEEDED, Task


class LeasePolicy(StrEnum):
    """What happens to a task whose lease expired (``on_lease_expired``): run it again,
    fail it, or fail it and enqueue its compensating task (``compensate=``)."""

    RETRY = "retry"
    ABANDON = "abandon"
    COMPENSATE = "compensate"


RETRY: Final = LeasePolicy.RETRY
ABANDON: Final = LeasePolicy.ABANDON
COMPENSATE: Final = LeasePolicy.COMPENSATE
POLICIES: Final = tuple(LeasePolicy)


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


def policy_of(on_lease_expired: Mapping[str, Any] | None) -> str:
    """A claimed task's lease policy, as its claim copied it from the worker's registry
    (none copied: retry)."""
    if not on_lease_expired:
        return RETRY
    return str(on_lease_expired.get("policy") or RETRY)


def after_outcome(state: str, cancel_requested: bool) -> str:
    """The state an attempt's outcome writes: what the handler's result says, except that
    a retry of a task whose cancellation was requested meanwhile ends it ``cancelled``."""
    return CANCELLED if state == PENDING and cancel_requested else state


def after_release(policy: str, cancel_requested: bool) -> str:
    """A running task given up by a stopping worker: ``cancelled`` if that was asked for;
    back to ``pending`` under the retry policy; otherwise still ``running`` with its lease
    ended now, so that the cleaner's next pass applies the policy (abandon, compensate)."""
    if cancel_requested:
        return CANCELLED
    return PENDING if policy == RETRY else RUNNING


def after_give_back(cancel_requested: bool) -> str:
    """A task claimed ahead and never started goes back to where it was, ``pending``, with
    its attempt uncounted: unless its cancellation was asked for meanwhile."""
    return CANCELLED if cancel_requested else PENDING


def after_lease_expired(
    policy: str, attempts: int, max_attempts: int, cancel_requested: bool
) -> str:
    """A running task whose lease expired: ``cancelled`` if that was asked for, run again
    under the retry policy while attempts are left, otherwise ``failed``."""
    if cancel_requested:
        return CANCELLED
    if policy == RETRY and attempts < max_attempts:
        return PENDING
    return FAILED


def compensates(policy: str, state: str) -> bool:
    """Whether a recovery that ended a task in ``state`` enqueues its compensating task."""
    return policy == COMPENSATE and state == FAILED


def compensation(
    on_lease_expired: Mapping[str, Any], task_id: str, name: str, payload: Any
) -> Task:
    """The task that undoes the work of one that failed under the compensate policy: the
    registry's chosen task, given the lost task's id, name and payload."""
    lost = {"task_id": task_id, "name": name, "payload": payload}
    return Task(on_lease_expired["name"], lost, queue=on_lease_expired["queue"])


FINISHED: Final = (SUCCEEDED, FAILED, CANCELLED)


def finished(state: str) -> bool:
    """Whether a task in ``state`` is done: it has a ``finished_at`` and runs no more."""
    return state in FINISHED


# The decision tables: every input of a decision with its outcome, as rows PostgreSQL's
# statements join on the facts of each task (jsonb_to_recordset), so a statement applies
# these functions' answers and decides nothing itself.

_FLAGS = (False, True)


@cache
def release_decisions() -> str:
    """``after_release`` for every policy and cancel flag, as JSON rows."""
    return json.dumps(
        [
            {"policy": p, "cancel_requested": c, "next": n, "finished": finished(n)}
            for p in POLICIES
            for c in _FLAGS
            for n in [after_release(p, c)]
        ]
    )


@cache
def give_back_decisions() -> str:
    """``after_give_back`` for both cancel flags, as JSON rows."""
    return json.dumps(
        [
            {"cancel_requested": c, "next": n, "finished": finished(n)}
            for c in _FLAGS
            for n in [after_give_back(c)]
        ]
    )


@cache
def lease_expired_decisions() -> str:
    """``after_lease_expired`` for every policy, cancel flag and whether attempts are
    left, as JSON rows."""
    return json.dumps(
        [
            {
                "policy": p,
                "cancel_requested": c,
                "attempts_left": left,
                "next": n,
                "finished": finished(n),
            }
            for p in POLICIES
            for c in _FLAGS
            for left in _FLAGS
            for n in [after_lease_expired(p, 0 if left else 1, 1, c)]
        ]
    )
