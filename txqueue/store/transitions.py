"""The state changes both stores make alike: decided by ``lifecycle``, applied by the
store's ``apply``. A store gives ``apply`` (a batch of transitions in one write), the
reads that lock the rows a decision needs (those alike on both stores are ``reads``'),
and its transaction; this module decides nothing itself, and holds no SQL."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Generator, Sequence
from typing import Any, Generic, TypeVar

from ..core import lifecycle
from ..core.lifecycle import Running, Transition
from ..core.task import PARKED, Task, TaskState
from ..errors import StoreError
from ..workflows import readiness
from . import follow
from .reads import Executes, TaskReads
from .records import (
    Applied,
    BulkBatch,
    BulkOrder,
    Changed,
    ClaimNext,
    Inserted,
    Moved,
    Outcome,
    Recovered,
    WorkflowPlan,
)

Child = tuple[uuid.UUID, TaskState, bool, str | None]
# A parent by its id as text (as the inputs name it: no id parsed in a join of thousands).
Values = dict[str, tuple[str, str | None, str | None]]

T = TypeVar("T")
C = TypeVar("C", bound=Executes)
A = TypeVar("A", bound=Executes)


class Transitions(TaskReads, Generic[C, A]):
    """Outcomes, release, give-back, recovery and cancel, as transitions, on txqueue's own
    connection ``C``; a cancel by hand also on an application's, ``A``."""

    # --- what each store gives ---------------------------------------------------------

    def apply(
        self,
        conn: C,
        transitions: Sequence[Transition],
        steps: bool = False,
        claim_next: ClaimNext | None = None,
    ) -> Applied:
        """Apply ``transitions`` in one write of their own, each fenced; returns the state
        each applied one wrote (one fenced out is missing), and what became of the
        children of the workflow steps among them, in the same transaction. ``steps``:
        some of them end workflow steps, as their claims said (speed only: the store
        finds those itself). ``claim_next``: claim the steps readied in that transaction too,
        as it allows, where the store can (``Applied.claimed``)."""
        raise NotImplementedError

    def _write(self, conn: C | A, transitions: Sequence[Transition]) -> list[Changed]:
        """Write ``transitions`` in the transaction ``conn`` is in (one statement where
        the store can); the tasks changed."""
        raise NotImplementedError

    def _free_waits(
        self, conn: C | A, parents: Sequence[uuid.UUID]
    ) -> list[tuple[uuid.UUID, uuid.UUID, str]]:
        """Delete the edges from ``parents`` (which have ended) to steps still waiting for
        them, and lock those steps until the transaction ends, so that of two parents
        ending at once the second sees the first's edge gone; (child, parent, OnFailure)
        of each edge deleted."""
        raise NotImplementedError

    def _children(self, conn: C | A, ids: Sequence[uuid.UUID]) -> tuple[list[Child], Values]:
        """The steps ``ids``, read after ``_free_waits`` locked them: (id, state, whether
        an edge to it is left, its inputs' specification as JSON text); and for those no
        edge is left to, the parents their inputs take results from: (state, result as
        JSON text, why it did not succeed)."""
        raise NotImplementedError

    def _stranded(self, conn: C, limit: int) -> dict[uuid.UUID, readiness.Parent]:
        """Up to ``limit`` steps that ended with an edge to a child left behind, locked."""
        raise NotImplementedError

    def _rewait(self, conn: A | C, edges: Sequence[tuple[uuid.UUID, uuid.UUID, str]]) -> None:
        """Rearmed steps' edges back: (parent, child, OnFailure) each."""
        raise NotImplementedError

    def _retriable(self, conn: A, ids: Sequence[uuid.UUID]) -> list[tuple[uuid.UUID, TaskState]]:
        """Of ``ids``, those a retry by hand may move, locked (``retriable``): failed or
        cancelled, and a workflow's step only when its parents no longer hold it back."""
        raise NotImplementedError

    def lock_running(
        self, conn: C, worker_id: str, held: Sequence[tuple[uuid.UUID, int]]
    ) -> list[Running]:
        raise NotImplementedError

    def lock_expired(self, conn: C, limit: int, default_max_attempts: int) -> list[Running]:
        raise NotImplementedError

    def current_xid(self, conn: C) -> str | None:
        """The writing transaction's id, for the wake-ups of tasks it made ripe."""
        raise NotImplementedError

    def insert_task(self, conn: C, task: Task, trace: str | None = None) -> Inserted:
        raise NotImplementedError

    def insert_child(self, conn: C, task: Task) -> Inserted:
        """A task a handler's step starts (``ctx.start_child``), in the step's transaction;
        or its unique key's live holder."""
        return self.insert_task(conn, task)

    def insert_child_workflow(self, conn: C, plan: WorkflowPlan) -> list[Inserted]:
        """A workflow a handler's step starts, in the step's transaction; each step's row."""
        return self.insert_workflow(conn, plan)

    def insert_workflow(
        self, conn: C, plan: WorkflowPlan, trace: str | None = None, notify: bool = False
    ) -> list[Inserted]:
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

    def _apply(self, conn: C | A, transitions: Sequence[Transition]) -> Applied:
        """``apply`` in the transaction ``conn`` is in: the transitions, then what becomes
        of the children of the workflow steps they ended, and so on down the graph
        (``follow``), all in this transaction."""
        return self._drive(conn, follow.following(transitions))

    def _drive(self, conn: C | A, steps: Generator[follow.Request, Any, T]) -> T:
        """Run ``follow``'s ``steps`` on ``conn``, each request answered by the store's
        method of its name."""
        return follow.drive(steps, lambda name, arg: getattr(self, name)(conn, arg))

    def _may_have_expired(self, conn: C) -> bool:
        """Whether some running task's lease may have run out: a store whose recovery takes
        a lock that every writer waits for (SQLite's) reads first, without it."""
        return True

    def record_outcomes(
        self, conn: C, outcomes: Sequence[Outcome], claim_next: ClaimNext | None = None
    ) -> Applied:
        """Write attempts' outcomes, each fenced on (id, attempt, worker, running). Returns
        the state written for each id; an outcome missing from it was fenced out (its lease
        was lost). ``claim_next``: as ``apply``'s."""
        steps = any(o.step for o in outcomes)
        transitions = [ended(o) for o in outcomes]
        if claim_next is None or not steps:  # as a store without ``claim_next`` takes it
            return self.apply(conn, transitions, steps)
        return self.apply(conn, transitions, steps, claim_next=claim_next)

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
        applied = self.apply(conn, [lifecycle.given_back(i, a, worker_id) for i, a in held])
        return sum(1 for i, _ in held if i in applied)  # not the children they ended

    def recover_expired(
        self,
        conn: C,
        limit: int,
        default_max_attempts: int,
        readied: list[tuple[str, Inserted]] | None = None,
        by: str = lifecycle.CLEANER,
    ) -> list[Recovered]:
        """Take back up to ``limit`` running tasks whose lease expired, each by its policy:
        retry (back to pending, the lost attempt counted), abandon (failed), or compensate
        (failed, and the compensating task enqueued in the same transaction). The workflow
        steps that a failure readied (their edge runs however it ends) and the compensating
        tasks are added to ``readied``, for the caller's wake-ups after the commit. ``by``: who
        takes them back, for their history (a worker's id, or the cleaner)."""

        if not self._may_have_expired(conn):
            return []
        ready: list[tuple[str, Inserted]] = []

        def recover() -> list[Recovered]:
            running = self.lock_expired(conn, limit, default_max_attempts)
            decided = [(r, lifecycle.recovered(r, by)) for r in running]
            applied = self._apply(conn, [t for _, t in decided])
            ready[:] = applied.ready  # kept only once the transaction has committed
            xid = self.current_xid(conn) if applied else None
            out = []
            for r, t in decided:
                if r.id not in applied:
                    continue
                assert t.error is not None
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
                        applied.enqueued.get(r.id),
                    )
                )
            return out

        recovered = self._changing(conn, "recover expired leases", recover)
        if readied is not None:
            readied.extend(ready)
        return recovered

    def cancel(
        self,
        conn: A,
        task_id: uuid.UUID,
        by: str | None = None,
        readied: list[tuple[str, Inserted]] | None = None,
    ) -> str | None:
        """Pending or waiting: cancelled now. Running: flagged for its handler. Returns the
        state after, or None when the task is not pending, waiting or running. A workflow's
        step takes its children with it; those it readied (edges that run however it ends)
        are added to ``readied``, for the caller's wake-ups after the commit."""

        def cancel() -> str | None:
            return self._drive(conn, follow.cancelling_task(task_id, by, readied))

        return self._changing_theirs(conn, "cancel", cancel)

    def bulk_batch(self, conn: C, order: BulkOrder, after: uuid.UUID) -> BulkBatch:
        """One batch of a bulk ``order`` in a transaction of its own: its next ``limit``
        tasks after ``after``, up to ``upto``, in ``states`` that match ``where``, changed as
        the same action on one task changes it, ``by`` in their history. A retry leaves
        failed a task whose unique key another task holds, or one retried earlier in the
        batch."""
        action, where, states, upto, limit, by = order

        def batch() -> BulkBatch:
            picked = self.pick_tasks(conn, where, states, after, upto, limit, action == "retry")
            ids = [i for i, _, _, _ in picked]
            done = BulkBatch(len(ids), ids[-1] if ids else None)
            if not ids:
                return done
            if action == "cancel":
                moves = (lifecycle.cancelled(i, state, by) for i, state, _, _ in picked)
                applied = self._apply(conn, [t for t in moves if t is not None])
                done.changed = sum(1 for i in ids if i in applied)
                done.ready = applied.ready
            elif action == "retry":
                keys: set[str] = set()
                once = []
                for i, _, _, key in picked:
                    if key not in keys:
                        once.append(i)
                    if key is not None:
                        keys.add(key)
                done.moved = self._retry(conn, once, by)
                done.changed = len(done.moved)
            else:
                done.changed = self.delete_tasks(conn, ids)
            return done

        return self._changing(conn, action, batch)

    def release_stranded(self, conn: C, limit: int) -> Applied:
        """The cleaner's repair: the children of up to ``limit`` steps that ended with an
        edge to them left behind (ended by a worker of a release without workflows, or by
        hand in SQL), changed as the step's end would have changed them."""

        def release() -> Applied:
            ended = self._stranded(conn, limit)
            if not ended:
                return Applied()
            return self._drive(conn, follow.following([], ended))

        return self._changing(conn, "release stranded steps", release)

    def retry_ids(self, conn: A, ids: Sequence[uuid.UUID], by: str | None = None) -> list[Moved]:
        """Failed or cancelled tasks back to pending now, in the caller's transaction (a
        workflow's step only when its parents no longer hold it back), and the steps their
        ends had blocked or skipped waiting again (``follow.retrying``); (id, queue, xid)
        of those moved, for their wake-ups. A live task holding one's unique key fails
        the whole retry (StoreError)."""
        return self._changing_theirs(conn, "retry", lambda: self._retry(conn, ids, by))

    def retry_failed(
        self,
        conn: A,
        queue: str | None,
        after: uuid.UUID,
        limit: int,
        by: str | None = None,
    ) -> list[Moved]:
        """Up to ``limit`` failed tasks (of ``queue``, or all) with ids above ``after`` back
        to pending now, in id order, as ``retry_ids``; one whose unique key a live task
        holds stays failed."""

        def retry() -> list[Moved]:
            return self._drive(conn, follow.retrying_failed(queue, after, limit, by))

        return self._changing_theirs(conn, "retry", retry)

    def _retry(self, conn: A | C, ids: Sequence[uuid.UUID], by: str | None) -> list[Moved]:
        return self._drive(conn, follow.retrying(ids, by))

    def cancel_workflow(
        self, conn: A, workflow_id: uuid.UUID, by: str | None = None
    ) -> dict[uuid.UUID, str]:
        """Cancel every step of the workflow that has not ended (``follow.cancelling``), in
        the caller's transaction: what each became, ``cancelled`` or ``running`` (asked to
        stop)."""

        def cancel() -> dict[uuid.UUID, str]:
            return self._drive(conn, follow.cancelling(workflow_id, by))

        return self._changing_theirs(conn, "cancel workflow", cancel)


