"""The ``txqueue`` command. Errors reach the user as one line on stderr, never a traceback."""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from functools import wraps
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Column, Table
from rich.text import Text

from . import broker, client, config, manage
from .cleaner import DEFAULT_BATCH, DEFAULT_INTERVAL, Cleaner
from .demo import Demo, Progress
from .errors import BrokerError, ConfigError, TxQueueError
from .registry import Registry
from .signals import graceful
from .store import for_url
from .store.base import Store
from .task import DEFAULT_QUEUE, STATES, Task, TaskInfo
from .worker import Worker

app = typer.Typer(
    help="txqueue: a transactional outbox task queue on PostgreSQL or SQLite, woken by RabbitMQ.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True)
out = Console()

DatabaseUrl = Annotated[
    str | None,
    typer.Option(
        "--database-url",
        envvar=config.DATABASE_ENV,
        show_envvar=True,
        help="postgresql://user@host:5432/db or sqlite:///file.db [default: sqlite:///txqueue.db].",
        show_default=False,
    ),
]
AmqpUrl = Annotated[
    str | None,
    typer.Option(
        "--amqp-url",
        envvar=config.AMQP_ENV,
        show_envvar=True,
        help="RabbitMQ URL, e.g. amqp://guest:guest@host:5672/. Unset: no wake-ups, poll only.",
        show_default=False,
    ),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Print JSON for scripts and monitoring.")]

F = TypeVar("F", bound=Callable[..., Any])


def friendly(fn: F) -> F:
    """Turn txqueue's errors into one line on stderr and exit code 1."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except TxQueueError as exc:
            err.print(f"txqueue: error: {exc}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def _logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("pika").setLevel(logging.CRITICAL)


def load_registry(spec: str) -> Registry:
    """Import ``module:attribute`` (the current directory is on the path) as a Registry."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"--app must look like module:registry, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"--app {spec}: cannot import {module_name!r}: {exc}") from None
    except Exception as exc:
        raise ConfigError(
            f"--app {spec}: importing {module_name!r} raised {type(exc).__name__}: {exc}"
        ) from None
    registry = getattr(module, attr, None)
    if not isinstance(registry, Registry):
        raise ConfigError(f"--app {spec}: {module_name}.{attr} is not a txqueue.Registry")
    return registry


@contextmanager
def _database(database_url: str | None, *, create: bool = False) -> Iterator[tuple[Store, Any]]:
    """An autocommit connection to the configured database, and its store."""
    url = config.database_url(database_url)
    store = for_url(url)
    conn = store.connect(url, create=create)
    try:
        yield store, conn
    finally:
        conn.close()


@app.command()
@friendly
def init(database_url: DatabaseUrl = None, amqp_url: AmqpUrl = None) -> None:
    """Create or upgrade txqueue's tables (schema.sql, or schema.sqlite.sql, creating the
    SQLite file). Safe to run again.

    With a broker configured, also checks that RabbitMQ can be reached; it creates nothing
    there (workers and enqueues declare their queues), so an unreachable broker is reported
    and the command still succeeds.
    """
    with _database(database_url, create=True) as (store, conn):
        applied = store.apply_schema(conn)
    if applied:
        out.print(f"schema up to date: applied migration(s) {', '.join(map(str, applied))}")
    else:
        out.print("schema already up to date")
    url = config.amqp_url(amqp_url)
    if url:
        try:
            broker.check(url)
        except BrokerError as exc:
            _warn(f"{exc}; the schema is applied, and workers poll until it is reachable")
        else:
            out.print(f"RabbitMQ reachable at {config.redact(url)}", highlight=False)


def _warn(message: str) -> None:
    err.print(f"txqueue: warning: {message}", markup=False, highlight=False, soft_wrap=True)


@app.command()
@friendly
def worker(
    app_spec: Annotated[
        str,
        typer.Option(
            "--app", help="The task registry to run, as module:attribute (myapp.tasks:registry)."
        ),
    ],
    queues: Annotated[
        list[str] | None,
        typer.Option(
            "--queues",
            "-q",
            help="Queues to work on (repeat, or comma-separated). Default: the registry's.",
        ),
    ] = None,
    concurrency: Annotated[int, typer.Option(min=1, max=1024, help="Handler threads.")] = 8,
    poll_interval: Annotated[
        float | None,
        typer.Option(min=0.001, help="Seconds between idle polls [default: 1; 0.1, no broker]."),
    ] = None,
    shutdown_timeout: Annotated[
        float, typer.Option(min=0, help="Seconds to let running tasks finish on SIGTERM.")
    ] = 30.0,
    burst: Annotated[bool, typer.Option(help="Run what is ripe, then exit.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
    database_url: DatabaseUrl = None,
    amqp_url: AmqpUrl = None,
) -> None:
    """Run tasks: woken by RabbitMQ, polling the database when idle."""
    _logging(verbose)
    names = [q.strip() for item in queues or [] for q in item.split(",") if q.strip()]
    w = Worker(
        load_registry(app_spec),
        database_url=config.database_url(database_url),
        amqp_url=config.amqp_url(amqp_url),
        queues=names or None,
        concurrency=concurrency,
        poll_interval=poll_interval,
        shutdown_timeout=shutdown_timeout,
    )
    # Fail at start-up, in one line, rather than retrying forever on a typo'd URL. A broker
    # that is down is no reason not to work: the worker polls, and connects when it is back.
    with _database(w.database_url):
        pass
    with graceful(w.stop):
        w.run(burst=burst)
    if w.unfinished:
        # Handler threads cannot be interrupted and would keep the process alive: exit
        # without them; their tasks were released (or their leases run out) for the cleaner.
        logging.shutdown()
        os._exit(1)


@app.command()
@friendly
def enqueue(
    name: Annotated[str, typer.Argument(help="The task's name, as registered.")],
    payload: Annotated[str, typer.Option(help="The payload, as JSON.")] = "{}",
    queue: Annotated[str, typer.Option(help="Queue to put it on.")] = DEFAULT_QUEUE,
    priority: Annotated[int, typer.Option(help="Higher runs first.")] = 0,
    delay: Annotated[float | None, typer.Option(min=0, help="Seconds before it may run.")] = None,
    unique_key: Annotated[
        str | None, typer.Option(help="Insert nothing while a task with this key is live.")
    ] = None,
    max_attempts: Annotated[int | None, typer.Option(help="Override the registry's.")] = None,
    database_url: DatabaseUrl = None,
    amqp_url: AmqpUrl = None,
) -> None:
    """Enqueue one task (committed at once) and print its id."""
    try:
        body = json.loads(payload)
    except ValueError as exc:
        raise ConfigError(f"--payload is not valid JSON: {exc}") from None
    task = Task(
        name,
        body,
        queue=queue,
        priority=priority,
        delay=None if delay is None else timedelta(seconds=delay),
        unique_key=unique_key,
        max_attempts=max_attempts,
    )
    client.configure(amqp_url=config.amqp_url(amqp_url))
    with _database(database_url) as (_, conn):
        task_id = client.enqueue(conn, task)
    if not broker.flush(timeout=3.0):
        err.print("txqueue: warning: wake-up not confirmed by RabbitMQ; workers will poll for it")
    out.print(str(task_id), highlight=False)


@app.command()
@friendly
def status(
    json_output: JsonFlag = False, database_url: DatabaseUrl = None, amqp_url: AmqpUrl = None
) -> None:
    """Task counts by queue and state, the age of the oldest ripe pending task, and (with a
    broker) the wake-ups waiting in each RabbitMQ queue."""
    with _database(database_url) as (store, conn):
        rows = store.status(conn)
    url = config.amqp_url(amqp_url)
    depths: dict[str, int | None] = {}
    broker_error = None
    if url:
        try:
            depths = broker.check(url, sorted({r[0] for r in rows}))
        except BrokerError as exc:
            broker_error, url = str(exc), None
    queues: dict[str, dict[str, Any]] = {}
    for queue, state, count, oldest in rows:
        entry = queues.setdefault(queue, {"queue": queue, "oldest_ripe_pending_s": None})
        entry[state] = count
        if oldest is not None:
            entry["oldest_ripe_pending_s"] = round(oldest, 3)
    states = ("pending", "running", "succeeded", "failed", "cancelled")
    for entry in queues.values():
        for state in states:
            entry.setdefault(state, 0)
        if url:
            entry["messages"] = depths.get(entry["queue"])
    if broker_error:
        _warn(f"{broker_error}; wake-ups waiting in RabbitMQ are not shown")
    if json_output:
        doc: dict[str, Any] = {"queues": list(queues.values())}
        if broker_error:
            doc["broker_error"] = broker_error
        out.print_json(json.dumps(doc))
        return
    table = Table(*states, "oldest ripe pending", *(["messages"] if url else []))
    table.columns.insert(0, Column("queue", no_wrap=True))
    for entry in queues.values():
        age = entry["oldest_ripe_pending_s"]
        extra = [str(entry["messages"]) if entry["messages"] is not None else "-"] if url else []
        table.add_row(
            entry["queue"],
            *(str(entry[s]) for s in states),
            "-" if age is None else f"{age:.1f}s",
            *extra,
        )
    out.print(table if queues else "no tasks")


AppSpec = Annotated[
    str | None,
    typer.Option(
        "--app",
        help="The task registry, as module:attribute, for its on_failed hook. Recovery "
        "policies are stored with the tasks and need no --app.",
        show_default=False,
    ),
]


@app.command()
@friendly
def cleaner(
    loop: Annotated[
        bool, typer.Option("--loop/--once", help="Run every --interval, or once (for cron).")
    ] = False,
    interval: Annotated[
        str, typer.Option(help="Seconds between runs with --loop (also sets --grace).")
    ] = f"{DEFAULT_INTERVAL:g}s",
    grace: Annotated[
        str | None,
        typer.Option(
            help="Re-send the wake-up of a ripe task still pending after this long "
            "[default: two intervals].",
            show_default=False,
        ),
    ] = None,
    retain: Annotated[
        str, typer.Option(help="Keep succeeded and cancelled tasks this long.")
    ] = "24h",
    retain_failed: Annotated[str, typer.Option(help="Keep failed tasks this long.")] = "7d",
    batch_size: Annotated[
        int, typer.Option(min=1, max=100_000, help="Rows per statement.")
    ] = DEFAULT_BATCH,
    app_spec: AppSpec = None,
    json_output: JsonFlag = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v")] = False,
    database_url: DatabaseUrl = None,
    amqp_url: AmqpUrl = None,
) -> None:
    """Recover tasks whose worker died, re-send lost wake-ups, prune old tasks.

    Prints a one-line summary (--json for monitoring). Exits 1 only when it could not do
    its work (database unreachable; RabbitMQ unreachable or not confirming wake-ups).
    """
    _logging(verbose)
    interval_s = config.duration(interval, "--interval")
    c = Cleaner(
        database_url=config.database_url(database_url),
        amqp_url=config.amqp_url(amqp_url),
        registry=load_registry(app_spec) if app_spec else None,
        interval=interval_s,
        grace=None if grace is None else config.duration(grace, "--grace"),
        retain=config.duration(retain, "--retain"),
        retain_failed=config.duration(retain_failed, "--retain-failed"),
        batch_size=batch_size,
    )
    if loop:
        with graceful(c.stop):
            c.run()
        return
    report = c.run_once()
    if json_output:
        out.print_json(json.dumps(report.as_dict()))
    else:
        out.print(f"cleaner: {report.summary()}", highlight=False, soft_wrap=True)
    if not report.ok:
        raise typer.Exit(1)


TaskId = Annotated[str, typer.Argument(help="The task's id (a UUID).", show_default=False)]


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
    client.configure(amqp_url=config.amqp_url(amqp_url))
    with _database(database_url) as (_, conn):
        if task_id is not None:
            manage.retry(conn, task_id)
            count = 1
        else:
            count = manage.retry_failed(conn, queue=queue)
    if not broker.flush(timeout=3.0):
        err.print("txqueue: warning: wake-ups not confirmed by RabbitMQ; workers will poll")
    if json_output:
        out.print_json(json.dumps({"retried": count}))
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
        state = manage.cancel(conn, task_id)
    if json_output:
        out.print_json(json.dumps({"id": task_id, "state": state}))
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
) -> None:
    """The newest tasks, filtered by state, queue and name."""
    with _database(database_url) as (_, conn):
        tasks = manage.list_tasks(conn, state=state, queue=queue, name=name, limit=limit)
    if json_output:
        out.print_json(json.dumps({"tasks": [_brief(t) for t in tasks]}))
        return
    table = Table(
        Column("id", no_wrap=True, min_width=36), "queue", "name", "state", "tries", "last error"
    )
    for t in tasks:
        brief = _brief(t)
        table.add_row(
            brief["id"],
            t.queue,
            Text(t.name),
            t.state,
            f"{t.attempts}/{t.max_attempts or '-'}",
            Text(brief["last_error"] or ""),
        )
    out.print(table if tasks else "no tasks")


def _brief(t: TaskInfo) -> dict[str, Any]:
    doc = t.as_dict()
    last = t.errors[-1] if t.errors else None
    keep = ("id", "queue", "name", "state", "priority", "attempts", "max_attempts")
    return {
        **{k: doc[k] for k in keep},
        "run_at": doc["run_at"],
        "created_at": doc["created_at"],
        "finished_at": doc["finished_at"],
        "last_error": f"{last.get('type')}: {last.get('message')}" if last else None,
    }


@app.command()
@friendly
def show(task_id: TaskId, json_output: JsonFlag = False, database_url: DatabaseUrl = None) -> None:
    """One task in full, with its error history."""
    with _database(database_url) as (_, conn):
        info = manage.get_task(conn, task_id)
    doc = info.as_dict()
    if json_output:
        out.print_json(json.dumps(doc))
        return
    table = Table.grid(padding=(0, 2))
    for key, value in doc.items():
        if key == "errors":
            continue
        shown = json.dumps(value) if key in ("payload", "result") else value
        table.add_row(key, Text("-" if value is None else str(shown)))
    out.print(table)
    for i, error in enumerate(info.errors, 1):
        heading = f"error {i}: attempt {error.get('attempt')} at {error.get('at')}"
        out.print(Text(f"\n{heading} on {error.get('worker_id')}", style="bold"))
        out.print(f"{error.get('type')}: {error.get('message')}", markup=False, highlight=False)
        if error.get("traceback"):
            out.print(error["traceback"].rstrip(), markup=False, highlight=False)


@app.command()
@friendly
def demo(
    tasks: Annotated[int, typer.Option(min=100, max=100_000, help="How many tasks.")] = 2000,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Show the logs.")] = False,
    database_url: DatabaseUrl = None,
    amqp_url: AmqpUrl = None,
) -> None:
    """See txqueue work: workers, a cleaner and a producer on a realistic mix of tasks.

    With nothing configured it uses a throwaway SQLite file and no broker; give URLs to
    run it on PostgreSQL and RabbitMQ. Its tasks are deleted when it ends.
    """
    if verbose:
        _logging(verbose)
    else:
        logging.getLogger("txqueue").setLevel(logging.CRITICAL)
        logging.getLogger("pika").setLevel(logging.CRITICAL)
    run = Demo(database_url=database_url, amqp_url=amqp_url, tasks=tasks)
    with Live(_progress(None, tasks), console=out, transient=False, refresh_per_second=10) as live:
        report = run.run(lambda p: live.update(_progress(p, tasks)))
    table = Table("txqueue demo", "result", title="summary", title_justify="left")
    for key, value in report.rows():
        table.add_row(key, Text(value))
    out.print(table)
    if not report.ok:
        raise typer.Exit(1)


def _progress(p: Progress | None, total: int) -> Table:
    grid = Table.grid(padding=(0, 2))
    if p is None:
        grid.add_row("starting workers and the cleaner...")
        return grid
    done = p.succeeded + p.failed
    grid.add_row(Text(p.phase, style="bold"), f"{p.elapsed:5.1f} s")
    grid.add_row(ProgressBar(total=total, completed=done, width=50), f"{done:,}/{total:,}")
    counts = f"pending {p.pending:,}   running {p.running:,}   succeeded {p.succeeded:,}   "
    grid.add_row(Text(counts + f"failed {p.failed:,}"), "")
    return grid


def main() -> None:
    app()
