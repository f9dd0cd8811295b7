"""The stores: PostgreSQL and SQLite, each a module of the same functions (``base.Store``)."""

from __future__ import annotations

from . import postgres, sqlite
from .base import Store


def for_url(url: str) -> Store:
    """The store for a URL as ``config.database_url`` returns it."""
    return sqlite if url.startswith("sqlite:") else postgres
