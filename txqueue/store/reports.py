"""The records the stores report to the tools that watch them: ``txqueue status``'s counts,
the dashboard's rows and pages, and what holds the database's vacuum horizon."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from ..core.stored import TaskInfo


class StatusRow(NamedTuple):
    """``txqueue status``'s count of one queue's tasks in one state."""

    queue: str
    state: str
    tasks: int
    oldest_ripe: float | None  # age in seconds of the oldest ripe pending task


class Unhandled(NamedTuple):
    """The workers alive now, and the pending tasks none of them has a handler for."""

    workers: int
    pending: list[tuple[str, str, int]]  # (queue, name, count)


# The dashboard's reads. Each looks at a bounded number of rows through an index, so a
# table of millions answers as fast as a small one; counts that reach their cap are
# lower bounds.
class CountRow(NamedTuple):
    """One queue's tasks in one state, among at most ``cap`` tasks of each state (the
    newest finished ones)."""

    queue: str
    state: str
    tasks: int
    ripe: int
    oldest_ripe: float | None  # age in seconds


class RateRow(NamedTuple):
    """Tasks that finished in ``state`` in the minute ``minutes_ago`` whole minutes ago."""

    state: str
    minutes_ago: int
    tasks: int


@dataclass(frozen=True, slots=True)
class WorkerRow:
    worker_id: str
    queues: list[str]
    started_at: datetime
    seen_at: datetime


@dataclass(frozen=True, slots=True)
class Page:
    """Tasks newest first, and where the next page starts (None: there is no older task)."""

    tasks: list[TaskInfo]
    older: uuid.UUID | None


HOLDER_BACKEND = "backend"
HOLDER_SLOT = "slot"
HOLDER_PREPARED = "prepared"


@dataclass(frozen=True, slots=True)
class HorizonHolder:
    """What holds the vacuum horizon of the database furthest back: a session (or a
    walsender, for a standby's ``hot_standby_feedback``), a replication slot, or a prepared
    transaction. Vacuum cannot remove a row version deleted after ``xmin``.

    ``since`` and ``seconds`` are how long it has held it, where PostgreSQL keeps a time: a
    session's transaction start (hidden from roles without ``pg_read_all_stats`` for other
    users' sessions, as are ``state``, ``client`` and ``backend_type``), a prepared
    transaction's; None for a slot or a walsender, whose xmin carries no time.
    """

    kind: str  # HOLDER_BACKEND | HOLDER_SLOT | HOLDER_PREPARED
    xmin: str  # the transaction id held
    xid_age: int  # transactions begun since
    seconds: float | None
    since: datetime | None
    pid: int | None  # a session's; a slot's when active
    application: str | None
    user: str | None  # a session's role, a prepared transaction's owner
    client: str | None  # a session's address
    state: str | None  # a session's: active, idle in transaction, ...
    backend_type: str | None  # client backend, walsender, ...
    name: str | None  # a slot's name, a prepared transaction's gid
    active: bool | None  # a slot's: a standby or consumer is connected to it
