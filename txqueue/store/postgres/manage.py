"""Task management: retry, cancel, look up, list, delete a queue's tasks, and the status counts."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from ...errors import StoreError
from ...task import TaskInfo
from ..records import Moved, StatusRow
from .connection import QUERIES, Caller, again_if_moved, errors, retrying_moved
from .waiting import Waiting

# Ids and JSON as text, decoded here: an application's connection may load them its own
# way (Django's loads jsonb as str), and these reads must not depend on it.
_JSON = [i for i, f in enumerate(fields(TaskInfo)) if f.name in ("payload", "result", "errors")]


def task_info(row: Sequence[Any]) -> TaskInfo:
    values = list(row)
    values[0] = uuid.UUID(values[0])
    for i in _JSON:
        values[i] = None if values[i] is None else json.loads(values[i])
    return TaskInfo(*values)


def _moved(rows: Sequence[Sequence[Any]]) -> list[Moved]:
    """The tasks a retry moved; a row of NULLs (a unique key taken) fails it, and the
    savepoint around it undoes the rest."""
    if any(r[0] is None for r in rows):
        raise StoreError(
            "retry: a pending or running task holds the same unique_key; nothing was retried"
        )
    return [Moved(r[0], r[1], r[2]) for r in rows]


# --- inspection ------------------------------------------------------------------------


class Manage(Waiting):
    """Task management: retry, cancel, look up, list, delete a queue's tasks, and the
    status counts, on the caller's connection."""

    def retry_ids(self, conn: Caller, ids: Sequence[uuid.UUID]) -> list[Moved]:
        """Failed or cancelled tasks back to pending now; returns (id, queue, xid) of those
        moved."""

        def retry() -> list[Moved]:
            conn.execute(QUERIES["free_unique_keys"], {"keys": [], "ids": list(ids)})
            return _moved(conn.execute(QUERIES["retry_ids"], (list(ids),)).fetchall())

        with errors("retry"):
            return again_if_moved(conn, retry)

    def retry_failed(
        self, conn: Caller, queue: str | None, after: uuid.UUID, limit: int
    ) -> list[Moved]:
        """Up to ``limit`` failed tasks (of ``queue``, or all) with ids above ``after`` back to
        pending now, in id order."""
        params = {"queue": queue, "after": after, "limit": limit}

        def retry() -> list[Moved]:
            ids = [row[0] for row in conn.execute(QUERIES["failed_page"], params)]
            return _moved(conn.execute(QUERIES["retry_ids"], (ids,)).fetchall()) if ids else []

        with errors("retry"):
            return again_if_moved(conn, retry)

    def cancel(self, conn: Caller, task_id: uuid.UUID) -> str | None:
        """Pending: cancelled now. Running: flagged for its handler. Returns the state after,
        or None when the task is not pending or running."""
        with errors("cancel"):
            rows = retrying_moved(conn, lambda: conn.execute(QUERIES["cancel"], (task_id,)))
        row = rows[0] if rows else None
        if row is not None and row[0] == "cancelled":
            self.notify_finished(conn, [task_id])
        return None if row is None else str(row[0])

    def get_task(self, conn: Caller, task_id: uuid.UUID) -> TaskInfo | None:
        with errors("show"):
            row = conn.execute(QUERIES["get_task"], (task_id,)).fetchone()
        return None if row is None else task_info(row)

    def delete_queue(self, conn: Caller, queue: str) -> int:
        """Delete every task of ``queue``, whatever its state (the demo's, when it is done)."""
        with errors("delete queue"):
            row = conn.execute(QUERIES["delete_queue"], (queue,)).fetchone()
        return 0 if row is None else int(row[0])

    def status(self, conn: Caller) -> list[StatusRow]:
        """(queue, state, count, age in seconds of the oldest ripe pending task) per group."""
        with errors("status"):
            return [StatusRow(*r) for r in conn.execute(QUERIES["status"]).fetchall()]
