"""The stores the conformance suite runs on: one declaration each, in ``KINDS``.

A kind says how to get a fresh database of its store, what its driver does differently
(placeholders, error texts, SQL the tests need to set a scene) and which traits it has.
Tests ask about a trait (``s.kind.notifies``), never about a store's name, so a new store
is one more declaration (and its URL fixtures) and the suite runs unchanged. What a store
cannot offer at all is declared on the test: ``@pytest.mark.unsupported(<name>="why")``.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiosqlite
import psycopg

from txqueue.store.postgres import errors as postgres_errors
from txqueue.store.sqlite import errors as sqlite_errors
from txqueue.store.sqlite import path as sqlite_path


@dataclass(frozen=True)
class StoreKind:
    name: str  # the test id, and the key of ``@pytest.mark.unsupported``
    url_fixture: str  # a fresh database with the schema applied, for one test
    empty_url_fixture: str  # a fresh database without txqueue's tables
    errors: Callable[..., AbstractContextManager[None]]  # the store's driver errors, as ours
    driver_error: type[Exception]  # the root of the driver's own exceptions
    placeholder: str  # the driver's parameter marker, for the tests' ``%s``
    schema: str  # the schema file, its migrations in order
    # (a lost connection's driver error, whether the store counts it worth retrying)
    connection_errors: tuple[tuple[BaseException, bool], ...]
    syntax_error: str  # the driver's text for the statement "SELECT nonsense FROM"
    # A database of the store that does not exist (a server's beside ``url``, else the
    # file ``file``), and the whole StoreError connecting to it, as a pattern.
    missing: Callable[[str, Path], tuple[str, str]]
    # Statements making each insert into txqueue_tasks matching ``when`` (SQL on NEW)
    # fail with ``message``.
    refuse_inserts: Callable[[str, str], list[str]]
    open_async: Callable[[str, bool], Awaitable[Any]]  # its native asyncio driver (url, autocommit)
    current_xid: str | None  # reads the transaction's id as wake-ups name it; None: no ids
    # How many sessions of the database at a URL wait for a lock; None: the store cannot tell.
    lock_waiters: Callable[[str], int] | None

    # --- traits ------------------------------------------------------------------------
    creates: bool  # connect(create=True) makes a missing database (a file)
    notifies: bool  # listen_finished: a listener woken when a task finishes
    slots: bool  # tasks live in slots turned by keep_slots
    atomic_batches: bool  # a batch on an autocommit connection is one transaction
    guards_commit: bool  # the driver refuses a commit inside the block ``atomic`` opened

    @property
    def xids(self) -> bool:
        """Whether inserts name their transaction for the wake-ups."""
        return self.current_xid is not None


def other_database(url: str, name: str, password: str | None = None) -> str:
    """``url``'s server, the database ``name``, and when given another password."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if password is not None:
        user, host = netloc.rsplit("@", 1)
        netloc = f"{user.split(':')[0]}:{password}@{host}"
    return urlunsplit(parts._replace(netloc=netloc, path="/" + name))


def _pg_missing(url: str, file: Path) -> tuple[str, str]:
    missing = other_database(url, "txqueue_nothing")
    return missing, (
        rf"cannot connect to PostgreSQL \({re.escape(missing)}\): .*"
        r'database "txqueue_nothing" does not exist'
    )


def _pg_refuse(when: str, message: str) -> list[str]:
    return [
        f"""CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN IF {when} THEN RAISE EXCEPTION '{message}'; END IF; RETURN NEW; END $$""",
        """CREATE TRIGGER refuse BEFORE INSERT ON txqueue_tasks
           FOR EACH ROW EXECUTE FUNCTION refuse()""",
    ]


