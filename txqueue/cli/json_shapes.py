"""The shape of every ``--json`` output, in one place: each object's keys with their type,
an example value and what they mean. The CLI reference renders it (docs/hooks.py) and
tests/integration/test_cli_json.py holds every command's real output to it, so the page
and the commands cannot drift apart.

The convention: one JSON object on stdout; a list under a plural noun, with
``next_before`` where it is paged; times as ISO 8601 strings in UTC; ids as strings;
counts as integers; snake_case keys, each present in every output (null when it has no
value). A type is ``string``, ``integer``, ``number``, ``boolean``, ``time``, ``id``,
``json`` (any JSON value) or the name of one of the objects below; ``[T]`` is a list of
them, ``T?`` a T or null. An example ``...`` is the named object's own example.
"""

from __future__ import annotations

from typing import Any, Final

Key = tuple[str, Any, str]
"""A key's type, example value and meaning."""

T0 = "2026-11-28T09:00:00.120000+00:00"
T1 = "2026-11-28T09:00:02.480000+00:00"
ID = "01937f6e-5a2b-7c41-9d3e-2f6a8b1c0d4e"
Q = "emails"

EVENT: Final[dict[str, Key]] = {
    "at": ("time", T1, "When."),
    "attempt": ("integer", 1, "The attempt it belongs to."),
    "move": ("string", "succeeded", "What happened: enqueued, claimed, retried, ..."),
    "from": ("string", "running", "The state before."),
    "to": ("string", "succeeded", "The state after."),
    "by": ("string?", "web-1:4242:9f2c", "Who: a worker's id, cleaner, cli:<user>, ..."),
    "reason": ("string?", None, "Why, where it was given."),
}
BRIEF_TASK: Final[dict[str, Key]] = {
    "id": ("id", ID, "The task's id."),
    "queue": ("string", Q, "Its queue."),
    "name": ("string", "send_receipt", "Its task name."),
    "state": ("string", "failed", "Its state."),
    "priority": ("integer", 0, "Higher runs first."),
    "attempts": ("integer", 5, "Attempts started."),
    "max_attempts": ("integer?", None, "Its own; null: its registration's."),
    "run_at": ("time", T0, "When it is due."),
    "created_at": ("time", T0, "When it was enqueued."),
    "finished_at": ("time?", T1, "When it ended."),
    "progress": ("progress?", None, "What its handler last reported."),
    "last_error": ("string?", "TimeoutError: timed out", "Its last error, cut at 200 characters."),
}
SCHEDULE: Final[dict[str, Key]] = {
    "name": ("string", "nightly-report", "The schedule's name."),
    "source": ("string", "runtime", "code (declared in a registry) or runtime."),
    "task": ("string", "report", "The task it enqueues."),
    "queue": ("string", "default", "On this queue."),
    "cron": ("string", "0 3 * * *", "Its expression."),
    "timezone": ("string", "UTC", "The zone the expression is read in."),
    "payload": ("json", {}, "The task's arguments."),
    "catch_up": ("boolean", False, "Each missed slot is enqueued, not only the last."),
    "paused": ("boolean", False, "It enqueues nothing."),
    "last_run": ("time", "2026-11-28T03:00:00+00:00", "The newest slot enqueued."),
    "next_run": ("time?", "2026-11-29T03:00:00+00:00", "The next slot; null while paused."),
}

