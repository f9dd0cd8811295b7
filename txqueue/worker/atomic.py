"""Atomic tasks: the handler's database work and the task's success in one transaction.

Each handler thread opens a connection of its own for them at its first atomic task, so
the worker holds at most one per thread: a pool sized to its concurrency. The transaction
begins before the handler runs and the success is written in it, fenced as every outcome
is, so a worker that lost the lease (the task recovered and run elsewhere) rolls the
work back with it. The steps of the attempts a thread runs are kept on the same
connection (``journal``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic

from ..store.protocols import C, Claims, Own
from ..store.records import Claimed, Inserted, Outcome
from ..store.roles import Recording
from ..tasks.context import DriverConnection
from .journal import StoreJournal, Wake
from .link import Link, Outage

log = logging.getLogger("txqueue.worker")


class FencedOut(Exception):
    """The success could not be written: this worker no longer holds the task."""


Ready = list[tuple[str, Inserted]]
"""The workflow steps a write readied, (queue, row) each, to wake once it has committed."""


def committed(
    store: Claims[C],
    conn: C,
    driver: DriverConnection,
    attempt: Callable[[DriverConnection], Outcome],
) -> tuple[Outcome, Ready]:
    """Call ``attempt(driver)`` in a transaction on ``conn`` (``driver`` is the connection
    under it that the handler is given), write the success it returns, commit both and
    return it, with the steps it readied. What ``attempt`` raises is raised after the
    rollback; FencedOut if the lease was lost (rolled back too)."""
    with store.atomic(conn):
        outcome = attempt(driver)
        written = store.record_atomic(conn, outcome)
        if outcome.id not in written:
            raise FencedOut
    return outcome, written.ready


class Atomic(Generic[Own]):
    def __init__(self, store: Recording[Own], database_url: str, outage: Outage, size: int) -> None:
        self._store = store
        self._links = [Link(store, database_url, outage) for _ in range(size)]

    def run(
        self, thread: int, attempt: Callable[[DriverConnection], Outcome]
    ) -> tuple[Outcome, Ready]:
        """``committed`` on ``thread``'s connection. StoreError if the database failed,
        when the commit may or may not have happened: the outcome the caller then hands
        the recorder is fenced out if it did."""
        return self._links[thread].use(lambda conn: committed(self._store, conn, conn, attempt))

    def journal(self, thread: int, task: Claimed, worker_id: str, wake: Wake) -> StoreJournal[Own]:
        """Where ``task``'s attempt on ``thread`` keeps its steps: that thread's connection.
        ``wake``: sends the wake-ups of the children its steps start."""
        return StoreJournal(self._store, self._links[thread].use, task, worker_id, wake=wake)

    def close(self) -> None:
        for link in self._links:
            try:
                link.close()
            except Exception as exc:  # a connection already broken: nothing left to close
                log.debug("closing an atomic task's connection: %s", exc)
