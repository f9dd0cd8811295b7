"""The recorder: writes outcomes in batches and, at shutdown, releases what the worker
will not finish.

It runs on its own thread and database connection, so a slow write holds up neither the
claimer, nor the handlers, nor the leases (kept by ``leases``), and one outcome the
database refuses holds up no other.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from typing import Generic

from ..core.failures import failure
from ..core.task import CANCELLED, FAILED, PARKED, PENDING, RUNNING
from ..errors import StoreError, TaskError
from ..store.protocols import Own
from ..store.records import Applied, Claimed, ClaimNext, Outcome
from ..store.roles import Recording
from ..tasks.registry import FailedTask, Registry
from .atomic import Ready
from .board import Board
from .link import Link
from .messages import Done, Inbox, Unstarted, Written
from .outcomes import failed_task, storable
from .stats import UNRECORDED, ending

log = logging.getLogger("txqueue.worker")


class Recorder(Generic[Own]):
    def __init__(
        self,
        store: Recording[Own],
        worker_id: str,
        registry: Registry,
        board: Board,
        link: Link[Own],
        stop_now: threading.Event,
        deadline: Callable[[], float],
        claimer: Inbox[Written],
        readied: Callable[[Ready, list[Claimed]], list[Claimed]],
        claim_next: Callable[[], ClaimNext | None],
    ) -> None:
        """``deadline()``: the monotonic time by which a stopping worker must have ended,
        asked once the recorder is closed; what it has not written by then is left to the
        tasks' leases. ``readied`` is told what a write of workflow steps' outcomes
        readied, once it has committed: it starts the steps the write claimed
        (``claim_next`` says which it may) and wakes the others; it returns those it could
        not start, to give back."""
        self._readied = readied
        self._claim_next = claim_next
        self._deadline = deadline
        self._claimer = claimer
        self._store = store
        self._worker_id = worker_id
        self._registry = registry
        self._board = board
        self._link = link
        self._stop_now = stop_now
        self._pending: list[Done] = []  # taken from the outbox, not written: kept on restart
        self._unstarted: list[tuple[uuid.UUID, int]] = []  # likewise, to give back
        # (id, attempt) of outcomes sent in a write whose connection was lost before it
        # answered: committed or not, nobody can tell until the row is read.
        self._sent: set[tuple[uuid.UUID, int]] = set()
        self._alerts: queue.SimpleQueue[FailedTask | None] = queue.SimpleQueue()
        # Stopped with the database out of reach: outcomes not written and tasks not
        # released, left to their leases.
        self.left_behind = 0

    def close(self) -> None:
        """Write what is done, release the rest, then stop."""
        self._board.outbox.put(None)

    def alert_loop(self) -> None:
        """Runs ``on_failed`` hooks on a thread of their own: a slow hook must hold up
        neither outcomes nor handlers."""
        while (failure := self._alerts.get()) is not None:
            self._registry.alert(failure)

    def alert(self, failure: FailedTask) -> None:
        """Have ``failure``'s ``on_failed`` hooks run on the alerts' thread."""
        self._alerts.put(failure)

    def close_alerts(self) -> None:
        self._alerts.put(None)

    def run(self) -> None:
        try:
            self._record()
        finally:  # a restarted loop starts on a new connection
            self._link.close()

    def _record(self) -> None:
        deadline: float | None = None  # set once closed
        outbox = self._board.outbox
        while True:
            try:  # after a failed write, retry without waiting for new outcomes
                entry = outbox.get(block=not (self._pending or deadline is not None))
                while True:
                    if entry is None:
                        deadline = self._deadline()
                    else:
                        self._take(entry)
                    entry = outbox.get_nowait()
            except queue.Empty:
                pass
            if deadline is not None and self._empty_handed():
                return  # nothing to write or release: no reason to wait for the database
            try:
                conn = self._link.open()
                self._give_back(conn)
                self._write(conn, self._pending)
                if deadline is not None:
                    self._release(conn)
                    return
                self._link.worked()
            except StoreError as exc:
                if not self._link.failed(exc) and self._link.failures == 1:
                    log.warning("cannot record outcomes (%s): retrying until written", exc)
                left = math.inf if deadline is None else deadline - time.monotonic()
                if self._stop_now.is_set() or left <= 0:
                    self._left_unwritten(exc)
                    return
                self._stop_now.wait(min(self._link.backoff(), left))

    def _empty_handed(self) -> bool:
        """Nothing to write, give back or release: no outcome taken or queued, no task
        running past the shutdown timeout."""
        return not (self._pending or self._unstarted) and self._board.settled_and_sent()

    def _left_unwritten(self, exc: StoreError) -> None:
        """Stopping with the database out of reach: say, by task id, what is left to the
        leases (the cleaner recovers those tasks as after a crash)."""
        running, queued = self._board.release_all()
        for entry in queued:
            self._take(entry)
        unwritten = [d.outcome.id for d in self._pending]
        unsure = sum((d.outcome.id, d.outcome.attempt) in self._sent for d in self._pending)
        held = [t.id for t in running] + [task_id for task_id, _ in self._unstarted]
        self.left_behind = len(unwritten) + len(held)
        if unwritten or held:
            log.error(
                "stopping without the database (%s): %d outcomes not written%s (tasks %s) "
                "and %d tasks not released (%s); their leases will expire and the cleaner "
                "recover them",
                exc,
                len(unwritten),
                f", {unsure} of them perhaps (sent, but the reply was lost)" if unsure else "",
                ", ".join(map(str, unwritten)) or "none",
                len(held),
                ", ".join(map(str, held)) or "none",
            )

    def _release(self, conn: Own) -> None:
        """Give up the tasks this worker will not finish now, rather than at lease expiry.

        Runs after every outcome queued before it was written, so a task is either
        recorded or released, never neither. Handlers still running keep their threads (the
        CLI exits; an embedded worker's caller carries on) and any outcome they reach is
        fenced out.
        """
        running, queued = self._board.release_all()
        tasks = {t.id: t for t in running}
        for entry in queued:
            self._take(entry)  # kept for a retry if writing fails
        self._give_back(conn)
        self._write(conn, self._pending)
        self._give_back(conn)  # steps the write claimed as the worker stopped
        if not tasks:
            return
        held = [(t.id, t.attempts) for t in tasks.values()]
        released = self._store.release(conn, self._worker_id, held)
        for task_id in released:
            self._board.ended(tasks[task_id], "released")
        states = Counter(released.values())
        log.warning(
            "released %d unfinished tasks: %d to run again, %d left to the cleaner's "
            "lease policy, %d cancelled",
            len(released),
            states[PENDING],
            states[RUNNING],
            states[CANCELLED],
        )

    def _take(self, entry: Done | Unstarted) -> None:
        if isinstance(entry, Unstarted):
            self._unstarted += [(t.id, t.attempts) for t in entry.tasks]
        else:
            self._pending.append(entry)

    def _give_back(self, conn: Own) -> None:
        if self._unstarted:
            returned = self._store.give_back(conn, self._worker_id, self._unstarted)
            self._unstarted.clear()
            self._board.counts.add("given_back", returned)

    def _write(self, conn: Own, done: list[Done]) -> None:
        """Write ``done`` and empty it; on a lost connection what is left stays in it."""
        if not done:
            return
        written = self._try_record(conn, [d.outcome for d in done])
        if isinstance(written, StoreError):
            # One outcome the database refuses must not hold up the others: each alone.
            while done:
                d, written_one = self._write_one(conn, done[0])
                done.pop(0)
                self._reported(written_one, [d])
            return
        self._reported(written, done)
        done.clear()

    def _try_record(
        self, conn: Own, outcomes: list[Outcome], claiming: bool = True
    ) -> dict[uuid.UUID, str] | StoreError:
        """``record_outcomes``, or the database's refusal; a lost connection still raises.
        ``claiming``: claim the steps it readies, as ``claim_next`` allows."""
        steps = claiming and any(o.step for o in outcomes)
        then = self._claim_next() if steps else None
        try:
            written = (
                self._store.record_outcomes(conn, outcomes, claim_next=then)
                if then is not None
                else self._store.record_outcomes(conn, outcomes)
            )
        except StoreError as exc:
            if self._store.is_connection_error(exc):
                # The write may have committed and only its reply been lost: the retry's
                # fence then matches nothing, and must not be taken for a lost lease.
                self._sent.update((o.id, o.attempt) for o in outcomes)
                raise
            return exc
        unsure = [o for o in outcomes if o.id not in written and (o.id, o.attempt) in self._sent]
        if unsure:
            landed = self._store.outcomes_landed(conn, unsure)
            for o in unsure:
                if o.id in landed:
                    log.info(
                        "task %s attempt %d: outcome written before the connection was lost",
                        o.id,
                        o.attempt,
                    )
            written.update(landed)
        self._sent.difference_update((o.id, o.attempt) for o in outcomes)
        return written

    def _write_one(self, conn: Own, d: Done) -> tuple[Done, dict[uuid.UUID, str]]:
        """Write one outcome; one the database still refuses ends the task ``failed`` with
        the reason, and one that cannot even be failed is left to its lease."""
        # Alone and claiming nothing: a claim must never be what fails an outcome.
        written = self._try_record(conn, [d.outcome], claiming=False)
        if not isinstance(written, StoreError):
            return d, written
        o = d.outcome
        reason = storable(f"the outcome could not be stored: {written}")
        log.error("task %s attempt %d: %s; failing the task", o.id, o.attempt, reason)
        error = failure(o.worker_id, o.attempt, TaskError, reason).as_json()
        failed = Done(
            Outcome(o.id, o.attempt, o.worker_id, FAILED, error=error, step=o.step),
            d.task,
            "unstorable outcome",
        )
        written = self._try_record(conn, [failed.outcome], claiming=False)
        if not isinstance(written, StoreError):
            return failed, written
        log.error(
            "task %s: cannot record even its failure (%s); its lease will expire and the "
            "cleaner recover it",
            o.id,
            written,
        )
        return d, {o.id: UNRECORDED}

    def _reported(self, written: dict[uuid.UUID, str], done: list[Done]) -> None:
        if isinstance(written, Applied) and written.claim_error is not None:
            log.warning(
                "could not claim the workflow steps these outcomes readied (%s): they are "
                "woken instead",
                written.claim_error,
            )
        if isinstance(written, Applied) and written.ready:
            left = self._readied(written.ready, written.claimed)
            self._unstarted += [(t.id, t.attempts) for t in left]
        # The retries written are ripe once their backoff ends from now (rounded up to 10 ms,
        # so that a batch of them makes few polls): the claimer polls by then.
        now = time.monotonic()
        self._claimer.put(
            Written(
                frozenset(
                    math.ceil((now + d.outcome.retry_in) * 100) / 100
                    for d in done
                    if d.outcome.state == PENDING and written.get(d.outcome.id) == PENDING
                )
            )
        )
        self._board.recorded(done)
        for d in done:
            outcome = d.outcome
            state = written.get(outcome.id)
            if state == UNRECORDED:
                self._board.ended(d.task, UNRECORDED)
            elif state is None:
                self._board.ended(d.task, "fenced_out")
                log.warning(
                    "task %s attempt %d: outcome dropped, this worker no longer holds the task "
                    "(its lease expired and it was recovered)",
                    outcome.id,
                    outcome.attempt,
                )
            else:  # a park whose signal had come is pending at once: parked all the same
                parked = outcome.state == PARKED and state != CANCELLED
                self._board.ended(d.task, PARKED if parked else ending(state))
                if state == FAILED:
                    self._alerts.put(failed_task(d.task, d.reason, outcome.error))
