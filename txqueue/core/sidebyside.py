"""Several databases at once: reads where one may not answer, and runs where one may
fail."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future, wait
from typing import Generic, TypeVar

T = TypeVar("T")


class SideBySide(Generic[T]):
    """Reads of named databases, each on a thread of its own, at most one in flight per
    database however many callers ask: one that does not answer within the caller's wait
    (a partition leaves a connection hanging until TCP gives up) is a TimeoutError for
    that caller, and the next one waits on the same read instead of starting another."""

    def __init__(self, thread_name_prefix: str) -> None:
        self._prefix = thread_name_prefix
        self._reading: dict[str, Future[T]] = {}
        self._lock = threading.Lock()

    def _start(self, name: str, read: Callable[[], T]) -> Future[T]:
        # A daemon thread per read rather than a pool's: a read hanging on a partition
        # must not hold up the process's exit.
        future: Future[T] = Future()

        def run() -> None:
            future.set_running_or_notify_cancel()
            try:
                future.set_result(read())
            except BaseException as exc:  # handed to the reader
                future.set_exception(exc)

        threading.Thread(target=run, name=f"{self._prefix}-{name}", daemon=True).start()
        return future

    def read(self, reads: Mapping[str, Callable[[], T]], within: float) -> dict[str, T | Exception]:
        """Each database's answer to its read, or the exception it raised."""
        with self._lock:
            for name, read in reads.items():
                if name not in self._reading or self._reading[name].done():
                    self._reading[name] = self._start(name, read)
            reading = {name: self._reading[name] for name in reads}
        wait(reading.values(), timeout=within)
        found: dict[str, T | Exception] = {}
        for name, future in reading.items():
            if not future.done():
                found[name] = TimeoutError(f"no answer within {within:g} s")
                continue
            exc = future.exception()
            if exc is not None and not isinstance(exc, Exception):
                raise exc
            found[name] = future.result() if exc is None else exc
        return found


def run_each(
    runs: Mapping[str, Callable[[], None]],
    failed: Callable[[str, BaseException], None],
    thread_name_prefix: str,
) -> None:
    """Each of ``runs`` on a thread of its own until all return. Each that raises has
    ``failed(name, exc)`` called (which stops the others, as a signal would), and the
    first exception is raised here once every run has ended."""
    failures: list[BaseException] = []

    def running(name: str, run: Callable[[], None]) -> None:
        try:
            run()
        except BaseException as exc:  # raised to the caller once all have ended
            failures.append(exc)
            failed(name, exc)

    threads = [
        threading.Thread(target=running, args=(n, r), name=f"{thread_name_prefix}-{n}")
        for n, r in runs.items()
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        raise failures[0]
