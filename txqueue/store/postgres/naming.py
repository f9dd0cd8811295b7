"""A database's name among several that one fleet of workers serves (migration 20)."""

from __future__ import annotations

from .connection import QUERIES, Caller, PgConnection, errors


class Naming:
    """The name ``txqueue init`` recorded in the database, which enqueues read to wake the
    workers of that database."""

    def database_name(self, conn: Caller) -> str | None:
        """This database's name, None if it has none (the only one, or a schema older
        than its table), on any connection to it, in its transaction."""
        with errors("database name"):
            [named] = conn.execute(QUERIES["database_named"], prepare=False).fetchone()
            if not named:
                return None
            row = conn.execute(QUERIES["database_name"], prepare=False).fetchone()
        return None if row is None else str(row[0])

    def name_database(self, conn: PgConnection, name: str) -> str:
        """Record ``name`` as this database's, unless it has one already; the name it has
        now (for the caller to check: one name a database)."""
        with errors("naming the database"):
            row = conn.execute(QUERIES["name_database"], {"name": name}).fetchone()
        assert row is not None
        return str(row[0])
