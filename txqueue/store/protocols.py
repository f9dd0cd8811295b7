"""What txqueue needs from a database, split by who asks: small protocols that
``PostgresStore`` and ``SqliteStore`` both satisfy, generic in the connection types.

``C`` is txqueue's own connection (from ``connect``: autocommit, one statement a
transaction); ``A`` is an application's connection, in the caller's transaction, which
txqueue never commits. On PostgreSQL ``A`` is wider than ``C`` (psycopg2 and row-factory
adapters look like a psycopg connection); on SQLite both are a ``sqlite3.Connection``.

What each part of a worker and the tools use of them is in ``roles``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol, TypeVar

from ..core.lifecycle import Transition
from ..core.stored import TaskEvent, TaskInfo
from ..core.task import Task
from ..operations.filters import DeadLetterGroup, TaskFilter
from ..workflows.graph import WorkflowInfo, WorkflowSearch, WorkflowSummary
from .records import (
    Applied,
    BulkBatch,
    BulkOrder,
    ClaimDefaults,
    Claimed,
    ClaimNext,
    HistoryFilter,
    Inserted,
    Leadership,
    Moved,
    Outcome,
    Poll,
    Polled,
    Recovered,
    ScheduleRow,
    SlotsKept,
    StepDone,
    Why,
    WorkflowPlan,
)
from .reports import CountRow, HorizonHolder, Page, RateRow, StatusRow, Unhandled, WorkerRow
from .settings import QueueChange, QueueSettings

C = TypeVar("C")
C_contra = TypeVar("C_contra", contravariant=True)
A_contra = TypeVar("A_contra", contravariant=True)


class Closing(Protocol):
    """A connection txqueue opened with ``connect``, closed by the part that holds it."""

    def close(self) -> None: ...


Own = TypeVar("Own", bound=Closing)
"""txqueue's own connection, in a part that opens it and closes it when done."""


class Connections(Protocol[C]):
    """Opening txqueue's own connections, telling a lost one from a refusal, the schema."""

    def connect(self, url: str, *, application_name: str = ..., create: bool = ...) -> C: ...
    def is_connection_error(self, exc: BaseException) -> bool: ...
    def is_closed(self, conn: C) -> bool: ...
    def apply_schema(self, conn: C) -> list[int]: ...
    def name_database(self, conn: C, name: str) -> str: ...


class Notifies(Protocol[A_contra]):
    """Wake-ups by the database itself (PostgreSQL's NOTIFY), where it carries them:
    ``notifies`` says whether it does (on SQLite nothing is sent and nothing heard)."""

    @property
    def notifies(self) -> bool: ...
    def notify_wakeups(self, conn: A_contra, notes: Sequence[str]) -> None:
        """Send the wake-ups ``notes`` (``notes.note``) when the transaction commits."""


class Enqueue(Notifies[A_contra], Protocol[A_contra]):
    """The application's side: tasks written in its transaction. ``notify``: each insert
    sends its wake-ups by NOTIFY itself, in the same statement."""

    def transaction(self, conn: A_contra) -> AbstractContextManager[object]: ...
    def database_name(self, conn: A_contra) -> str | None: ...
    def insert_task(
        self, conn: A_contra, task: Task, trace: str | None = None, notify: bool = False
    ) -> Inserted: ...
    def insert_tasks(
        self,
        conn: A_contra,
        tasks: Sequence[Task],
        trace: str | None = None,
        notify: bool = False,
    ) -> list[Inserted]: ...
    def insert_workflow(
        self,
        conn: A_contra,
        plan: WorkflowPlan,
        trace: str | None = None,
        notify: bool = False,
    ) -> list[Inserted]: ...


