"""The wake-ups the claimer could not claim, or had no thread free to claim: why not, in
one round trip, and what becomes of each (``triage``); those whose transaction has not
committed yet are kept to ask about again, with a growing backoff, until ``commit_wait``
is up."""

from __future__ import annotations

import heapq
import itertools
import logging
import math
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Generic

from ..outbox.wakeup import Wakeup
from ..store.protocols import Claims, Own
from ..store.records import ClaimDefaults
from .once import Once
from .stats import Tally
from .triage import Verdict, triage

log = logging.getLogger("txqueue.worker")

_COMMIT_RETRY_FIRST = 0.002
DUE_MARGIN = 0.005
"""Seconds past a task's due time (said by NOTIFY, or read from its row) that the claimer
polls for it: times are rounded, and clocks differ."""
_COMMIT_RETRY_MAX = 0.25


@dataclass(order=True)
class _Waiting:
    """A wake-up whose task is not visible yet: its transaction has not committed."""

    due: float
    seq: int
    wakeup: Wakeup = field(compare=False)


@dataclass(slots=True)
class Decided:
    """Wake-ups decided, for the claimer: those to ack now, and what they tell its polls."""

    ack: list[Wakeup]
    poll_at: float = math.inf  # a task left to the poll (passed on, held back): poll by then
    ripe_at: float = math.inf  # the first task due later is ripe then: a poll by then
    held: bool = False  # a limit held a task back: claim no further ahead than the threads


class Unclaimed(Generic[Own]):
    """Decides the wake-ups the claimer hands it, on the claimer's connection and turn."""

    def __init__(
        self, store: Claims[Own], defaults: ClaimDefaults, counts: Tally, commit_wait: float
    ) -> None:
        self._store = store
        self._defaults = defaults
        self._known = frozenset(defaults.names)
        self._counts = counts
        self.commit_wait = commit_wait
        self.waiting: list[_Waiting] = []  # a heap, soonest first
        # By task id: since when its wake-up waits for the commit, and its next delay. The
        # claimer drops a task's entry when it claims the task.
        self.since: dict[uuid.UUID, tuple[float, float]] = {}
        self._seq = itertools.count()
        self._skipped = Once()

    def due(self) -> float:
        """When the first wake-up waiting for its commit is asked about again (monotonic)."""
        return self.waiting[0].due if self.waiting else math.inf

    def ready(self, now: float) -> list[Wakeup]:
        """The waiting wake-ups due by ``now``, to claim again."""
        ready = []
        while self.waiting and self.waiting[0].due <= now:
            ready.append(heapq.heappop(self.waiting).wakeup)
        return ready

    def pass_on(self, conn: Own, overflow: list[Wakeup]) -> Decided:
        """Decide wake-ups no thread is free to claim.

        Those whose message says its tasks were due when enqueued, of a transaction now
        committed, need no row read: every row it wrote is visible to the poll, which is
        due now. A backlog's messages name a thousand tasks each, which the rows' way
        costs about 10 µs apiece. The others (a task due later, an open transaction, no
        transaction id, a message that does not say) are triaged by their rows.
        """
        xids = {w.xid for w in overflow if w.ripe and w.xid is not None}
        committed = self._store.committed(conn, sorted(xids)) if xids else set()
        passed = [w for w in overflow if w.ripe and w.xid in committed]
        rest = [w for w in overflow if not (w.ripe and w.xid in committed)]
        decided = self.triage(conn, rest, passed_on=True) if rest else Decided([])
        if passed:
            decided.poll_at = min(decided.poll_at, time.monotonic())
            self._counts.add(Verdict.PASS_ON.value, len(passed))
            for w in passed:
                self.since.pop(w.id, None)
        decided.ack[:0] = passed
        return decided

    def triage(self, conn: Own, missed: list[Wakeup], *, passed_on: bool) -> Decided:
        """Ask why each wake-up was not claimed (or, ``passed_on``, could not be: no free
        thread) and decide it."""
        why = self._store.why_unclaimed(conn, [(w.id, w.xid) for w in missed])
        now = time.monotonic()
        decided = Decided([])
        for wakeup in missed:
            w = why[wakeup.id]
            verdict = triage(
                w,
                has_xid=wakeup.xid is not None,
                passed_on=passed_on,
                known=self._known,
                keyed=self._defaults.keyed,
            )
            if verdict is Verdict.WAIT:
                if self._wait_for_commit(wakeup, now):
                    continue
                self._gave_up(wakeup)
            else:
                self._counts.add(verdict.value)
            if verdict in (Verdict.PASS_ON, Verdict.HELD):
                decided.poll_at = now
                decided.held |= verdict is Verdict.HELD
            elif verdict is Verdict.NO_HANDLER and w.name is not None:
                self._no_handler(w.name)
            elif verdict is Verdict.NOT_RIPE and w.run_at is not None:
                # Of the tasks due later, the first: the poll then finds those after it.
                ripe_in = (w.run_at - datetime.now(UTC)).total_seconds()
                decided.ripe_at = min(decided.ripe_at, now + max(0.0, ripe_in) + DUE_MARGIN)
            log.debug("task %s: %s", wakeup.id, verdict.value)
            self.since.pop(wakeup.id, None)
            decided.ack.append(wakeup)
        return decided

    def _gave_up(self, wakeup: Wakeup) -> None:
        self._counts.add("gave_up_waiting")
        log.info(
            "task %s: not claimable after %.0fs (its transaction still open, or its "
            "row locked); leaving it to the poll and the cleaner",
            wakeup.id,
            self.commit_wait,
        )

    def _no_handler(self, name: str) -> None:
        """Log once per name a task this worker leaves to a worker that has its handler."""
        if self._skipped.first(name):
            log.warning(
                "tasks named %r have no handler in this worker's registry: left pending "
                "(no attempt spent) for a worker that has one; `txqueue status` lists them",
                name,
            )

    def _wait_for_commit(self, wakeup: Wakeup, now: float) -> bool:
        previous = self.since.pop(wakeup.id, None)
        if previous is None:
            self._counts.add("waited_for_commit")
        since, delay = previous if previous else (now, _COMMIT_RETRY_FIRST)
        if now - since > self.commit_wait:
            return False
        self.since[wakeup.id] = (since, min(delay * 2, _COMMIT_RETRY_MAX))
        heapq.heappush(self.waiting, _Waiting(now + delay, next(self._seq), wakeup))
        return True
