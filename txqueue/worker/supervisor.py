"""Supervised parts: a worker's loops restarted when they die, and the process ended when
one cannot be kept alive, so that systemd or Kubernetes restarts it. Never silent. And
their stop, in the worker's order."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Protocol

from ..backoff import reconnect_delay
from ..errors import PermanentError
from ..outbox import wakeup

log = logging.getLogger("txqueue.worker")

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
"""txqueue's own directory: a thread's frames in it say where txqueue waits."""

RESTARTS = 5
"""Unexpected deaths in a row (each less than ``HEALTHY`` seconds after its restart) before
a part is given up on."""
HEALTHY = 60.0


class Supervisor:
    """Runs each part's loop, logging an unexpected exception once with its traceback and
    restarting the loop with backoff. A part that keeps dying is given up on: ``failure``
    names it, and ``on_failure`` (the worker's ``stop(now=True)``) is called once. A part
    refused for good is given up on at once, and ``refusal`` is the error."""

    def __init__(self, on_failure: Callable[[], None]) -> None:
        self.failure: str | None = None
        self.refusal: PermanentError | None = None
        self._restarting: set[str] = set()  # died, waiting for their restart
        self._on_failure = on_failure
        self._lock = threading.Lock()  # for both: each part's thread writes them

    def restarting(self) -> list[str]:
        """The parts that died and wait for their restart."""
        with self._lock:
            return sorted(self._restarting)

    def thread(
        self, name: str, loop: Callable[[], None], *, daemon: bool = False
    ) -> threading.Thread:
        """A started thread running ``loop`` under supervision."""
        thread = threading.Thread(target=self.run, args=(name, loop), name=name, daemon=daemon)
        thread.start()
        return thread

    def run(self, name: str, loop: Callable[[], None]) -> None:
        """Run ``loop`` until it returns, restarting it when it raises."""
        deaths = 0
        while True:
            with self._lock:
                self._restarting.discard(name)
            started = time.monotonic()
            try:
                loop()
                return
            except PermanentError as exc:  # no restart creates the tables or mends a login
                log.error("%s: %s", name, exc)
                self._give_up(str(exc), exc)
                return
            except BaseException:
                deaths = 1 if time.monotonic() - started > HEALTHY else deaths + 1
                if deaths > RESTARTS:
                    log.exception("%s died %d times in a row: stopping the worker", name, deaths)
                    self._give_up(f"{name} died {deaths} times in a row")
                    return
                log.exception("%s died unexpectedly; restarting it", name)
                with self._lock:
                    self._restarting.add(name)
            time.sleep(reconnect_delay(deaths, first=0.2, cap=5.0))

    def _give_up(self, reason: str, refusal: PermanentError | None = None) -> None:
        with self._lock:
            if self.failure is not None:
                return
            self.failure, self.refusal = reason, refusal
        self._on_failure()


def where(thread: threading.Thread) -> str:
    """Where a thread is now: its innermost frame of txqueue's, and the call it waits in."""
    frame = sys._current_frames().get(thread.ident or -1)
    if frame is None:
        return "ending"
    stack = traceback.extract_stack(frame)
    ours = [f for f in stack if f.filename.startswith(PACKAGE)]
    at = ours[-1] if ours else stack[-1]
    place = f"{os.path.basename(at.filename)}:{at.lineno}"
    return f"in {at.name} ({place}), waiting in {stack[-1].name}"


class Part(Protocol):
    """A part of a running worker, as the worker starts and stops it: ``start`` under the
    supervisor, ``stop`` to ask it to end (it returns at once, or once the work the next
    part to stop relies on is done), ``join`` to wait for its threads."""

    name: str

    def start(self, supervisor: Supervisor) -> None: ...
    def stop(self) -> None: ...
    def join(self, timeout: float) -> str | None:
        """Wait up to ``timeout`` for the part to end: None once it has, else where it is
        still running."""
        ...

    def dead(self) -> list[str]: ...


class Loop:
    """A part that is one loop on a supervised thread: ``run`` until ``stop`` ends it
    (a loop that ends on the worker's stopping event needs none), then ``ended``."""

    def __init__(
        self,
        name: str,
        run: Callable[[], None],
        stop: Callable[[], None] = lambda: None,
        *,
        ended: Callable[[], None] = lambda: None,
        daemon: bool = False,
    ) -> None:
        self.name = name
        self._run, self._stop, self._ended, self._daemon = run, stop, ended, daemon
        self._thread: threading.Thread | None = None

    def start(self, supervisor: Supervisor) -> None:
        self._thread = supervisor.thread(self.name, self._run, daemon=self._daemon)

    def stop(self) -> None:
        self._stop()

    def join(self, timeout: float) -> str | None:
        thread = self._thread
        if thread is not None:
            thread.join(timeout)
        self._ended()
        return where(thread) if thread is not None and thread.is_alive() else None

    def dead(self) -> list[str]:
        thread = self._thread
        return [self.name] if thread is not None and not thread.is_alive() else []


def stop_in_order(parts: list[tuple[Part, bool]], until: float) -> list[str]:
    """Stop the parts in order, waiting for each that the next waits for (the others are
    waited for last); each part and where it is, of those still running at ``until`` (a
    monotonic time)."""
    late: list[str] = []

    def join(part: Part) -> None:
        if (at := part.join(timeout=max(until - time.monotonic(), 0.0))) is not None:
            late.append(f"{part.name} {at}")

    for part, awaited in parts:
        part.stop()
        if awaited:
            join(part)
    for part, awaited in parts:
        if not awaited:
            join(part)
    return late


class LocalWakeups:
    """Without a broker: the wake-ups of this process's own enqueues, delivered in process
    to the claimer while the worker runs."""

    name = "txqueue-local-wakeups"

    def __init__(
        self,
        local: wakeup.LocalDelivery,
        queues: list[str],
        deliver: Callable[[wakeup.Wakeup], None],
    ) -> None:
        self._local, self._queues, self._deliver = local, queues, deliver

    def start(self, supervisor: Supervisor) -> None:
        self._local.subscribe(self._queues, self._deliver)

    def stop(self) -> None:
        self._local.unsubscribe(self._deliver)

    def join(self, timeout: float) -> str | None:
        return None

    def dead(self) -> list[str]:
        return []
