"""The cleaner's statements: stale pending tasks to re-notify, expired leases to lock for
their recovery, finished tasks to prune."""

from __future__ import annotations

from collections.abc import Sequence

from ...core.lifecycle import Running
from ..records import Moved
from .claims import running
from .connection import QUERIES, PgConnection, errors, retrying_moved
from .enqueue import Enqueue


class Upkeep(Enqueue):
    """The cleaner's statements: stale pending tasks to re-notify, expired leases to
    recover, finished tasks to prune."""

    def stale_queues(self, conn: PgConnection, grace: float) -> list[str]:
        """Queues holding ripe tasks left pending longer than ``grace`` (and not re-notified
        within it)."""
        with errors("re-notify"):
            return [
                r[0] for r in conn.execute(QUERIES["stale_queues"], {"grace": grace}).fetchall()
            ]

    def renotify(
        self, conn: PgConnection, grace: float, queues: Sequence[str], limit: int
    ) -> list[Moved]:
        """Mark up to ``limit`` stale tasks of ``queues`` as re-notified now; returns their
        (id, queue, xid of this marking). Rows another cleaner holds are skipped."""
        params = {"grace": grace, "queues": list(queues), "limit": limit}
        with errors("re-notify"):
            rows = retrying_moved(conn, lambda: conn.execute(QUERIES["renotify"], params))
        return [Moved(r[0], r[1], r[2]) for r in rows]

    def lock_expired(
        self, conn: PgConnection, limit: int, default_max_attempts: int
    ) -> list[Running]:
        """Up to ``limit`` running tasks whose lease expired, locked until the commit (those
        another cleaner holds are skipped)."""
        params = {"limit": limit, "default_max_attempts": default_max_attempts}
        return [running(r) for r in conn.execute(QUERIES["lock_expired"], params).fetchall()]

    def current_xid(self, conn: PgConnection) -> str | None:
        row = conn.execute(QUERIES["current_xid"]).fetchone()
        return None if row is None else str(row[0])

    def prune(self, conn: PgConnection, state: str, age: float, limit: int) -> int:
        """Delete up to ``limit`` tasks in ``state`` finished more than ``age`` seconds ago
        (a workflow's step once every step of its workflow is)."""
        with errors("prune"):
            return conn.execute(
                QUERIES["prune"], {"state": state, "age": age, "limit": limit}
            ).rowcount

    def prune_starts(self, conn: PgConnection) -> int:
        """Delete the starts no rate window holds any more."""
        with errors("prune"):
            return conn.execute(QUERIES["prune_starts"]).rowcount
