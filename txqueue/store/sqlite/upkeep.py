"""The cleaner's statements: stale pending tasks to re-notify, expired leases to recover,
finished tasks to prune."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Sequence
from dataclasses import replace

from ... import lifecycle
from ..records import Moved, Recovered
from .connection import QUERIES, _at, _immediate, _moved, errors
from .enqueue import Enqueue


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

    def recover_expired(
        self, conn: sqlite3.Connection, limit: int, default_max_attempts: int
    ) -> list[Recovered]:
        """Take back up to ``limit`` running tasks whose lease expired, each by its policy:
        retry (back to pending, the lost attempt counted), abandon (failed), or compensate
        (failed, and the compensating task enqueued in the same transaction)."""
        out = []
        with errors("recover expired leases"), _immediate(conn):
            now = self.clock.now()
            params = (default_max_attempts, now, limit)
            rows = conn.execute(QUERIES["expired"], params).fetchall()
            for task_id, queue, name, payload, attempts, worker, cancelled, most, spec in rows:
                policy_spec = json.loads(spec) if spec else None
                policy = lifecycle.policy_of(policy_spec)
                nxt = lifecycle.after_lease_expired(policy, attempts, most, bool(cancelled))
                entry = lifecycle.lease_expired(attempts, worker, _at(now)).as_json()
                update = {
                    "next": nxt,
                    "now": now,
                    "finished_at": now if lifecycle.finished(nxt) else None,
                    "error": json.dumps(entry),
                    "id": task_id,
                }
                if not conn.execute(QUERIES["recover"], update).rowcount:
                    continue
                recovered = Recovered(
                    uuid.UUID(task_id),
                    queue,
                    name,
                    json.loads(payload),
                    nxt,
                    attempts,
                    policy,
                    worker,
                    None,
                    entry,
                )
                if policy_spec is not None and lifecycle.compensates(policy, nxt):
                    comp = lifecycle.compensation(policy_spec, task_id, name, recovered.payload)
                    compensation = (comp.queue, self.insert_task(conn, comp))
                    recovered = replace(recovered, compensation=compensation)
                out.append(recovered)
        return out

    def prune(self, conn: sqlite3.Connection, state: str, age: float, limit: int) -> int:
        """Delete up to ``limit`` tasks in ``state`` finished more than ``age`` seconds ago."""
        with errors("prune"):
            return conn.execute(QUERIES["prune"], (state, self.clock.now() - age, limit)).rowcount

    def prune_starts(self, conn: sqlite3.Connection) -> int:
        """Delete the starts no rate window holds any more."""
        with errors("prune"):
            return conn.execute(QUERIES["prune_starts"], {"now": self.clock.now()}).rowcount
