"""What a worker's parts share: the tasks running now, the messages the parts pass each
other, the statistics they keep, and their database connections with the one report of
an outage."""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from ..backoff import reconnect_delay
from ..errors import StoreError
from ..store.protocols import Connections, Own
from ..store.records import Claimed, Outcome
from ..task import PENDING
from ..telemetry import LEASE_LOST, Telemetry

log = logging.getLogger("txqueue.worker")


def ending(state: str) -> str:
    """How an attempt whose outcome has ``state`` ended, in the statistics, the metrics and
    its span: a failure back to pending is a retry."""
    return "retried" if state == PENDING else state


UNRECORDED = "unrecorded"
STATS = (
    "claimed",
    "succeeded",
    "retried",
    "failed",
    "cancelled",
    "released",
    "given_back",
    "fenced_out",
    UNRECORDED,
    "dropped_rolled_back",
    "dropped_gone",
    "dropped_not_pending",
    "dropped_not_ripe",
    "woken",
    "waited_for_commit",
    "gave_up_waiting",
    "passed_on",
    "no_handler",
    "held",
)


HORIZON = 0.02
"""Claims run ahead of the free threads by no more tasks than the worker expects to start
within this many seconds: enough to keep short tasks flowing while the next claim's round
trip is under way, too few to keep a task from an idle neighbour for long."""
MAX_AHEAD = 1000


class Tally:
    """Counts that many threads add to, kept exact: each thread adds to a counter of its
    own, so no update is lost between another thread's read and write of the same count
    (``counts[k] += 1`` is three steps), and a read sums them all."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self._names = names
        self._mine = threading.local()
        self._every: list[dict[str, int]] = []
        self._lock = threading.Lock()

    def add(self, name: str, n: int = 1) -> None:
        counts: dict[str, int] | None = getattr(self._mine, "counts", None)
        if counts is None:
            counts = self._mine.counts = dict.fromkeys(self._names, 0)
            with self._lock:
                self._every.append(counts)
        counts[name] += n

    def read(self) -> dict[str, int]:
        with self._lock:
            every = list(self._every)
        total = dict.fromkeys(self._names, 0)
        for counts in every:  # their keys never change, only values: safe to walk
            for name, n in counts.items():
                total[name] += n
        return total


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


@dataclass(frozen=True, slots=True)
class Done:
    """An attempt's outcome on its way to the recorder, with the task it belongs to."""

    outcome: Outcome
    task: Claimed
    reason: str = "attempts exhausted"  # for on_failed, should the outcome be a failure


@dataclass(frozen=True, slots=True)
class Unstarted:
    """Tasks claimed ahead and never started, on their way back to ``pending`` (a stopping
    worker gives them up at once: no attempt of theirs began)."""

    tasks: list[Claimed]


M_contra = TypeVar("M_contra", contravariant=True)


class Inbox(Protocol[M_contra]):
    """Where a part sends another part its messages: the receiving part's queue, which
    only its own thread reads."""

    def put(self, item: M_contra) -> None: ...


@dataclass(frozen=True, slots=True)
class Freed:
    """A handler thread is free again, on its way to the claimer: claim what fits now."""


@dataclass(frozen=True, slots=True)
class Ripe:
    """A wake-up by NOTIFY, on its way to the claimer: a task of its queues is ripe at
    ``at`` (monotonic): poll by then."""

    at: float


@dataclass(frozen=True, slots=True)
class Written:
    """Outcomes written, on their way to the claimer: tasks ended, so a queue whose
    concurrency limit held tasks back may have room now; and when the retries among them
    are ripe (``ripe_at``, monotonic), for a poll by then."""

    ripe_at: frozenset[float] = frozenset()


@dataclass(frozen=True, slots=True)
class Beat:
    """``ctx.heartbeat()`` on its way to the lease keeper: extend this lease now, and
    answer whether this worker still holds it."""

    task: Claimed
    answer: Future[bool] = field(default_factory=Future)


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
            queued: list[Done | Unstarted] = []
            while True:
                try:
                    entry = self.outbox.get_nowait()
                except queue.Empty:
                    break
                if entry is not None:
                    queued.append(entry)
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


class Outage:
    """One warning when the database goes away and one when it is back, although the
    claimer, the recorder and the lease keeper each notice on their own connection.

    Each outage ends a period; a failure on a connection opened in an earlier period is
    the tail of an outage already reported.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._down = False
        self.period = 0
        self.reached = time.monotonic()  # the lease keeper's last presence write

    @property
    def down(self) -> bool:
        return self._down

    def lost(self, exc: StoreError, opened_in: int) -> None:
        with self._lock:
            if self._down or opened_in < self.period:
                return
            self._down = True
        log.warning(
            "database unreachable (%s): reconnecting; running tasks go on and their outcomes "
            "are written once it is back",
            exc,
        )

    def back(self) -> int:
        """Called on each new connection; returns the period it was opened in."""
        with self._lock:
            if self._down:
                self._down = False
                self.period += 1
                log.warning("database reachable again")
            return self.period


class Link(Generic[Own]):
    """A part's own database connection, opened when needed: the claimer, the recorder and
    the lease keeper each have one, and one slow statement holds up no other part."""

    def __init__(self, store: Connections[Own], database_url: str, outage: Outage) -> None:
        self._store = store
        self._url = database_url
        self._outage = outage
        self._opened_in = outage.period
        self.conn: Own | None = None
        self.failures = 0  # statements failed in a row, for the backoff

    def open(self) -> Own:
        conn = self.conn
        if conn is None or self._store.is_closed(conn):
            conn = self.conn = self._store.connect(self._url, application_name="txqueue-worker")
            self._opened_in = self._outage.back()
        return conn

    @property
    def down(self) -> bool:
        """The database is known to be out of reach (an outage reported, not yet over)."""
        return self._outage.down

    def worked(self) -> None:
        # Only statements that worked start the backoff over: a server that accepts
        # connections and refuses the work (a standby, read-only) is tried once a second.
        self.failures = 0

    def answered(self) -> None:
        """A statement just came back from the database: it is not hanging."""
        self._outage.reached = time.monotonic()

    def failed(self, exc: StoreError) -> bool:
        """Count a failed statement; True if the connection was lost (reported once per
        outage, however many parts notice), False if the database refused it. A lost
        connection is closed, a read-only one (a standby's) too, to be opened anew."""
        self.failures += 1
        if self._store.is_connection_error(exc):
            self._outage.lost(exc, self._opened_in)
            self.close()
            return True
        return False

    def backoff(self) -> float:
        """Capped at a second: once the server is back, work resumes within a second, and
        a server still down sees one attempt a second from each part."""
        return reconnect_delay(self.failures, first=0.1, cap=1.0)

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()
