"""The benchmark's task module: a handler that does nothing, and one that notes when it
started (its result), for commit-to-start latency."""

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
