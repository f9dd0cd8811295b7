"""Task management: retry, cancel, look up, list, delete a queue's tasks, and the status counts."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, fields, replace
from datetime import datetime
from typing import Any

from ...core.stored import Event, TaskEvent, TaskInfo, info_timeline, recorded
from ...core.task import TaskState
from ...operations.filters import DeadLetterGroup, TaskFilter
from ...tasks import progress
from ..reads import Dialect
from ..records import HistoryFilter
from ..reports import StatusRow
from ..transitions import kept, keyed, retriable
from .connection import QUERIES, Caller, T, again_if_moved, as_uuid, errors
from .waiting import Waiting

# Ids and JSON as text, decoded here: an application's connection may load them its own
# way (Django's loads jsonb as str), and these reads must not depend on it.
_JSON = [i for i, f in enumerate(fields(TaskInfo)) if f.name in ("payload", "result", "errors")]
_PROGRESS = [f.name for f in fields(TaskInfo)].index("progress")


def task_info(row: Sequence[Any]) -> TaskInfo:
    values = list(row)
    values[0] = uuid.UUID(values[0])
    for i in _JSON:
        values[i] = None if values[i] is None else json.loads(values[i])
    stored, values[-3] = json.loads(values[-3]), []
    values[-2] = None if values[-2] is None else uuid.UUID(values[-2])
    values[-1] = recorded(values[-1])
    values[_PROGRESS] = progress.decode(values[_PROGRESS])
    info = TaskInfo(*values)
    return replace(info, events=info_timeline(stored, info))


# --- inspection ------------------------------------------------------------------------


class Manage(Waiting):
    """Task management: retry, cancel, look up, list, delete a queue's tasks, and the
    status counts, on the caller's connection."""

    def _retriable(
        self, conn: Caller, ids: Sequence[uuid.UUID]
    ) -> list[tuple[uuid.UUID, TaskState]]:
        conn.execute(QUERIES["free_unique_keys"], {"keys": [], "ids": list(ids)})
        conn.execute(QUERIES["bring_back"], (list(ids),))
        found = retriable(conn.execute(QUERIES["retriable"], (list(ids),)).fetchall())
        keys = keyed(found)
        taken = {r[0] for r in conn.execute(QUERIES["take_keys"], (keys,))} if keys else set()
        return kept(found, taken)

    def _changing(self, conn: Caller, action: str, block: Callable[[], T]) -> T:
        with errors(action):
            return again_if_moved(conn, block)

    def _changing_theirs(self, conn: Caller, action: str, block: Callable[[], T]) -> T:
        return self._changing(conn, action, block)  # a savepoint in theirs

    def history(self, conn: Caller, filters: HistoryFilter) -> list[TaskEvent]:
        """Events of the tasks kept, newest first, matching ``filters``."""
        with errors("history"):
            rows = conn.execute(QUERIES["history"], asdict(filters)).fetchall()
        return [TaskEvent(as_uuid(i), n, q, Event.of_json(json.loads(e))) for i, n, q, e in rows]

    def dead_letters(self, conn: Caller, queue: str | None, limit: int) -> list[DeadLetterGroup]:
        """The failed tasks grouped by name and last error type, the biggest group first."""
        with errors("dead letters"):
            rows = conn.execute(QUERIES["dead_letters"], {"queue": queue, "limit": limit})
            return [
                DeadLetterGroup(name, error, int(n), first, last, message, queue)
                for name, error, n, first, last, message in rows.fetchall()
            ]

    def delete_queue(self, conn: Caller, queue: str) -> int:
        """Delete every task of ``queue``, whatever its state (the demo's, when it is done)."""
        with errors("delete queue"):
            row = conn.execute(QUERIES["delete_queue"], (queue,)).fetchone()
        return 0 if row is None else int(row[0])

    def status(self, conn: Caller) -> list[StatusRow]:
        """(queue, state, count, age in seconds of the oldest ripe pending task) per group."""
        with errors("status"):
            return [StatusRow(*r) for r in conn.execute(QUERIES["status"]).fetchall()]


def filter_params(where: TaskFilter, states: Sequence[TaskState] | None) -> dict[str, Any]:
    """The ``task_filter`` part's parameters for ``where``, its states as ``states``."""
    return {
        "states": None if states is None else [str(s) for s in states],
        "queue": where.queue,
        "name": where.name,
        "created_after": where.created_after,
        "created_before": where.created_before,
        "finished_after": where.finished_after,
        "finished_before": where.finished_before,
        "workflow": where.workflow,
        "payload": where.payload_json(),
        "error": where.error,
        "failed_with": where.failed_with,
    }


def _id(task_id: uuid.UUID) -> uuid.UUID:
    return task_id  # psycopg takes uuid.UUID


def _time(when: datetime | None) -> datetime | None:
    return when  # every driver takes an aware datetime for a timestamptz


def _datetime(value: datetime) -> datetime:
    return value  # and returns one


DIALECT = Dialect(QUERIES, errors, task_info, filter_params, _id, list, as_uuid, _time, _datetime)
"""The PostgreSQL statements of the reads both stores share (``reads``)."""
