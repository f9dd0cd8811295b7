"""What holds the vacuum horizon back: one read of PostgreSQL's activity, slots and
prepared transactions."""

from __future__ import annotations

from ..reports import HorizonHolder
from .connection import QUERIES, PgConnection, errors


class VacuumHorizon:
    def vacuum_horizon(self, conn: PgConnection) -> HorizonHolder | None:
        """The session, walsender, replication slot or prepared transaction holding the
        oldest xmin that keeps vacuum from cleaning this database, or None."""
        with errors("vacuum horizon"):
            row = conn.execute(QUERIES["vacuum_horizon"]).fetchone()
        return None if row is None else HorizonHolder(*row)
