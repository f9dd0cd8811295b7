"""The PostgreSQL store (``PostgresStore``) and what other layers need of its connections."""

from .connection import Caller, PgConnection, errors, pooled
from .store import PostgresStore

__all__ = ["Caller", "PgConnection", "PostgresStore", "errors", "pooled"]
