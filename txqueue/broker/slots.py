"""Which publisher an owner uses: a ``PublisherSlot`` per owner (``SHARED``, the
process-wide one, and one per ``txqueue.App``) holds its current ``Publisher`` and
replaces it after a fork, a death, or a change of URL or queue type; ``flush`` waits on
every slot of the process."""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref

from .. import config
from .publisher import Publisher

log = logging.getLogger("txqueue.broker")


class PublisherSlot:
    """Where one owner keeps its publisher: a new one after a fork, after the last one died
    (carrying over what it had not sent), or when the owner's URL or queue type changed."""

    def __init__(self) -> None:
        self._current: Publisher | None = None
        self._lock = threading.Lock()
        _slots.add(self)

    def get(self, url: str, kind: str) -> Publisher:
        current = self._current
        if current is not None and current.alive and current.serves(url, kind):
            return current
        with self._lock:
            current = self._current
            if current is None or not current.serves(url, kind):
                if current is not None and current.pid == os.getpid():
                    current.close(timeout=0.5)
                current = Publisher(url, queue_type=kind)
            elif not current.alive:
                log.error("the wake-up publisher had died: replaced, its unsent wake-ups kept")
                current = Publisher(url, queue_type=kind, carry=current.unsent())
            self._current = current
            return current

    def flush(self, timeout: float = 2.0) -> bool:
        """Wait for this slot's wake-ups to be confirmed; True at once if it has none here."""
        current = self._current
        if current is None or current.pid != os.getpid():
            return True
        return current.flush(timeout)

    def close(self, timeout: float = 2.0) -> None:
        """Flush and stop this slot's publisher; a later ``get`` starts a new one."""
        with self._lock:
            current, self._current = self._current, None
        if current is not None and current.pid == os.getpid():
            current.close(timeout)


_slots: weakref.WeakSet[PublisherSlot] = weakref.WeakSet()
SHARED = PublisherSlot()
"""The process-wide publisher's slot."""


def publisher(url: str, queue_type: str | None = None) -> Publisher:
    """The process-wide publisher for ``url`` and ``queue_type`` (None:
    TXQUEUE_AMQP_QUEUE_TYPE), which the module-level ``enqueue`` and the workers and cleaners
    built directly share (a new one after a fork, or a change of URL or of queue type)."""
    return SHARED.get(url, config.queue_type(queue_type))


def flush(timeout: float = 2.0) -> bool:
    """Wait for this process's wake-ups to be confirmed (before a short-lived process exits):
    the process-wide publisher's and every ``txqueue.App``'s.

    Example:

    ```python
    send_receipt.enqueue(conn, order=42)
    conn.commit()
    txqueue.flush(timeout=5)  # a short-lived process: its wake-ups confirmed before it exits
    ```
    """
    deadline = time.monotonic() + timeout
    flushed = True
    for slot in list(_slots):
        flushed = slot.flush(max(0.0, deadline - time.monotonic())) and flushed
    return flushed
