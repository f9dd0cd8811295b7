"""The stores: ``PostgresStore`` and ``SqliteStore``, each behind the protocols of
``protocols``; ``for_url`` picks the one a database URL names."""

from __future__ import annotations

from ..errors import ConfigError
from ..redaction import redact
from .postgres import PostgresStore
from .protocols import AnyStore
from .sqlite import SqliteStore

POSTGRES = PostgresStore()
SQLITE = SqliteStore()


__all__ = ["POSTGRES", "SQLITE", "PostgresStore", "SqliteStore", "for_url", "serving"]


def for_url(url: str) -> AnyStore:
    """The store for a URL as ``config.database_url`` returns it."""
    return SQLITE if url.startswith("sqlite:") else POSTGRES


def serving(url: str, store: AnyStore | None) -> AnyStore:
    """``store`` (an App's, with its own clock) when given, which must be of the kind the
    URL names; else ``for_url(url)``."""
    if store is None:
        return for_url(url)
    if not isinstance(store, type(for_url(url))):
        raise ConfigError(f"store: a {type(store).__name__} cannot serve {redact(url)}")
    return store
