"""The stores: ``PostgresStore`` and ``SqliteStore``, each behind the protocols of
``protocols``; ``for_url`` picks the one a database URL names."""

from __future__ import annotations

from .postgres import PostgresStore
from .protocols import AnyStore
from .sqlite import SqliteStore

POSTGRES = PostgresStore()
SQLITE = SqliteStore()


__all__ = ["POSTGRES", "SQLITE", "PostgresStore", "SqliteStore", "for_url"]


def for_url(url: str) -> AnyStore:
    """The store for a URL as ``config.database_url`` returns it."""
    return SQLITE if url.startswith("sqlite:") else POSTGRES
