"""The lease keeper: extends the leases of running tasks, answers ``ctx.heartbeat()``,
flags cancellations, keeps this worker's row in ``txqueue_workers``, turns and empties
the slots tasks are written to (docs/explanation/storage.md), takes back the tasks of
workers that died once their leases end (``cleaner.recovery``), and once a minute reads
what holds the vacuum horizon back.

On a thread and connection of its own, apart from the recorder, so that no outcome write
(a 10 MB result, a slow disk) can delay a lease past its end: the shortest allowed
timeout, 1 s, is extended every third of a second.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Generic

from ..cleaner.recovery import RECOVER_AFTER_OUTAGE, RECOVER_EVERY
from ..errors import StoreError
from ..observability.horizon import READ_EVERY, Watch
from ..store.protocols import Own
from ..store.records import SLOT_PERIOD, WORKER_SEEN_EVERY, Claimed
from ..store.roles import Keeping
from ..tasks import progress
from .board import Board
from .link import Link
from .messages import Beat, drain

log = logging.getLogger("txqueue.worker")

_CANCEL_CHECK_EVERY = 1.0


class LeaseKeeper(Generic[Own]):
    def __init__(
        self,
        store: Keeping[Own],
        worker_id: str,
        queues: list[str],
        names: list[str],
        board: Board,
        link: Link[Own],
        stop_now: threading.Event,
        horizon: Watch,
        recover: Callable[[Own], bool],
    ) -> None:
        self._store = store
        self._worker_id = worker_id
        self._queues = queues
        self._names = names
        self._board = board
        self._link = link
        self._stop_now = stop_now
        self._horizon = horizon
        self._recover = recover
        self._beats: queue.SimpleQueue[Beat | None] = queue.SimpleQueue()
        self._presence_failed = False
        self._slots_failed = False
        self._slots_stuck = False
        self.done = threading.Event()

    def close(self) -> None:
        self._beats.put(None)

    def heartbeat(self, task: Claimed) -> bool:
        """``ctx.heartbeat()``: True once the lease is extended; False at once if the keeper
        has stopped, or if it cannot answer before the lease would run out."""
        running = self._board.holding(task.id)
        if self.done.is_set() or running is None or running.released:
            return False
        beat = Beat(task)
        self._beats.put(beat)
        if self.done.is_set():  # stopped meanwhile: its last drain may have missed this one
            return False
        last = running.beat_at
        try:
            return beat.answer.result(timeout=max(0.0, last + task.timeout - time.monotonic()))
        except FutureTimeout:
            return False

    def run(self) -> None:
        try:
            self._keep()
        finally:  # a loop that died is restarted on a new connection
            self._link.close()
        self.stopped()

    def stopped(self) -> None:
        """No lease is kept any more (also called by the worker once this part is given
        up on): every heartbeat asked, and any asked later, is answered False at once."""
        self.done.set()
        for beat in drain(self._beats):
            beat.answer.set_result(False)

    def _keep(self) -> None:
        # Every chore at the first pass, but the cancellation check: none is old enough yet.
        chores = [
            _Chore(WORKER_SEEN_EVERY, self._present),
            # Progress to write is looked for at each pass (the cancellation check makes
            # one every second at least), and put off only once some was written: it never
            # sets the loop's wait, which would otherwise spin while none is reported.
            _Chore(progress.WRITE_EVERY, self._write_progress, paces=False),
            _Chore(_CANCEL_CHECK_EVERY, self._check_cancellations, _CANCEL_CHECK_EVERY),
            _Chore(SLOT_PERIOD / 2, self._keep_slots),
            recovering := _Chore(RECOVER_EVERY, self._recover),
            _Chore(READ_EVERY, lambda conn: self._horizon.read(self._store, conn)),
        ]
        for chore in chores:
            chore.due += time.monotonic()
        while True:
            due = min(min(c.due for c in chores if c.paces), self._next_beat())
            wait = due - time.monotonic()
            asked: list[Beat | None] = []
            try:
                asked.append(self._beats.get(timeout=max(0.0, wait)))
                while True:
                    asked.append(self._beats.get_nowait())
            except queue.Empty:
                pass
            beats = [b for b in asked if b is not None]
            if None in asked and self._link.down:
                # Closing in an outage: no presence row to delete that will not expire on
                # its own, and a database that hangs must not hold the worker's exit.
                for beat in beats:
                    beat.answer.set_result(False)
                return
            try:
                conn = self._link.open()
                if None in asked:  # the recorder has released what was left
                    for beat in beats:
                        beat.answer.set_result(False)
                    self._absent(conn)
                    return
                for beat in beats:
                    self._answer(conn, beat)
                self._beat_due(conn)
                for chore in chores:
                    chore.run_if_due(conn)
                self._link.worked()
            except StoreError as exc:
                for beat in beats:
                    if not beat.answer.done():
                        beat.answer.set_result(False)
                if not self._link.failed(exc):
                    raise  # a refused lease statement is a bug: the supervisor says so
                if self._stop_now.is_set() or None in asked:
                    return
                # Back before the other workers, it must not take their tasks, which ran
                # on through the outage, before their keepers extend the leases again.
                recovering.due = max(recovering.due, time.monotonic() + RECOVER_AFTER_OUTAGE)
                time.sleep(self._link.backoff())

    def _answer(self, conn: Own, beat: Beat) -> None:
        t = beat.task
        running = self._board.holding(t.id)
        if running is None or running.released:
            beat.answer.set_result(False)
            return
        extended = self._store.extend_leases(conn, self._worker_id, [(t.id, t.attempts, t.timeout)])
        if t.id in extended:
            running.beat_at = time.monotonic()
        beat.answer.set_result(t.id in extended)

    def _write_progress(self, conn: Own) -> bool:
        """Write the progress handlers reported since the last write; False if none had."""
        due = [(r, r.progress) for r in self._board.progressed()]
        reports = [(r.task.id, r.task.attempts, text) for r, text in due if text is not None]
        if not reports:
            return False
        written = self._store.write_progress(conn, self._worker_id, reports)
        for running, text in due:
            if running.task.id in written:  # one skipped, locked, is tried again
                running.progress_written = text
        return True

    def _next_beat(self) -> float:
        """When the first running lease has used a third of its length (monotonic)."""
        return min(
            (r.beat_at + r.task.timeout / 3 for r in self._board.leased()), default=float("inf")
        )

    def _beat_due(self, conn: Own) -> None:
        """Extend, in one statement, the leases that have used a third of their length."""
        now = time.monotonic()
        due = [r for r in self._board.leased() if now - r.beat_at >= r.task.timeout / 3]
        if not due:
            return
        self._store.extend_leases(
            conn, self._worker_id, [(r.task.id, r.task.attempts, r.task.timeout) for r in due]
        )
        for r in due:
            r.beat_at = now

    def _check_cancellations(self, conn: Own) -> None:
        """Flag ``ctx.cancelled`` on running tasks someone cancelled (those over a second old:
        shorter ones finish before anyone could ask)."""
        old = self._board.started_before(time.monotonic() - _CANCEL_CHECK_EVERY)
        if not old:
            return
        for task_id in self._store.cancel_requested(conn, self._worker_id, list(old)):
            log.info("task %s: cancellation requested", task_id)
            old[task_id].cancelled.set()

    def _present(self, conn: Own) -> None:
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
        self._link.answered()  # refused or not, the database answered

    def _keep_slots(self, conn: Own) -> None:
        try:
            kept = self._store.keep_slots(conn, SLOT_PERIOD)
        except StoreError as exc:
            if self._store.is_connection_error(exc):
                raise
            if not self._slots_failed:  # an older schema: the work itself goes on
                self._slots_failed = True
                log.warning("cannot keep the task slots (%s); run `txqueue init`", exc)
            return
        if kept is None or kept.stuck == self._slots_stuck:
            return
        self._slots_stuck = kept.stuck
        if kept.stuck:
            log.warning(
                "new tasks stay in slot %d past its period: no other slot is empty (a task "
                "still running in each, or a long transaction reading txqueue_tasks); under a "
                "held vacuum horizon claims slow down until one is (docs/explanation/storage.md)",
                kept.current,
            )
        else:
            log.info("the task slots turn again (slot %d)", kept.current)

    def _absent(self, conn: Own) -> None:
        try:
            self._store.worker_gone(conn, self._worker_id)
        except StoreError as exc:
            log.info("could not remove this worker's row (%s): it ages out", exc)


class _Chore:
    """One of the keeper's periodic statements: run when due, then put off by ``every``
    (unless it says it found nothing to do, by returning False). ``paces``: the keeper's
    loop waits for it to be due."""

    def __init__(
        self,
        every: float,
        run: Callable[[Any], object],
        first: float = 0.0,
        *,
        paces: bool = True,
    ) -> None:
        self.every, self.run, self.due, self.paces = every, run, first, paces

    def run_if_due(self, conn: Any) -> None:
        if time.monotonic() >= self.due and self.run(conn) is not False:
            self.due = time.monotonic() + self.every
