"""Roles one process of many holds at a time, kept in txqueue_leaders by renewed leases."""

from __future__ import annotations

from typing import Any

import psycopg

from ..base import Leadership
from .connection import errors

# Taken if free, lapsed or already ours; otherwise the row as the statement found it. The
# server's clock alone decides, so hosts whose clocks disagree still agree on the holder.
LEAD = """
WITH taken AS (
    INSERT INTO txqueue_leaders AS l (role, holder, expires_at)
    VALUES (%(role)s, %(holder)s, now() + make_interval(secs => %(seconds)s))
    ON CONFLICT (role) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
    WHERE l.holder = excluded.holder OR l.expires_at <= now()
    RETURNING holder, expires_at
)
SELECT holder, extract(epoch FROM expires_at - now())::float8 FROM taken
UNION ALL
SELECT holder, extract(epoch FROM expires_at - now())::float8 FROM txqueue_leaders
WHERE role = %(role)s AND NOT EXISTS (SELECT 1 FROM taken)
"""

RESIGN = "DELETE FROM txqueue_leaders WHERE role = %s AND holder = %s"


def lead(conn: psycopg.Connection[Any], role: str, holder: str, seconds: float) -> Leadership:
    """Take or renew ``role`` for ``seconds``; says who holds it now, and how long for."""
    with errors("leader lease"):
        row = conn.execute(LEAD, {"role": role, "holder": holder, "seconds": seconds}).fetchone()
    if row is None:  # the row was deleted by its holder meanwhile: free for the next ask
        return Leadership("", 0.0)
    return Leadership(row[0], row[1])


def resign(conn: psycopg.Connection[Any], role: str, holder: str) -> None:
    """Give ``role`` up at once, if ``holder`` has it (a process that stops)."""
    with errors("leader lease"):
        conn.execute(RESIGN, (role, holder))
