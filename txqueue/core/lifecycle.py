"""Every decision about a task's next state, made once, as pure functions, and the
transitions that carry them to a store.

A state change is a ``Transition``: the fence the task must pass (the state it must be
in, and the attempt and worker when they matter), the state it moves to, and what comes
with the move (the result, the error entry, when it runs again, the tasks it enqueues,
the event its history records). Each store applies a batch of them with one method
(``apply``; on PostgreSQL one statement), so a rule about a task's life is written here
once and the stores decide nothing. ``MOVES`` is the table of legal moves; a transition
that breaks it cannot be built.

A task moves ``pending → running`` by a claim, then out of ``running`` by one of:

- an attempt's outcome: ``after_outcome`` (succeeded, failed, or a retry, which a cancel
  requested meanwhile turns into ``cancelled``);
- a release by a stopping worker: ``after_release`` (the retry policy goes back to
  ``pending``; the others keep the lease, ended now, for the cleaner's policy);
- a give-back of a task claimed ahead and never started: ``after_give_back``;
- the cleaner's recovery of an expired lease: ``after_lease_expired``, with its error
  entry (``lease_expired``) and, under the compensate policy, ``compensation``.

By hand, a pending task is cancelled, a running one asked to stop (``cancelled``), a
failed or cancelled one retried (``retried``), which rearms the steps its end had blocked
(``rearmed``).

A workflow's step with parents starts ``waiting``; what its parents' ends make of it is
decided in ``readiness``, as transitions of this module.

A handler that sleeps or waits for a signal is ``parked``, an attempt added to its budget,
until its time or signal comes (``woken``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from .failures import lease_expired, worker_stopped
from .task import CANCELLED, FAILED, PARKED, PENDING, RUNNING, SUCCEEDED, WAITING, Task, TaskState


class LeasePolicy(StrEnum):
    """What happens to a task whose lease expired (``on_lease_expired``): run it again,
    fail it, or fail it and enqueue its compensating task (``compensate=``).

    Example:

    ```python
    @registry.task(on_lease_expired=txqueue.LeasePolicy.ABANDON)  # or "abandon"
    def charge_card(order: int) -> None: ...  # a worker died mid-charge: fail, never re-run
    ```
    """

    RETRY = "retry"
    ABANDON = "abandon"
    COMPENSATE = "compensate"


RETRY: Final = LeasePolicy.RETRY
ABANDON: Final = LeasePolicy.ABANDON
COMPENSATE: Final = LeasePolicy.COMPENSATE
POLICIES: Final = tuple(LeasePolicy)


def policy_of(on_lease_expired: Mapping[str, Any] | None) -> str:
    """A claimed task's lease policy, as its claim copied it from the worker's registry
    (none copied: retry)."""
    if not on_lease_expired:
        return RETRY
    return str(on_lease_expired.get("policy") or RETRY)


def after_failure(attempts: int, max_attempts: int, final: bool = False) -> TaskState:
    """An attempt that ended in error: ``pending``, to run again, while attempts are left,
    unless the error is ``final`` (it would recur on every attempt); else ``failed``. The
    one place this is decided: the worker's outcomes and the cleaner's recovery ask it."""
    return PENDING if attempts < max_attempts and not final else FAILED


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
    return after_failure(attempts, max_attempts, final=policy != RETRY)


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


class Move(StrEnum):
    """Each kind of state change, as a task's history names it."""

    CLAIMED = "claimed"
    SUCCEEDED = "succeeded"
    RETRIED = "retried"  # an attempt failed, the task runs again after its backoff
    FAILED = "failed"
    CANCELLED = "cancelled"  # the handler stopped on a cancel request
    RELEASED = "released"  # a stopping worker gave up a running task
    GIVEN_BACK = "given back"  # claimed ahead, never started
    RECOVERED = "recovered"  # its lease expired: the cleaner applied the policy
    CANCEL = "cancel"  # by hand: a pending task cancelled, a running one asked to stop
    RETRY = "retry"  # by hand: a failed or cancelled task back to pending
    READIED = "readied"  # a workflow's step: its last parent ended, it may run
    BLOCKED = "blocked"  # a workflow's step: a parent failed or was cancelled, it never runs
    SKIPPED = "skipped"  # likewise, by an edge that asked to skip it (OnFailure.SKIP)
    REARMED = "rearmed"  # blocked or skipped, waiting again: a parent was retried by hand
    PARKED = "parked"  # its handler sleeps or waits for a signal: an attempt more for it
    WOKEN = "woken"  # parked, its time came or a signal did: it runs again


