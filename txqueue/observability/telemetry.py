"""What a worker tells the outside about itself: the hooks its parts call as tasks start
and finish (silent unless metrics are on), and the snapshot its health and gauges are read
from. Nothing here depends on a metrics library."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..store.records import Claimed

LEASE_LOST = "lease_lost"
"""The outcome of an attempt whose lease this worker lost before its outcome was written:
another worker may be running the task again."""


class Telemetry:
    """Called by the worker's parts; this one does nothing (metrics off)."""

    def started(self, task: Claimed, waited: float) -> None:
        """A handler starts ``task``, ``waited`` seconds after the task became ripe."""

    def ran(self, task: Claimed, seconds: float) -> None:
        """A handler ran ``task`` for ``seconds``."""

    def finished(self, task: Claimed, outcome: str) -> None:
        """An attempt ended: succeeded, failed, retried, cancelled, released, lease_lost or
        unrecorded."""


@dataclass(frozen=True)
class WorkerState:
    """A worker at one moment, for its gauges and ``/healthz``."""

    threads: int
    running: Counter[str]  # tasks held, by queue
    stats: dict[str, int]
    database_up: bool
    database_seen: float  # seconds since a statement last succeeded
    database_outages: int
    broker_up: bool | None  # None: no broker configured
    broker_outages: int
    vacuum_horizon: float = 0.0  # seconds it has been held back (0: nothing holds it)
    dead: list[str] = field(default_factory=list)  # parts not running

    def unhealthy(self, stale: float) -> str | None:
        """Why the worker is not healthy, or None: a part is not running, or the database
        is unreachable or was not reached for ``stale`` seconds."""
        if self.dead:
            return f"not running: {', '.join(self.dead)}"
        if not self.database_up:
            return "the database is unreachable"
        if self.database_seen > stale:
            return f"the database was last reached {self.database_seen:.0f}s ago"
        return None
