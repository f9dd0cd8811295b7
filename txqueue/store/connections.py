"""The caller's connection, whatever its kind, as the driver connection and store it needs.

Accepted: a psycopg 3 or psycopg2 ``connection``, a ``sqlite3.Connection``, a SQLAlchemy
``Connection`` or ``Session`` on any of those drivers, and Django's ``connection`` /
``connections[alias]`` (PostgreSQL or SQLite). psycopg2, SQLAlchemy and Django are
recognised by the module of the object's type and imported only then, so each stays an
optional dependency.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, overload

import psycopg
import psycopg.rows

from ..errors import ConfigError, InvalidTypeError
from . import POSTGRES, SQLITE
from .aio import AsyncCaller
from .bound import AfterCommit, AsyncBound, Bound
from .postgres.aio import AsyncPostgresStore
from .postgres.aio_conns import Asyncpg, PsycopgAsync
from .protocols import AnyStore
from .roles import InTransaction
from .sqlite import SqliteStore
from .sqlite.aio import Aiosqlite, AiosqliteStore

_PG_ASYNC = AsyncPostgresStore()
_SQLITE_ASYNC = AiosqliteStore()

_SESSION_KEY = "txqueue_after_commit"


@overload
def bind(conn: object) -> Bound[AnyStore]: ...
@overload
def bind(conn: object, store: InTransaction[Any] | None) -> Bound[InTransaction[Any]]: ...
def bind(conn: object, store: InTransaction[Any] | None = None) -> Bound[InTransaction[Any]]:
    """``conn``'s driver connection bound to its store: ``store`` when given (an App's,
    with its own clock), which must be of the connection's kind, else the process-wide
    one of that kind, whole."""
    module = type(conn).__module__
    session = module.startswith("sqlalchemy.orm")
    after_commit = _session_hook(conn) if session else None
    if session:
        driver = conn.connection().connection.driver_connection  # type: ignore[attr-defined]
    elif module.startswith("django."):
        driver, after_commit = _django(conn)
    elif module.startswith("sqlalchemy.engine"):
        # Begin as SQLAlchemy's own execute would, so its commit() and rollback() apply
        # to our insert: it does not see statements sent to the driver connection.
        if not conn.in_transaction():  # type: ignore[attr-defined]
            conn.begin()  # type: ignore[attr-defined]
        driver = conn.connection.driver_connection  # type: ignore[attr-defined]
    else:
        driver = conn
    sqlite = isinstance(driver, sqlite3.Connection)
    caller = driver if sqlite else _postgres(conn, driver)
    return Bound(caller, after_commit, driver, driver is not conn, _own(store, sqlite))


def _postgres(conn: object, driver: Any) -> Any:
    """What the PostgreSQL store's statements take for this driver connection."""
    if type(driver).__module__.startswith("psycopg2"):
        from .postgres.adapters import Psycopg2

        return Psycopg2(driver)
    if not isinstance(driver, psycopg.Connection):
        if driver is not conn:  # SQLAlchemy or Django on a driver txqueue does not know
            raise ConfigError(f"{SUPPORTED}; this one runs on {type(driver).__module__}")
        raise InvalidTypeError("conn", f"must be {SUPPORTED}, not {type(conn).__name__}")
    if driver.row_factory is not psycopg.rows.tuple_row:
        from .postgres.adapters import TupleRows

        return TupleRows(driver)  # the statements read rows by position
    return driver


def _own(store: InTransaction[Any] | None, sqlite: bool) -> InTransaction[Any]:
    if store is None:
        return SQLITE if sqlite else POSTGRES
    if isinstance(store, SqliteStore) != sqlite:
        found, wanted = ("SQLite", "PostgreSQL") if sqlite else ("PostgreSQL", "SQLite")
        raise ConfigError(f"conn is a {found} connection, and database_url names {wanted}")
    return store


SUPPORTED = (
    "a psycopg 3 or psycopg2 connection, a sqlite3 Connection, a SQLAlchemy Connection or "
    "Session on one of those drivers, or Django's connection (PostgreSQL or SQLite)"
)


