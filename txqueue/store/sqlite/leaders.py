"""Roles one process of many holds at a time, kept in txqueue_leaders by renewed leases."""

from __future__ import annotations

import sqlite3

from ..records import Leadership
from .connection import QUERIES, Clock, _immediate, errors


class Leaders:
    clock: Clock

    def lead(self, conn: sqlite3.Connection, role: str, holder: str, seconds: float) -> Leadership:
        """Take or renew ``role`` for ``seconds``; says who holds it now, and how long for."""
        now = self.clock.now()
        params = {"role": role, "holder": holder, "until": now + seconds, "now": now}
        with errors("leader lease"), _immediate(conn):
            conn.execute(QUERIES["lead"], params)
            row = conn.execute(QUERIES["holder"], (role,)).fetchone()
        return Leadership(row[0], row[1] - now)

    def resign(self, conn: sqlite3.Connection, role: str, holder: str) -> None:
        """Give ``role`` up at once, if ``holder`` has it (a process that stops)."""
        with errors("leader lease"), _immediate(conn):
            conn.execute(QUERIES["resign"], (role, holder))
