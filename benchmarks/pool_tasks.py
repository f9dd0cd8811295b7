"""The tasks of benchmarks/pool.py, run by a process pool's children."""

from __future__ import annotations

import os
import time

import txqueue

registry = txqueue.Registry()
_kept: list[bytes] = []


@registry.task("spin", queue="bench", time_limit=2, max_attempts=2, backoff=lambda _: 1.0)
def spin() -> None:
    """Pure Python that never ends."""
    while True:
        pass


@registry.task("stamp", queue="bench")
def stamp() -> float:
    """The time it started, after a short nap (a task of its own, beside the looping one)."""
    started = time.time()
    time.sleep(0.01)
    return started


@registry.task("leak", queue="bench")
def leak() -> int:
    """Keeps one more MiB (touched: resident), like a library that leaks; its process."""
    _kept.append(os.urandom(2**20))
    return os.getpid()
