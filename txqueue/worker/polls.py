"""A queue's poll, of the kind the queue takes: the claimer's, and ``txqueue.testing``'s
inline runner's, so that both claim a fair-share queue as its settings say."""

from __future__ import annotations

from typing import Generic, TypeVar

from ..store.protocols import Claims
from ..store.records import ClaimDefaults, Poll, Polled

C = TypeVar("C")


class Polls(Generic[C]):
    """Polls queues for one claimer, remembering between polls which queues are claimed
    fairly (and where each goes on in its round of keys) and which had tasks of keys at
    their limit."""

    def __init__(self, store: Claims[C], worker_id: str, defaults: ClaimDefaults) -> None:
        self._store = store
        self._worker_id = worker_id
        self._defaults = defaults
        # Fair-share queues, each with where its next poll goes on in its round of keys.
        self._rounds: dict[str, str] = {}
        # Queues whose last poll found tasks of keys at their limit: the next looks past
        # them (three times as many candidates as it has room for), not every poll.
        self._past_keys: set[str] = set()

    def poll(self, conn: C, queue: str, room: int) -> Polled:
        """Claim up to ``room`` of ``queue``'s ripe tasks. A poll of the kind the queue does
        not take claims nothing and says so; then the right one follows at once."""
        asked = Poll(queue, room, self._worker_id, self._defaults)
        for _ in range(2):
            if queue in self._rounds:
                polled = self._store.claim_fair(conn, asked, self._rounds[queue])
                if polled.held == "plain":
                    del self._rounds[queue]
                    continue
                self._rounds[queue] = polled.after
                return polled
            lookahead = 3 * room if queue in self._past_keys else 0
            polled = self._store.claim_ripe(conn, asked, lookahead)
            if polled.held == "fair":
                self._rounds[queue] = ""
                continue
            if polled.held == "key":
                self._past_keys.add(queue)
            else:
                self._past_keys.discard(queue)
            return polled
        return polled  # changed twice in between: the next poll asks again
