"""The SQLite store (``SqliteStore``): one database file shared by the processes of one
machine."""

from .connection import Clock, errors, path
from .store import SqliteStore

__all__ = ["Clock", "SqliteStore", "errors", "path"]
