"""Commands on tasks: enqueue, retry, cancel, list, show, wait."""

from __future__ import annotations

import difflib
import json
import uuid
from datetime import timedelta
from typing import Annotated, Any

import typer
from rich.text import Text

from .. import config
from ..app import DEFAULTS
from ..core.stored import Progress, RecordedStep, TaskInfo
from ..core.task import DEFAULT_QUEUE, STATES, Task
from ..errors import ConfigError, StoreError, WaitTimeoutError
from ..operations import waiting
from ..store.protocols import Presence
from .app import (
    AmqpUrl,
    Databases,
    DatabaseUrl,
    JsonFlag,
    TaskId,
    _database,
    _warn,
    app,
    each_database,
    err,
    friendly,
    full_flag,
    load_registry,
    out,
    read_payload,
    registry_option,
    waking,
)
from .output import OPERATOR, SHOWN, cut, print_json, print_table


@app.command()
@friendly
def enqueue(
    name: Annotated[str, typer.Argument(help="The task's name, as registered.")],
    payload: Annotated[
        str,
        typer.Option(
            help="The payload: JSON, @file.json to read it from a file, - from stdin. For a "
            "typed task, its arguments by name."
        ),
    ] = "{}",
    app_spec: Annotated[
        str | None,
        registry_option(
            ": the task's queue and options are taken from it, and the payload checked "
            "against its handler's arguments."
        ),
    ] = None,
    queue: Annotated[
        str | None,
        typer.Option(help="Queue to put it on. Default: the registered task's, else default."),
    ] = None,
    priority: Annotated[int, typer.Option(help="Higher runs first.")] = 0,
    delay: Annotated[float | None, typer.Option(min=0, help="Seconds before it may run.")] = None,
    unique_key: Annotated[
        str | None, typer.Option(help="Insert nothing while a task with this key is live.")
    ] = None,
    max_attempts: Annotated[int | None, typer.Option(help="Override the registry's.")] = None,
    expires: Annotated[
        float | None,
        typer.Option(help="Seconds after it is due past which it is not started (it fails)."),
    ] = None,
    time_limit: Annotated[
        float | None, typer.Option(help="Seconds an attempt may run (a process pool kills it).")
    ] = None,
    database_url: DatabaseUrl = None,
    amqp_url: AmqpUrl = None,
) -> None:
    """Enqueue one task (committed at once) and print its id."""
    options: dict[str, Any] = {
        "priority": priority,
        "delay": None if delay is None else timedelta(seconds=delay),
        "unique_key": unique_key,
        "max_attempts": max_attempts,
        "expires": expires,
        "time_limit": time_limit,
    }
    task = _task(name, read_payload(payload), app_spec, queue, options)
    unconfirmed = "wake-up not confirmed by RabbitMQ; workers will poll for it"
    with waking(amqp_url, unconfirmed), _database(database_url) as (store, conn):
        # Only a keyed task can come back as another's: read the clock for those alone.
        before = None if task.unique_key is None else store.now(conn)
        task_id = DEFAULTS.enqueue(conn, task)
        if before is not None and DEFAULTS.get_task(conn, task_id).created_at < before:
            _already_queued(task_id, task.unique_key)
        if app_spec is None:
            _check_served(store, conn, task)
    out.print(str(task_id), highlight=False)


def _task(
    name: str, body: Any, app_spec: str | None, queue: str | None, options: dict[str, Any]
) -> Task:
    """The task to enqueue: as given, or (``--app``) as the registry's definition makes
    it, its payload checked against the handler's arguments."""
    if app_spec is None:
        return Task(name, body, queue=queue or DEFAULT_QUEUE, **options)
    definition = load_registry(app_spec).get(name)
    if definition is None:
        raise ConfigError(f"--app {app_spec}: it registers no task {name!r}")
    args, kwargs = definition.signature.load(body)  # names the argument that is wrong
    return definition.options(queue=queue, **options).task(*args, **kwargs)


def _already_queued(task_id: uuid.UUID, key: str | None) -> None:
    err.print(
        f"txqueue: already queued as {task_id}: that live task holds the unique key "
        f"{key!r}; nothing new was enqueued",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )


def _check_served(store: Presence[Any], conn: Any, task: Task) -> None:
    """Warn when no running worker will run ``task`` (advice: it is committed)."""
    try:
        unserved = _unserved(task.name, task.queue, store.handled(conn))
    except StoreError as exc:
        unserved = f"{exc}; not checked whether a running worker handles it"
    if unserved is not None:
        _warn(unserved)


