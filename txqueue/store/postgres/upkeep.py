"""The cleaner's statements: stale pending tasks to re-notify, expired leases to recover,
finished tasks to prune."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ... import lifecycle
from ..records import Moved, Recovered
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

    def recover_expired(
        self, conn: PgConnection, limit: int, default_max_attempts: int
    ) -> list[Recovered]:
        """Take back up to ``limit`` running tasks whose lease expired, each by its policy:
        retry (back to pending, the lost attempt counted), abandon (failed), or compensate
        (failed, and the compensating task enqueued in the same transaction)."""
        params = {
            "limit": limit,
            "default_max_attempts": default_max_attempts,
            "decisions": lifecycle.lease_expired_decisions(),
            "default_policy": lifecycle.RETRY,
            "error_type": lifecycle.LEASE_EXPIRED,
            # The message with the lost worker left for the statement to fill in (format).
            "error_message": lifecycle.lease_expired_message("%s"),
        }
        out = []
        with errors("recover expired leases"), conn.transaction():
            rows = conn.execute(QUERIES["recover_expired"], params).fetchall()
            for *row, spec in rows:
                recovered = Recovered(*row)
                if lifecycle.compensates(recovered.policy, recovered.state):
                    comp = lifecycle.compensation(
                        spec, str(recovered.id), recovered.name, recovered.payload
                    )
                    recovered = replace(
                        recovered, compensation=(comp.queue, self.insert_task(conn, comp))
                    )
                out.append(recovered)
        return out

    def prune(self, conn: PgConnection, state: str, age: float, limit: int) -> int:
        """Delete up to ``limit`` tasks in ``state`` finished more than ``age`` seconds ago."""
        with errors("prune"):
            return conn.execute(
                QUERIES["prune"], {"state": state, "age": age, "limit": limit}
            ).rowcount

    def prune_starts(self, conn: PgConnection) -> int:
        """Delete the starts no rate window holds any more."""
        with errors("prune"):
            return conn.execute(QUERIES["prune_starts"]).rowcount