class Claims(Protocol[C_contra]):
    """A worker's hot path: claims, the commit check, outcomes, leases, release."""

    def claim_ids(
        self, conn: C_contra, ids: Sequence[uuid.UUID], worker_id: str, defaults: ClaimDefaults
    ) -> list[Claimed]: ...
    def claim_ripe(self, conn: C_contra, poll: Poll, lookahead: int = 0) -> Polled: ...
    def claim_fair(self, conn: C_contra, poll: Poll, after: str = "") -> Polled: ...
    def committed(self, conn: C_contra, xids: Sequence[str]) -> set[str]: ...
    def why_unclaimed(
        self, conn: C_contra, items: Sequence[tuple[uuid.UUID, str | None]]
    ) -> dict[uuid.UUID, Why]: ...
    def apply(
        self,
        conn: C_contra,
        transitions: Sequence[Transition],
        steps: bool = ...,
        claim_next: ClaimNext | None = ...,
    ) -> Applied: ...
    def record_outcomes(
        self, conn: C_contra, outcomes: Sequence[Outcome], claim_next: ClaimNext | None = ...
    ) -> Applied: ...
    def outcomes_landed(
        self, conn: C_contra, outcomes: Sequence[Outcome]
    ) -> dict[uuid.UUID, str]: ...
    def atomic(self, conn: C_contra) -> AbstractContextManager[None]: ...
    def record_atomic(self, conn: C_contra, outcome: Outcome) -> Applied: ...
    def extend_leases(
        self, conn: C_contra, worker_id: str, leases: Sequence[tuple[uuid.UUID, int, float]]
    ) -> set[uuid.UUID]: ...
    def write_progress(
        self, conn: C_contra, worker_id: str, reports: Sequence[tuple[uuid.UUID, int, str]]
    ) -> set[uuid.UUID]: ...
    def release(
        self, conn: C_contra, worker_id: str, held: Sequence[tuple[uuid.UUID, int]]
    ) -> dict[uuid.UUID, str]: ...
    def give_back(
        self, conn: C_contra, worker_id: str, held: Sequence[tuple[uuid.UUID, int]]
    ) -> int: ...
    def cancel_requested(
        self, conn: C_contra, worker_id: str, ids: Sequence[uuid.UUID]
    ) -> set[uuid.UUID]: ...


class Journals(Protocol[C_contra]):
    """The steps a running task's handler records (``ctx.step``) and reads back, the
    signals its waits take (``ctx.wait_for``), and the children it starts."""

    def record_step(self, conn: C_contra, step: StepDone, in_transaction: bool = False) -> bool: ...
    def recorded_steps(self, conn: C_contra, task_id: uuid.UUID) -> list[dict[str, Any]]: ...
    def take_signal(
        self, conn: C_contra, task_id: uuid.UUID, key: str
    ) -> tuple[bool, str | None]: ...
    def insert_child(self, conn: C_contra, task: Task) -> Inserted: ...
    def insert_child_workflow(self, conn: C_contra, plan: WorkflowPlan) -> list[Inserted]: ...


class Presence(Protocol[C_contra]):
    """Workers saying they are alive, and what none of the live ones can run."""

    def worker_seen(
        self, conn: C_contra, worker_id: str, queues: Sequence[str], names: Sequence[str]
    ) -> None: ...
    def worker_gone(self, conn: C_contra, worker_id: str) -> None: ...
    def unhandled(self, conn: C_contra) -> Unhandled: ...
    def handled(self, conn: C_contra) -> dict[str, list[str]]: ...


class Clocks(Protocol[C_contra]):
    """The database's time: the one tasks are due and woken by."""

    def now(self, conn: C_contra) -> datetime: ...


