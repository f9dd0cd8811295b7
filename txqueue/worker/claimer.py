"""The claimer: wake-ups and polls become claims, claims go to the handler pool.

It runs on the thread that calls ``Worker.run``, on its own database connection, and
has each wake-up it could not claim decided by ``Unclaimed``. When it is idle, the consumer's
thread claims a message's wake-ups itself (``offer``), on the same connection.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Generic

from ..errors import StoreError
from ..outbox.wakeup import Wakeup
from ..store.protocols import Claims, Own
from ..store.records import ClaimDefaults, Claimed, ClaimNext
from .atomic import Ready
from .board import Board
from .handlers import Handlers
from .link import Link
from .messages import Freed, Ripe, Written, drain
from .polls import Polls
from .unclaimed import DUE_MARGIN, Decided, Unclaimed

log = logging.getLogger("txqueue.worker")


class Claimer(Generic[Own]):
    def __init__(
        self,
        store: Claims[Own],
        worker_id: str,
        queues: Sequence[str],
        defaults: ClaimDefaults,
        board: Board,
        link: Link[Own],
        stopping: threading.Event,
        *,
        poll_interval: float,
        commit_wait: float,
    ) -> None:
        self._store = store
        self._link = link
        self._worker_id = worker_id
        self._queues = queues
        self._queue_set = frozenset(queues)
        self._defaults = defaults
        self._board = board
        self._stopping = stopping
        self.poll_interval = poll_interval
        # Wake-ups, free threads (from the handlers), outcomes written (from the recorder),
        # and None: look again now.
        self.inbox: queue.SimpleQueue[Wakeup | Freed | Written | Ripe | None] = queue.SimpleQueue()
        # A concurrency limit (a queue's, or maybe a key's) held tasks back at the last
        # poll: poll again as soon as a task ends.
        self._held_by_running = False
        # A queue's limit held tasks back lately: claim no more than the idle threads can
        # start at once, or a task would wait here after its claim, which the limit counts
        # as its start.
        self._holding = False
        self._polls = Polls(store, worker_id, defaults)
        self.ack: Callable[[list[Wakeup]], None] = lambda wakeups: None
        self.next_poll = 0.0
        self._buffered: list[Wakeup] = []
        self._unclaimed = Unclaimed(store, defaults, board.counts, commit_wait)
        # When tasks that NOTIFY said are due later will be ripe (monotonic): a poll at each,
        # whatever polls come before it.
        self._ripe_at: list[float] = []
        # Held by the thread working with the claimer's state and connection: its own,
        # or the consumer's in ``offer``.
        self._turn = threading.Lock()
        self._handlers: Handlers[Own] | None = None

    def claim_next(self) -> ClaimNext | None:
        """What an outcome's write may claim, in its transaction, of the workflow steps it
        readies (asked on the recorder's thread): as many as a claim would now; none once
        the worker stops."""
        free = self._free()
        if free <= 0 or self._stopping.is_set() or self._handlers is None:
            return None
        return ClaimNext(self._queue_set, free, self._worker_id, self._defaults)

    def readied(self, ready: Ready, claimed: list[Claimed]) -> tuple[list[Claimed], Ready]:
        """The steps an outcome's write readied, once it has committed: those it claimed
        (``claim_next``) go to the handler pool, and those of this worker's queues it did
        not claim are woken here at once, sparing a chain's hop the broker's round trip
        (the broker's copy then finds the step claimed). Returns the claimed it could not
        start (the worker stopped meanwhile: for the recorder to give back), and those to
        wake as any enqueue's."""
        taken = {t.id for t in claimed}
        ready = [(name, row) for name, row in ready if row.id not in taken]
        for name, row in ready:
            if name in self._queue_set:
                self.inbox.put(Wakeup(row.id, row.xid))
        if not claimed:
            return [], ready
        with self._turn:
            if self._handlers is None:
                return claimed, ready
            self._start(self._handlers, claimed)
        return [], ready

    def _free(self) -> int:
        """How many tasks to claim now (not ahead of the idle threads while a limit holds)."""
        return self._board.free(ahead=not self._holding)

    def wake(self) -> None:
        """A thread is free, or the worker is stopping: look again now."""
        self.inbox.put(None)

    def offer(self, wakeups: list[Wakeup]) -> None:
        """A message's wake-ups, on the consumer's thread: claimed here when the claimer is
        idle and has a thread free for each, else handed over. Claimed here, a task starts
        a thread hand-off sooner (a wake-up of an idle thread, a good part of the latency
        from commit to start when tasks arrive one at a time)."""
        if self._turn.acquire(blocking=False):
            try:
                if self._claim_offered(wakeups):
                    return
            finally:
                self._turn.release()
        for wakeup in wakeups:
            self.inbox.put(wakeup)

    def _claim_offered(self, wakeups: list[Wakeup]) -> bool:
        handlers, conn = self._handlers, self._link.conn
        if (
            handlers is None
            or conn is None
            or self._stopping.is_set()
            or self._buffered
            or len(wakeups) > self._free()
        ):
            return False
        waiting, next_poll = len(self._unclaimed.waiting), self.next_poll
        # Anything but a database error is a bug: it ends the consumer's connection, its
        # supervisor logs it and restarts it, and RabbitMQ delivers the messages again.
        try:
            with self._kept(wakeups):
                self._claim_wakeups(conn, handlers, wakeups)
        except StoreError:
            pass  # kept: the claimer meets the error on its next round and reports it
        if self._buffered or len(self._unclaimed.waiting) != waiting or self.next_poll != next_poll:
            self.wake()  # the claimer's wait may be due sooner now
        return True

    def notified(self, queue: str | None, due: float | None = None) -> None:
        """A wake-up by NOTIFY, on the listener's thread: ``queue`` has a task ripe now, or
        at ``due`` (Unix time); None: any queue may (the listener has just begun to
        listen, and missed what committed before). A ripe one is claimed here when the
        claimer is idle, as ``offer`` claims a message's tasks; else the claimer polls."""
        now = time.monotonic()
        if due is not None and due > time.time():
            # A moment past it: the time is rounded to the millisecond, and clocks differ.
            self.inbox.put(Ripe(now + due - time.time() + DUE_MARGIN))
            return
        if queue is not None and self._turn.acquire(blocking=False):
            try:
                if self._poll_offered(queue):
                    return
            finally:
                self._turn.release()
        self.inbox.put(Ripe(now))

    def _poll_offered(self, queue: str) -> bool:
        handlers, conn, free = self._handlers, self._link.conn, self._free()
        if handlers is None or conn is None or self._stopping.is_set() or self._buffered:
            return False
        if free == 0:
            return False  # the claimer polls as soon as a thread is free
        try:
            polled = self._polls.poll(conn, queue, free)
        except StoreError:
            return False  # the claimer meets the error on its next round and reports it
        self._start(handlers, polled.claimed)
        self._board.counts.add("woken", len(polled.claimed))
        if polled.held is not None or len(polled.claimed) == free:
            # A limit to heed, or more than there was room for: the claimer's own poll.
            self.next_poll = time.monotonic()
            self.wake()
        return True

    def close(self) -> None:
        self._link.close()

    def run(self, handlers: Handlers[Own], burst: bool) -> None:
        self._handlers = handlers
        try:
            self._run(handlers, burst)
        finally:
            # Once this returns the worker shuts its handlers down: a claim the consumer's
            # thread has under way ends first, and none starts after.
            with self._turn:
                self._handlers = None

    def _run(self, handlers: Handlers[Own], burst: bool) -> None:
        while not self._stopping.is_set():
            with self._turn:
                try:
                    idle = self._round(self._link.open(), handlers)
                    self._link.worked()
                except StoreError as exc:
                    if not self._link.failed(exc):
                        raise
                    failed = True
                else:
                    failed = False
                    if burst and idle and not self._unclaimed.waiting:
                        break
                    due = self._due()
            if failed:
                self._stopping.wait(self._link.backoff())
                continue
            try:
                item = self.inbox.get(timeout=max(0.0, due - time.monotonic()))
            except queue.Empty:
                continue
            if item is not None:
                with self._turn:
                    self._take(item)

    def _take(self, item: Wakeup | Freed | Written | Ripe) -> None:
        if isinstance(item, Wakeup):
            self._buffered.append(item)
        elif isinstance(item, Written):
            if self._held_by_running:
                self.next_poll = min(self.next_poll, time.monotonic())
            for at in item.ripe_at:  # a retry's row is ripe then: poll by then
                self._take(Ripe(at + DUE_MARGIN))
        elif isinstance(item, Ripe):
            self.next_poll = min(self.next_poll, item.at)
            if item.at > time.monotonic():
                heapq.heappush(self._ripe_at, item.at)

    def _due(self) -> float:
        """When to look again, unless a wake-up comes first."""
        now = time.monotonic()
        free = self._free()
        due = self.next_poll if free > 0 else now + 1.0
        due = min(due, self._unclaimed.due())
        if self._buffered and free > 0:
            due = now
        return due

    def _round(self, conn: Own, handlers: Handlers[Own]) -> bool:
        """One pass: take in wake-ups, claim what fits, poll if idle. True if nothing was found."""
        taken: list[Wakeup | Freed | Written | Ripe] = drain(self.inbox)
        for item in taken:
            self._take(item)
        now = time.monotonic()
        self._buffered += self._unclaimed.ready(now)
        settled = self._board.settled()
        free = self._free()
        if self._buffered:
            batch, overflow = self._buffered[:free], self._buffered[free:]
            self._buffered = []
            if batch:
                with self._kept(batch + overflow):
                    self._claim_wakeups(conn, handlers, batch)
            if overflow:
                # Not held: held, each would wait for the tasks ahead of it, unacked (RabbitMQ
                # takes back a delivery left so past its consumer_timeout) and out of idle
                # workers' reach. One whose row is committed and pending is acked now, and
                # the poll claims that row as soon as a thread is free.
                with self._kept(overflow):
                    self.ack(self._decided(self._unclaimed.pass_on(conn, overflow)))
            return False
        if free > 0 and now >= self.next_poll:
            claimed: list[Claimed] = []
            # A full batch means more may be ripe: poll again as soon as there is room.
            # Else at the poll interval, or when a queue's limit has room again: a rate
            # limit's in so many seconds; a concurrency limit's when a task ends.
            next_poll = now + self.poll_interval
            while self._ripe_at and self._ripe_at[0] <= now:
                heapq.heappop(self._ripe_at)  # this poll is theirs
            if self._ripe_at:
                next_poll = min(next_poll, self._ripe_at[0])
            self._held_by_running = self._holding = False
            for name in self._queues:
                polled = self._polls.poll(conn, name, free - len(claimed))
                claimed += polled.claimed
                if polled.retry_in is not None:
                    next_poll = min(next_poll, now + polled.retry_in)
                self._held_by_running |= polled.held in ("concurrency", "key")
                self._holding |= polled.held not in (None, "paused")
                if len(claimed) == free:
                    next_poll = now
                    break
            self._start(handlers, claimed)
            self.next_poll = next_poll
            return settled and not claimed
        return False

    @contextlib.contextmanager
    def _kept(self, wakeups: list[Wakeup]) -> Iterator[None]:
        """On a database error, keep ``wakeups`` to ask about again once it is back, so each
        is acked in the end."""
        try:
            yield
        except StoreError:
            self._buffered[:0] = wakeups
            raise

    def _claim_wakeups(self, conn: Own, handlers: Handlers[Own], batch: list[Wakeup]) -> None:
        ids = list(dict.fromkeys(w.id for w in batch))
        claimed = self._store.claim_ids(conn, ids, self._worker_id, self._defaults)
        got = {c.id for c in claimed}
        self._start(handlers, claimed)
        # Acked right after the claim commits, never after the task: a delivery left unacked
        # for the length of a long task would trip RabbitMQ's consumer_timeout.
        done = [w for w in batch if w.id in got]
        self._board.counts.add("woken", len(done))
        missed = [w for w in batch if w.id not in got]
        if missed:
            done.extend(self._decided(self._unclaimed.triage(conn, missed, passed_on=False)))
        self.ack(done)

    def _start(self, handlers: Handlers[Own], claimed: list[Claimed]) -> None:
        now, waited = time.monotonic(), self._unclaimed.since
        for task in claimed:
            waited.pop(task.id, None)
            handlers.submit(self._board.start(task, now))

    def _decided(self, decided: Decided) -> list[Wakeup]:
        """Heed what deciding wake-ups told of the polls due; returns those to ack now."""
        self.next_poll = min(self.next_poll, decided.poll_at)
        self._holding |= decided.held
        if decided.ripe_at < math.inf:  # kept apart from next_poll, which a poll may move
            self._take(Ripe(decided.ripe_at))
        return decided.ack
