"""The recorder: writes outcomes in batches, keeps running tasks' leases alive, flags
cancellations, and at shutdown releases what the worker will not finish.

It runs on its own thread and database connection, so a slow write holds up neither the
claimer nor the handlers, and one outcome the database refuses holds up no other.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from ..errors import StoreError, TaskError
from ..registry import FailedTask, Registry
from ..store.base import WORKER_SEEN_EVERY, Claimed, Outcome, Store
from ..task import CANCELLED, FAILED, PENDING, RUNNING
from .board import UNRECORDED, Beat, Board, Done, Outage, database_retry
from .outcomes import error_entry, storable

log = logging.getLogger("txqueue.worker")

_CANCEL_CHECK_EVERY = 1.0


class Recorder:
    def __init__(
        self,
        store: Store,
        database_url: str,
        worker_id: str,
        registry: Registry,
        queues: list[str],
        board: Board,
        outage: Outage,
        stop_now: threading.Event,
    ) -> None:
        self._store = store
        self._database_url = database_url
        self._worker_id = worker_id
        self._registry = registry
        self._queues = queues
        self._names = sorted(d.name for d in registry)
        self._presence_failed = False
        self._board = board
        self._outage = outage
        self._stop_now = stop_now
        self.done = threading.Event()
        self._pending: list[
            Done
        ] = []  # taken from the outbox, not written yet; kept across restarts
        self._alerts: queue.SimpleQueue[FailedTask | None] = queue.SimpleQueue()

    def close(self) -> None:
        """Write what is done, release the rest, then stop."""
        self._board.outbox.put(None)

    def heartbeat(self, task: Claimed) -> bool:
        """``ctx.heartbeat()``: False once the recorder is gone or cannot answer in time,
        as the lease is then as good as lost."""
        if self.done.is_set():
            return False
        beat = Beat(task)
        self._board.outbox.put(beat)
        try:
            return beat.answer.result(timeout=task.timeout / 3)
        except FutureTimeout:
            return False

    def alert_loop(self) -> None:
        """Runs ``on_failed`` hooks on a thread of their own: a slow hook must hold up
        neither outcomes nor handlers."""
        while (failure := self._alerts.get()) is not None:
            self._registry.alert(failure)

    def close_alerts(self) -> None:
        self._alerts.put(None)

    def run(self) -> None:
        held: list[Any] = []  # its connection, closed also when the loop dies
        try:
            self._record(held)
        finally:
            for conn in held:
                conn.close()

    def _record(self, held: list[Any]) -> None:
        conn: Any = None
        failures = 0
        closing = False
        opened_in = self._outage.period
        next_cancel_check = time.monotonic() + _CANCEL_CHECK_EVERY
        next_presence = 0.0
        outbox = self._board.outbox
        while True:
            wait = min(next_cancel_check, next_presence, self._next_beat()) - time.monotonic()
            batch: list[Done | Beat | None] = []
            try:
                batch.append(outbox.get(timeout=max(0.0, wait)))
                while True:
                    batch.append(outbox.get_nowait())
            except queue.Empty:
                pass
            beats: list[Beat] = []
            for entry in batch:
                if entry is None:
                    closing = True
                elif isinstance(entry, Done):
                    self._pending.append(entry)
                else:
                    beats.append(entry)
            try:
                if conn is None or self._store.is_closed(conn):
                    conn = self._store.connect(
                        self._database_url, application_name="txqueue-worker"
                    )
                    held[:] = [conn]
                    opened_in = self._outage.back()
                    failures = 0
                self._write(conn, self._pending)
                for beat in beats:
                    t = beat.task
                    extended = self._store.extend_leases(
                        conn, self._worker_id, [(t.id, t.attempts, t.timeout)]
                    )
                    beat.answer.set_result(t.id in extended)
                if closing:
                    self._release(conn)
                    self._absent(conn)
                    break
                self._beat_due(conn)
                if time.monotonic() >= next_presence:
                    self._present(conn)
                    next_presence = time.monotonic() + WORKER_SEEN_EVERY
                if time.monotonic() >= next_cancel_check:
                    self._check_cancellations(conn)
                    next_cancel_check = time.monotonic() + _CANCEL_CHECK_EVERY
                failures = 0
            except StoreError as exc:
                for beat in beats:
                    if not beat.answer.done():
                        beat.answer.set_result(False)
                if self._store.is_connection_error(exc):
                    self._outage.lost(exc, opened_in)
                elif failures == 0:
                    log.warning("cannot record outcomes (%s): retrying until written", exc)
                failures += 1
                if self._stop_now.is_set():
                    break
                time.sleep(database_retry(failures))
        self.done.set()
        while True:  # heartbeats asked for meanwhile get their answer: not extended
            try:
                entry = outbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(entry, Beat):
                entry.answer.set_result(False)

    def _present(self, conn: Any) -> None:
        """Refresh this worker's row in ``txqueue_workers``, which ``txqueue status`` reads
        to tell which pending tasks no running worker has a handler for."""
        try:
            self._store.worker_seen(conn, self._worker_id, self._queues, self._names)
        except StoreError as exc:
            if self._store.is_connection_error(exc):
                raise
            if not self._presence_failed:  # an older schema: the work itself goes on
                self._presence_failed = True
                log.warning(
                    "cannot register this worker for `txqueue status` (%s); "
                    "run `txqueue init` to upgrade the schema",
                    exc,
                )

    def _absent(self, conn: Any) -> None:
        try:
            self._store.worker_gone(conn, self._worker_id)
        except StoreError as exc:
            log.info("could not remove this worker's row (%s): it ages out", exc)

    def _release(self, conn: Any) -> None:
        """Give up the tasks this worker will not finish now, rather than at lease expiry.

        Runs after every outcome queued before it was written, so a task is either
        recorded or released, never neither. Handlers still running keep their threads (the
        CLI exits; an embedded worker's caller carries on) and any outcome they reach is
        fenced out.
        """
        with self._board.lock:  # a handler leaves `running` and queues its outcome under it
            held = [(r.task.id, r.task.attempts) for r in self._board.running.values()]
            while True:
                try:
                    entry = self._board.outbox.get_nowait()
                except queue.Empty:
                    break
                if isinstance(entry, Done):
                    self._pending.append(entry)  # kept for a retry if writing fails
                elif isinstance(entry, Beat):
                    entry.answer.set_result(False)  # the lease is being given up
        self._write(conn, self._pending)
        if not held:
            return
        released = self._store.release(conn, self._worker_id, held)
        self._board.stats["released"] += len(released)
        states = Counter(released.values())
        log.warning(
            "released %d unfinished tasks: %d to run again, %d left to the cleaner's "
            "lease policy, %d cancelled",
            len(released),
            states[PENDING],
            states[RUNNING],
            states[CANCELLED],
        )

    def _write(self, conn: Any, done: list[Done]) -> None:
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

    def _try_record(self, conn: Any, outcomes: list[Outcome]) -> dict[uuid.UUID, str] | StoreError:
        """``record_outcomes``, or the database's refusal; a lost connection still raises."""
        try:
            return self._store.record_outcomes(conn, outcomes)
        except StoreError as exc:
            if self._store.is_connection_error(exc):
                raise
            return exc

    def _write_one(self, conn: Any, d: Done) -> tuple[Done, dict[uuid.UUID, str]]:
        """Write one outcome; one the database still refuses ends the task ``failed`` with
        the reason, and one that cannot even be failed is left to its lease."""
        written = self._try_record(conn, [d.outcome])
        if not isinstance(written, StoreError):
            return d, written
        o = d.outcome
        reason = storable(f"the outcome could not be stored: {written}")
        log.error("task %s attempt %d: %s; failing the task", o.id, o.attempt, reason)
        error = error_entry(o.worker_id, o.attempt, TaskError, reason)
        failed = Done(
            Outcome(o.id, o.attempt, o.worker_id, FAILED, error=error), d.task, "unstorable outcome"
        )
        written = self._try_record(conn, [failed.outcome])
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
        self._board.recorded(len(done))
        stats = self._board.stats
        for d in done:
            outcome = d.outcome
            state = written.get(outcome.id)
            if state == UNRECORDED:
                stats[UNRECORDED] += 1
            elif state is None:
                stats["fenced_out"] += 1
                log.warning(
                    "task %s attempt %d: outcome dropped, this worker no longer holds the task "
                    "(its lease expired and it was recovered)",
                    outcome.id,
                    outcome.attempt,
                )
            else:
                stats["retried" if state == PENDING else state] += 1
                if state == FAILED:
                    t = d.task
                    self._alerts.put(
                        FailedTask(
                            t.id, t.name, t.queue, t.payload, t.attempts, d.reason, outcome.error
                        )
                    )

    def _next_beat(self) -> float:
        """When the first running lease has used a third of its length (monotonic)."""
        with self._board.lock:
            return min(
                (r.beat_at + r.task.timeout / 3 for r in self._board.running.values()),
                default=float("inf"),
            )

    def _beat_due(self, conn: Any) -> None:
        """Extend, in one statement, the leases that have used a third of their length."""
        now = time.monotonic()
        with self._board.lock:
            due = [r for r in self._board.running.values() if now - r.beat_at >= r.task.timeout / 3]
        if not due:
            return
        self._store.extend_leases(
            conn, self._worker_id, [(r.task.id, r.task.attempts, r.task.timeout) for r in due]
        )
        for r in due:
            r.beat_at = now

    def _check_cancellations(self, conn: Any) -> None:
        """Flag ``ctx.cancelled`` on running tasks someone cancelled (those over a second old:
        shorter ones finish before anyone could ask)."""
        now = time.monotonic()
        with self._board.lock:
            old = {
                r.task.id: r
                for r in self._board.running.values()
                if now - r.started >= _CANCEL_CHECK_EVERY and not r.cancelled.is_set()
            }
        if not old:
            return
        for task_id in self._store.cancel_requested(conn, self._worker_id, list(old)):
            log.info("task %s: cancellation requested", task_id)
            old[task_id].cancelled.set()
