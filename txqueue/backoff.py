"""The one backoff formula of txqueue's reconnecting parts (database, broker, supervisor)."""

from __future__ import annotations

import random


def reconnect_delay(failures: int, *, first: float, cap: float) -> float:
    """The wait after ``failures`` failures in a row: ``first``, doubled per failure up to
    ``cap``, then jittered down by up to half so that parts failing together (every worker
    of a deploy when the database restarts) do not come back in step."""
    return float(min(cap, first * 2 ** min(max(failures - 1, 0), 30)) * random.uniform(0.5, 1.0))