MOVES: Final[Mapping[TaskState, frozenset[TaskState]]] = {
    PENDING: frozenset({RUNNING, CANCELLED}),
    # running → running: a release leaving the task to the cleaner's policy, a cancel
    # request for its handler.
    RUNNING: frozenset({SUCCEEDED, FAILED, CANCELLED, PENDING, RUNNING, PARKED}),
    SUCCEEDED: frozenset(),
    FAILED: frozenset({PENDING}),
    # cancelled → waiting: a step blocked or skipped, rearmed by its parent's retry.
    CANCELLED: frozenset({PENDING, WAITING}),
    WAITING: frozenset({PENDING, CANCELLED}),
    PARKED: frozenset({PENDING, CANCELLED}),
}
"""Every legal move: from a state to the states a transition may write
(docs/explanation/lifecycle.md, whose table a test compares with this). A finished task
leaves only by a retry by hand (or a rearm), or by the prune that deletes it with its
history."""


# Fence and Transition are values, not frozen: one of each is built for every task a
# worker runs, and a frozen dataclass sets each field through object.__setattr__ (about
# four times the cost of the whole record otherwise).
@dataclass(slots=True)
class Fence:
    """What a task must be for a transition to apply: in ``state``, and when set, at
    ``attempt`` and held by ``worker_id``. A transition fenced out changes nothing."""

    state: TaskState
    attempt: int | None = None
    worker_id: str | None = None


@dataclass(slots=True)
class Transition:
    """One state change of one task, decided here and applied by a store's ``apply``.

    ``to`` is written, or ``if_cancel_requested`` (when set) if the task's cancellation
    was requested by the time the store locks its row. A transition that finishes the
    task frees its unique key and wakes ``txqueue.wait``, and when it is a workflow's
    step, decides its children in the same transaction; the store records its event in
    the task's history in the same write.
    """

    id: uuid.UUID
    move: Move
    fence: Fence
    to: TaskState
    by: str | None  # who: a worker's id, the cleaner, an operator
    if_cancel_requested: TaskState | None = None
    error: Mapping[str, Any] | None = None  # the error entry the task's history gains
    result: str | None = None  # JSON text, for a success
    run_in: float | None = None  # back to pending: ripe after this many seconds (None: as it was)
    lease_ends: bool = False  # still running: its lease ended now, for the cleaner
    undoes_claim: bool = False  # the attempt the claim counted never began
    requests_cancel: bool = False
    enqueues: tuple[Task, ...] = ()  # written in the same transaction (compensation)
    inputs: str | None = None  # readied: its parents' results, JSON text merged into its payload
    progress: str | None = None  # an outcome: its handler's last progress (progress.encode)
    note: str | None = None  # why, where no error says it
    wait_key: str | None = None  # parked: the signal it waits for (ctx.wait_for)

    def __post_init__(self) -> None:
        moves = MOVES[self.fence.state]
        for to in (self.to, self.if_cancel_requested):
            if to is not None and to not in moves:
                raise ValueError(f"{self.move}: no move from {self.fence.state} to {to}")

    def reason(self) -> str | None:
        """Why, as the event says it: the error's type and message, if any."""
        if self.error is None:
            return self.note
        return f"{self.error['type']}: {self.error['message']}"


@dataclass(frozen=True, slots=True)
class Running:
    """What the decisions about a running task need of its row, read under its lock."""

    id: uuid.UUID
    queue: str
    name: str
    payload: Any
    attempt: int
    max_attempts: int
    worker_id: str | None
    on_lease_expired: Mapping[str, Any] | None
    cancel_requested: bool
    now: datetime  # the store's clock as it locked the row


CLEANER: Final = "cleaner"

# An attempt's outcome, by the state its handler's result asks for: the move, the state
# written, and the one written instead if a cancel was requested (``after_outcome``).
_ENDED: Final[Mapping[str, tuple[Move, TaskState, TaskState]]] = {
    state: (move, TaskState(after_outcome(state, False)), TaskState(after_outcome(state, True)))
    for state, move in (
        (SUCCEEDED, Move.SUCCEEDED),
        (FAILED, Move.FAILED),
        (CANCELLED, Move.CANCELLED),
        (PENDING, Move.RETRIED),
    )
}


def ended(
    task_id: uuid.UUID,
    attempt: int,
    worker_id: str,
    state: str,
    result: str | None = None,
    error: Mapping[str, Any] | None = None,
    retry_in: float = 0.0,
    progress: str | None = None,
) -> Transition:
    """An attempt's outcome: what its handler's result says (``after_outcome``). Built
    for every task a worker runs, so looked up, not worked out."""
    move, to, if_cancelled = _ENDED[state]
    return Transition(
        task_id,
        move,
        Fence(RUNNING, attempt, worker_id),
        to,
        worker_id,
        if_cancel_requested=if_cancelled,
        error=error,
        result=result,
        run_in=retry_in,
        progress=progress,
    )


