"""The records the stores exchange with the rest of txqueue (what they report to the
tools that watch them is in ``reports``), and the presence and slot timings."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from ..core.task import Task, TaskState
from ..errors import InvalidValueError, StoreError
from ..operations.filters import TaskFilter


@dataclass(frozen=True, slots=True)
class Inserted:
    """An enqueue's outcome: the task's id, whether this call created it (False: a live task
    held the unique key), and the transaction id for its wake-up (None where the store has
    no way to look a transaction up later, as on SQLite)."""

    id: uuid.UUID
    new: bool
    xid: str | None = None

    @classmethod
    def held(cls, task: Task, holder: uuid.UUID, name: str) -> Inserted:
        """``task`` not inserted: the live task ``holder`` holds its unique key. A key
        stands for one task name; one of another name is refused rather than answered
        with an id the caller would take for its own task's."""
        if name != task.name:
            raise InvalidValueError(
                "unique_key",
                f"{task.unique_key!r} is held by the live task {name} {holder}, not a "
                f"{task.name}: give each task name keys of its own",
            )
        return cls(holder, False)


def check_keys(tasks: Sequence[Task], holders: Mapping[str, tuple[uuid.UUID, str]]) -> None:
    """Refuse, before anything is written, a batch in which a unique key would stand for
    two task names: one of them and a live holder (by key: its id and name), or two of
    them (a store that inserts one task at a time would otherwise refuse it halfway)."""
    names: dict[str, str] = {}
    for task in tasks:
        key = task.unique_key
        if key is None:
            continue
        if key in holders:
            Inserted.held(task, *holders[key])
        elif names.setdefault(key, task.name) != task.name:
            raise InvalidValueError(
                "unique_key", f"{key!r} is given to a {names[key]} and a {task.name} at once"
            )


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
    step: bool = False  # a workflow's step: its outcome decides its children's
    time_limit: float | None = None  # seconds its handler may run, if it has a hard limit
    late: float | None = None  # seconds past its start deadline (>= 0: not to be started)

    @property
    def expired(self) -> bool:
        return self.late is not None and self.late >= 0


@dataclass(frozen=True, slots=True)
class Why:
    """Why a delivered id was not claimed: its transaction's status and the row, if visible."""

    xact_status: str | None  # 'committed', 'aborted', 'in progress', or None (unknown)
    state: str | None  # None: no row visible
    run_at: datetime | None
    ripe: bool
    name: str | None = None  # the task's name, when its row is visible
    held: bool = False  # its queue is paused, limited or fair: claimed only by a poll of it


class Poll(NamedTuple):
    """An idle poll's request: up to ``limit`` ripe tasks of ``queue``, claimed by worker
    ``worker_id``, which runs the tasks ``defaults`` names."""

    queue: str
    limit: int
    worker_id: str
    defaults: ClaimDefaults


class ClaimNext(NamedTuple):
    """What an outcome's write may claim, in its own transaction, of the workflow steps it
    readies: up to ``limit`` of those in ``queues``, for worker ``worker_id``. A chain's
    next step then starts without a wake-up and a claim's commit of its own."""

    queues: frozenset[str]
    limit: int
    worker_id: str
    defaults: ClaimDefaults


class Polled(NamedTuple):
    """An idle poll's claims in one queue, and, when a limit held some back, which
    (``paused``, ``rate``, ``concurrency``: the queue's; ``key``: a task key's) and, for a
    rate limit, in how many seconds one more may start. ``fair`` or ``plain``: nothing
    was claimed, the queue is claimed the other way (``claim_fair``, or ``claim_ripe``).
    ``after``: where a fair poll's next round goes on."""

    claimed: list[Claimed]
    held: str | None = None
    retry_in: float | None = None
    after: str = ""


@dataclass(frozen=True, slots=True)
class Outcome:
    """An attempt's result, written only if the attempt still holds the task (fencing)."""

    id: uuid.UUID
    attempt: int
    worker_id: str
    state: str  # succeeded | pending (retry) | failed | cancelled | parked
    result: str | None = None  # JSON text
    error: dict[str, Any] | None = None
    retry_in: float = 0.0  # pending: its backoff; parked: when it wakes
    step: bool = False  # a workflow's step (Claimed.step)
    progress: str | None = None  # the last its handler reported (progress.encode)
    wait_key: str | None = None  # parked: the signal it waits for


class StepDone(NamedTuple):
    """A step's result (JSON) to keep with attempt ``attempt`` of task ``id``, which
    ``worker_id`` runs; its function ran ``took`` seconds."""

    id: uuid.UUID
    attempt: int
    worker_id: str
    name: str
    result: str
    took: float


class Applied(dict[uuid.UUID, str]):
    """What a batch of transitions wrote: the state of each task it changed (a transition
    fenced out is missing), its workflow steps' children included; and ``ready``, the
    (queue, Inserted) of each step it readied and each new task it enqueued, for the
    wake-ups its caller sends once the transaction has committed; ``claimed``, those of
    them it claimed in the transaction (``ClaimNext``), which need none, and
    ``claim_error``, why that claim was refused if it was (the steps are then woken, the
    transitions written all the same); ``enqueued``, by the id of the task whose move
    enqueued it, each (queue, Inserted) (a compensation)."""

    def __init__(self, states: Mapping[uuid.UUID, str] | None = None) -> None:
        super().__init__(states or {})
        self.ready: list[tuple[str, Inserted]] = []
        self.claimed: list[Claimed] = []
        self.claim_error: StoreError | None = None
        self.enqueued: dict[uuid.UUID, tuple[str, Inserted]] = {}


