"""The listener: wake-ups by PostgreSQL's NOTIFY (``notes.note``), heard on a
connection of its own and handed to the claimer.

They are sent by an enqueue without RabbitMQ, in the enqueuing transaction, and so reach
the listener only once it has committed. A wake-up is a hint: one sent while the listener
was away (a restart, a failover, a cut) is made up for by a poll of every queue as soon as
it listens again, and by the claimer's own poll meanwhile.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import StoreError
from ..outbox import notes
from ..store.protocols import Waits
from .claimer import Claimer
from .link import Link

log = logging.getLogger("txqueue.worker")

WAIT = 0.2
"""Seconds each wait for wake-ups lasts at most: how soon a stopping worker's listener
sees it is stopping (psycopg's wait for a notification cannot be woken from another
thread). A wait that times out reads the socket and sends nothing to the server."""


class Listener:
    def __init__(
        self,
        store: Waits[Any],
        link: Link[Any],
        queues: Sequence[str],
        claimer: Claimer[Any],
        stopping: threading.Event,
    ) -> None:
        self._store = store
        self._link = link
        self._queues = frozenset(queues)
        self._claimer = claimer
        self._stopping = stopping
        self._receive: Callable[[float], list[str]] | None = None
        self.malformed = 0

    def run(self) -> None:
        try:
            self._link.serve(self._listen, self._stopping)
        finally:
            self._receive = None

    def _listen(self) -> float:
        """Hand on the wake-ups heard within ``WAIT``; listen again at once."""
        try:
            notes = self._listening()(WAIT)
        except StoreError:
            self._receive = None  # the next connection listens anew
            raise
        for note in notes:
            self._heard(note)
        return 0.0

    def _listening(self) -> Callable[[float], list[str]]:
        receive = self._receive
        if receive is None:
            receive = self._store.listen_wakeups(self._link.open())
            assert receive is not None, "a store that sends no wake-ups has no listener"
            self._receive = receive
            self._claimer.notified(None)  # what committed while none listened
        return receive

    def _heard(self, note: str) -> None:
        try:
            queue, due = notes.read_note(note)
        except ValueError as exc:
            self.malformed += 1
            log.warning("%s (on channel txqueue_wakeup): ignored", exc)
            return
        if queue in self._queues:
            self._claimer.notified(queue, due)


def woken_by(amqp_url: str | None, listen_url: str | None, notifies: bool, poll: float) -> str:
    """How a worker learns of new tasks, as its start line says."""
    heard = {
        (True, True): "woken by RabbitMQ, and by PostgreSQL NOTIFY",
        (True, False): "woken by RabbitMQ",
        (False, True): "woken by PostgreSQL NOTIFY",
    }.get((amqp_url is not None, listen_url is not None))
    if heard is not None:
        return f"{heard} (a poll every {poll}s besides)"
    if notifies:
        return (
            f"polling every {poll}s: its database URL goes through a transaction pooler, "
            "which cannot carry NOTIFY wake-ups (give a direct URL to listen on as "
            "listen_url, or TXQUEUE_LISTEN_URL, to be woken at once)"
        )
    return f"polling every {poll}s, woken at once by this process's enqueues"
