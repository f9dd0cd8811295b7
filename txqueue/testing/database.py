"""The database a testing helper works on: a URL, or an App (whose store, on SQLite, has
a clock of its own)."""

from __future__ import annotations

from ..app import App
from ..config import database_url
from ..store import for_url
from ..store.protocols import AnyStore

Database = str | App
"""A database URL (``postgresql://…``, ``sqlite:///…``), or the App whose database it is."""


def resolve(database: Database) -> tuple[str, AnyStore]:
    """The database's URL in txqueue's form, and the store to reach it by."""
    if isinstance(database, App):
        return database.database_url, database.store
    url = database_url(database)
    return url, for_url(url)
