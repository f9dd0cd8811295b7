"""Running a worker (or a fleet) on threads of its own beside an asyncio application."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import AsyncIterator, Callable

log = logging.getLogger("txqueue.worker")


@contextlib.asynccontextmanager
async def beside(
    run: Callable[[], None], stop: Callable[[], None], who: str
) -> AsyncIterator[None]:
    """``run()`` on a thread while the block runs; at its end ``stop()``, and the thread
    waited for off the loop. What ``run`` raised is raised there."""
    failure: list[BaseException] = []

    def running() -> None:
        try:
            run()
        except BaseException as exc:  # raised to the application at the block's end
            log.error("%s stopped under a running application: %s", who, exc)
            failure.append(exc)

    thread = threading.Thread(target=running, name="txqueue-worker", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop()
        await asyncio.to_thread(thread.join)
    if failure:
        raise failure[0]
