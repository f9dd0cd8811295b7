"""The cleaner's statements: stale pending tasks to re-notify, expired leases to recover,
finished tasks to prune."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from ...core.lifecycle import Running
from ..records import Moved
from .connection import QUERIES, _moved, errors
from .enqueue import Enqueue
from .rows import running


class Upkeep(Enqueue):
    """The cleaner's work; a compensating task is enqueued as any other (``insert_task``)."""

    def stale_queues(self, conn: sqlite3.Connection, grace: float) -> list[str]:
        """Queues holding ripe tasks left pending longer than ``grace`` (and not re-notified
        within it)."""
        params = {"before": self.clock.now() - grace}
        with errors("re-notify"):
            return [r[0] for r in conn.execute(QUERIES["stale_queues"], params)]

    def renotify(
        self, conn: sqlite3.Connection, grace: float, queues: Sequence[str], limit: int
    ) -> list[Moved]:
        """Mark up to ``limit`` stale tasks of ``queues`` as re-notified now; returns them."""
        now = self.clock.now()
        params = {
            "now": now,
            "before": now - grace,
            "queues": json.dumps(list(queues)),
            "limit": limit,
        }
        with errors("re-notify"):
            return _moved(conn.execute(QUERIES["renotify"], params).fetchall())

    def _may_have_expired(self, conn: sqlite3.Connection) -> bool:
        with errors("recover expired leases"):
            params = {"now": self.clock.now()}
            return conn.execute(QUERIES["any_expired"], params).fetchone() is not None

    def lock_expired(
        self, conn: sqlite3.Connection, limit: int, default_max_attempts: int
    ) -> list[Running]:
        """Up to ``limit`` running tasks whose lease expired, in the caller's write
        transaction."""
        now = self.clock.now()
        params = {"now": now, "limit": limit, "default_max_attempts": default_max_attempts}
        rows = conn.execute(QUERIES["lock_expired"], params).fetchall()
        return [running(r, now) for r in rows]

    def current_xid(self, conn: sqlite3.Connection) -> str | None:
        return None  # SQLite keeps no transaction ids: its wake-ups carry none

    def prune(self, conn: sqlite3.Connection, state: str, age: float, limit: int) -> int:
        """Delete up to ``limit`` tasks in ``state`` finished more than ``age`` seconds ago
        (a workflow's step once every step of its workflow is)."""
        with errors("prune"):
            params = {"state": state, "before": self.clock.now() - age, "limit": limit}
            return conn.execute(QUERIES["prune"], params).rowcount

    def prune_starts(self, conn: sqlite3.Connection) -> int:
        """Delete the starts no rate window holds any more."""
        with errors("prune"):
            return conn.execute(QUERIES["prune_starts"], {"now": self.clock.now()}).rowcount
