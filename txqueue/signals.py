"""Two-phase shutdown on SIGTERM/SIGINT: the first stops gracefully, the second at once."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from types import FrameType

log = logging.getLogger("txqueue.signals")

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def graceful(stop: Callable[..., None]) -> Iterator[None]:
    """Route the signals to ``stop()`` then ``stop(now=True)`` while the block runs.

    The handler only writes the signal's number to a pipe, and a thread of its own calls
    ``stop``. Python runs a handler on the main thread between two bytecodes, wherever it
    is: one that took a lock (an Event's, a logging handler's) would wait forever for a
    lock the main thread held at that moment, as a cleaner did on SIGTERM inside
    ``Event.wait``.
    """
    readable, writable = os.pipe()
    os.set_blocking(writable, False)

    def handle(signum: int, frame: FrameType | None) -> None:
        with suppress(BlockingIOError):  # a full pipe has told the relay enough already
            os.write(writable, bytes([signum]))

    def relay() -> None:
        received = 0
        while data := os.read(readable, 16):
            for signum in data:
                received += 1
                name = signal.Signals(signum).name
                if received == 1:
                    log.warning("%s: finishing the work in hand, no more (again to stop now)", name)
                    stop()
                else:
                    log.warning("%s again: stopping now", name)
                    stop(now=True)

    thread = threading.Thread(target=relay, name="txqueue-signals", daemon=True)
    thread.start()
    previous = {sig: signal.signal(sig, handle) for sig in _SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(writable)  # the relay reads the end of the pipe and returns
        thread.join()
        os.close(readable)
