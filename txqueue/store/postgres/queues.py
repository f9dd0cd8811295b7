"""A queue's flow control: its settings, read and changed on the caller's connection."""

from __future__ import annotations

import uuid

from ..records import Moved
from ..settings import QueueChange, QueueSettings
from .connection import QUERIES, Caller, errors


class Queues:
    """A queue's settings: changed in one statement in the caller's transaction, and read."""

    def change_queue(self, conn: Caller, queue: str, change: QueueChange) -> QueueSettings:
        """Change a queue's settings in one statement, in the caller's transaction."""
        params = {**change._asdict(), "queue": queue, "set": sorted(change.changing)}
        with errors("queue settings"):
            return QueueSettings.of_row(conn.execute(QUERIES["change_queue"], params).fetchone())

    def queue_settings(self, conn: Caller) -> list[QueueSettings]:
        """The settings of every queue that is paused, limited or shared fairly, by name."""
        with errors("queue settings"):
            rows = conn.execute(QUERIES["queue_settings"]).fetchall()
        return [QueueSettings.of_row(r) for r in rows]

    def ripe_tasks(self, conn: Caller, queue: str, limit: int) -> list[Moved]:
        """Up to ``limit`` ripe pending tasks of ``queue``, best priority first, and what
        their wake-ups need."""
        with errors("queue settings"):
            rows = conn.execute(QUERIES["ripe_tasks"], {"queue": queue, "limit": limit})
            return [Moved(uuid.UUID(i), q, x) for i, q, x in rows.fetchall()]
