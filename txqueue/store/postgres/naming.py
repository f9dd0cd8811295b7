"""A database's name among several that one fleet of workers serves (migration 20)."""

from __future__ import annotations

import psycopg

from ...errors import ConfigError, SchemaError
from .connection import QUERIES, Caller, PgConnection, errors


class Naming:
    """The name ``txqueue init`` recorded in the database, which enqueues read to wake the
    workers of that database."""

    def database_name(self, conn: Caller) -> str | None:
        """This database's name, None if it has none (the only one), on any connection to
        it, in its transaction."""
        with errors("database name"):
            try:
                row = conn.execute(QUERIES["database_name"], prepare=False).fetchone()
            except psycopg.errors.UndefinedTable:
                raise SchemaError(
                    "database name: its txqueue tables are older than this txqueue; run "
                    "`txqueue init` with its name"
                ) from None
        return None if row is None else str(row[0])

    def name_database(self, conn: PgConnection, name: str) -> None:
        """Record ``name`` as this database's, unless it has another (ConfigError: an enqueue
        reading the old one would wake the wrong workers)."""
        with errors("naming the database"):
            row = conn.execute(QUERIES["name_database"], {"name": name}).fetchone()
        held = None if row is None else row[0]
        if held != name:
            raise ConfigError(
                f"databases: {name!r} is named {held!r} in its txqueue_database table; a "
                "database keeps one name (two names for one URL, or a mistyped one?)"
            )
