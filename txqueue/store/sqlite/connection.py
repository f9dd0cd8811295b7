"""The SQLite file: connections (WAL, busy timeout), write transactions taken up front, the
schema's migrations, the store's clock, and helpers the statements share."""

from __future__ import annotations

import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime
from itertools import count
from typing import Any

from ...errors import ConfigError, SchemaError, StoreError
from ...redaction import redact
from ..columns import all_fragments
from ..records import Moved
from ..sql import Queries, migrations, schema_text

QUERIES = Queries("txqueue.store.sqlite", fill=all_fragments("sqlite"))
"""The statements of ``queries.sql``, read once at import."""

BUSY_TIMEOUT = 30.0
"""Seconds a statement waits for another process's write lock before failing."""

_TRANSIENT = ("locked", "busy", "unable to open", "disk i/o")


class Clock:
    """The store's time in Unix seconds: this machine's clock moved by ``skew``, which only
    tests that travel in time set (PostgreSQL's clock is the server's ``now()``)."""

    skew = 0.0

    def now(self) -> float:
        return time.time() + self.skew


clock = Clock()
"""The clock of every store made without one of its own."""


def path(url: str) -> str:
    """The file of a ``sqlite:///relative.db`` or ``sqlite:////absolute.db`` URL."""
    return url.removeprefix("sqlite:///")


@contextmanager
def errors(action: str, url: str | None = None) -> Iterator[None]:
    """Translate sqlite3 exceptions into StoreError, naming what failed."""
    try:
        yield
    except sqlite3.Error as exc:
        detail = str(exc).strip() or type(exc).__name__
        if "no such table" in detail:
            raise SchemaError(
                f"{action}: the txqueue tables do not exist; run `txqueue init` first"
            ) from exc
        if "no such column" in detail or "has no column named" in detail:
            raise SchemaError(
                f"{action}: the txqueue tables are older than this txqueue; run `txqueue init`"
            ) from exc
        if isinstance(exc, sqlite3.IntegrityError) and "unique_key" in detail:
            detail = "a pending or running task holds the same unique_key"
        where = f" ({redact(url)})" if url else ""
        raise StoreError(f"{action}{where}: {detail}") from exc


_savepoints = count()


