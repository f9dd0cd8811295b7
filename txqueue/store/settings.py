"""A queue's flow control as the store keeps it (``QueueSettings``), and a change to it
(``QueueChange``): what ``limit_queue``, ``pause_queue`` and the claims' limits read and
write."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from ..core.limits import format_rate


class QueueSettings(NamedTuple):
    """A queue's flow control: whether it is paused, at most ``rate_limit`` task starts per
    ``rate_period`` seconds, at most ``concurrency`` tasks running at once (None: no limit),
    and whether its tasks' keys take turns (``fair_share``).

    Example:

    ```python
    settings = txqueue.limit_queue(conn, "emails", rate_limit="600/min", concurrency=5)
    print(settings.paused, settings.rate_limit, settings.concurrency, settings.fair_share)
    ```
    """

    queue: str
    paused: bool = False
    rate_limit: int | None = None
    rate_period: float | None = None
    concurrency: int | None = None
    fair_share: bool = False

    @classmethod
    def of_row(cls, row: Sequence[Any]) -> QueueSettings:
        """From a row of (queue, paused, rate_limit, rate_period, concurrency, fair_share),
        as either store returns it (SQLite's booleans are 0 or 1)."""
        queue, paused, rate_limit, rate_period, concurrency, fair_share = row
        period = None if rate_period is None else float(rate_period)
        return cls(queue, bool(paused), rate_limit, period, concurrency, bool(fair_share))

    @property
    def free(self) -> bool:
        """Neither paused, nor limited, nor shared fairly: the queue as if it had no
        settings."""
        return (
            not self.paused
            and self.rate_limit is None
            and self.concurrency is None
            and not self.fair_share
        )

    @property
    def rate(self) -> str | None:
        """The rate limit as ``limit_queue`` takes it: ``50/s``, ``600/min``."""
        if self.rate_limit is None or self.rate_period is None:
            return None
        return format_rate(self.rate_limit, self.rate_period)

    def describe(self) -> str:
        """``paused, 50/s, 5 at once``; ``running freely`` for a queue with no settings."""
        parts = ["paused"] if self.paused else []
        parts += [self.rate] if self.rate else []
        parts += [f"{self.concurrency} at once"] if self.concurrency is not None else []
        parts += ["fair share"] if self.fair_share else []
        return ", ".join(parts) or "running freely"

    def as_dict(self) -> dict[str, Any]:
        """As ``--json`` prints it: the rate as written."""
        return {
            "queue": self.queue,
            "paused": self.paused,
            "rate_limit": self.rate,
            "concurrency": self.concurrency,
            "fair_share": self.fair_share,
        }


class QueueChange(NamedTuple):
    """A change of a queue's settings: those named in ``changing`` (``paused``, ``rate``,
    ``concurrency``, ``fair_share``) take the values here; the others stay as they are."""

    changing: frozenset[str]
    paused: bool | None = None
    rate_limit: int | None = None
    rate_period: float | None = None
    concurrency: int | None = None
    fair_share: bool | None = None