def _django(conn: Any) -> tuple[Any, AfterCommit | None]:
    """Django's connection (``django.db.connection``, ``connections[alias]``): its driver
    connection, opened if need be, and inside ``atomic()`` Django's ``on_commit``."""
    from django.db import transaction as django_transaction

    conn.ensure_connection()
    if not conn.in_atomic_block:
        return conn.connection, None  # autocommit: the statement commits on its own
    alias = conn.alias

    def register(callback: Callable[[], None]) -> None:
        django_transaction.on_commit(callback, using=alias)

    return conn.connection, register


def _session_hook(session: Any) -> AfterCommit:
    """Collect callbacks in ``session.info``; run them after commit, drop them on rollback."""
    from sqlalchemy import event

    if _SESSION_KEY not in session.info:
        session.info[_SESSION_KEY] = []

        def after_commit(sess: Any) -> None:
            callbacks, sess.info[_SESSION_KEY] = sess.info[_SESSION_KEY], []
            for callback in callbacks:
                callback()

        def after_rollback(sess: Any) -> None:
            sess.info[_SESSION_KEY] = []

        event.listen(session, "after_commit", after_commit)
        event.listen(session, "after_rollback", after_rollback)

    def register(callback: Callable[[], None]) -> None:
        session.info[_SESSION_KEY].append(callback)

    return register


async def bind_async(conn: object, store: InTransaction[Any] | None = None) -> AsyncBound:
    """As ``bind``, for an asyncio connection: psycopg's ``AsyncConnection``, asyncpg's
    (a pool's too), aiosqlite's, or SQLAlchemy's ``AsyncConnection`` / ``AsyncSession`` on
    any of them. A SQLite ``store`` lends the async statements its clock."""
    after_commit = None
    driver: Any = conn
    if type(conn).__module__.startswith("sqlalchemy.ext.asyncio"):
        driver, after_commit = await _sqlalchemy_async(conn)
    module = type(driver).__module__
    managed = driver is not conn
    if isinstance(driver, psycopg.AsyncConnection):
        _own(store, sqlite=False)
        caller: AsyncCaller = PsycopgAsync(driver)
        return AsyncBound(caller, after_commit, driver, managed, _PG_ASYNC)
    # A Pool has no transaction to join (each call takes any connection): only a
    # connection, or one acquired from the pool, will do.
    if module.startswith("asyncpg") and hasattr(driver, "is_in_transaction"):
        _own(store, sqlite=False)
        return AsyncBound(Asyncpg(driver), after_commit, driver, managed, _PG_ASYNC)
    if module.startswith("aiosqlite"):
        _own(store, sqlite=True)
        aio = AiosqliteStore(store.clock) if isinstance(store, SqliteStore) else _SQLITE_ASYNC
        return AsyncBound(Aiosqlite(driver), after_commit, driver, managed, aio)
    if driver is not conn:
        raise ConfigError(f"{SUPPORTED_ASYNC}; this one runs on {type(driver).__module__}")
    raise InvalidTypeError("conn", f"must be {SUPPORTED_ASYNC}, not {type(conn).__name__}")


SUPPORTED_ASYNC = (
    "a psycopg AsyncConnection, an asyncpg connection (or one from pool.acquire()), an aiosqlite "
    "Connection, or a SQLAlchemy AsyncConnection or AsyncSession on one of those drivers"
)


async def _sqlalchemy_async(conn: Any) -> tuple[Any, AfterCommit | None]:
    session = hasattr(conn, "sync_session")
    connection = await conn.connection() if session else conn
    if not connection.in_transaction():
        await connection.begin()
    driver = (await connection.get_raw_connection()).driver_connection
    if type(driver).__module__.startswith("asyncpg") and not driver.is_in_transaction():
        # SQLAlchemy opens asyncpg's transaction at its own first statement; ours, sent to
        # the driver before that, would commit on its own.
        await connection.exec_driver_sql("SELECT 1")
    return driver, _session_hook(conn.sync_session) if session else None


def managed(call: str) -> ConfigError:
    """The error for ``call`` (``transaction``, ``transaction_async``) given a connection
    SQLAlchemy or Django manages: a block of txqueue's there would commit on its own."""
    return ConfigError(
        f"txqueue.{call} takes a driver's connection: with SQLAlchemy use its own begin() "
        "(a Session's wake-ups go after its commit), with Django transaction.atomic()"
    )
