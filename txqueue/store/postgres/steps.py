"""The steps a running task's handler records (``ctx.step``) and reads back, and the
signals its waits take (``ctx.wait_for``)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from ...core.fields import CHILD_KEYS
from ...errors import ConfigError
from ..records import StepDone
from .connection import QUERIES, Caller, PgConnection, as_uuid, errors


class Steps:
    """The steps a running task's handler records and reads back."""

    def record_step(self, conn: PgConnection, step: StepDone, in_transaction: bool = False) -> bool:
        """Append ``step`` to its task's steps, if its attempt still holds the task; in the
        transaction of an atomic step (``in_transaction``: psycopg refuses a commit of the
        step's function inside it, so it is still open)."""
        with errors("step"):
            row = conn.execute(QUERIES["record_step"], step._asdict()).fetchone()
        return row is not None

    def recorded_steps(self, conn: PgConnection, task_id: uuid.UUID) -> list[dict[str, Any]]:
        """The steps recorded for the task, in their order: ``{name, result, at, took,
        attempt}`` each, times in Unix seconds."""
        with errors("step"):
            row = conn.execute(QUERIES["recorded_steps"], (task_id,)).fetchone()
        steps: list[dict[str, Any]] = [] if row is None or row[0] is None else json.loads(row[0])
        return steps

    def take_signal(
        self, conn: PgConnection, task_id: uuid.UUID, key: str
    ) -> tuple[bool, str | None]:
        """Take the oldest signal of ``key`` for task ``task_id``'s wait, in the caller's
        transaction: (True, its payload as JSON text), or (False, None) if none was kept."""
        with errors("wait for a signal"):
            params = {"id": task_id, "key": key}
            check_locked(conn.execute(QUERIES["lock_wait"], params).fetchone())
            row = conn.execute(QUERIES["take_signal"], {"key": key}).fetchone()
        return (False, None) if row is None else (True, row[0])

    def due_parked(self, conn: PgConnection, limit: int) -> list[uuid.UUID]:
        rows = conn.execute(QUERIES["due_parked"], {"limit": limit}).fetchall()
        return [r[0] for r in rows]

    def keep_signal(self, conn: Caller, arg: tuple[str, str | None]) -> list[uuid.UUID]:
        key, payload = arg
        check_locked(conn.execute(QUERIES["lock_signal"], {"key": key}).fetchone())
        rows = conn.execute(QUERIES["keep_signal"], {"key": key, "payload": payload}).fetchall()
        return [as_uuid(r[0]) for r in rows]

    def tell_parents(self, conn: Caller, ids: list[uuid.UUID]) -> list[tuple[uuid.UUID, str]]:
        params = children_ended(ids)
        conn.execute(QUERIES["lock_signals"], params)
        rows = conn.execute(QUERIES["tell_parents"], params).fetchall()
        return [(as_uuid(r[0]), r[1]) for r in rows]

    def prune_signals(self, conn: PgConnection, age: float) -> int:
        """Delete the signals no wait took in ``age`` seconds; how many."""
        with errors("prune signals"):
            return conn.execute(QUERIES["prune_signals"], {"age": age}).rowcount


def check_locked(row: Any) -> None:
    """ConfigError unless ``lock_signal`` took the key's lock (read committed)."""
    if row is not None and row[0] is not None:
        raise ConfigError(
            f"signal: the transaction is {row[0]}; a signal or a wait needs read committed "
            "(PostgreSQL's default), whose statements see what committed while they waited"
        )


def children_ended(ids: list[uuid.UUID]) -> dict[str, Any]:
    """The parameters of ``lock_signals`` and ``tell_parents`` (the asyncio store's too)."""
    return {"ids": ids, "keys": [f"{CHILD_KEYS}{i}" for i in ids]}
