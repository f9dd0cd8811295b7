"""A queue's flow control: its settings, read and changed on the caller's connection."""

from __future__ import annotations

import json
import sqlite3

from ..records import Moved
from ..settings import QueueChange, QueueSettings
from .connection import QUERIES, Clock, _moved, errors


class Queues:
    """A queue's settings: changed in one statement in the caller's transaction, and read."""

    clock: Clock

    def change_queue(
        self, conn: sqlite3.Connection, queue: str, change: QueueChange
    ) -> QueueSettings:
        """Change a queue's settings in one statement, in the caller's transaction."""
        params = {
            **change._asdict(),
            "queue": queue,
            "set": json.dumps(sorted(change.changing)),
            "now": self.clock.now(),
        }
        with errors("queue settings"):
            return QueueSettings.of_row(conn.execute(QUERIES["change_queue"], params).fetchone())

    def queue_settings(self, conn: sqlite3.Connection) -> list[QueueSettings]:
        """The settings of every queue that is paused, limited or shared fairly, by name."""
        with errors("queue settings"):
            rows = conn.execute(QUERIES["queue_settings"]).fetchall()
        return [QueueSettings.of_row(r) for r in rows]

    def ripe_tasks(self, conn: sqlite3.Connection, queue: str, limit: int) -> list[Moved]:
        """Up to ``limit`` ripe pending tasks of ``queue``, best priority first."""
        params = {"queue": queue, "limit": limit, "now": self.clock.now()}
        with errors("queue settings"):
            return _moved(conn.execute(QUERIES["ripe_tasks"], params).fetchall())
