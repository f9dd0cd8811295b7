"""The steps a running task's handler records (``ctx.step``) and reads back, and the
signals its waits take (``ctx.wait_for``)."""

from __future__ import annotations

import json
import sqlite3
import uuid
from typing import Any

from ...core.fields import CHILD_KEYS
from ...errors import StoreError
from ..records import StepDone
from .connection import QUERIES, Clock, _ids, _immediate, errors


class Steps:
    """The steps a running task's handler records and reads back."""

    clock: Clock

    def record_step(
        self, conn: sqlite3.Connection, step: StepDone, in_transaction: bool = False
    ) -> bool:
        """Append ``step`` to its task's steps, if its attempt still holds the task; in the
        transaction of an atomic step (``in_transaction``), which StoreError refuses if the
        step's function ended it."""
        if in_transaction and not conn.in_transaction:
            raise StoreError(
                f"step {step.name!r}: its function ended the transaction on conn itself; "
                "its work was committed without its record"
            )
        params = step._asdict() | {"id": str(step.id), "now": self.clock.now()}
        with errors("step"), _immediate(conn):
            row = conn.execute(QUERIES["record_step"], params).fetchone()
        return row is not None

    def recorded_steps(self, conn: sqlite3.Connection, task_id: uuid.UUID) -> list[dict[str, Any]]:
        """The steps recorded for the task, in their order: ``{name, result, at, took,
        attempt}`` each, times in Unix seconds."""
        with errors("step"):
            row = conn.execute(QUERIES["recorded_steps"], (str(task_id),)).fetchone()
        steps: list[dict[str, Any]] = [] if row is None or row[0] is None else json.loads(row[0])
        return steps

    def take_signal(
        self, conn: sqlite3.Connection, task_id: uuid.UUID, key: str
    ) -> tuple[bool, str | None]:
        """Take the oldest signal of ``key``, in the caller's transaction: (True, its payload
        as JSON text), or (False, None) if none was kept."""
        with errors("wait for a signal"):
            row = conn.execute(QUERIES["take_signal"], (key,)).fetchone()
        return (False, None) if row is None else (True, row[0])

    def _may_have_parked(self, conn: sqlite3.Connection) -> bool:
        with errors("wake parked tasks"):
            row = conn.execute(QUERIES["parked_due"], {"now": self.clock.now()}).fetchone()
        return bool(row and row[0])

    def due_parked(self, conn: sqlite3.Connection, limit: int) -> list[uuid.UUID]:
        params = {"now": self.clock.now(), "limit": limit}
        return [uuid.UUID(r[0]) for r in conn.execute(QUERIES["due_parked"], params).fetchall()]

    def keep_signal(self, conn: sqlite3.Connection, arg: tuple[str, str | None]) -> list[uuid.UUID]:
        key, payload = arg
        params = {"key": key, "payload": payload, "now": self.clock.now()}
        conn.execute(QUERIES["keep_signal"], params)
        return [uuid.UUID(r[0]) for r in conn.execute(QUERIES["parked_on"], (key,)).fetchall()]

    def tell_parents(
        self, conn: sqlite3.Connection, ids: list[uuid.UUID]
    ) -> list[tuple[uuid.UUID, str]]:
        params = children_ended(ids, self.clock.now())
        conn.execute(QUERIES["forget_ends"], params)
        conn.execute(QUERIES["tell_parents"], params)
        rows = conn.execute(QUERIES["parked_on_any"], params).fetchall()
        return [(uuid.UUID(r[0]), r[1]) for r in rows]

    def prune_signals(self, conn: sqlite3.Connection, age: float) -> int:
        """Delete the signals no wait took in ``age`` seconds; how many."""
        with errors("prune signals"), _immediate(conn):
            since = self.clock.now() - age
            return conn.execute(QUERIES["prune_signals"], {"since": since}).rowcount


def children_ended(ids: list[uuid.UUID], now: float) -> dict[str, Any]:
    """The parameters of ``forget_ends``, ``tell_parents`` and ``parked_on_any`` (the
    asyncio store's too)."""
    return {"ids": _ids(ids), "keys": json.dumps([f"{CHILD_KEYS}{i}" for i in ids]), "now": now}
