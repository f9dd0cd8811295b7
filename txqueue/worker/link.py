"""A worker part's own database connection (``Link``), the one report of an outage
however many parts notice it (``Outage``), and the loop a part runs on its link until the
worker stops (``Link.serve``)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from ..backoff import reconnect_delay
from ..errors import StoreError
from ..store.protocols import Connections, Own

log = logging.getLogger("txqueue.worker")

T = TypeVar("T")


class Outage:
    """One warning when the database goes away and one when it is back, although the
    claimer, the recorder and the lease keeper each notice on their own connection.

    Each outage ends a period; a failure on a connection opened in an earlier period is
    the tail of an outage already reported.
    """

    def __init__(self, database: str | None = None) -> None:
        self._lock = threading.Lock()
        self._what = "database" if database is None else f"database {database}"
        self._down = False
        self.period = 0
        self.reached = time.monotonic()  # the lease keeper's last presence write

    @property
    def down(self) -> bool:
        return self._down

    def lost(self, exc: StoreError, opened_in: int) -> None:
        with self._lock:
            if self._down or opened_in < self.period:
                return
            self._down = True
        log.warning(
            "%s unreachable (%s): reconnecting; running tasks go on and their outcomes "
            "are written once it is back",
            self._what,
            exc,
        )

    def back(self) -> int:
        """Called on each new connection; returns the period it was opened in."""
        with self._lock:
            if self._down:
                self._down = False
                self.period += 1
                log.warning("%s reachable again", self._what)
            return self.period


class Link(Generic[Own]):
    """A part's own database connection, opened when needed: the claimer, the recorder and
    the lease keeper each have one, and one slow statement holds up no other part."""

    def __init__(
        self,
        store: Connections[Own],
        database_url: str,
        outage: Outage,
        check: Callable[[Own], None] | None = None,
    ) -> None:
        self._store = store
        self._url = database_url
        self._outage = outage
        self._check = check  # asked of each new connection (it is the right database)
        self._opened_in = outage.period
        self.conn: Own | None = None
        self.failures = 0  # statements failed in a row, for the backoff
        self._using = threading.Lock()

    def open(self) -> Own:
        conn = self.conn
        if conn is None or self._store.is_closed(conn):
            conn = self._store.connect(self._url, application_name="txqueue-worker")
            if self._check is not None:
                try:
                    self._check(conn)
                except BaseException:
                    conn.close()
                    raise
            self.conn = conn
            self._opened_in = self._outage.back()
        return conn

    @property
    def down(self) -> bool:
        """The database is known to be out of reach (an outage reported, not yet over)."""
        return self._outage.down

    def use(self, call: Callable[[Own], T]) -> T:
        """``call(conn)`` on this link's connection, opened if need be, by one caller at a
        time: a handler thread's atomic task, or a step's record left running on a thread
        of the event loop's after its async attempt was cancelled at its time limit. A
        StoreError is counted (a lost connection closed and reported) and raised on."""
        with self._using:
            try:
                out = call(self.open())
            except StoreError as exc:
                self.failed(exc)
                raise
            self.worked()
            return out

    def worked(self) -> None:
        # Only statements that worked start the backoff over: a server that accepts
        # connections and refuses the work (a standby, read-only) is tried once a second.
        self.failures = 0

    def answered(self) -> None:
        """A statement just came back from the database: it is not hanging."""
        self._outage.reached = time.monotonic()

    def failed(self, exc: StoreError) -> bool:
        """Count a failed statement; True if the connection was lost (reported once per
        outage, however many parts notice), False if the database refused it. A lost
        connection is closed, a read-only one (a standby's) too, to be opened anew."""
        self.failures += 1
        if self._store.is_connection_error(exc):
            self._outage.lost(exc, self._opened_in)
            self.close()
            return True
        return False

    def backoff(self) -> float:
        """Capped at a second: once the server is back, work resumes within a second, and
        a server still down sees one attempt a second from each part."""
        return reconnect_delay(self.failures, first=0.1, cap=1.0)

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()

    def serve(self, step: Callable[[], float], stopping: threading.Event) -> None:
        """Call ``step`` until ``stopping`` is set, waiting the seconds it returns between
        two calls, and the backoff after a lost connection. A statement the database
        refused is a bug, raised for the supervisor to report and restart the part on a
        new connection: this one is closed whenever the loop ends."""
        try:
            while not stopping.is_set():
                try:
                    wait = step()
                    self.worked()
                except StoreError as exc:
                    if not self.failed(exc):
                        raise
                    wait = self.backoff()
                stopping.wait(wait)
        finally:
            self.close()
