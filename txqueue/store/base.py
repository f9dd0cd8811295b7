"""What every store offers: the records they exchange with the rest of txqueue, and the
``Store`` protocol that the ``postgres`` and ``sqlite`` modules both satisfy."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Protocol

from ..errors import StoreError
from ..task import Task, TaskInfo


@dataclass(frozen=True, slots=True)
class Inserted:
    """An enqueue's outcome: the task's id, whether this call created it (False: a live task
    held the unique key), and the transaction id for its wake-up (None where the store has
    no way to look a transaction up later, as on SQLite)."""

    id: uuid.UUID
    new: bool
    xid: str | None = None


@dataclass(frozen=True, slots=True)
class Claimed:
    """A task this worker now holds, attempt ``attempts``, for ``timeout`` seconds."""

    id: uuid.UUID
    queue: str
    name: str
    payload: Any
    attempts: int
    max_attempts: int
    timeout: float
    waited: float = 0.0  # seconds from ripe (enqueued, or run_at if later) to the claim
    trace_context: str | None = None  # JSON: the enqueuing span's propagation headers


@dataclass(frozen=True, slots=True)
class Why:
    """Why a delivered id was not claimed: its transaction's status and the row, if visible."""

    xact_status: str | None  # 'committed', 'aborted', 'in progress', or None (unknown)
    state: str | None  # None: no row visible
    run_at: datetime | None
    ripe: bool
    name: str | None = None  # the task's name, when its row is visible


@dataclass(frozen=True, slots=True)
class Outcome:
    """An attempt's result, written only if the attempt still holds the task (fencing)."""

    id: uuid.UUID
    attempt: int
    worker_id: str
    state: str  # succeeded | pending (retry) | failed | cancelled
    result: str | None = None  # JSON text
    error: dict[str, Any] | None = None
    retry_in: float = 0.0


@dataclass(frozen=True, slots=True)
class ClaimDefaults:
    """What a claim fills in from the worker's registry for rows that leave it unset.

    ``per_name`` maps a task name to ``{"timeout", "max_attempts", "on_lease_expired"}``;
    a claim takes only tasks whose name is there (those the worker has a handler for).
    """

    per_name: dict[str, dict[str, Any]]
    timeout: float
    max_attempts: int
    per_name_json: str = field(init=False)  # encoded once per worker, not per claim
    names: list[str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "per_name_json", json.dumps(self.per_name))
        object.__setattr__(self, "names", list(self.per_name))


@dataclass(frozen=True, slots=True)
class Recovered:
    """A task taken back from a worker whose lease expired, and what became of it."""

    id: uuid.UUID
    queue: str
    name: str
    payload: Any
    state: str  # pending (retried) | failed | cancelled
    attempts: int
    policy: str  # retry | abandon | compensate
    lost_worker: str | None
    xid: str | None  # the recovering transaction: a wake-up for a retried task carries it
    compensation: tuple[str, Inserted] | None = None  # (queue, the task enqueued)


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """A periodic task as the database keeps it: its definition as a worker last wrote it,
    and the newest slot enqueued."""

    name: str
    task: str
    queue: str
    cron: str
    timezone: str
    last_slot: datetime


Moved = tuple[uuid.UUID, str, str | None]
"""A task put back to pending: (id, queue, xid for its wake-up)."""

StatusRow = tuple[str, str, int, float | None]
"""(queue, state, count, age in seconds of the oldest ripe pending task)."""

Unhandled = tuple[int, list[tuple[str, str, int]]]
"""The workers alive now, and (queue, name, pending count) for the pending tasks none of
them has a handler for."""

# The dashboard's reads. Each looks at a bounded number of rows through an index, so a
# table of millions answers as fast as a small one; counts that reach their cap are
# lower bounds.
CountRow = tuple[str, str, int, int, float | None]
"""(queue, state, tasks, ripe ones of them, age in seconds of the oldest ripe) among at
most ``cap`` tasks of each state (the newest finished ones)."""
RateRow = tuple[str, int, int]
"""(state, whole minutes ago, tasks that finished in that state in that minute)."""


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


@dataclass(frozen=True, slots=True)
class Leadership:
    """Who holds a role after asking for it, and for how many more seconds (negative: the
    lease has lapsed and is anyone's)."""

    holder: str
    left: float


WORKER_SEEN_EVERY = 10.0
"""Seconds between a running worker's refreshes of its ``txqueue_workers`` row."""
WORKER_ALIVE_WITHIN = 3 * WORKER_SEEN_EVERY
"""A worker whose row is older than this has stopped (or cannot reach the database)."""
WORKER_FORGOTTEN_AFTER = 3600.0
"""The row of a worker that died without deleting it is kept this long, for whoever looks."""


@cache
def schema_text(filename: str) -> str:
    """A schema file: packaged inside the wheel, or at the top of a source checkout."""
    packaged = resources.files("txqueue").joinpath(filename)
    if packaged.is_file():
        return packaged.read_text(encoding="utf-8")
    return (Path(__file__).resolve().parents[2] / filename).read_text(encoding="utf-8")


_MIGRATION_RE = re.compile(r"^-- migration: (\d+)\s*$", re.MULTILINE)


def migrations(text: str) -> tuple[str, list[tuple[int, str]]]:
    """A schema file split into its preamble and its numbered migrations, in order."""
    parts = _MIGRATION_RE.split(text)
    preamble, rest = parts[0], parts[1:]
    numbered = [(int(rest[i]), rest[i + 1]) for i in range(0, len(rest), 2)]
    versions = [v for v, _ in numbered]
    if versions != sorted(set(versions)):
        raise StoreError("schema: migration numbers must be unique and increasing")
    return preamble, numbered


