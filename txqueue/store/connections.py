"""The caller's connection, whatever its kind, as the driver connection and store it needs.

Accepted: a psycopg ``Connection``, a ``sqlite3.Connection``, or a SQLAlchemy ``Connection``
or ``Session`` on either driver. The SQLAlchemy objects are recognised by duck typing so
that SQLAlchemy stays an optional dependency.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from ..errors import ConfigError, InvalidTypeError
from . import postgres, sqlite
from .base import Store

AfterCommit = Callable[[Callable[[], None]], None]
"""Registers a callback to run once the caller's transaction has committed."""

_SESSION_KEY = "txqueue_after_commit"


@dataclass(frozen=True, slots=True)
class Resolved:
    store: Store
    conn: Any  # the driver's connection
    after_commit: AfterCommit | None  # None: the library cannot see the commit


def resolve(conn: object) -> Resolved:
    module = type(conn).__module__
    session = module.startswith("sqlalchemy.orm")
    if session:
        driver = conn.connection().connection.driver_connection  # type: ignore[attr-defined]
    elif module.startswith("sqlalchemy.engine"):
        # Begin as SQLAlchemy's own execute would, so its commit() and rollback() apply
        # to our insert: it does not see statements sent to the driver connection.
        if not conn.in_transaction():  # type: ignore[attr-defined]
            conn.begin()  # type: ignore[attr-defined]
        driver = conn.connection.driver_connection  # type: ignore[attr-defined]
    else:
        driver = conn
    store: Store
    if isinstance(driver, psycopg.Connection):
        store = postgres
    elif isinstance(driver, sqlite3.Connection):
        store = sqlite
    elif driver is not conn:
        raise ConfigError(
            "txqueue needs SQLAlchemy's psycopg or sqlite driver: use a postgresql+psycopg:// "
            "or sqlite:/// URL"
        )
    else:
        raise InvalidTypeError(
            "conn",
            "must be a psycopg or sqlite3 Connection, or a SQLAlchemy Connection or Session, "
            f"not {type(conn).__name__}",
        )
    return Resolved(store, driver, _session_hook(conn) if session else None)


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
