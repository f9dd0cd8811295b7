"""The database a testing helper works on: a URL, or an App (whose store, on SQLite, has
a clock of its own); for ``captured`` and ``run_tasks``, also a connection of the
application's, whose transaction they then work in."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from typing import Any

from ..app import App
from ..config import database_url
from ..store import connections, for_url
from ..store.protocols import AnyStore

Database = str | App
"""A database URL (``postgresql://…``, ``sqlite:///…``), or the App whose database it is."""

DatabaseOrConnection = Database | object
"""A ``Database``, or a connection ``enqueue`` takes (Django's ``connection`` in a
``TestCase``): what the helpers then read and run sees that connection's transaction."""


def resolve(database: Database) -> tuple[str, AnyStore]:
    """The database's URL in txqueue's form, and the store to reach it by."""
    if isinstance(database, App):
        return database.database_url, database.store
    url = database_url(database)
    return url, for_url(url)


@dataclass(frozen=True, slots=True)
class Session:
    """A connection a helper works on, and the store that speaks to it."""

    store: AnyStore
    conn: Any  # what the store's methods take
    driver: Any  # the driver's connection under it: an atomic task's ``ctx.conn``


@contextmanager
def session(database: DatabaseOrConnection, application_name: str) -> Iterator[Session]:
    """A connection to ``database`` for the block: txqueue's own for a URL or an App,
    closed after it; a connection given, as it is, in its transaction (a test's, which
    Django's ``TestCase`` rolls back: no other connection would see its rows)."""
    if not isinstance(database, str | App):
        given = connections.bind(database)
        yield Session(given.store, given.conn, given.key)
        return
    url, store = resolve(database)
    with closing(store.connect(url, application_name=application_name)) as conn:
        yield Session(store, conn, conn)