OBJECTS: Final[dict[str, dict[str, Key]]] = {
    "task": {
        "id": ("id", ID, "The task's id."),
        "queue": ("string", Q, "Its queue."),
        "name": ("string", "send_receipt", "Its task name."),
        "payload": ("json", {"order": 42}, "Its arguments."),
        "state": (
            "string",
            "succeeded",
            "pending, running, succeeded, failed, cancelled "
            "or waiting (a workflow's step whose parents have not all ended).",
        ),
        "priority": ("integer", 0, "Higher runs first."),
        "run_at": ("time", T0, "When it is due."),
        "start_time": ("time?", T0, "When its last attempt started."),
        "lease_expires_at": (
            "time?",
            None,
            "While it runs: when its worker's lease ends "
            "unless heartbeats extend it (the expires_at column).",
        ),
        "finished_at": ("time?", T1, "When it ended."),
        "attempts": ("integer", 1, "Attempts started."),
        "max_attempts": ("integer?", None, "Its own; null: its registration's."),
        "timeout": ("number?", None, "Its lease in seconds; null: its registration's."),
        "unique_key": ("string?", None, "The key no other live task holds."),
        "worker_id": ("string?", "web-1:4242:9f2c", "The worker that ran it last."),
        "result": ("json", {"sent": True}, "What its handler returned (null until then)."),
        "errors": ("[error]", [], "Each failed attempt's error, oldest first."),
        "created_at": ("time", T0, "When it was enqueued."),
        "updated_at": ("time", T1, "When its row last changed."),
        "cancel_requested": ("boolean", False, "Cancellation asked while it ran."),
        "progress": ("progress?", None, "What its handler last reported."),
        "expires": (
            "time?",
            None,
            "The start deadline (enqueued with expires): it is not started after it.",
        ),
        "time_limit": ("number?", None, "Seconds an attempt may run, if set on the task."),
        "events": ("[event]", ..., "Its history, oldest first."),
        "workflow_id": ("id?", None, "The workflow it is a step of."),
        "steps": ("[step]", [], "The steps its handler recorded (ctx.step), in their order."),
    },
    "step": {
        "name": ("string", "charge", "The step's name."),
        "result": ("json", {"charge_id": "ch_42"}, "What its function returned."),
        "at": ("time", T1, "When it was recorded."),
        "took": ("number", 0.25, "Seconds its function ran."),
        "attempt": ("integer", 1, "The attempt that ran it."),
    },
    "error": {
        "at": ("time", T1, "When the attempt failed."),
        "attempt": ("integer", 1, "Which attempt."),
        "worker_id": ("string?", "web-1:4242:9f2c", "The worker it ran on."),
        "type": ("string", "smtplib.SMTPServerDisconnected", "The exception's type."),
        "message": ("string", "Connection unexpectedly closed", "Its message."),
        "traceback": ("string?", "Traceback (most recent call last): ...", "Its traceback."),
    },
    "event": EVENT,
    "progress": {
        "done": ("number", 3, "How much is done."),
        "total": ("number?", 10, "Out of; null when unknown."),
        "message": ("string?", "copying", "What it is doing."),
        "at": ("time", T1, "When it was reported."),
    },
    "brief_task": BRIEF_TASK,
    "listed_task": {
        **BRIEF_TASK,
        "queue_paused": ("boolean", False, "Its queue is paused."),
    },
    "history_event": {
        "task_id": ("id", ID, "The task's id."),
        "name": ("string", "send_receipt", "Its task name."),
        "queue": ("string", Q, "Its queue."),
        **EVENT,
    },
    "dead_letter_group": {
        "name": ("string", "send_receipt", "The tasks' name."),
        "error": ("string", "smtplib.SMTPServerDisconnected", "The type of their last error."),
        "count": ("integer", 12, "Tasks in the group."),
        "first_seen": ("time", T0, "The oldest one's end."),
        "last_seen": ("time", T1, "The newest one's end."),
        "message": ("string?", "Connection unexpectedly closed", "The newest one's message."),
    },
    "queue_settings": {
        "queue": ("string", Q, "The queue."),
        "paused": ("boolean", False, "No task of it starts."),
        "rate_limit": ("string?", "50/s", "At most this many starts per period."),
        "concurrency": ("integer?", 5, "At most this many running at once."),
        "fair_share": ("boolean", False, "Its tasks' concurrency keys take turns."),
    },
    "status_queue": {
        "queue": ("string", Q, "The queue."),
        "pending": ("integer", 3, "Tasks pending."),
        "running": ("integer", 1, "Tasks running."),
        "succeeded": ("integer", 120, "Tasks succeeded (until pruned)."),
        "failed": ("integer", 2, "Tasks failed."),
        "cancelled": ("integer", 0, "Tasks cancelled."),
        "waiting": ("integer", 0, "Workflow steps waiting on their parents."),
        "parked": ("integer", 0, "Tasks whose handler sleeps or waits for a signal."),
        "oldest_ripe_pending_s": ("number?", 0.8, "Age of its oldest due pending task."),
        "messages": (
            "integer?",
            None,
            "Wake-ups waiting in its RabbitMQ queue; null without --amqp-url.",
        ),
        "paused": ("boolean", False, "As in queue_settings."),
        "rate_limit": ("string?", None, "As in queue_settings."),
        "concurrency": ("integer?", None, "As in queue_settings."),
        "fair_share": ("boolean", False, "As in queue_settings."),
    },
    "no_handler": {
        "queue": ("string", Q, "The queue."),
        "name": ("string", "send_reciept", "A task name no running worker handles there."),
        "pending": ("integer", 4, "Its pending tasks."),
    },
    "vacuum_horizon": {
        "seconds": ("number", 0.0, "How long it has been held back."),
        "at_least": ("boolean", False, "seconds is a lower bound."),
        "past_threshold": ("boolean", False, "Held back past the warning threshold."),
        "threshold_s": ("number", 3600.0, "That threshold."),
        "description": ("string", "nothing holds it back", "One line naming the culprit."),
        "holder": ("horizon_holder?", None, "What holds it back, or null."),
    },
    "horizon_holder": {
        "kind": ("string", "backend", "backend (a session), slot or prepared."),
        "xmin": ("string", "981220", "The transaction id it holds."),
        "xid_age": ("integer", 4120, "Transactions begun since."),
        "seconds": ("number?", 5400.0, "How long, where PostgreSQL keeps a time."),
        "since": ("time?", T0, "Since when, likewise."),
        "pid": ("integer?", 5150, "A session's process, an active slot's."),
        "application": ("string?", "psql", "A session's application name."),
        "user": ("string?", "report", "A session's role, a prepared transaction's owner."),
        "client": ("string?", "10.0.0.7", "A session's address."),
        "state": ("string?", "idle in transaction", "A session's state."),
        "backend_type": ("string?", "client backend", "client backend, walsender, ..."),
        "name": ("string?", None, "A slot's name, a prepared transaction's gid."),
        "active": ("boolean?", None, "A slot's: something is connected to it."),
    },
    "schedule": SCHEDULE,
    "listed_schedule": {
        **SCHEDULE,
        "missed": ("boolean", False, "next_run is past: no worker kept the schedule then."),
    },
    "workflow": {
        "id": ("id", ID, "The workflow's id."),
        "name": ("string", "onboard", "Its name."),
        "state": ("string", "succeeded", "Its steps' state as a whole."),
        "created_at": ("time", T0, "When it was enqueued."),
        "results": ("json", {"welcome": {"sent": True}}, "Each succeeded step's result."),
        "steps": ("[workflow_step]", ..., "Its steps, in the order declared."),
    },
    "workflow_summary": {
        "id": ("id", ID, "The workflow's id."),
        "name": ("string", "onboard", "Its name."),
        "state": ("string", "running", "Its steps' state as a whole."),
        "steps": ("json", {"pending": 1, "succeeded": 1}, "How many steps are in each state."),
        "created_at": ("time", T0, "When it was enqueued."),
        "finished_at": ("time?", None, "When its last step ended; null while one has not."),
    },
    "workflow_step": {
        "id": ("id", ID, "The step's task id."),
        "step": ("string", "welcome", "The step's name."),
        "name": ("string", "send_welcome", "Its task name."),
        "queue": ("string", Q, "Its queue."),
        "state": ("string", "succeeded", "Its state."),
        "parents": ("[id]", [], "The steps it runs after."),
        "attempts": ("integer", 1, "Attempts started."),
        "result": ("json", {"sent": True}, "Its result."),
        "reason": ("string?", None, "Why it did not succeed."),
        "move": ("string?", "succeeded", "Its last move."),
        "finished_at": ("time?", T1, "When it ended."),
    },
}

