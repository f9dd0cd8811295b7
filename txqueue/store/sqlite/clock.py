"""Moving a test database's clock (``txqueue.testing.Clock``): on SQLite, the store's."""

from __future__ import annotations

import sqlite3

from .connection import Clock


class MovedClock:
    """The store's clock, moved forward by tests (workers of this process only: SQLite's
    time is read by each process)."""

    clock: Clock

    def install_clock(self, conn: sqlite3.Connection) -> None:
        pass  # the store's clock is there already

    def move_clock(self, conn: sqlite3.Connection, seconds: float) -> None:
        self.clock.skew += seconds

    def reset_clock(self, conn: sqlite3.Connection) -> None:
        self.clock.skew = 0.0
