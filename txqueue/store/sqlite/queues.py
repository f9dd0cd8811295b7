"""A queue's flow control: its settings, read and changed on the caller's connection."""

from __future__ import annotations

import sqlite3
from typing import Any

from ..records import Moved, QueueSettings
from .connection import QUERIES, Clock, _moved, errors


def _settings(row: Any) -> QueueSettings:
    queue, paused, rate_limit, rate_period, concurrency = row
    return QueueSettings(queue, bool(paused), rate_limit, rate_period, concurrency)


class Queues:
    """A queue's settings: locked and saved in the caller's transaction, and read."""

    clock: Clock

    def lock_queue(self, conn: sqlite3.Connection, queue: str) -> QueueSettings:
        """The queue's settings. The write this makes takes the database's write lock, held
        until the caller's transaction ends (outside one, the change is saved at once)."""
        params = {"queue": queue, "now": self.clock.now()}
        with errors("queue settings"):
            conn.execute(QUERIES["make_queue"], params)
            row = conn.execute(QUERIES["queue_settings_of"], params).fetchone()
        return _settings(row)

    def save_queue(self, conn: sqlite3.Connection, settings: QueueSettings) -> None:
        """Write a queue's settings; a free queue's row goes."""
        params = {**settings._asdict(), "now": self.clock.now()}
        with errors("queue settings"):
            conn.execute(QUERIES["forget_queue" if settings.free else "save_queue"], params)

    def queue_settings(self, conn: sqlite3.Connection) -> list[QueueSettings]:
        """The settings of every queue that is paused or limited, by name."""
        with errors("queue settings"):
            rows = conn.execute(QUERIES["queue_settings"]).fetchall()
        return [s for s in map(_settings, rows) if not s.free]

    def ripe_tasks(self, conn: sqlite3.Connection, queue: str, limit: int) -> list[Moved]:
        """Up to ``limit`` ripe pending tasks of ``queue``, best priority first."""
        params = {"queue": queue, "limit": limit, "now": self.clock.now()}
        with errors("queue settings"):
            return _moved(conn.execute(QUERIES["ripe_tasks"], params).fetchall())
