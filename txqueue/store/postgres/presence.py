"""The workers running now, kept in txqueue_workers for status."""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..records import WORKER_ALIVE_WITHIN, WORKER_FORGOTTEN_AFTER
from ..reports import Unhandled
from .connection import QUERIES, PgConnection, errors


class Presence:
    """The workers running now, kept in txqueue_workers for status."""

    def worker_seen(
        self, conn: PgConnection, worker_id: str, queues: Sequence[str], names: Sequence[str]
    ) -> None:
        """A running worker says it is alive, and which queues and task names it serves."""
        with errors("worker presence"), conn.transaction():
            conn.execute(QUERIES["forget_workers"], (WORKER_FORGOTTEN_AFTER,))
            conn.execute(
                QUERIES["worker_seen"],
                (worker_id, json.dumps(list(queues)), json.dumps(list(names))),
            )

    def worker_gone(self, conn: PgConnection, worker_id: str) -> None:
        """A worker that stops deletes its row."""
        with errors("worker presence"):
            conn.execute(QUERIES["worker_gone"], (worker_id,))

    def unhandled(self, conn: PgConnection) -> Unhandled:
        """The workers alive now, and the pending tasks none of them has a handler for."""
        with errors("status"):
            live = conn.execute(QUERIES["live_workers"], (WORKER_ALIVE_WITHIN,)).fetchone()
            rows = conn.execute(QUERIES["unhandled"], (WORKER_ALIVE_WITHIN,)).fetchall()
        return Unhandled(live[0] if live else 0, [(r[0], r[1], r[2]) for r in rows])

    def handled(self, conn: PgConnection) -> dict[str, list[str]]:
        """Each task name the live workers have a handler for, and the queues (sorted)
        they serve it on."""
        with errors("worker presence"):
            rows = conn.execute(QUERIES["handled"], (WORKER_ALIVE_WITHIN,)).fetchall()
        return {r[0]: sorted(json.loads(r[1])) for r in rows}
