"""The SQLite store: the same operations as the PostgreSQL store, for one database file
shared by the processes of one machine.

SQLite has one writer at a time, so every claim, outcome and recovery is one short
``BEGIN IMMEDIATE`` transaction: it takes the write lock first, reads, decides, writes and
commits, and no other process can claim the same row in between. Connections opened
here are in autocommit mode, in WAL (readers never wait for the writer), with
``synchronous=NORMAL`` and a busy timeout, so a process waiting for the lock waits
instead of failing with "database is locked". Times are Unix seconds from this
machine's clock.
"""

from .claims import (
    atomic,
    cancel_requested,
    claim_ids,
    claim_ripe,
    extend_leases,
    give_back,
    record_atomic,
    record_outcomes,
    release,
    why_unclaimed,
)
from .connection import (
    apply_schema,
    connect,
    errors,
    is_closed,
    is_connection_error,
    path,
    transaction,
)
from .dashboard import (
    browse,
    failing_names,
    finished_per_minute,
    queue_counts,
    running_tasks,
    workers,
)
from .enqueue import insert_task, insert_tasks
from .leaders import lead, resign
from .manage import (
    cancel,
    delete_queue,
    get_task,
    list_tasks,
    listen_finished,
    retry_failed,
    retry_ids,
    status,
)
from .presence import unhandled, worker_gone, worker_seen
from .schedules import fire_schedule, keep_schedules, last_slots, list_schedules, now
from .upkeep import prune, recover_expired, renotify, stale_queues

__all__ = [
    "apply_schema",
    "atomic",
    "browse",
    "cancel",
    "cancel_requested",
    "claim_ids",
    "claim_ripe",
    "connect",
    "delete_queue",
    "errors",
    "extend_leases",
    "failing_names",
    "finished_per_minute",
    "fire_schedule",
    "get_task",
    "give_back",
    "insert_task",
    "insert_tasks",
    "is_closed",
    "is_connection_error",
    "keep_schedules",
    "last_slots",
    "lead",
    "list_schedules",
    "list_tasks",
    "listen_finished",
    "now",
    "path",
    "prune",
    "queue_counts",
    "record_atomic",
    "record_outcomes",
    "recover_expired",
    "release",
    "renotify",
    "resign",
    "retry_failed",
    "retry_ids",
    "running_tasks",
    "stale_queues",
    "status",
    "transaction",
    "unhandled",
    "why_unclaimed",
    "worker_gone",
    "worker_seen",
    "workers",
]
