"""Time limits in the thread pool. A thread cannot be stopped from outside, so at its
task's ``time_limit`` the attempt is failed for it (``TimeLimitError``, retried by the
task's policy) and the thread runs on, outside the pool's count, until its handler
returns; what the handler then returns or raises is dropped: its attempt is over, its
task may already run elsewhere, and an atomic task's work is rolled back by the fence.
An ``async def`` handler is cancelled at its limit, and so does stop."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import threading
import time
from collections.abc import Iterator

from ..errors import TimeLimitError
from ..tasks.registry import Registry
from .board import Board, Running
from .messages import Done
from .outcomes import failed

log = logging.getLogger("txqueue.worker")


class Overruns:
    """Watches the time limits of the tasks that run on handler threads."""

    def __init__(self, board: Board, registry: Registry, worker_id: str) -> None:
        self._board = board
        self._registry = registry
        self._worker_id = worker_id
        self._lock = threading.Condition()
        self._due: list[tuple[float, int, Running]] = []  # by deadline
        self._order = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, job: Running) -> None:
        """``job`` starts now on a handler thread; it ends with ``ended``."""
        limit = job.task.time_limit
        if limit is None:
            return
        with self._lock:
            heapq.heappush(self._due, (time.monotonic() + limit, next(self._order), job))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="txqueue-time-limits", daemon=True
                )
                self._thread.start()
            self._lock.notify()

    @contextlib.contextmanager
    def checked(self, job: Running) -> Iterator[None]:
        """The handler's call: raises TimeLimitError after it if the attempt was failed
        at its limit meanwhile, so that an atomic task's work rolls back rather than
        commits with a success."""
        yield
        if job.over:
            raise TimeLimitError("time limit exceeded: its handler ended after the attempt failed")

    def ended(self, job: Running) -> bool:
        """``job``'s handler returned: False to record its outcome, True if it was failed
        at its time limit already (its outcome is dropped, its thread is free again)."""
        if job.task.time_limit is None:
            return False
        with self._lock:
            if job.over:
                return True
            job.ended = True
            if len(self._due) > 64 and len(self._due) > 4 * self._board.busy():
                # The ended ones, which would otherwise stay until their deadline: with
                # long limits, a day's tasks.
                self._due = [d for d in self._due if not d[2].ended]
                heapq.heapify(self._due)
            return False

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._due or self._due[0][0] > time.monotonic():
                    self._lock.wait(None if not self._due else self._due[0][0] - time.monotonic())
                _, _, job = heapq.heappop(self._due)
                if job.ended:
                    continue
                job.over = True
                self._board.overrun(+1)
            try:
                self._fail(job)
            except Exception:  # this thread keeps every limit: it must not end here
                log.exception("task %s: could not fail it at its time limit", job.task.id)
                with self._lock:  # its handler's own outcome is recorded, when it comes
                    job.over = False
                    self._board.overrun(-1)

    def _fail(self, job: Running) -> None:
        task = job.task
        log.error(
            "task %s %s: past its time_limit of %gs on a handler thread, which cannot be "
            "stopped: the attempt fails now, and what the handler does from here is dropped",
            task.name,
            task.id,
            task.time_limit,
        )
        if job.halt is not None:
            job.halt()  # an async handler: cancelled
        exc = TimeLimitError(
            f"time limit exceeded: still running {task.time_limit:g}s after it started on a "
            "handler thread (not stopped: its result is dropped)"
        )
        definition = self._registry.get(task.name)
        outcome = failed(task, self._worker_id, definition, exc, False, job.progress)
        self._board.finish(Done(outcome, task))
