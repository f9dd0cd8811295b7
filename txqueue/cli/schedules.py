"""``txqueue schedule``: the periodic schedules, those declared in code and those made at
run time; create, change, pause, resume and delete them."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

import typer

from ..app import DEFAULTS
from ..core.task import DEFAULT_QUEUE
from ..core.times import iso, iso_or_none
from ..errors import ConfigError
from ..schedules import runtime as schedules
from ..schedules.info import ScheduleInfo
from .app import (
    DatabaseUrl,
    JsonFlag,
    _database,
    friendly,
    group,
    load_registry,
    out,
    read_payload,
    registry_option,
)
from .output import print_json, print_table

schedule_app = group(
    "schedule",
    "The periodic schedules the workers keep, by the database's clock: those declared in "
    "code and those made here. Without a command, list them.",
    listing=True,
)

_MISSED_AFTER = timedelta(seconds=5)
"""A slot this far past with no task enqueued was missed (not merely being enqueued)."""

Name = Annotated[str, typer.Argument(help="The schedule's name.", show_default=False)]
Cron = Annotated[
    str,
    typer.Option(
        help="Five fields (minute hour day-of-month month day-of-week), or six with seconds first.",
        show_default=False,
    ),
]
TaskName = Annotated[str, typer.Option("--task", help="The task to enqueue at each slot.")]
Payload = Annotated[
    str | None,
    typer.Option(
        help="The task's arguments: JSON, @file.json to read them from a file, - from stdin.",
        show_default=False,
    ),
]
Zone = Annotated[str, typer.Option("--timezone", help="The zone the expression is read in.")]
AppSpec = Annotated[
    str | None, registry_option(", to check the payload against the task's handler.")
]


@schedule_app.callback()
@friendly
def schedule(
    ctx: typer.Context, json_output: JsonFlag = False, database_url: DatabaseUrl = None
) -> None:
    """The schedules with their last and next runs (by the database's clock). A next run
    already past means no worker kept the schedule then: the next worker to start
    enqueues it once (or each missed slot, with catch_up)."""
    if ctx.invoked_subcommand is not None:
        return
    with _database(database_url) as (store, conn):
        now = store.now(conn)
        kept = DEFAULTS.list_schedules(conn)
    missed = {s.name: s.next_run is not None and s.next_run < now - _MISSED_AFTER for s in kept}
    if json_output:
        print_json(out, {"schedules": [{**_doc(s), "missed": missed[s.name]} for s in kept]})
        return
    if not kept:
        out.print(
            "no periodic tasks (a worker writes its registry's schedules when it starts; "
            "`txqueue schedule create` makes one)"
        )
        return
    headers = ["name", "source", "task", "queue", "cron", "timezone", "last run", "next run"]
    table = [
        [
            s.name,
            s.source,
            s.task,
            s.queue,
            s.cron,
            s.timezone,
            s.last_run.isoformat(),
            _next(s) + ("  (missed: no worker ran)" if missed[s.name] else ""),
        ]
        for s in kept
    ]
    print_table(out, headers, table, whole=(6, 7))


@schedule_app.command()
@friendly
def create(
    name: Name,
    cron: Cron,
    task: TaskName,
    queue: Annotated[str, typer.Option(help="The queue of its tasks.")] = DEFAULT_QUEUE,
    payload: Payload = None,
    timezone: Zone = "UTC",
    catch_up: Annotated[
        bool, typer.Option(help="Enqueue each slot missed while no worker ran, not the last.")
    ] = False,
    paused: Annotated[bool, typer.Option(help="Make it paused.")] = False,
    app_spec: AppSpec = None,
    json_output: JsonFlag = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Make a schedule: the workers of its queue enqueue TASK at each slot of CRON from the
    next one on, as they do the schedules declared in code."""
    control = _control(app_spec)
    with _database(database_url) as (_, conn):
        made = control.create_schedule(
            conn,
            name,
            cron=cron,
            task=task,
            queue=queue,
            payload=None if payload is None else read_payload(payload),
            timezone=timezone,
            catch_up=catch_up,
            paused=paused,
        )
    _print(made, json_output)


@schedule_app.command()
@friendly
def change(
    name: Name,
    cron: Annotated[str | None, typer.Option(help="A new expression.", show_default=False)] = None,
    task: Annotated[str | None, typer.Option(help="A new task.", show_default=False)] = None,
    queue: Annotated[str | None, typer.Option(help="A new queue.", show_default=False)] = None,
    payload: Payload = None,
    timezone: Annotated[
        str | None, typer.Option(help="A new time zone.", show_default=False)
    ] = None,
    catch_up: Annotated[
        bool | None, typer.Option(help="Enqueue each missed slot, or the last.", show_default=False)
    ] = None,
    app_spec: AppSpec = None,
    json_output: JsonFlag = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Change a schedule made at run time (one declared in code is changed in the code);
    what is not given stays. A new expression or time zone starts at its next slot."""
    given: dict[str, Any] = {"cron": cron, "task": task, "queue": queue}
    given |= {"timezone": timezone, "catch_up": catch_up}
    changes = {k: v for k, v in given.items() if v is not None}
    if payload is not None:
        changes["payload"] = read_payload(payload)
    if not changes:
        raise ConfigError(
            "nothing to change: give --cron, --task, --queue, --payload, --timezone or "
            "--catch-up/--no-catch-up"
        )
    control = _control(app_spec)
    with _database(database_url) as (_, conn):
        changed = control.change_schedule(conn, name, **changes)
    _print(changed, json_output)


@schedule_app.command()
@friendly
def pause(name: Name, json_output: JsonFlag = False, database_url: DatabaseUrl = None) -> None:
    """Stop a schedule (of either kind) enqueuing until it is resumed; it stays paused
    across deploys."""
    with _database(database_url) as (_, conn):
        paused = DEFAULTS.pause_schedule(conn, name)
    _print(paused, json_output)


@schedule_app.command()
@friendly
def resume(name: Name, json_output: JsonFlag = False, database_url: DatabaseUrl = None) -> None:
    """Start a paused schedule again at its next slot; the slots passed meanwhile are
    skipped."""
    with _database(database_url) as (_, conn):
        resumed = DEFAULTS.resume_schedule(conn, name)
    _print(resumed, json_output)


@schedule_app.command()
@friendly
def delete(name: Name, database_url: DatabaseUrl = None) -> None:
    """Delete a schedule. One still declared in code comes back when a worker that
    declares it next looks: pause it instead."""
    with _database(database_url) as (_, conn):
        DEFAULTS.delete_schedule(conn, name)
    out.print(f"schedule {name} deleted", highlight=False)


def _control(app_spec: str | None) -> schedules.ScheduleControl:
    """The calls, checking payloads against ``--app``'s registry when given."""
    return schedules.ScheduleControl(None if app_spec is None else load_registry(app_spec))


def _doc(s: ScheduleInfo) -> dict[str, Any]:
    return {
        "name": s.name,
        "source": s.source,
        "task": s.task,
        "queue": s.queue,
        "cron": s.cron,
        "timezone": s.timezone,
        "payload": s.payload,
        "catch_up": s.catch_up,
        "paused": s.paused,
        "last_run": iso(s.last_run),
        "next_run": iso_or_none(s.next_run),
    }


def _next(s: ScheduleInfo) -> str:
    return "paused" if s.next_run is None else s.next_run.isoformat()


def _print(s: ScheduleInfo, json_output: bool) -> None:
    if json_output:
        print_json(out, _doc(s))
        return
    out.print(
        f"schedule {s.name}: {s.task} on {s.queue} at {s.cron!r} ({s.timezone}), next run "
        f"{_next(s)}",
        highlight=False,
    )
