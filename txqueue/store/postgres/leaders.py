"""Roles one process of many holds at a time, kept in txqueue_leaders by renewed leases."""

from __future__ import annotations

from ..records import Leadership
from .connection import QUERIES, PgConnection, errors


class Leaders:
    """Roles one process of many holds at a time, kept in txqueue_leaders by renewed
    leases."""

    def lead(self, conn: PgConnection, role: str, holder: str, seconds: float) -> Leadership:
        """Take or renew ``role`` for ``seconds``; says who holds it now, and how long for."""
        with errors("leader lease"):
            row = conn.execute(
                QUERIES["lead"], {"role": role, "holder": holder, "seconds": seconds}
            ).fetchone()
        if row is None:  # the row was deleted by its holder meanwhile: free for the next ask
            return Leadership("", 0.0)
        return Leadership(row[0], row[1])

    def resign(self, conn: PgConnection, role: str, holder: str) -> None:
        """Give ``role`` up at once, if ``holder`` has it (a process that stops)."""
        with errors("leader lease"):
            conn.execute(QUERIES["resign"], (role, holder))