class AsyncStore(Protocol):
    """Enqueueing on an application's asyncio connection (``postgres.aio``, ``sqlite.aio``),
    given the adapter ``connections.resolve_async`` made of it."""

    async def insert_task(self, conn: Any, task: Task, trace: str | None = None) -> Inserted: ...
    async def insert_tasks(
        self, conn: Any, tasks: Sequence[Task], trace: str | None = None
    ) -> list[Inserted]: ...
    async def get_task(self, conn: Any, task_id: uuid.UUID) -> TaskInfo | None: ...


class Store(Protocol):
    """The operations txqueue needs from a database. Each takes a connection of the store's
    own kind: from ``connect`` for txqueue's own work, or the caller's for enqueues and
    task management (in the caller's transaction, never committing it)."""

    def connect(self, url: str, *, application_name: str = ..., create: bool = ...) -> Any: ...
    def is_connection_error(self, exc: BaseException) -> bool: ...
    def is_closed(self, conn: Any) -> bool: ...
    def apply_schema(self, conn: Any) -> list[int]: ...
    def transaction(self, conn: Any) -> AbstractContextManager[Any]: ...

    def insert_task(self, conn: Any, task: Task, trace: str | None = None) -> Inserted: ...
    def insert_tasks(
        self, conn: Any, tasks: Sequence[Task], trace: str | None = None
    ) -> list[Inserted]: ...

    def claim_ids(
        self, conn: Any, ids: Sequence[uuid.UUID], worker_id: str, defaults: ClaimDefaults
    ) -> list[Claimed]: ...
    def claim_ripe(
        self, conn: Any, queue: str, limit: int, worker_id: str, defaults: ClaimDefaults
    ) -> list[Claimed]: ...
    def why_unclaimed(
        self, conn: Any, items: Sequence[tuple[uuid.UUID, str | None]]
    ) -> dict[uuid.UUID, Why]: ...
    def record_outcomes(self, conn: Any, outcomes: Sequence[Outcome]) -> dict[uuid.UUID, str]: ...
    def atomic(self, conn: Any) -> AbstractContextManager[None]: ...
    def record_atomic(self, conn: Any, outcome: Outcome) -> bool: ...
    def extend_leases(
        self, conn: Any, worker_id: str, leases: Sequence[tuple[uuid.UUID, int, float]]
    ) -> set[uuid.UUID]: ...
    def release(
        self, conn: Any, worker_id: str, held: Sequence[tuple[uuid.UUID, int]]
    ) -> dict[uuid.UUID, str]: ...
    def give_back(
        self, conn: Any, worker_id: str, held: Sequence[tuple[uuid.UUID, int]]
    ) -> int: ...
    def cancel_requested(
        self, conn: Any, worker_id: str, ids: Sequence[uuid.UUID]
    ) -> set[uuid.UUID]: ...

    def now(self, conn: Any) -> datetime: ...
    def keep_schedules(self, conn: Any, rows: Sequence[ScheduleRow]) -> None: ...
    def last_slots(
        self, conn: Any, names: Sequence[str]
    ) -> tuple[datetime, dict[str, datetime]]: ...
    def fire_schedule(
        self, conn: Any, name: str, seen: datetime, slot: datetime, tasks: Sequence[Task]
    ) -> list[Inserted] | None: ...
    def list_schedules(self, conn: Any) -> list[ScheduleRow]: ...

    def stale_queues(self, conn: Any, grace: float) -> list[str]: ...
    def renotify(
        self, conn: Any, grace: float, queues: Sequence[str], limit: int
    ) -> list[Moved]: ...
    def recover_expired(
        self, conn: Any, limit: int, default_max_attempts: int
    ) -> list[Recovered]: ...
    def prune(self, conn: Any, state: str, age: float, limit: int) -> int: ...

    def retry_ids(self, conn: Any, ids: Sequence[uuid.UUID]) -> list[Moved]: ...
    def retry_failed(
        self, conn: Any, queue: str | None, after: uuid.UUID, limit: int
    ) -> list[Moved]: ...
    def cancel(self, conn: Any, task_id: uuid.UUID) -> str | None: ...
    def get_task(self, conn: Any, task_id: uuid.UUID) -> TaskInfo | None: ...
    def listen_finished(self, conn: Any) -> Callable[[uuid.UUID, float], None] | None: ...
    def list_tasks(
        self, conn: Any, *, state: str | None, queue: str | None, name: str | None, limit: int
    ) -> list[TaskInfo]: ...
    def delete_queue(self, conn: Any, queue: str) -> int: ...
    def status(self, conn: Any) -> list[StatusRow]: ...
    def worker_seen(
        self, conn: Any, worker_id: str, queues: Sequence[str], names: Sequence[str]
    ) -> None: ...
    def worker_gone(self, conn: Any, worker_id: str) -> None: ...
    def unhandled(self, conn: Any) -> Unhandled: ...
    def queue_counts(self, conn: Any, cap: int) -> list[CountRow]: ...
    def finished_per_minute(self, conn: Any, cap: int) -> list[RateRow]: ...
    def failing_names(self, conn: Any, cap: int, limit: int) -> list[tuple[str, int]]: ...
    def browse(
        self,
        conn: Any,
        *,
        state: str | None,
        queue: str | None,
        name: str | None,
        before: uuid.UUID | None,
        window: int,
        limit: int,
    ) -> Page: ...
    def running_tasks(self, conn: Any, limit: int) -> list[TaskInfo]: ...
    def lead(self, conn: Any, role: str, holder: str, seconds: float) -> Leadership: ...
    def resign(self, conn: Any, role: str, holder: str) -> None: ...
    def workers(self, conn: Any) -> list[WorkerRow]: ...
