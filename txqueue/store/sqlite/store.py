"""The SQLite store: the same operations as the PostgreSQL store, for one database file
shared by the processes of one machine."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from ...filters import TaskFilter
from ...task import TaskInfo, TaskState
from ..reads import TaskReads
from ..transitions import Transitions
from .claims import Claims
from .clock import MovedClock
from .connection import QUERIES, Clock, Connection, errors
from .connection import clock as default_clock
from .dashboard import Dashboard
from .enqueue import Enqueue
from .horizon import VacuumHorizon
from .leaders import Leaders
from .manage import Manage, filter_params, task_info
from .presence import Presence
from .queues import Queues
from .schedules import Schedules
from .slots import Slots
from .upkeep import Upkeep
from .workflows import Workflows


# Enqueue comes last: Upkeep and Schedules build on it, so it must follow them in the MRO.
class SqliteStore(
    Connection,
    Claims,
    Upkeep,
    Manage,
    Queues,
    Presence,
    Schedules,
    Leaders,
    Dashboard,
    VacuumHorizon,
    Slots,
    MovedClock,
    Enqueue,
    Workflows,
    TaskReads,
    Transitions[sqlite3.Connection, sqlite3.Connection],
):
    """The same operations as the PostgreSQL store, for one database file shared by the
    processes of one machine.

    SQLite has one writer at a time, so every claim, outcome and recovery is one short
    ``BEGIN IMMEDIATE`` transaction: it takes the write lock first, reads, decides, writes and
    commits, and no other process can claim the same row in between. Connections opened
    here are in autocommit mode, in WAL (readers never wait for the writer), with
    ``synchronous=NORMAL`` and a busy timeout, so a process waiting for the lock waits
    instead of failing with "database is locked". Times are Unix seconds from ``clock``:
    this machine's, moved only by tests that travel in time (the default, when
    none is given: ``connection.clock``).
    """

    queries = QUERIES

    def _errors(self, action: str) -> AbstractContextManager[None]:
        return errors(action)

    def _task_info(self, row: Sequence[Any]) -> TaskInfo:
        return task_info(row)

    def _id_param(self, task_id: uuid.UUID) -> object:
        return str(task_id)  # ids are text in the file

    def _id_value(self, value: Any) -> uuid.UUID:
        return uuid.UUID(value)

    def _ids_param(self, ids: Sequence[uuid.UUID]) -> object:
        return json.dumps([str(i) for i in ids])

    def _filter_params(
        self, where: TaskFilter, states: Sequence[TaskState] | None
    ) -> dict[str, Any]:
        return filter_params(where, states)

    def __init__(self, clock: Clock | None = None) -> None:
        self.clock = default_clock if clock is None else clock


if TYPE_CHECKING:
    from ..protocols import Store

    _check: Store[sqlite3.Connection, sqlite3.Connection] = SqliteStore()