class Connection:
    """Opening the file, telling a lost connection from a refusal, the caller's
    transactions, and the schema."""

    def connect(
        self, url: str, *, application_name: str = "txqueue", create: bool = False
    ) -> sqlite3.Connection:
        """An autocommit connection in WAL mode for txqueue's own statements. The file must
        exist unless ``create`` (`txqueue init`): a typo'd path is an error, not a new file."""
        file = path(url)
        folder = os.path.dirname(os.path.abspath(file))
        if not os.path.isdir(folder):
            raise StoreError(
                f"no SQLite database at {file!r}: its directory {folder!r} does not exist"
                + ("" if create else "; create it, then run `txqueue init`")
            )
        if not create and not os.path.exists(file):
            raise StoreError(
                f"no SQLite database at {file!r}: run `txqueue init` to create it there"
            )
        with errors("cannot open the SQLite database", url):
            # A worker's claimer connection is also used from its consumer's thread, never
            # at the same time (``Claimer.offer``).
            conn = sqlite3.connect(
                file, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
            )
            try:
                conn.execute(QUERIES["journal_mode_wal"])
                conn.execute(QUERIES["synchronous_normal"])
            except sqlite3.Error:
                conn.close()
                raise
        return conn

    def is_connection_error(self, exc: BaseException) -> bool:
        """True when a StoreError is worth retrying: the file is locked, busy or unreachable."""
        cause = exc.__cause__
        if isinstance(cause, sqlite3.ProgrammingError):
            return "closed" in str(cause)
        return isinstance(cause, sqlite3.OperationalError) and any(
            word in str(cause).lower() for word in _TRANSIENT
        )

    def is_closed(self, conn: sqlite3.Connection) -> bool:
        try:
            conn.total_changes  # noqa: B018 - raises once the connection is closed
        except sqlite3.ProgrammingError:
            return True
        return False

    @contextmanager
    def transaction(self, conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        """A write transaction on the caller's connection, committed when the block ends; a
        savepoint inside one already open.

        It takes the write lock first (``BEGIN IMMEDIATE``, waiting as long as the
        connection's own busy timeout): in WAL mode a transaction that reads, then writes
        after another connection wrote, fails at once with ``database is locked``.
        """
        if conn.in_transaction:
            with _savepoint(conn):
                yield conn
            return
        with errors("begin a transaction"):
            conn.execute(QUERIES["begin_immediate"])
        try:
            yield conn
        except BaseException:
            if conn.in_transaction:
                conn.execute(QUERIES["rollback"])
            raise
        with errors("commit a transaction"):
            _commit(conn)

    def name_database(self, conn: sqlite3.Connection, name: str) -> str:
        raise ConfigError("databases: several named databases are PostgreSQL's, not SQLite's")

    def apply_schema(self, conn: sqlite3.Connection) -> list[int]:
        """Apply the migrations not yet recorded; returns the versions applied now."""
        preamble, numbered = migrations(schema_text("schema.sqlite.sql"))
        applied: list[int] = []
        # In the caller's transaction if one is open (a Django migration's), else in its own.
        block = nullcontext() if conn.in_transaction else _immediate(conn)
        with errors("applying schema.sqlite.sql"), block:
            for statement in _statements(preamble):
                conn.execute(statement)
            done = {r[0] for r in conn.execute(QUERIES["applied_migrations"])}
            for version, body in numbered:
                if version in done:
                    continue
                for statement in _statements(body):
                    conn.execute(statement)
                conn.execute(QUERIES["record_migration"], (version, time.time()))
                applied.append(version)
        return applied


def _busy_timeout(milliseconds: int) -> str:
    # A PRAGMA takes no parameters: the value is written into the statement.
    return f"PRAGMA busy_timeout = {milliseconds:d}"


def _begin(conn: sqlite3.Connection) -> None:
    """BEGIN IMMEDIATE, retried every few milliseconds while another connection writes.

    SQLite's own busy handler sleeps up to 100 ms between tries, which adds that much to
    a claim's latency behind a 1 ms write; here the wait is ours, so it is switched off
    for the BEGIN and restored for the caller-style statements the connection also runs.
    """
    conn.execute(_busy_timeout(0))
    try:
        delay, deadline = 0.0005, time.monotonic() + BUSY_TIMEOUT
        while True:
            try:
                conn.execute(QUERIES["begin_immediate"])
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() > deadline:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 0.004)
    finally:
        conn.execute(_busy_timeout(int(BUSY_TIMEOUT * 1000)))


@contextmanager
def _savepoint(conn: sqlite3.Connection) -> Iterator[None]:
    """A savepoint: a transaction of its own outside one, a part of the one open."""
    # A savepoint's name cannot be a parameter: it is made here, from a counter.
    name = f"txqueue_{next(_savepoints)}"
    conn.execute(f"SAVEPOINT {name}")
    try:
        yield
    except BaseException:
        conn.execute(f"ROLLBACK TO {name}")
        conn.execute(f"RELEASE {name}")
        raise
    conn.execute(f"RELEASE {name}")


def _commit(conn: sqlite3.Connection) -> None:
    """COMMIT, or roll back if it fails: SQLite keeps a transaction whose COMMIT failed
    (a deferred constraint, a full disk) open, and with it the file's one write lock."""
    try:
        conn.execute(QUERIES["commit"])
    except BaseException:
        if conn.in_transaction:
            conn.execute(QUERIES["rollback"])
        raise


@contextmanager
def _immediate(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction on txqueue's own connection, the lock taken up front. On a
    connection already in a transaction (a test's, that ``run_tasks`` was given) a part of
    it: a savepoint, which the test's rollback undoes with the rest."""
    if conn.in_transaction:
        with _savepoint(conn):
            yield
        return
    _begin(conn)
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute(QUERIES["rollback"])
        raise
    _commit(conn)


def _ids(ids: Iterable[uuid.UUID]) -> str:
    """Ids as one JSON array parameter, read back in SQL with ``json_each``."""
    return json.dumps([str(i) for i in ids])


def _moved(rows: list[Any]) -> list[Moved]:
    """(id, queue) rows as tasks put back to pending; SQLite has no xid for their wake-ups."""
    return [Moved(uuid.UUID(r[0]), r[1], None) for r in rows]


def _time(seconds: float | None) -> datetime | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, UTC)


def _at(seconds: float) -> datetime:
    """A store time as the aware datetime an error entry carries."""
    return datetime.fromtimestamp(seconds, UTC)


def _statements(script: str) -> Iterator[str]:
    statement = ""
    for line in script.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            yield statement
            statement = ""
