"""The steps a running task's handler records (``ctx.step``) and reads back."""

from __future__ import annotations

import json
import uuid
from typing import Any

from ..records import StepDone
from .connection import QUERIES, PgConnection, errors


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
