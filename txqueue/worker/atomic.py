"""Atomic tasks: the handler's database work and the task's success in one transaction.

Each handler thread opens a connection of its own for them at its first atomic task, so
the worker holds at most one per thread: a pool sized to its concurrency. The transaction
begins before the handler runs and the success is written in it, fenced as every outcome
is, so a worker that lost the lease (the task recovered and run elsewhere) rolls the
work back with it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Generic

from ..errors import StoreError
from ..store.protocols import Own, Recording
from ..store.records import Outcome
from .board import Link, Outage

log = logging.getLogger("txqueue.worker")


class FencedOut(Exception):
    """The success could not be written: this worker no longer holds the task."""


class Atomic(Generic[Own]):
    def __init__(self, store: Recording[Own], database_url: str, outage: Outage, size: int) -> None:
        self._store = store
        self._links = [Link(store, database_url, outage) for _ in range(size)]

    def run(self, thread: int, attempt: Callable[[Own], Outcome]) -> None:
        """Call ``attempt(conn)`` in a transaction on ``thread``'s connection, write the
        success it returns, and commit both. What ``attempt`` raises is raised after the
        rollback; FencedOut if the lease was lost (rolled back too); StoreError if the
        database failed, when the commit may or may not have happened: the outcome the
        caller then hands the recorder is fenced out if it did."""
        link = self._links[thread]
        try:
            conn = link.open()
            with self._store.atomic(conn):
                if not self._store.record_atomic(conn, attempt(conn)):
                    raise FencedOut
            link.worked()
        except StoreError as exc:
            link.failed(exc)  # closes a lost connection
            raise

    def close(self) -> None:
        for link in self._links:
            try:
                link.close()
            except Exception as exc:  # a connection already broken: nothing left to close
                log.debug("closing an atomic task's connection: %s", exc)
