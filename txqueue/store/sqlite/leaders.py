"""Roles one process of many holds at a time, kept in txqueue_leaders by renewed leases."""

from __future__ import annotations

import sqlite3

from ..base import Leadership
from .connection import _immediate, clock, errors

LEAD = """
INSERT INTO txqueue_leaders (role, holder, expires_at) VALUES (:role, :holder, :until)
ON CONFLICT (role) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
WHERE txqueue_leaders.holder = excluded.holder OR txqueue_leaders.expires_at <= :now
"""
HOLDER = "SELECT holder, expires_at FROM txqueue_leaders WHERE role = ?"
RESIGN = "DELETE FROM txqueue_leaders WHERE role = ? AND holder = ?"


def lead(conn: sqlite3.Connection, role: str, holder: str, seconds: float) -> Leadership:
    """Take or renew ``role`` for ``seconds``; says who holds it now, and how long for."""
    now = clock.now()
    params = {"role": role, "holder": holder, "until": now + seconds, "now": now}
    with errors("leader lease"), _immediate(conn):
        conn.execute(LEAD, params)
        row = conn.execute(HOLDER, (role,)).fetchone()
    return Leadership(row[0], row[1] - now)


def resign(conn: sqlite3.Connection, role: str, holder: str) -> None:
    """Give ``role`` up at once, if ``holder`` has it (a process that stops)."""
    with errors("leader lease"), _immediate(conn):
        conn.execute(RESIGN, (role, holder))