FOREVER: Final = 100 * 365.25 * 86400.0  # a wait without a timeout: until a signal, in practice


def parked(
    task_id: uuid.UUID,
    attempt: int,
    worker_id: str,
    run_in: float,
    wait_key: str | None = None,
    progress: str | None = None,
) -> Transition:
    """An attempt that sleeps or waits for signal ``wait_key``, until its time in ``run_in``
    seconds or the signal. It gives its task an attempt more (a sleep spends none of its
    budget), and counts: attempt numbers only rise, so each fences its own outcome."""
    return Transition(
        task_id,
        Move.PARKED,
        Fence(RUNNING, attempt, worker_id),
        PARKED,
        worker_id,
        if_cancel_requested=CANCELLED,
        run_in=min(max(run_in, 0.0), FOREVER),
        progress=progress,
        wait_key=wait_key,
    )


def woken(task_id: uuid.UUID, by: str | None, note: str | None = None) -> Transition:
    """A parked task whose time or signal came: pending, due now."""
    return Transition(task_id, Move.WOKEN, Fence(PARKED), PENDING, by, run_in=0.0, note=note)


def released(task: Running, worker_id: str) -> Transition:
    """A running task given up by its stopping worker (``after_release``)."""
    to = TaskState(after_release(policy_of(task.on_lease_expired), task.cancel_requested))
    stays = to == RUNNING
    return Transition(
        task.id,
        Move.RELEASED,
        Fence(RUNNING, task.attempt, worker_id),
        to,
        worker_id,
        # The cleaner writes the error of a task it is left (its policy's, then).
        error=None if stays else worker_stopped(task.attempt, worker_id, task.now).as_json(),
        run_in=0.0,
        lease_ends=stays,
    )


def given_back(task_id: uuid.UUID, attempt: int, worker_id: str) -> Transition:
    """A task claimed ahead and never started (``after_give_back``)."""
    return Transition(
        task_id,
        Move.GIVEN_BACK,
        Fence(RUNNING, attempt, worker_id),
        TaskState(after_give_back(cancel_requested=False)),
        worker_id,
        if_cancel_requested=TaskState(after_give_back(cancel_requested=True)),
        undoes_claim=True,
    )


def recovered(task: Running, by: str = CLEANER) -> Transition:
    """A running task whose lease expired, by its policy (``after_lease_expired``); under
    the compensate policy its compensating task comes with it. ``by``: the worker that took
    it back, or the cleaner."""
    policy = policy_of(task.on_lease_expired)
    to = TaskState(
        after_lease_expired(policy, task.attempt, task.max_attempts, task.cancel_requested)
    )
    spec = task.on_lease_expired
    comp: tuple[Task, ...] = ()
    if spec is not None and compensates(policy, to):
        comp = (compensation(spec, str(task.id), task.name, task.payload),)
    return Transition(
        task.id,
        Move.RECOVERED,
        Fence(RUNNING, task.attempt, task.worker_id),
        to,
        by,
        error=lease_expired(task.attempt, task.worker_id, task.now).as_json(),
        run_in=0.0,
        enqueues=comp,
    )


def retried(task_id: uuid.UUID, state: TaskState, by: str | None) -> Transition | None:
    """A retry by hand: a failed or cancelled task runs again now (the store, seeing it
    leave a finished state, gives it an attempt more if it had none left and clears its
    cancel request; the retry takes its unique key back); any other is left."""
    if state in (FAILED, CANCELLED):
        return Transition(task_id, Move.RETRY, Fence(state), PENDING, by, run_in=0.0)
    return None


def rearmed(task_id: uuid.UUID, by: str | None) -> Transition:
    """A step blocked or skipped by a parent that a retry by hand runs again: waiting
    again (``readiness.rearmed``; the store gives it back its edges from the parents that
    run again, in the same transaction)."""
    return Transition(task_id, Move.REARMED, Fence(CANCELLED), WAITING, by)


def cancelled(task_id: uuid.UUID, state: TaskState, by: str | None) -> Transition | None:
    """A cancel by hand: a pending, waiting or parked task ends ``cancelled``; a running
    one is asked to stop (its handler sees ``ctx.cancelled``, its outcome ends it); any
    other is left."""
    if state in (PENDING, WAITING, PARKED):
        return Transition(task_id, Move.CANCEL, Fence(state), CANCELLED, by)
    if state == RUNNING:
        return Transition(task_id, Move.CANCEL, Fence(RUNNING), RUNNING, by, requests_cancel=True)
    return None
