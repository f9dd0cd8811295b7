"""The opt-in index for searches by payload (``TaskFilter(payload=...)``): GIN with
``jsonb_path_ops``, which answers ``payload @> …``. Built partition by partition with
CREATE INDEX CONCURRENTLY, so that enqueues and claims go on while it is made."""

from __future__ import annotations

from psycopg import sql

from .connection import QUERIES, PgConnection, errors


def _statement(name: str, part: str) -> sql.Composed:
    return sql.SQL(QUERIES[name]).format(
        index=sql.Identifier(f"{part}_payload"), part=sql.Identifier(part)
    )


class PayloadIndex:
    def payload_index(self, conn: PgConnection, *, drop: bool = False) -> None:
        """Create the index (or ``drop`` it) on a connection in autocommit. Safe to run
        again: it finishes what an interrupted run left."""
        with errors("payload index"):
            if drop:
                conn.execute(QUERIES["payload_index_drop"])
                return
            conn.execute(QUERIES["payload_index_parent"])
            for part, valid in conn.execute(QUERIES["payload_index_parts"]).fetchall():
                if valid is False:  # left by an interrupted run
                    conn.execute(_statement("payload_index_drop_part", part))
                if not valid:
                    conn.execute(_statement("payload_index_create", part))
                conn.execute(_statement("payload_index_attach", part))
