"""SQLite keeps its tasks in one table: it leaves no dead row versions for an old reader
to hold back, so there are no slots to turn."""

from __future__ import annotations

import sqlite3

from ..records import SlotsKept


class Slots:
    def keep_slots(self, conn: sqlite3.Connection, period: float) -> SlotsKept | None:
        return None