ACTION: Final[Key] = ("string", "cancel", "What was done: retry, cancel or delete.")
CHANGED: Final[Key] = ("integer", 120, "Tasks changed.")

OUTPUTS: Final[dict[str, dict[str, Key]]] = {
    "status": {
        "queues": ("[status_queue]", ..., "Each queue with tasks or settings, by name."),
        "workers": ("integer?", 2, "Workers running; null where the database cannot tell."),
        "no_handler": ("[no_handler]", [], "Pending tasks no running worker handles."),
        "vacuum_horizon": ("vacuum_horizon?", ..., "What holds vacuum back; null: unread."),
        "wakeups": ("string", "rabbitmq", "How enqueues wake workers: rabbitmq, notify, none."),
        "broker_error": ("string?", None, "Why RabbitMQ could not be read; null if it was."),
    },
    "retried": {"action": ("string", "retry", "retry."), "changed": CHANGED},
    "cancelled": {
        "action": ACTION,
        "id": ("id", ID, "The task's id."),
        "state": ("string", "cancelled", "cancelled, or running: its handler is asked to stop."),
    },
    "task_list": {"tasks": ("[listed_task]", ..., "The newest tasks first.")},
    "waited": {
        "timed_out": ("boolean", False, "--timeout passed before it ended."),
        "task": ("task", ..., "The task as it is now."),
    },
    "found": {
        "tasks": ("[brief_task]", ..., "The page, newest first."),
        "next_before": ("id?", None, "--before this for the next page; null on the last."),
    },
    "workflow_list": {
        "workflows": ("[workflow_summary]", ..., "The page, newest first."),
        "next_before": ("id?", None, "--before this for the next page; null on the last."),
    },
    "bulk": {
        "action": ACTION,
        "dry_run": ("boolean", False, "Nothing was changed: --dry-run."),
        "matched": ("integer", 120, "Tasks matching the filters (that the action applies to)."),
        "changed": CHANGED,
        "sample": ("[brief_task]", ..., "A few of the matching tasks, before the action."),
    },
    "dead_letters": {"groups": ("[dead_letter_group]", ..., "The biggest groups first.")},
    "queue_list": {"queues": ("[queue_settings]", ..., "The queue, or every one with settings.")},
    "history": {"events": ("[history_event]", ..., "Newest first.")},
    "schedule_list": {"schedules": ("[listed_schedule]", ..., "By name.")},
    "workflow_cancelled": {
        "action": ACTION,
        "id": ("id", ID, "The workflow's id."),
        "changed": ("integer", 3, "Steps cancelled or asked to stop."),
    },
    "cleanup": {
        "renotified": ("integer", 0, "Tasks woken again."),
        "retried": ("integer", 1, "Lease expired: back to pending."),
        "failed": ("integer", 0, "Lease expired: failed, compensated or out of attempts."),
        "compensations": ("integer", 0, "Compensating tasks enqueued."),
        "cancelled": ("integer", 0, "Lease expired on a task asked to stop."),
        "steps_released": ("integer", 0, "Workflow steps moved on from ended parents."),
        "woken": ("integer", 0, "Parked tasks whose time came: a sleep ended, a wait timed out."),
        "pruned": ("integer", 250, "Old tasks deleted."),
        "prune_deferred": ("boolean", False, "Pruning waited: the vacuum horizon is held."),
        "seconds": ("number", 0.042, "How long the pass took."),
        "problems": ("[string]", [], "What it could not do."),
        "ok": ("boolean", True, "No problems: the exit code is 0."),
    },
}
"""The objects commands print, which OBJECTS does not already hold."""

