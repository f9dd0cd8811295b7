"""The caller's psycopg2 connection, as txqueue's statements on the caller's connection use a
psycopg 3 one: ``execute`` returning a cursor, ``autocommit``, ``transaction()``.

psycopg2 is the application's (``txqueue[psycopg2]``); it is imported only when such a
connection is passed in. Its errors are raised as the matching psycopg ones, so the store
reports them as it reports its own; UUIDs go out as text (the statements cast them) and
come back as ``uuid.UUID`` through a typecaster on txqueue's own cursors alone, leaving
the application's adaptation as it was.
"""

from __future__ import annotations

import contextlib
import itertools
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg.rows
import psycopg2
import psycopg2.extensions

_UUID_OID = 2950
_UUID = psycopg2.extensions.new_type(
    (_UUID_OID,), "TXQUEUE_UUID", lambda value, cursor: None if value is None else uuid.UUID(value)
)
_savepoints = itertools.count()


def _out(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, list | tuple):
        return [_out(v) for v in value]
    return value


def _as_psycopg(exc: psycopg2.Error) -> psycopg.Error:
    """The psycopg exception for a psycopg2 one: same SQLSTATE class, same message."""
    kind: type[psycopg.Error] = getattr(psycopg, type(exc).__name__, psycopg.DatabaseError)
    if exc.pgcode:
        with contextlib.suppress(KeyError):  # a SQLSTATE newer than this psycopg
            kind = psycopg.errors.lookup(exc.pgcode)
    return kind(str(exc).strip())


class Psycopg2:
    """Wraps a psycopg2 connection for the length of one txqueue call."""

    def __init__(self, conn: Any) -> None:
        self.raw = conn

    @property
    def autocommit(self) -> bool:
        return bool(self.raw.autocommit)

    def execute(self, query: str, params: Any = None, *, prepare: bool | None = None) -> Any:
        """Run ``query`` on a new cursor of the caller's connection and return it."""
        if isinstance(params, dict):
            params = {k: _out(v) for k, v in params.items()}
        elif params is not None:
            params = _out(params)
        try:
            # The plain cursor, whatever the caller's factory: rows are read by position.
            cursor = self.raw.cursor(cursor_factory=psycopg2.extensions.cursor)
            psycopg2.extensions.register_type(_UUID, cursor)
            cursor.execute(query, params)
        except psycopg2.Error as exc:
            raise _as_psycopg(exc) from exc
        return cursor

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """As psycopg 3's: a transaction, committed at the end, if none is open; a savepoint
        inside one."""
        if self.raw.info.transaction_status != psycopg2.extensions.TRANSACTION_STATUS_IDLE:
            name = f"txqueue_{next(_savepoints)}"
            self.execute(f"SAVEPOINT {name}")
            try:
                yield
            except BaseException:
                self.execute(f"ROLLBACK TO SAVEPOINT {name}")
                raise
            self.execute(f"RELEASE SAVEPOINT {name}")
            return
        if self.raw.autocommit:
            self.execute("BEGIN")
        try:
            yield
        except BaseException:
            self._end("ROLLBACK")
            raise
        self._end("COMMIT")

    def _end(self, command: str) -> None:
        if self.raw.autocommit:  # the transaction is ours, opened by a BEGIN of ours
            self.execute(command)
            return
        try:  # psycopg2's own, begun at the first statement
            self.raw.commit() if command == "COMMIT" else self.raw.rollback()
        except psycopg2.Error as exc:
            raise _as_psycopg(exc) from exc


class TupleRows:
    """A psycopg connection whose own row factory is not tuples (``dict_row``, say): the
    statements get plain tuples all the same."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.raw = conn

    @property
    def autocommit(self) -> bool:
        return self.raw.autocommit

    def execute(self, query: Any, params: Any = None, *, prepare: bool | None = None) -> Any:
        cursor = self.raw.cursor(row_factory=psycopg.rows.tuple_row)
        return cursor.execute(query, params, prepare=prepare)

    def transaction(self) -> Any:
        return self.raw.transaction()
