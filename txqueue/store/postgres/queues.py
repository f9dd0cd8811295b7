"""A queue's flow control: its settings, read and changed on the caller's connection."""

from __future__ import annotations

import uuid
from typing import Any

from ..records import Moved, QueueSettings
from .connection import QUERIES, Caller, errors


def _settings(row: Any) -> QueueSettings:
    queue, paused, rate_limit, rate_period, concurrency = row
    return QueueSettings(
        queue,
        bool(paused),
        rate_limit,
        None if rate_period is None else float(rate_period),
        concurrency,
    )


class Queues:
    """A queue's settings: locked and saved in the caller's transaction, and read."""

    def lock_queue(self, conn: Caller, queue: str) -> QueueSettings:
        """The queue's settings, locked until the caller's transaction ends."""
        with errors("queue settings"):
            conn.execute(QUERIES["make_queue"], {"queue": queue})
            row = conn.execute(QUERIES["queue_for_update"], {"queue": queue}).fetchone()
        assert row is not None  # made just above, and a row is only deleted under this lock
        return _settings(row)

    def save_queue(self, conn: Caller, settings: QueueSettings) -> None:
        """Write a queue's settings (locked by ``lock_queue``); a free queue's row goes."""
        with errors("queue settings"):
            if settings.free:
                conn.execute(QUERIES["forget_queue"], {"queue": settings.queue})
            else:
                conn.execute(QUERIES["save_queue"], settings._asdict())

    def queue_settings(self, conn: Caller) -> list[QueueSettings]:
        """The settings of every queue that is paused or limited, by name."""
        with errors("queue settings"):
            rows = conn.execute(QUERIES["queue_settings"]).fetchall()
        return [s for s in map(_settings, rows) if not s.free]

    def ripe_tasks(self, conn: Caller, queue: str, limit: int) -> list[Moved]:
        """Up to ``limit`` ripe pending tasks of ``queue``, best priority first, and what
        their wake-ups need."""
        with errors("queue settings"):
            rows = conn.execute(QUERIES["ripe_tasks"], {"queue": queue, "limit": limit})
            return [Moved(uuid.UUID(i), q, x) for i, q, x in rows.fetchall()]