@dataclass(frozen=True, slots=True)
class Changed:
    """A task a batch of transitions changed, as the store's write returns it: its new
    state, its step's name (None outside a workflow) and, if it was readied, its queue
    and the writing transaction's id. ``freed``: for a step it ended, the edges from it
    the write deleted (child, OnFailure), where the store's write does that too (None:
    it did not, and ``follow`` asks). ``signals``: a child it ended, whose parent's wait
    ``follow`` signals."""

    id: uuid.UUID
    state: str
    step: str | None = None
    queue: str | None = None
    xid: str | None = None
    freed: tuple[tuple[uuid.UUID, str], ...] | None = None
    signals: bool = False


@dataclass(frozen=True, slots=True)
class Planned:
    """A workflow's step as its enqueue writes it: the task, its name in the workflow,
    its parents (id: OnFailure), and its arguments that are parents' results (argument:
    ``{"as": "result" | "outcome", "from": id or [ids]}``). One without parents is
    written ready to run, the others ``waiting``."""

    id: uuid.UUID
    task: Task
    step: str
    parents: Mapping[str, str]
    inputs: Mapping[str, Any]

    @property
    def state(self) -> str:
        """The state it is written in."""
        return "waiting" if self.parents else "pending"

    @property
    def parents_json(self) -> str | None:
        return json.dumps(self.parents) if self.parents else None

    @property
    def inputs_json(self) -> str | None:
        return json.dumps(self.inputs) if self.inputs else None


@dataclass(frozen=True, slots=True)
class WorkflowPlan:
    """A workflow as its enqueue writes it, steps in order (every parent before its
    children)."""

    id: uuid.UUID
    name: str
    steps: Sequence[Planned]


@dataclass(frozen=True, slots=True)
class HistoryFilter:
    """Which events ``history`` reads: each filter given must match (None: any)."""

    name: str | None = None
    queue: str | None = None
    state: str | None = None  # the state the event moved the task to
    by: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    limit: int = 100


@dataclass(frozen=True, slots=True)
class ClaimDefaults:
    """What a claim fills in from the worker's registry for rows that leave it unset.

    ``per_name`` maps a task name to ``{"timeout", "max_attempts", "on_lease_expired"}``,
    and, for a task with limits of its own, ``"concurrency": {"arg", "default", "limit"}``
    and ``"rate": {"arg", "default", "limit", "period"}`` (``arg``: the argument whose value
    makes the key, None for the task's name; ``default``: its value as text when not given).
    A claim takes only tasks whose name is there (those the worker has a handler for).
    """

    per_name: dict[str, dict[str, Any]]
    timeout: float
    max_attempts: int
    per_name_json: str = field(init=False)  # encoded once per worker, not per claim
    names: list[str] = field(init=False)
    keyed: bool = field(init=False)  # a name has a concurrency or rate key

    def __post_init__(self) -> None:
        object.__setattr__(self, "per_name_json", json.dumps(self.per_name))
        object.__setattr__(self, "names", list(self.per_name))
        keyed = any("concurrency" in d or "rate" in d for d in self.per_name.values())
        object.__setattr__(self, "keyed", keyed)


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
    error: dict[str, Any]  # the entry the recovery added to the task's error history
    compensation: tuple[str, Inserted] | None = None  # (queue, the task enqueued)


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    """A periodic task as the database keeps it: its definition (as a worker last wrote
    it, for one declared in code), and the newest slot enqueued."""

    name: str
    task: str
    queue: str
    cron: str
    timezone: str
    last_slot: datetime
    payload: Any = None
    catch_up: bool = False
    paused: bool = False
    source: str = "code"  # or "runtime": made through the API, the CLI or the dashboard


class Moved(NamedTuple):
    """A task put back to pending, and what its wake-up needs."""

    id: uuid.UUID
    queue: str
    xid: str | None  # the transaction that moved it (None on SQLite)


class BulkOrder(NamedTuple):
    """What a bulk operation asks of each of its batches: ``action`` (retry, cancel or
    delete) on the tasks in ``states`` that match ``where``, made up to the id ``upto``,
    ``limit`` a batch, ``by`` in their history."""

    action: str
    where: TaskFilter
    states: Sequence[TaskState]
    upto: uuid.UUID
    limit: int
    by: str | None = None


@dataclass(slots=True)
class BulkBatch:
    """One batch of a bulk operation: how many tasks it picked, the last one's id (None:
    none was left), how many it changed, and the wake-ups its commit owes (tasks moved back
    to pending, steps readied)."""

    picked: int
    last: uuid.UUID | None
    changed: int = 0
    moved: list[Moved] = field(default_factory=list)
    ready: list[tuple[str, Inserted]] = field(default_factory=list)


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


SLOT_PERIOD = 10.0
"""Seconds new tasks go to one slot before the next empty one takes over
(docs/explanation/storage.md)."""
SLOT_BATCH = 5000
"""Tasks a reclaim moves out of one slot at a time."""


@dataclass(frozen=True, slots=True)
class SlotsKept:
    """One round of slot upkeep: the slot new tasks go to after it, the tasks moved to the
    history and to that slot, the slots truncated, and ``stuck`` when the current slot is
    past its period and no other is empty to take over (a task long running, a reader
    holding a lock on every slot): new tasks then stay where they go."""

    current: int
    rotated: bool
    finished_moved: int
    pending_moved: int
    truncated: tuple[int, ...]
    stuck: bool
