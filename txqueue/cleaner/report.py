"""What one pass of the cleaner did (``CleanupReport``): the counts that ``run_once``
returns, ``txqueue cleaner --once`` prints, and the loop logs."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class CleanupReport:
    """What one ``run_once`` did. ``problems`` lists what it could not do.

    Example:

    ```python
    report = txqueue.Cleaner(database_url=url, amqp_url=None).run_once()
    print(report.retried, report.renotified, report.pruned, report.seconds, report.problems)
    ```
    """

    renotified: int = 0  # tasks woken again (by NOTIFY: queues, one notification each)
    retried: int = 0  # lease expired: back to pending
    failed: int = 0  # lease expired: abandoned, compensated, or out of attempts
    compensations: int = 0  # compensating tasks enqueued
    cancelled: int = 0  # lease expired on a task whose cancellation was requested
    steps_released: int = 0  # workflow steps left waiting on ended parents, moved on
    woken: int = 0  # parked tasks whose time came: a sleep ended, a wait timed out
    pruned: int = 0
    prune_deferred: bool = False  # the vacuum horizon was held back past its threshold
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "seconds": round(self.seconds, 3), "ok": self.ok}

    def summary(self) -> str:
        recovered = self.retried + self.failed + self.cancelled
        line = (
            f"re-notified {self.renotified}, recovered {recovered} "
            f"(retried {self.retried}, failed {self.failed}, cancelled {self.cancelled}, "
            f"compensations {self.compensations}), pruned {self.pruned}"
            + (" (deferred: the vacuum horizon is held back)" if self.prune_deferred else "")
            + (f", steps released {self.steps_released}" if self.steps_released else "")
            + (f", woken {self.woken}" if self.woken else "")
            + f" in {self.seconds:.2f}s"
        )
        return line + "".join(f"; {p}" for p in self.problems)
