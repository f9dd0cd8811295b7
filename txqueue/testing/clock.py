"""A clock the test moves: delays, retries' backoff and periodic slots pass in no time."""

from __future__ import annotations

from contextlib import closing
from datetime import datetime, timedelta

from ..errors import InvalidValueError
from ..store.protocols import AnyStore
from .database import Database, resolve


class Clock:
    """The clock of ``database`` (a URL, or an App), which txqueue reads its time from.

    On PostgreSQL, making it installs a ``now()`` that runs ahead of the server's by what
    ``advance`` added, for every session opened afterwards, in any process (sessions opened
    before keep the real time; the fixture ``txqueue_postgres`` installs it at once). On
    SQLite it moves the store's clock, which this process's workers and runs read: the
    clock of ``txqueue.App`` if one is given, else the one shared by URLs. ``store`` names
    the store to reach the database by when it is not txqueue's own for the URL (a third
    store's, in the conformance suite).

    Example:

    ```python
    from datetime import timedelta

    from txqueue.testing import Clock, run_tasks

    clock = Clock(url)
    send_receipt.options(delay=3600).enqueue(conn, order=42)
    conn.commit()
    clock.advance(timedelta(hours=1))  # the database's now() an hour ahead, for every session
    [ran] = run_tasks(registry, url, clock=clock)
    clock.reset()
    ```
    """

    def __init__(self, database: Database, *, store: AnyStore | None = None) -> None:
        self._url, self._store = resolve(database)
        if store is not None:  # a store of a third party's, which no URL names
            self._store = store
        with closing(self._store.connect(self._url)) as conn:
            self._store.install_clock(conn)

    def advance(self, by: float | timedelta) -> None:
        """Move the clock forward by ``by`` (seconds, or a timedelta)."""
        seconds = by.total_seconds() if isinstance(by, timedelta) else by
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
            raise InvalidValueError("by", f"must be a duration >= 0, got {by!r}")
        with closing(self._store.connect(self._url)) as conn:
            self._store.move_clock(conn, float(seconds))

    def now(self) -> datetime:
        """The database's time now, as txqueue reads it."""
        with closing(self._store.connect(self._url)) as conn:
            return self._store.now(conn)

    def reset(self) -> None:
        """Back to the real time."""
        with closing(self._store.connect(self._url)) as conn:
            self._store.reset_clock(conn)
