"""Moving a test database's clock (``txqueue.testing.Clock``)."""

from __future__ import annotations

from .connection import QUERIES, PgConnection, errors


class MovedClock:
    """The database's ``now()``, moved forward by tests: delays, backoff and periodic
    slots pass in no time, in every process that opens a session after the install."""

    def install_clock(self, conn: PgConnection) -> None:
        with errors("install the test clock"):
            conn.execute(QUERIES["install_clock"])

    def move_clock(self, conn: PgConnection, seconds: float) -> None:
        with errors("move the test clock"):
            conn.execute(QUERIES["move_clock"], {"seconds": seconds})

    def reset_clock(self, conn: PgConnection) -> None:
        with errors("reset the test clock"):
            conn.execute(QUERIES["reset_clock"])
