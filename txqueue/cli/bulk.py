"""Many tasks at once: `txqueue find` searches by filter; `txqueue bulk retry|cancel|delete`
acts on every match, in batches, after a dry run or a confirmation when asked."""

from __future__ import annotations

import inspect
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import wraps
from typing import Annotated, Any

import typer

from .. import broker, config
from ..app import DEFAULTS
from ..core.task import STATES
from ..core.times import iso
from ..errors import ConfigError, InvalidValueError
from ..operations import bulk, search
from ..operations.filters import TaskFilter
from ..outbox import client
from .app import (
    AmqpUrl,
    Databases,
    DatabaseUrl,
    JsonFlag,
    _database,
    app,
    each_database,
    err,
    friendly,
    out,
)
from .output import OPERATOR, cut, print_json, print_page, print_table
from .tasks import _brief
from .times import CreatedAfter, CreatedBefore, FinishedAfter, FinishedBefore, when

CONFIRM_OVER = 100
"""Tasks a bulk operation changes without asking (or without --yes)."""
SAMPLE = 5

bulk_app = typer.Typer(
    help="Retry, cancel or delete every task matching a filter, in batches.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(bulk_app, name="bulk")

Name = Annotated[str | None, typer.Option(help="Task name.", show_default=False)]
Queue = Annotated[str | None, typer.Option(help="Queue.", show_default=False)]
State = Annotated[
    str | None,
    typer.Option(
        help=f"One or several, comma-separated, of: {', '.join(STATES)}.", show_default=False
    ),
]
Error = Annotated[
    str | None,
    typer.Option(
        help="An attempt failed with this exception type (TimeoutError, or module.Name) or with "
        "this text in its message (any case).",
        show_default=False,
    ),
]
Payload = Annotated[
    list[str] | None,
    typer.Option(
        help="KEY=VALUE: the task's argument KEY has VALUE (read as JSON when it is: 42, true, "
        'null, "42"; else as text). Repeat for several.',
        show_default=False,
    ),
]
FailedWith = Annotated[
    str | None,
    typer.Option(
        help="The error it failed with last is of this type (TimeoutError, or module.Name).",
        show_default=False,
    ),
]
WorkflowId = Annotated[
    str | None, typer.Option("--workflow", help="A workflow's id.", show_default=False)
]

Command = Callable[..., None]


def _payload(pairs: list[str] | None) -> dict[str, Any] | None:
    if not pairs:
        return None
    found: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise InvalidValueError("--payload", f"must be KEY=VALUE, got {pair!r}")
        try:
            found[key] = json.loads(text)
        except (ValueError, RecursionError):  # not JSON, or nested past any payload's
            found[key] = text
    return found


def _filters(
    name: Name = None,
    queue: Queue = None,
    state: State = None,
    created_after: CreatedAfter = None,
    created_before: CreatedBefore = None,
    finished_after: FinishedAfter = None,
    finished_before: FinishedBefore = None,
    error: Error = None,
    payload: Payload = None,
    workflow: WorkflowId = None,
    failed_with: FailedWith = None,
) -> TaskFilter:
    """The filter options every search and bulk command takes, as their TaskFilter."""
    return TaskFilter(
        name=name,
        queue=queue,
        state=None if state is None else [s.strip() for s in state.split(",")],
        error=error,
        payload=_payload(payload),
        workflow=workflow,
        failed_with=failed_with,
        created_after=when("--created-after", created_after),
        created_before=when("--created-before", created_before),
        finished_after=when("--finished-after", finished_after),
        finished_before=when("--finished-before", finished_before),
    )


def _taking(where_of: Callable[..., TaskFilter]) -> Callable[[Command], Command]:
    """Make ``command(where, ...)`` a command that takes ``where_of``'s options and then
    its own, and is given the TaskFilter ``where_of`` makes of them as ``where``: typer
    reads a command's options from its signature, so each set is declared once."""
    first = inspect.signature(where_of, eval_str=True).parameters

    def make(command: Command) -> Command:
        own = list(inspect.signature(command, eval_str=True).parameters.values())[1:]

        @wraps(command)
        def run(**options: Any) -> None:
            command(where_of(**{name: options.pop(name) for name in first}), **options)

        run.__signature__ = inspect.Signature([*first.values(), *own])  # type: ignore[attr-defined]
        return run

    return make


def _table(tasks: Sequence[Any]) -> None:
    rows = []
    for t in tasks:
        brief = _brief(t)
        tries = f"{t.attempts}/{t.max_attempts or '-'}"
        rows.append([brief["id"], t.queue, t.name, t.state, tries, brief["last_error"] or ""])
    print_table(out, ["id", "queue", "name", "state", "tries", "last error"], rows, whole=(0, 3, 4))


Before = Annotated[
    str | None,
    typer.Option(help="Start below this task id: the last of the page before.", show_default=False),
]


@app.command()
@friendly
@_taking(_filters)
def find(
    where: TaskFilter,
    limit: Annotated[int, typer.Option(min=1, max=search.SEARCH_LIMIT)] = 50,
    before: Before = None,
    json_output: JsonFlag = False,
    database_url: DatabaseUrl = None,
    databases: Databases = None,
) -> None:
    """Tasks matching every filter given, live and finished, newest first, a page at a time
    (of several databases, each one's)."""

    def one(url: str, _: str | None) -> None:
        with _database(url) as (_store, conn):
            tasks = DEFAULTS.find_tasks(conn, where, limit=limit, before=before)
        print_page(out, "tasks", tasks, limit, _brief if json_output else None, _table)

    each_database(database_url, databases, json_output, one)


def _bulk(
    action: str,
    where: TaskFilter,
    dry_run: bool,
    yes: bool,
    batch: int,
    json_output: bool,
    database_url: str | None,
) -> None:
    url = config.database_url(database_url)
    narrowed = replace(where, state=list(bulk.eligible(action, where, "--state")))
    with _database(url) as (_, conn):
        count = DEFAULTS.count_tasks(conn, narrowed)
        sample = DEFAULTS.find_tasks(conn, narrowed, limit=SAMPLE)
    past = {"retry": "retried", "cancel": "cancelled", "delete": "deleted"}[action]
    described = where.describe()
    # One shape for every action and for a dry run: a script reads the same keys of each.
    doc = {
        "action": action,
        "dry_run": dry_run,
        "matched": count,
        "changed": 0,
        "sample": [_brief(t) for t in sample],
    }
    if dry_run:
        if json_output:
            print_json(out, doc)
            return
        s = "" if count == 1 else "s"
        out.print(f"would {action} {count:,} task{s} matching {described}", highlight=False)
        if sample:
            _table(sample)
        return
    if count > CONFIRM_OVER and not yes:
        if not sys.stdin.isatty():
            raise ConfigError(f"{count:,} tasks match {described}: add --yes to {action} them")
        if not typer.confirm(f"{action} {count:,} tasks matching {described}?"):
            raise typer.Exit(1)
    done = 0

    def progress(changed: int) -> None:
        nonlocal done
        done += changed
        if err.is_terminal and count > batch:
            err.print(f"{past} {done:,} of about {count:,}…", highlight=False)

    run = {
        "retry": DEFAULTS.retry_tasks,
        "cancel": DEFAULTS.cancel_tasks,
        "delete": DEFAULTS.delete_tasks,
    }[action]
    changed = run(where, by=OPERATOR, batch=batch, database_url=url, on_batch=progress)
    if action == "retry" and not broker.flush(timeout=3.0):
        err.print("txqueue: warning: wake-ups not confirmed by RabbitMQ; workers will poll")
    if json_output:
        print_json(out, {**doc, "changed": changed})
    else:
        s = "" if changed == 1 else "s"
        out.print(f"{past} {changed:,} task{s} matching {described}", highlight=False)


DryRun = Annotated[
    bool,
    typer.Option("--dry-run", help="Print how many tasks match, and a few of them; change none."),
]
Yes = Annotated[
    bool, typer.Option("--yes", "-y", help=f"Go ahead past {CONFIRM_OVER} tasks without asking.")
]
Batch = Annotated[int, typer.Option(min=1, max=10_000, help="Tasks per transaction.")]


def _bulk_command(
    group: typer.Typer, name: str, action: str, doc: str, where_of: Callable[..., TaskFilter]
) -> None:
    """Register `txqueue GROUP NAME`: ``action`` on the tasks of ``where_of``'s options,
    then how to go about it."""

    def command(
        where: TaskFilter,
        dry_run: DryRun = False,
        yes: Yes = False,
        batch: Batch = bulk.BATCH,
        json_output: JsonFlag = False,
        database_url: DatabaseUrl = None,
        databases: Databases = None,
        amqp_url: AmqpUrl = None,
    ) -> None:
        client.configure(amqp_url=config.amqp_url(amqp_url))
        each_database(
            database_url,
            databases,
            json_output,
            lambda url, _: _bulk(action, where, dry_run, yes, batch, json_output, url),
        )

    command.__doc__ = doc
    group.command(name)(friendly(_taking(where_of)(command)))


_bulk_command(
    bulk_app,
    "retry",
    "retry",
    "Run the failed and cancelled tasks matching the filters again, now.",
    _filters,
)
_bulk_command(
    bulk_app,
    "cancel",
    "cancel",
    "Cancel the pending and waiting tasks matching the filters; ask running ones to stop.",
    _filters,
)
_bulk_command(
    bulk_app,
    "delete",
    "delete",
    "Delete the finished tasks matching the filters, history and all (cancel first what "
    "has not finished).",
    _filters,
)


dead_app = typer.Typer(
    help="Tasks failed for good, grouped by task name and the type of their last error.",
    invoke_without_command=True,
    rich_markup_mode=None,
)
app.add_typer(dead_app, name="dead-letters")

GroupName = Annotated[str, typer.Argument(help="The group's task name.")]
GroupError = Annotated[str, typer.Argument(help="The group's error type, as listed.")]


@dead_app.callback()
@friendly
def dead_letters(
    ctx: typer.Context,
    queue: Queue = None,
    limit: Annotated[int, typer.Option(min=1, max=search.SEARCH_LIMIT)] = 100,
    json_output: JsonFlag = False,
    database_url: DatabaseUrl = None,
    databases: Databases = None,
) -> None:
    """The groups, the biggest first (of several databases, each one's); `retry` or
    `discard` one."""
    if ctx.invoked_subcommand is not None:
        return
    each_database(
        database_url,
        databases,
        json_output,
        lambda url, _: _dead_letters(url, queue, limit, json_output),
    )


def _dead_letters(url: str, queue: str | None, limit: int, json_output: bool) -> None:
    with _database(url) as (_, conn):
        groups = DEFAULTS.dead_letters(conn, queue=queue, limit=limit)
    if json_output:
        docs = [
            {
                "name": g.name,
                "error": g.error,
                "count": g.count,
                "first_seen": iso(g.first_seen),
                "last_seen": iso(g.last_seen),
                "message": g.message,
            }
            for g in groups
        ]
        print_json(out, {"groups": docs})
        return
    if not groups:
        out.print("no dead letters")
        return
    rows = [
        [
            g.name,
            g.error,
            f"{g.count:,}",
            g.first_seen.strftime("%Y-%m-%d %H:%M:%S"),
            g.last_seen.strftime("%Y-%m-%d %H:%M:%S"),
            cut(g.message or "", 80),
        ]
        for g in groups
    ]
    headers = ["name", "error", "count", "first seen", "last seen", "last message"]
    print_table(out, headers, rows, whole=(0, 1, 2, 3, 4))


def _group(name: GroupName, error: GroupError, queue: Queue = None) -> TaskFilter:
    """A dead-letter group's tasks: failed with ``error`` last."""
    return TaskFilter(name=name, queue=queue, state="failed", failed_with=error)


_bulk_command(dead_app, "retry", "retry", "Run every task of a group again, now.", _group)
_bulk_command(
    dead_app, "discard", "delete", "Delete every task of a group, history and all.", _group
)