COMMANDS: Final[dict[str, str]] = {
    "status": "status",
    "list": "task_list",
    "show": "task",
    "wait": "waited",
    "retry": "retried",
    "cancel": "cancelled",
    "find": "found",
    "bulk retry": "bulk",
    "bulk cancel": "bulk",
    "bulk delete": "bulk",
    "dead-letters": "dead_letters",
    "dead-letters retry": "bulk",
    "dead-letters discard": "bulk",
    "history": "history",
    "queue show": "queue_list",
    "queue pause": "queue_settings",
    "queue resume": "queue_settings",
    "queue set": "queue_settings",
    "schedule": "schedule_list",
    "schedule create": "schedule",
    "schedule change": "schedule",
    "schedule pause": "schedule",
    "schedule resume": "schedule",
    "workflow list": "workflow_list",
    "workflow show": "workflow",
    "workflow cancel": "workflow_cancelled",
    "cleaner": "cleanup",
}
"""Every command that takes --json (after ``txqueue``), and the object it prints."""


def shape(name: str) -> dict[str, Key]:
    """The object named ``name``, among OUTPUTS and OBJECTS."""
    return OUTPUTS[name] if name in OUTPUTS else OBJECTS[name]


def example(kind: str, value: Any = ...) -> Any:
    """A value of type ``kind``: ``value``, or where it is ``...`` the named object's own
    example (one of it, for a list)."""
    if value is not ...:
        return value
    inner = kind.rstrip("?")
    if inner.startswith("["):
        return [example(inner[1:-1])]
    return {key: example(k, v) for key, (k, v, _) in shape(inner).items()}