def to_claim(applied: Applied, then: ClaimNext) -> list[uuid.UUID]:
    """Of the steps ``applied`` readied, those its transaction may claim for ``then``."""
    return [row.id for queue, row in applied.ready if queue in then.queues][: then.limit]


def ended(o: Outcome) -> Transition:
    """An attempt's outcome as its transition."""
    if o.state == PARKED:
        return lifecycle.parked(o.id, o.attempt, o.worker_id, o.retry_in, o.wait_key, o.progress)
    return lifecycle.ended(
        o.id, o.attempt, o.worker_id, o.state, o.result, o.error, o.retry_in, o.progress
    )


def retriable(rows: Sequence[Sequence[Any]]) -> list[tuple[uuid.UUID, TaskState, str | None]]:
    """A store's ``retriable`` read, (id, state, unique key, whether a live task holds
    it) each: a key held, or two of them with one key, fail the whole retry, which the
    caller's savepoint undoes. (id, state, unique key) of each."""
    keys = [key for _, _, key, _ in rows if key is not None]
    if any(held for *_, held in rows) or len(keys) != len(set(keys)):
        raise StoreError(
            "retry: a pending or running task holds the same unique_key; nothing was retried"
        )
    return [
        (i if type(i) is uuid.UUID else uuid.UUID(str(i)), TaskState(s), k) for i, s, k, _ in rows
    ]


def keyed(found: Sequence[tuple[uuid.UUID, TaskState, str | None]]) -> list[uuid.UUID]:
    """Of ``retriable``'s tasks, those with a unique key to take back."""
    return [i for i, _, key in found if key is not None]


def kept(
    found: Sequence[tuple[uuid.UUID, TaskState, str | None]], taken: set[uuid.UUID]
) -> list[tuple[uuid.UUID, TaskState]]:
    """Of ``retriable``'s tasks, those to retry: without a key, or whose key was taken back
    (``taken``); one whose key an enqueue took meanwhile is left."""
    return [(i, state) for i, state, key in found if key is None or i in taken]