class Schedules(Clocks[C_contra], Protocol[C_contra]):
    """Periodic tasks, by the database's clock, each slot enqueued once."""

    def keep_schedules(self, conn: C_contra, rows: Sequence[ScheduleRow]) -> list[str]: ...
    def schedules_of(
        self, conn: C_contra, queues: Sequence[str], names: Sequence[str] = ()
    ) -> tuple[datetime, list[ScheduleRow]]: ...
    def fire_schedule(
        self, conn: C_contra, name: str, seen: datetime, slot: datetime, tasks: Sequence[Task]
    ) -> list[Inserted] | None: ...
    def list_schedules(self, conn: C_contra) -> list[ScheduleRow]: ...
    def get_schedule(self, conn: C_contra, name: str, lock: bool = False) -> ScheduleRow | None: ...
    def add_schedule(self, conn: C_contra, row: ScheduleRow) -> bool: ...
    def write_schedule(self, conn: C_contra, row: ScheduleRow, seen: ScheduleRow) -> bool: ...
    def delete_schedule(self, conn: C_contra, name: str) -> bool: ...


class Upkeep(Protocol[C_contra]):
    """The cleaner: re-notify, recover expired leases, prune, and its leader lease."""

    def stale_queues(self, conn: C_contra, grace: float) -> list[str]: ...
    def renotify(
        self, conn: C_contra, grace: float, queues: Sequence[str], limit: int
    ) -> list[Moved]: ...
    def recover_expired(
        self,
        conn: C_contra,
        limit: int,
        default_max_attempts: int,
        readied: list[tuple[str, Inserted]] | None = None,
        by: str = ...,
    ) -> list[Recovered]: ...
    def wake_parked(
        self, conn: C_contra, limit: int, readied: list[tuple[str, Inserted]], by: str = ...
    ) -> int: ...
    def prune(self, conn: C_contra, state: str, age: float, limit: int) -> int: ...
    def prune_starts(self, conn: C_contra) -> int: ...
    def prune_signals(self, conn: C_contra, age: float) -> int: ...
    def prune_workflows(self, conn: C_contra, age: float) -> int: ...
    def release_stranded(self, conn: C_contra, limit: int) -> Applied: ...
    def lead(self, conn: C_contra, role: str, holder: str, seconds: float) -> Leadership: ...
    def resign(self, conn: C_contra, role: str, holder: str) -> None: ...


class Manage(Protocol[A_contra]):
    """Operators and applications: retry, cancel, look up, list, count."""

    def retry_ids(
        self, conn: A_contra, ids: Sequence[uuid.UUID], by: str | None = None
    ) -> list[Moved]: ...
    def retry_failed(
        self,
        conn: A_contra,
        queue: str | None,
        after: uuid.UUID,
        limit: int,
        by: str | None = None,
    ) -> list[Moved]: ...
    def cancel(
        self,
        conn: A_contra,
        task_id: uuid.UUID,
        by: str | None = None,
        readied: list[tuple[str, Inserted]] | None = None,
    ) -> str | None: ...
    def signal(self, conn: A_contra, key: str, payload: str | None) -> list[Moved]: ...
    def get_task(self, conn: A_contra, task_id: uuid.UUID) -> TaskInfo | None: ...
    def get_workflow(self, conn: A_contra, workflow_id: uuid.UUID) -> WorkflowInfo | None: ...
    def list_workflows(
        self, conn: A_contra, search: WorkflowSearch, before: uuid.UUID | None, limit: int
    ) -> list[WorkflowSummary]: ...
    def workflow_counts(self, conn: A_contra, cap: int) -> dict[str, int]: ...
    def cancel_workflow(
        self, conn: A_contra, workflow_id: uuid.UUID, by: str | None = None
    ) -> dict[uuid.UUID, str]: ...
    def list_tasks(
        self,
        conn: A_contra,
        *,
        state: str | None,
        queue: str | None,
        name: str | None,
        limit: int,
    ) -> list[TaskInfo]: ...
    def history(self, conn: A_contra, filters: HistoryFilter) -> list[TaskEvent]: ...
    def find_tasks(
        self, conn: A_contra, where: TaskFilter, before: uuid.UUID | None, limit: int
    ) -> list[TaskInfo]: ...
    def count_tasks(self, conn: A_contra, where: TaskFilter, cap: int | None = None) -> int: ...
    def dead_letters(
        self, conn: A_contra, queue: str | None, limit: int
    ) -> list[DeadLetterGroup]: ...
    def delete_queue(self, conn: A_contra, queue: str) -> int: ...
    def status(self, conn: A_contra) -> list[StatusRow]: ...


