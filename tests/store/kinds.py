"""txqueue's own stores, as the shipped conformance suite (``txqueue.testing.conformance``)
sees them: one ``StoreKind`` each, in ``KINDS``, run by ``tests/store/test_conformance.py``.
"""

from __future__ import annotations

import re
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiosqlite
import psycopg
import pytest

from tests.integration.helpers import connect, rows
from txqueue import store
from txqueue.store.postgres import errors as postgres_errors
from txqueue.store.sqlite import errors as sqlite_errors
from txqueue.store.sqlite import path as sqlite_path
from txqueue.testing.conformance import StoreKind


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
    store=store.POSTGRES,
    url_fixture="pg_url",
    empty_url_fixture="pg_empty_url",
    connect=connect,
    rows=rows,
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
    guards_commit=psycopg.ProgrammingError,
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
    store=store.SQLITE,
    url_fixture="sqlite_url",
    empty_url_fixture="sqlite_empty_url",
    connect=connect,
    rows=rows,
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
    guards_commit=None,
)

KINDS: tuple[StoreKind, ...] = (POSTGRES, SQLITE)
"""Every store the suite runs on, in the order of the test ids."""

POSTGRES_18 = replace(
    POSTGRES, name="postgres18", url_fixture="pg18_url", empty_url_fixture="pg18_empty_url"
)
"""The PostgreSQL store on PostgreSQL 18 (a private server): the store and contract suites
run on it too (tests/store/conftest.py)."""

GAPS_OF = {POSTGRES_18.name: POSTGRES}
"""A kind whose gaps are another's: those declared on the tests for ``postgres``."""

POOLS_ON_EVERY_SERVER = pytest.mark.parametrize(
    ("store_kind", "pool"),
    [
        *(
            pytest.param(kind, pool, id=f"{pool}-{kind.name}")
            for kind in (POSTGRES, SQLITE)
            for pool in ("threads", "processes")
        ),
        pytest.param(POSTGRES_18, "threads", id="threads-postgres18"),
    ],
)
"""For a fault test that takes ``db_url`` and a worker ``pool``: each pool on both stores,
and threads on PostgreSQL 18 too (the pool does not meet the server)."""
"""A kind whose gaps are another's: those declared on the tests for ``postgres``."""
