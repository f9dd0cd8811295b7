from __future__ import annotations

import os
import signal
import threading
import time

from txqueue.signals import graceful


def test_a_signal_that_lands_while_the_main_thread_holds_the_stop_lock_still_stops() -> None:
    """The handler runs between two bytecodes of the main thread, here while it holds the
    lock ``stop`` needs (as ``Event.wait`` holds its condition's lock for a few bytecodes):
    ``stop`` runs once the main thread lets go, instead of waiting on it forever."""
    lock = threading.Lock()
    calls: list[tuple[bool, bool]] = []
    stopped = threading.Event()

    def stop(*, now: bool = False) -> None:
        got = lock.acquire(timeout=5)
        if got:
            lock.release()
        calls.append((now, got))
        stopped.set()

    with graceful(stop):
        with lock:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)  # Python runs the handler here, lock held
        assert stopped.wait(10)
    assert calls == [(False, True)]


def test_the_second_signal_stops_now_and_the_handlers_are_put_back() -> None:
    calls: list[bool] = []
    two = threading.Event()

    def stop(*, now: bool = False) -> None:
        calls.append(now)
        if len(calls) == 3:
            two.set()

    before = signal.getsignal(signal.SIGTERM)
    with graceful(stop):
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGTERM):
            os.kill(os.getpid(), sig)
        assert two.wait(10)
    assert calls == [False, True, True]
    assert signal.getsignal(signal.SIGTERM) is before