class Queues(Protocol[A_contra]):
    """Operators and applications: a queue's flow control, in the caller's transaction."""

    def change_queue(self, conn: A_contra, queue: str, change: QueueChange) -> QueueSettings: ...
    def queue_settings(self, conn: A_contra) -> list[QueueSettings]: ...
    def ripe_tasks(self, conn: A_contra, queue: str, limit: int) -> list[Moved]: ...


class Waits(Protocol[C_contra]):
    """``txqueue.wait``: told when tasks finish, where the database can tell."""

    def listen_finished(self, conn: C_contra) -> Callable[[uuid.UUID, float], None] | None:
        """A function waiting on ``conn`` until a task finishes or a timeout passes; None
        where finished tasks are only found by looking."""

    def listen_wakeups(self, conn: C_contra) -> Callable[[float], list[str]] | None:
        """Listen for wake-ups on ``conn`` (``Notifies``); returns a function waiting up to
        its argument in seconds for some, and returning them (each a ``notes.note``);
        None where the database sends none."""


class DashboardReads(Protocol[C_contra]):
    """The dashboard's bounded, index-backed reads."""

    def queue_counts(self, conn: C_contra, cap: int) -> list[CountRow]: ...
    def finished_per_minute(self, conn: C_contra, cap: int) -> list[RateRow]: ...
    def failing_names(self, conn: C_contra, cap: int, limit: int) -> list[tuple[str, int]]: ...
    def browse(
        self,
        conn: C_contra,
        *,
        state: str | None,
        queue: str | None,
        name: str | None,
        before: uuid.UUID | None,
        window: int,
        limit: int,
    ) -> Page: ...
    def running_tasks(self, conn: C_contra, limit: int) -> list[TaskInfo]: ...
    def workers(self, conn: C_contra) -> list[WorkerRow]: ...


class VacuumHorizon(Protocol[C_contra]):
    """Workers, the cleaner, ``txqueue status`` and the dashboard: what keeps vacuum from
    removing dead row versions, read about once a minute."""

    def vacuum_horizon(self, conn: C_contra) -> HorizonHolder | None:
        """What holds the database's vacuum horizon furthest back, or None (nothing does,
        or the database has no such thing)."""


class Slots(Protocol[C_contra]):
    """Workers and the cleaner, every few seconds: the slots tasks are written to, turned
    and emptied (docs/explanation/storage.md)."""

    def keep_slots(self, conn: C_contra, period: float) -> SlotsKept | None:
        """One round of upkeep, or None when another process is doing it (or the database
        keeps its tasks in one table)."""


class Bulk(Protocol[C_contra]):
    """A bulk operation's batches, each in a transaction of its own on txqueue's connection."""

    def bulk_batch(self, conn: C_contra, order: BulkOrder, after: uuid.UUID) -> BulkBatch: ...


class TimeTravel(Protocol[C_contra]):
    """``txqueue.testing.Clock``: the database's clock, moved forward by tests."""

    def install_clock(self, conn: C_contra) -> None: ...
    def move_clock(self, conn: C_contra, seconds: float) -> None: ...
    def reset_clock(self, conn: C_contra) -> None: ...


class Store(
    Connections[C],
    Enqueue[A_contra],
    Claims[C],
    Journals[C],
    Presence[C],
    Schedules[C],
    Upkeep[C],
    Manage[A_contra],
    Queues[A_contra],
    Waits[C],
    DashboardReads[C],
    VacuumHorizon[C],
    Slots[C],
    Bulk[C],
    TimeTravel[C],
    Protocol[C, A_contra],
):
    """Everything above: what ``store.for_url`` returns."""


AnyStore = Store[Any, Any]
"""A store chosen by URL at run time: its connections are whatever its ``connect`` made."""
