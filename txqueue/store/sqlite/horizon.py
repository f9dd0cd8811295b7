"""SQLite has no vacuum horizon: it keeps no dead row versions for old readers to see."""

from __future__ import annotations

import sqlite3

from ..reports import HorizonHolder


class VacuumHorizon:
    def vacuum_horizon(self, conn: sqlite3.Connection) -> HorizonHolder | None:
        return None
