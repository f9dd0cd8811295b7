"""The state changes both stores make alike: decided by ``lifecycle``, applied by the
store's ``apply``. A store gives ``apply`` (a batch of transitions in one write), the
reads that lock the rows a decision needs, and its transaction; this module decides
nothing itself, and holds no SQL."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from .. import lifecycle
from ..lifecycle import Running, Transition
from ..task import Task, TaskState
from .records import Inserted, Outcome, Recovered

T = TypeVar("T")
C = TypeVar("C")
A = TypeVar("A")

CANCEL_TRIES = 3
"""Reads of a cancel whose task a claim moved between its read and its write."""


class Transitions(Generic[C, A]):
    """Outcomes, release, give-back, recovery and cancel, as transitions, on txqueue's own
    connection ``C``; a cancel by hand also on an application's, ``A``."""

    # --- what each store gives ---------------------------------------------------------

    def apply(self, conn: C, transitions: Sequence[Transition]) -> dict[uuid.UUID, str]:
        """Apply ``transitions`` in one write of their own, each fenced; returns the state
        each applied one wrote (one fenced out is missing)."""
        raise NotImplementedError

    def _apply(self, conn: C | A, transitions: Sequence[Transition]) -> dict[uuid.UUID, str]:
        """``apply`` in the transaction ``conn`` is in."""
        raise NotImplementedError

    def lock_running(
        self, conn: C, worker_id: str, held: Sequence[tuple[uuid.UUID, int]]
    ) -> list[Running]:
        raise NotImplementedError

    def lock_expired(self, conn: C, limit: int, default_max_attempts: int) -> list[Running]:
        raise NotImplementedError

    def lock_state(self, conn: A, task_id: uuid.UUID) -> TaskState | None:
        raise NotImplementedError

    def current_xid(self, conn: C) -> str | None:
        """The writing transaction's id, for the wake-ups of tasks it made ripe."""
        raise NotImplementedError

    def insert_task(self, conn: C, task: Task, trace: str | None = None) -> Inserted:
        raise NotImplementedError

    def _changing(self, conn: C, action: str, block: Callable[[], T]) -> T:
        """``block()`` in one transaction on txqueue's own connection, its driver errors
        raised as StoreError naming ``action``."""
        raise NotImplementedError

    def _changing_theirs(self, conn: A, action: str, block: Callable[[], T]) -> T:
        """``block()`` in the transaction of an application's connection, which txqueue
        never commits."""
        raise NotImplementedError

    # --- the changes -------------------------------------------------------------------

    def record_outcomes(self, conn: C, outcomes: Sequence[Outcome]) -> dict[uuid.UUID, str]:
        """Write attempts' outcomes, each fenced on (id, attempt, worker, running). Returns
        the state written for each id; an outcome missing from it was fenced out (its lease
        was lost)."""
        return self.apply(conn, [ended(o) for o in outcomes])

    def release(
        self, conn: C, worker_id: str, held: Sequence[tuple[uuid.UUID, int]]
    ) -> dict[uuid.UUID, str]:
        """Give up the (id, attempt) tasks a stopping worker will not finish: back to
        `pending` by the retry policy, or to the cleaner at once for the others. Returns
        id -> state."""
        if not held:
            return {}

        def release() -> dict[uuid.UUID, str]:
            running = self.lock_running(conn, worker_id, held)
            return self._apply(conn, [lifecycle.released(r, worker_id) for r in running])

        return self._changing(conn, "release", release)

    def give_back(self, conn: C, worker_id: str, held: Sequence[tuple[uuid.UUID, int]]) -> int:
        """Return the (id, attempt) tasks a worker claimed and never started to the state
        they were claimed from: no attempt began, so none is counted. Returns how many."""
        return len(self.apply(conn, [lifecycle.given_back(i, a, worker_id) for i, a in held]))

    def recover_expired(self, conn: C, limit: int, default_max_attempts: int) -> list[Recovered]:
        """Take back up to ``limit`` running tasks whose lease expired, each by its policy:
        retry (back to pending, the lost attempt counted), abandon (failed), or compensate
        (failed, and the compensating task enqueued in the same transaction)."""

        def recover() -> list[Recovered]:
            running = self.lock_expired(conn, limit, default_max_attempts)
            decided = [(r, lifecycle.recovered(r)) for r in running]
            applied = self._apply(conn, [t for _, t in decided])
            xid = self.current_xid(conn) if applied else None
            out = []
            for r, t in decided:
                if r.id not in applied:
                    continue
                assert t.error is not None
                comp = None
                for task in t.enqueues:
                    comp = (task.queue, self.insert_task(conn, task))
                policy = lifecycle.policy_of(r.on_lease_expired)
                out.append(
                    Recovered(
                        r.id,
                        r.queue,
                        r.name,
                        r.payload,
                        applied[r.id],
                        r.attempt,
                        policy,
                        r.worker_id,
                        xid,
                        dict(t.error),
                        comp,
                    )
                )
            return out

        return self._changing(conn, "recover expired leases", recover)

    def cancel(self, conn: A, task_id: uuid.UUID, by: str | None = None) -> str | None:
        """Pending: cancelled now. Running: flagged for its handler. Returns the state after,
        or None when the task is not pending or running."""

        def cancel() -> str | None:
            # Where the read locks nothing (SQLite outside a write), a claim may move the
            # task between the read and the write: the write's fence refuses it, and the
            # cancel reads again.
            for _ in range(CANCEL_TRIES):
                state = self.lock_state(conn, task_id)
                t = None if state is None else lifecycle.cancelled(task_id, state, by)
                if t is None:
                    return None
                written = self._apply(conn, [t])
                if task_id in written:
                    return written[task_id]
            return None

        return self._changing_theirs(conn, "cancel", cancel)


def ended(o: Outcome) -> Transition:
    """An attempt's outcome as its transition."""
    return lifecycle.ended(o.id, o.attempt, o.worker_id, o.state, o.result, o.error, o.retry_in)