def _pg_lock_waiters(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as c:
        row = c.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()
    return 0 if row is None else int(row[0])


async def _pg_async(url: str, autocommit: bool) -> Any:
    return await psycopg.AsyncConnection.connect(url, autocommit=autocommit)


POSTGRES = StoreKind(
    name="postgres",
    url_fixture="pg_url",
    empty_url_fixture="pg_empty_url",
    errors=postgres_errors,
    driver_error=psycopg.Error,
    placeholder="%s",
    schema="schema.sql",
    connection_errors=(
        (psycopg.OperationalError("connection failed: Connection refused"), True),
        (psycopg.OperationalError("server closed the connection unexpectedly"), True),
        (psycopg.errors.AdminShutdown("terminating connection"), True),
        (psycopg.errors.CannotConnectNow("the database system is starting up"), True),
        (psycopg.InterfaceError("the connection is closed"), True),
        (psycopg.errors.InvalidPassword("password authentication failed"), False),
        (psycopg.errors.InvalidAuthorizationSpecification("role does not exist"), False),
        (psycopg.OperationalError('failed: FATAL:  database "x" does not exist'), False),
        (psycopg.OperationalError("failed: FATAL:  password authentication failed"), False),
        (psycopg.OperationalError("failed: FATAL:  no pg_hba.conf entry for host"), False),
        (psycopg.errors.UndefinedTable("relation does not exist"), False),
        # Today every OperationalError not refused for good counts, a statement's too.
        (psycopg.errors.SerializationFailure("could not serialize access"), True),
        (psycopg.errors.QueryCanceled("canceling statement due to statement timeout"), True),
    ),
    syntax_error="syntax error at end of input",
    missing=_pg_missing,
    refuse_inserts=_pg_refuse,
    open_async=_pg_async,
    current_xid="SELECT pg_current_xact_id()::text",
    lock_waiters=_pg_lock_waiters,
    creates=False,
    notifies=True,
    slots=True,
    atomic_batches=True,
    guards_commit=True,
)


def _sqlite_missing(url: str, file: Path) -> tuple[str, str]:
    return f"sqlite:///{file}", re.escape(
        f"no SQLite database at '{file}': run `txqueue init` to create it there"
    )


def _sqlite_refuse(when: str, message: str) -> list[str]:
    return [
        f"""CREATE TRIGGER refuse BEFORE INSERT ON txqueue_tasks WHEN {when}
            BEGIN SELECT RAISE(ABORT, '{message}'); END"""
    ]


async def _sqlite_async(url: str, autocommit: bool) -> Any:
    return await aiosqlite.connect(sqlite_path(url), isolation_level=None if autocommit else "")


SQLITE = StoreKind(
    name="sqlite",
    url_fixture="sqlite_url",
    empty_url_fixture="sqlite_empty_url",
    errors=sqlite_errors,
    driver_error=sqlite3.Error,
    placeholder="?",
    schema="schema.sqlite.sql",
    connection_errors=(
        (sqlite3.OperationalError("database is locked"), True),
        (sqlite3.OperationalError("database table is locked"), True),
        (sqlite3.OperationalError("database is busy"), True),
        (sqlite3.OperationalError("unable to open database file"), True),
        (sqlite3.OperationalError("disk I/O error"), True),
        (sqlite3.ProgrammingError("Cannot operate on a closed database."), True),
        (sqlite3.OperationalError("no such table: txqueue_tasks"), False),
        (sqlite3.ProgrammingError("Incorrect number of bindings supplied."), False),
        (sqlite3.IntegrityError("UNIQUE constraint failed: txqueue_tasks.id"), False),
        (sqlite3.DatabaseError("database disk image is malformed"), False),
    ),
    syntax_error="incomplete input",
    missing=_sqlite_missing,
    refuse_inserts=_sqlite_refuse,
    open_async=_sqlite_async,
    current_xid=None,
    lock_waiters=None,
    creates=True,
    notifies=False,
    slots=False,
    # Today each insert of a batch on an autocommit connection is a statement of its own.
    atomic_batches=False,
    guards_commit=False,
)

KINDS: tuple[StoreKind, ...] = (POSTGRES, SQLITE)
"""Every store the suite runs on, in the order of the test ids."""
