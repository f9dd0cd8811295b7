"""Parked tasks, on both stores alike: a handler that sleeps or waits for a signal ends its
attempt ``parked`` (an outcome, ``lifecycle.parked``); its task is woken when its time
comes (``wake_parked``, each worker's recovery look and the cleaner's) or when a signal
of its key is sent (``signal``, in the sender's transaction). A store gives the reads and
writes of each (``due_parked``, ``keep_signal``); the moves are ``lifecycle``'s."""

from __future__ import annotations

import uuid

from ..core import lifecycle
from . import follow
from .records import Inserted, Moved
from .transitions import A, C, Transitions


class Parking(Transitions[C, A]):
    """Waking parked tasks: by their time, or by a signal."""

    def due_parked(self, conn: C, limit: int) -> list[uuid.UUID]:
        """Up to ``limit`` parked tasks whose time came, earliest first, locked (those
        another process holds are skipped)."""
        raise NotImplementedError

    def keep_signal(self, conn: A, arg: tuple[str, str | None]) -> list[uuid.UUID]:
        """Keep a signal (key, payload) for a wait to take, after taking the key's lock;
        the tasks parked on its key, locked (``follow.signalling``)."""
        raise NotImplementedError

    def tell_parents(self, conn: C | A, ids: list[uuid.UUID]) -> list[tuple[uuid.UUID, str]]:
        """Keep the end of each child ``ids`` (ended in this transaction) as the signal
        ``task:<id>`` (its state, result and reason), in place of an end no wait took, its
        key's lock taken if it is free; the tasks parked on those keys that no other
        transaction holds, locked, with the key each waits for (``follow._telling``)."""
        raise NotImplementedError

    def _may_have_parked(self, conn: C) -> bool:
        """Whether a parked task may be due: a store whose wake takes a lock that every
        writer waits for (SQLite's) reads first, without it."""
        return True

    def wake_parked(
        self,
        conn: C,
        limit: int,
        readied: list[tuple[str, Inserted]],
        by: str = lifecycle.CLEANER,
    ) -> int:
        """Wake up to ``limit`` parked tasks whose time came: pending, due now, their
        wake-ups added to ``readied`` for the caller to send once this has committed.
        ``by``: who, for their history. How many."""
        ready: list[tuple[str, Inserted]] = []

        def wake() -> int:
            due = self.due_parked(conn, limit)
            applied = self._apply(conn, [lifecycle.woken(i, by) for i in due])
            ready[:] = applied.ready  # kept only once the transaction has committed
            return len(applied)

        if limit <= 0 or not self._may_have_parked(conn):
            return 0
        woken = self._changing(conn, "wake parked tasks", wake)
        readied.extend(ready)
        return woken

    def signal(self, conn: A, key: str, payload: str | None) -> list[Moved]:
        """Send signal ``key`` with ``payload`` (JSON text) in the caller's transaction:
        kept for the next wait of the key to take, and every task parked on it woken (a
        rollback undoes both). The tasks woken, for their wake-ups after the commit."""

        def send() -> list[Moved]:
            return self._drive(conn, follow.signalling(key, payload))

        return self._changing_theirs(conn, "signal", send)
