"""Two-phase shutdown on SIGTERM/SIGINT: the first stops gracefully, the second at once."""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

log = logging.getLogger("txqueue.signals")

_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def graceful(stop: Callable[..., None]) -> Iterator[None]:
    """Route the signals to ``stop()`` then ``stop(now=True)`` while the block runs."""
    received = 0

    def handle(signum: int, frame: FrameType | None) -> None:
        nonlocal received
        received += 1
        name = signal.Signals(signum).name
        if received == 1:
            log.warning("%s: finishing the work in hand, no more (again to stop now)", name)
            stop()
        else:
            log.warning("%s again: stopping now", name)
            stop(now=True)

    previous = {sig: signal.signal(sig, handle) for sig in _SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
