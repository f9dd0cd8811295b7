"""The benchmark's task module: a handler that does nothing, one that notes when it
started (its result), for commit-to-start latency, and one that sleeps, for ``wait``."""

from __future__ import annotations

import time
from typing import Any

import txqueue

registry = txqueue.Registry()


@registry.task("noop", queue="bench")
def noop(payload: Any) -> None:
    return None


@registry.task("stamp", queue="bench")
def stamp(payload: Any) -> float:
    return time.time()


@registry.task("nap", queue="bench")
def nap(payload: Any) -> None:
    time.sleep(payload["seconds"])
