"""The tasks a worker holds, from their claim until their outcome is written: which run
now, which wait for their outcome's write, and how many more to claim ahead of the free
threads."""

from __future__ import annotations

import queue
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from ..observability.telemetry import LEASE_LOST, Telemetry
from ..store.records import Claimed
from .messages import Done, Unstarted, drain
from .stats import STATS, Tally

HORIZON = 0.02
"""Claims run ahead of the free threads by no more tasks than the worker expects to start
within this many seconds: enough to keep short tasks flowing while the next claim's round
trip is under way, too few to keep a task from an idle neighbour for long."""
MAX_AHEAD = 1000


@dataclass
class Running:
    """A claimed task handed to the handler pool, until its outcome is written."""

    task: Claimed
    started: float  # claimed
    beat_at: float
    cancelled: threading.Event = field(default_factory=threading.Event)
    released: bool = False  # given up at shutdown: its lease is no longer ours to extend
    progress: str | None = None  # as its handler last reported it (progress.encode)
    progress_written: str | None = None  # as the lease keeper last wrote it
    # Its time limit on a handler thread (overruns): its handler ended, or it was failed
    # at its limit first; and how to stop an async handler there.
    ended: bool = False
    over: bool = False
    halt: Callable[[], object] | None = None

    def report(self, text: str) -> None:
        """``ctx.progress``, kept for the lease keeper, which writes it at most once a second."""
        self.progress = text


class Board:
    """The tasks this worker holds. The claimer adds them, handlers finish them, the
    recorder writes their outcomes and releases what is left at shutdown, and the lease
    keeper keeps their leases until their outcome is written and flags cancellations."""

    def __init__(self, concurrency: int) -> None:
        self.concurrency = concurrency
        self.lock = threading.Lock()
        self.running: dict[uuid.UUID, Running] = {}
        # Finished, their outcome not written yet (a slow write, an outage): their leases
        # are kept too, or the cleaner could recover and run them again meanwhile.
        self.recording: dict[uuid.UUID, Running] = {}
        # To the recorder.
        self.outbox: queue.SimpleQueue[Done | Unstarted | None] = queue.SimpleQueue()
        self.counts = Tally(STATS)
        self._cycle: float | None = None  # a handler thread's recent time per task
        # When each handler thread took its current task; 0.0 while it waits for one.
        self.busy_since = [0.0] * concurrency
        self.telemetry = Telemetry()
        self.over = 0  # handler threads running on past their task's time limit

    def free(self, ahead: bool = True) -> int:
        """How many more tasks to claim now: a thread for each, and for short tasks as many
        again as the threads are expected to start within ``HORIZON`` (unless not
        ``ahead``: a task claimed early would wait here, and a limit counts it from its
        claim)."""
        return self.concurrency + (self.ahead() if ahead else 0) - len(self.running) - self.over

    def overrun(self, change: int) -> None:
        """A handler thread runs on past its task's time limit (+1), or is free again (-1)."""
        with self.lock:
            self.over += change

    def ahead(self) -> int:
        cycle = self._cycle
        if cycle is None:  # nothing measured yet: a task per free thread
            return 0
        # A thread well into a task will not start another soon, whatever the average.
        long_ago = time.monotonic() - HORIZON
        busy = sum(1 for since in self.busy_since if 0.0 < since < long_ago)
        return min(MAX_AHEAD, int((self.concurrency - busy) * HORIZON / max(cycle, 1e-6)))

    def in_turn(self) -> int:
        """How many tasks one slot is expected to start within ``HORIZON``: a process
        pool's child is sent as many beside the one it runs."""
        cycle = self._cycle
        return 0 if cycle is None else int(HORIZON / max(cycle, 1e-6))

    def ran(self, seconds: float) -> None:
        """A handler thread spent ``seconds`` on one task, from taking it to handing on its
        outcome."""
        cycle = self._cycle
        self._cycle = seconds if cycle is None else cycle + (seconds - cycle) / 8

    def settled(self) -> bool:
        """Nothing runs and every outcome is written."""
        with self.lock:
            return not self.running and not self.recording

    def settled_and_sent(self) -> bool:
        """Nothing runs and no outcome waits in the outbox (the recorder's view: what it
        took out, it keeps itself)."""
        with self.lock:
            return not self.running and self.outbox.empty()

    def busy(self) -> int:
        """How many tasks run now (their outcome not handed on yet)."""
        with self.lock:
            return len(self.running)

    def running_queues(self) -> list[str]:
        """The queue of each task running now."""
        with self.lock:
            return [r.task.queue for r in self.running.values()]

    def started_before(self, when: float) -> dict[uuid.UUID, Running]:
        """The running tasks claimed before ``when`` (monotonic) and not flagged cancelled."""
        with self.lock:
            return {
                r.task.id: r
                for r in self.running.values()
                if r.started <= when and not r.cancelled.is_set()
            }

    def release_all(self) -> tuple[list[Claimed], list[Done | Unstarted]]:
        """At shutdown: the tasks still running, now released (the lease keeper stops
        extending their leases), and what the outbox still held. One step, under the lock
        a handler holds to leave ``running`` and queue its outcome: each task is in exactly
        one of the two."""
        with self.lock:
            for r in self.running.values():
                r.released = True
            tasks = [r.task for r in self.running.values()]
            queued: list[Done | Unstarted] = drain(self.outbox)
        return tasks, queued

    def holding(self, task_id: uuid.UUID) -> Running | None:
        """The running task ``task_id``, if this worker still holds it."""
        with self.lock:
            return self.running.get(task_id)

    def leased(self) -> list[Running]:
        """The tasks whose leases this worker keeps."""
        with self.lock:
            held = [*self.running.values(), *self.recording.values()]
        return [r for r in held if not r.released]

    def progressed(self) -> list[Running]:
        """The running tasks whose handlers reported progress not written yet."""
        with self.lock:
            return [
                r
                for r in self.running.values()
                if r.progress is not r.progress_written and not r.released
            ]

    def start(self, task: Claimed, now: float) -> Running:
        running = Running(task, now, now)
        with self.lock:
            self.running[task.id] = running
        self.counts.add("claimed")
        return running

    def finish(self, done: Done) -> None:
        """Hand an outcome to the recorder. The task leaves ``running`` in the same step,
        so a release at shutdown finds each task in exactly one of the two places."""
        with self.lock:
            running = self.running.pop(done.task.id, None)
            if running is not None:
                self.recording[done.task.id] = running
            self.outbox.put(done)

    def settle(self, task: Claimed, stat: str) -> None:
        """A task whose outcome its handler thread wrote itself (an atomic task's, with
        its work): nothing left to record or keep a lease for."""
        with self.lock:
            self.running.pop(task.id, None)
        self.ended(task, stat)

    def ended(self, task: Claimed, stat: str) -> None:
        """Count how an attempt ended, in the statistics and the telemetry."""
        self.counts.add(stat)
        self.telemetry.finished(task, LEASE_LOST if stat == "fenced_out" else stat)

    def give_back(self, tasks: list[Claimed]) -> None:
        """Hand tasks never started to the recorder, to go back to ``pending``."""
        if not tasks:
            return
        with self.lock:
            for task in tasks:
                self.running.pop(task.id, None)
            self.outbox.put(Unstarted(tasks))

    def recorded(self, done: list[Done]) -> None:
        with self.lock:
            for d in done:
                self.recording.pop(d.task.id, None)
