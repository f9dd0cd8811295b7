"""Task management: retry, cancel, look up, list, delete a queue's tasks, and the status counts."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, fields, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from ...core.stored import Event, TaskEvent, TaskInfo, info_timeline, recorded
from ...core.task import TaskState
from ...operations.filters import DeadLetterGroup, TaskFilter
from ...tasks import progress
from ..reads import Dialect
from ..records import HistoryFilter
from ..reports import StatusRow
from ..transitions import retriable
from .connection import QUERIES, Clock, _ids, _immediate, _time, errors

T = TypeVar("T")

_INFO_TIMES = {
    "run_at",
    "start_time",
    "expires_at",
    "finished_at",
    "created_at",
    "updated_at",
    "start_by",
}
_INFO_JSON = {"payload", "result", "errors"}


def task_info(row: Sequence[Any]) -> TaskInfo:
    """A row of the columns of ``TaskInfo``, in its order (``get_task`` and the others
    that select them)."""
    values = []
    for f, value in zip(fields(TaskInfo), row, strict=True):
        if f.name == "id" or (f.name == "workflow_id" and value is not None):
            value = uuid.UUID(value)
        elif f.name in _INFO_TIMES:
            value = _time(value)
        elif f.name in _INFO_JSON:
            value = None if value is None else json.loads(value)
        elif f.name == "cancel_requested":
            value = bool(value)
        elif f.name == "progress":
            value = progress.decode(value)
        elif f.name == "events":
            stored, value = json.loads(value), []
        elif f.name == "steps":
            value = recorded(value)
        values.append(value)
    info = TaskInfo(*values)
    return replace(info, events=info_timeline(stored, info))


class Manage:
    clock: Clock

    def _retriable(
        self, conn: sqlite3.Connection, ids: Sequence[uuid.UUID]
    ) -> list[tuple[uuid.UUID, TaskState]]:
        rows = conn.execute(QUERIES["retriable"], {"ids": _ids(ids)}).fetchall()
        return [(i, state) for i, state, _ in retriable(rows)]  # the unique index holds keys

    def _changing(self, conn: sqlite3.Connection, action: str, block: Callable[[], T]) -> T:
        with errors(action), _immediate(conn):
            return block()

    def _changing_theirs(self, conn: sqlite3.Connection, action: str, block: Callable[[], T]) -> T:
        # Its first write opens the connection's transaction, as any statement of theirs.
        with errors(action):
            return block()

    def history(self, conn: sqlite3.Connection, filters: HistoryFilter) -> list[TaskEvent]:
        """Events of the tasks kept, newest first, matching ``filters``."""
        since, until = filters.since, filters.until
        params = {
            **asdict(filters),
            "since": None if since is None else since.timestamp(),
            "until": None if until is None else until.timestamp(),
        }
        with errors("history"):
            rows = conn.execute(QUERIES["history"], params).fetchall()
        return [TaskEvent(uuid.UUID(i), n, q, Event.of_json(json.loads(e))) for i, n, q, e in rows]

    def listen_finished(self, conn: sqlite3.Connection) -> None:
        """SQLite sends no notifications: a waiter polls."""
        return None

    def dead_letters(
        self, conn: sqlite3.Connection, queue: str | None, limit: int
    ) -> list[DeadLetterGroup]:
        """The failed tasks grouped by name and last error type, the biggest group first."""
        with errors("dead letters"):
            rows = conn.execute(QUERIES["dead_letters"], {"queue": queue, "limit": limit})
            return [
                DeadLetterGroup(name, error, int(n), _at(first), _at(last), message, queue)
                for name, error, n, first, last, message in rows.fetchall()
            ]

    def delete_queue(self, conn: sqlite3.Connection, queue: str) -> int:
        """Delete every task of ``queue``, whatever its state (the demo's, when it is done)."""
        with errors("delete queue"):
            return conn.execute(QUERIES["delete_queue"], (queue,)).rowcount

    def status(self, conn: sqlite3.Connection) -> list[StatusRow]:
        """(queue, state, count, age in seconds of the oldest ripe pending task) per group."""
        with errors("status"):
            rows = conn.execute(QUERIES["status"], {"now": self.clock.now()}).fetchall()
        return [StatusRow(*r) for r in rows]


def _seconds(when: datetime | None) -> float | None:
    return None if when is None else when.timestamp()


def filter_params(where: TaskFilter, states: Sequence[TaskState] | None) -> dict[str, Any]:
    """The ``task_filter`` part's parameters for ``where``, its states as ``states``."""
    return {
        "states": None if states is None else json.dumps([str(s) for s in states]),
        "queue": where.queue,
        "name": where.name,
        "created_after": _seconds(where.created_after),
        "created_before": _seconds(where.created_before),
        "finished_after": _seconds(where.finished_after),
        "finished_before": _seconds(where.finished_before),
        "workflow": None if where.workflow is None else str(where.workflow),
        "payload": where.payload_json(),
        "error": where.error,
        "failed_with": where.failed_with,
    }


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


DIALECT = Dialect(QUERIES, errors, task_info, filter_params, str, _ids, uuid.UUID, _seconds, _at)
"""The SQLite statements of the reads both stores share (``reads``): ids are text in the
file."""
