"""The workers running now, kept in txqueue_workers for status."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence

from ..records import WORKER_ALIVE_WITHIN, WORKER_FORGOTTEN_AFTER
from ..reports import Unhandled
from .connection import QUERIES, Clock, _immediate, errors


class Presence:
    clock: Clock

    def worker_seen(
        self, conn: sqlite3.Connection, worker_id: str, queues: Sequence[str], names: Sequence[str]
    ) -> None:
        """A running worker says it is alive, and which queues and task names it serves."""
        now = self.clock.now()
        params = {
            "id": worker_id,
            "queues": json.dumps(list(queues)),
            "names": json.dumps(list(names)),
        }
        with errors("worker presence"), _immediate(conn):
            conn.execute(QUERIES["forget_workers"], (now - WORKER_FORGOTTEN_AFTER,))
            conn.execute(QUERIES["worker_seen"], {**params, "now": now})

    def worker_gone(self, conn: sqlite3.Connection, worker_id: str) -> None:
        """A worker that stops deletes its row."""
        with errors("worker presence"), _immediate(conn):
            conn.execute(QUERIES["worker_gone"], (worker_id,))

    def unhandled(self, conn: sqlite3.Connection) -> Unhandled:
        """The workers alive now, and the pending tasks none of them has a handler for."""
        since = self.clock.now() - WORKER_ALIVE_WITHIN
        with errors("status"):
            live = conn.execute(QUERIES["live_workers"], (since,))
            count_live = live.fetchone()[0]
            rows = conn.execute(QUERIES["unhandled"], {"since": since}).fetchall()
        return Unhandled(count_live, [(r[0], r[1], r[2]) for r in rows])

    def handled(self, conn: sqlite3.Connection) -> dict[str, list[str]]:
        """Each task name the live workers have a handler for, and the queues (sorted)
        they serve it on."""
        since = self.clock.now() - WORKER_ALIVE_WITHIN
        with errors("worker presence"):
            rows = conn.execute(QUERIES["handled"], (since,)).fetchall()
        return {r[0]: sorted(json.loads(r[1])) for r in rows}