def _unserved(name: str, queue: str, handled: dict[str, list[str]]) -> str | None:
    """Why no running worker will run a task ``name`` on ``queue``, if none will: without
    --app, a misspelt name or a wrong queue is otherwise a task that waits for ever."""
    queues = handled.get(name)
    if queues is None:
        close = difflib.get_close_matches(name, handled, n=3)
        if not handled:
            why, until = "none has reported in", " until one does"
        elif close:
            why, until = f"did you mean {' or '.join(map(repr, close))}?", ""
        else:
            why, until = "no running worker's task name is close", ""
        return (
            f"no running worker handles task {name!r} ({why}): it waits on queue {queue!r}"
            f"{until}; --app module:registry checks the name"
        )
    if queue not in queues:
        served = ", ".join(map(repr, queues))
        return (
            f"the running workers handle task {name!r} on queue {served}, not {queue!r}: "
            "pass --queue, or --app module:registry for the task's own"
        )
    return None


@app.command()
@friendly
def retry(
    task_id: Annotated[
        str | None, typer.Argument(help="The task's id.", show_default=False)
    ] = None,
    failed: Annotated[bool, typer.Option("--failed", help="Retry every failed task.")] = False,
    queue: Annotated[
        str | None, typer.Option(help="With --failed: only this queue's.", show_default=False)
    ] = None,
    json_output: JsonFlag = False,
    database_url: DatabaseUrl = None,
    amqp_url: AmqpUrl = None,
) -> None:
    """Run a failed or cancelled task again now (or, with --failed, every failed task)."""
    if (task_id is None) == (not failed):
        raise ConfigError("give a task id, or --failed (not both)")
    if queue is not None and not failed:
        raise ConfigError("--queue goes with --failed")
    with waking(amqp_url), _database(database_url) as (_, conn):
        if task_id is not None:
            DEFAULTS.retry(conn, task_id, by=OPERATOR)
            count = 1
        else:
            count = DEFAULTS.retry_failed(conn, queue=queue, by=OPERATOR)
    if json_output:
        print_json(out, {"action": "retry", "changed": count})
    else:
        out.print(f"retried {count} task{'s' if count != 1 else ''}", highlight=False)


