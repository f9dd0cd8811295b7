"""The worker's statistics: the names it counts attempts and wake-ups under, and the
tally its threads add to without a lock on the way."""

from __future__ import annotations

import threading

from ..core.task import PENDING


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
    "parked",
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