@app.command()
@friendly
def cancel(
    task_id: TaskId,
    json_output: JsonFlag = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Cancel a task: a pending one never runs; a running one's handler sees ctx.cancelled."""
    with _database(database_url) as (_, conn):
        state = DEFAULTS.cancel(conn, task_id, by=OPERATOR)
    if json_output:
        print_json(out, {"action": "cancel", "id": task_id, "state": state})
    elif state == "cancelled":
        out.print(f"{task_id} cancelled", highlight=False)
    else:
        out.print(f"{task_id} is running: cancellation requested", highlight=False)


@app.command("list")
@friendly
def list_(
    state: Annotated[
        str | None, typer.Option(help=f"One of: {', '.join(STATES)}.", show_default=False)
    ] = None,
    queue: Annotated[str | None, typer.Option(show_default=False)] = None,
    name: Annotated[str | None, typer.Option(help="Task name.", show_default=False)] = None,
    limit: Annotated[int, typer.Option(min=1, max=100_000)] = 50,
    json_output: JsonFlag = False,
    database_url: DatabaseUrl = None,
    databases: Databases = None,
) -> None:
    """The newest tasks, filtered by state, queue and name (of several databases, each
    one's)."""
    each_database(
        database_url,
        databases,
        json_output,
        lambda url, _: _listed(url, state, queue, name, limit, json_output),
    )


def _listed(
    url: str, state: str | None, queue: str | None, name: str | None, limit: int, json_output: bool
) -> None:
    with _database(url) as (_, conn):
        tasks = DEFAULTS.list_tasks(conn, state=state, queue=queue, name=name, limit=limit)
        paused = {q.queue for q in DEFAULTS.list_queues(conn) if q.paused}
    if json_output:
        briefs = [{**_brief(t), "queue_paused": t.queue in paused} for t in tasks]
        print_json(out, {"tasks": briefs})
        return
    if not tasks:
        out.print("no tasks")
        return
    rows = []
    progressed = any(t.progress is not None for t in tasks)
    for t in tasks:
        brief = _brief(t)
        # Without its own max_attempts a task takes its registration's, which a worker knows.
        tries = f"{t.attempts}/{t.max_attempts}" if t.max_attempts else str(t.attempts)
        shown = (
            f"{t.state} (queue paused)" if t.state == "pending" and t.queue in paused else t.state
        )
        row = [brief["id"], t.queue, t.name, shown, tries]
        if progressed:  # a column only where some task has said how far it got
            row.append(cut(t.progress.describe(), 60) if t.progress else "")
        rows.append([*row, brief["last_error"] or ""])
    headers = ["id", "queue", "name", "state", "tries"]
    headers += ["progress", "last error"] if progressed else ["last error"]
    print_table(out, headers, rows, whole=(0, 3, 4))


def _brief(t: TaskInfo) -> dict[str, Any]:
    doc = t.as_dict()
    last = t.errors[-1] if t.errors else None
    keep = ("id", "queue", "name", "state", "priority", "attempts", "max_attempts")
    return {
        **{k: doc[k] for k in keep},
        "run_at": doc["run_at"],
        "created_at": doc["created_at"],
        "finished_at": doc["finished_at"],
        "progress": doc["progress"],
        "last_error": cut(f"{last.get('type')}: {last.get('message')}", 200) if last else None,
    }


@app.command()
@friendly
def show(
    task_id: TaskId,
    full: Annotated[bool, full_flag("the payload and result")] = False,
    json_output: JsonFlag = False,
    database_url: DatabaseUrl = None,
) -> None:
    """One task, with its history and its errors (a long payload or result cut short
    unless --full or --json)."""
    with _database(database_url) as (_, conn):
        info = DEFAULTS.get_task(conn, task_id)
    doc = info.as_dict()
    if json_output:
        print_json(out, doc)
        return
    rows = []
    for key, value in doc.items():
        if key not in ("errors", "events", "steps"):
            shown = str(json.dumps(value) if key in ("payload", "result") else value)
            if key == "progress" and info.progress is not None:
                at = info.progress.at.isoformat(timespec="seconds")
                shown = f"{info.progress.describe()} (at {at})"
            if not full:
                shown = cut(shown, SHOWN, ": --full for all")
            if value is None:
                shown = "the registry's" if key in _REGISTERED else "-"
            rows.append([key, shown])
    print_table(out, None, rows)
    if info.events:
        out.print(Text("\nhistory", style="bold"))
        timeline = [
            [
                e.at.isoformat(timespec="milliseconds"),
                str(e.attempt),
                e.move,
                f"{e.from_state} → {e.to_state}",
                e.by or "-",
                e.reason or "",
            ]
            for e in info.events
        ]
        print_table(out, ["at", "attempt", "what", "state", "by", "why"], timeline)
    if info.steps:
        out.print(Text("\nsteps", style="bold"))
        steps = [_step_row(step, full) for step in info.steps]
        print_table(out, ["step", "attempt", "recorded", "took", "result"], steps)
    for i, error in enumerate(info.errors, 1):
        heading = f"error {i}: attempt {error.get('attempt')} at {error.get('at')}"
        out.print(Text(f"\n{heading} on {error.get('worker_id')}", style="bold"))
        out.print(f"{error.get('type')}: {error.get('message')}", markup=False, highlight=False)
        if error.get("traceback"):
            out.print(error["traceback"].rstrip(), markup=False, highlight=False)


def _step_row(step: RecordedStep, full: bool) -> list[str]:
    result = json.dumps(step.result)
    return [
        step.name,
        str(step.attempt),
        step.at.isoformat(timespec="milliseconds"),
        f"{step.took * 1000:.1f} ms",
        result if full else cut(result, SHOWN, ": --full for all"),
    ]


_REGISTERED = ("max_attempts", "timeout", "time_limit")
"""Options a task without its own takes from its registration, when a worker claims it."""


# Exit codes of `txqueue wait` beyond 0 (succeeded) and 1 (an error, such as no such task).
WAIT_EXIT = {"failed": 3, "cancelled": 4, "timeout": 5}


@app.command()
@friendly
def wait(
    task_id: TaskId,
    timeout: Annotated[
        float | None,
        typer.Option(
            min=0, help="Seconds to wait at most [default: no limit].", show_default=False
        ),
    ] = None,
    show_progress: Annotated[
        bool,
        typer.Option("--progress", help="Print each new progress of the task on stderr."),
    ] = False,
    json_output: JsonFlag = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Wait for a task to finish and print its result. Exit 0 if it succeeded, 3 if it
    failed, 4 if it was cancelled, 5 on timeout (1 on an error such as no such task)."""
    url = config.database_url(database_url)

    def shown(progress: Progress) -> None:
        err.print(f"progress: {progress.describe()}", markup=False, highlight=False)

    try:
        info = waiting.wait(url, task_id, timeout, on_progress=shown if show_progress else None)
    except WaitTimeoutError as exc:
        if json_output:
            with _database(url) as (_, conn):
                now = DEFAULTS.get_task(conn, task_id).as_dict()
            print_json(out, {"timed_out": True, "task": now})
        err.print(f"txqueue: {exc}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(WAIT_EXIT["timeout"]) from None
    if json_output:
        print_json(out, {"timed_out": False, "task": info.as_dict()})
    elif info.state == "succeeded":
        out.print(json.dumps(info.result), markup=False, highlight=False, soft_wrap=True)
    else:
        last = info.errors[-1] if info.errors else {}
        why = f": {last.get('type')}: {last.get('message')}" if last else ""
        err.print(
            f"task {info.id} {info.state}{why}", markup=False, highlight=False, soft_wrap=True
        )
    if info.state != "succeeded":
        raise typer.Exit(WAIT_EXIT[info.state])
