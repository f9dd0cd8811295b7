"""The operator's commands: init, worker, status, schedule, cleaner, metrics."""

from __future__ import annotations

import gc
import json
import logging
import os
from dataclasses import asdict
from datetime import timedelta
from typing import Annotated, Any

import typer

from .. import broker, config
from ..cleaner import DEFAULT_BATCH, DEFAULT_INTERVAL, Cleaner
from ..errors import BrokerError, ConfigError, PermanentError, StoreError
from ..horizon import SEE, Horizon, estimate, span
from ..periodic import Schedule
from ..signals import graceful
from ..store import for_url
from ..store.records import WORKER_ALIVE_WITHIN, QueueSettings
from ..worker import Worker
from .app import (
    AmqpUrl,
    AppSpec,
    DatabaseUrl,
    JsonFlag,
    LogFormat,
    LogFormatOption,
    MetricsHost,
    MetricsPort,
    _database,
    _logging,
    _warn,
    app,
    friendly,
    load_registry,
    out,
)
from .output import print_table


@app.command()
@friendly
def init(database_url: DatabaseUrl = None, amqp_url: AmqpUrl = None) -> None:
    """Create or upgrade txqueue's tables (schema.sql, or schema.sqlite.sql, creating the
    SQLite file). Safe to run again.

    With a broker configured, also checks that RabbitMQ can be reached; it creates nothing
    there (workers and enqueues declare their queues), so an unreachable broker is reported
    and the command still succeeds. A login RabbitMQ refuses fails it: no retry mends that.
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
        except PermanentError:
            raise
        except BrokerError as exc:
            _warn(f"{exc}; the schema is applied, and workers poll until it is reachable")
        else:
            out.print(
                f"RabbitMQ reachable at {config.redact(url)}", highlight=False, soft_wrap=True
            )


WORKER_UNFINISHED = 3
"""`txqueue worker`'s exit code when it stopped with work not done: tasks still running
(past --shutdown-timeout, or a second signal), outcomes and tasks it could not write or
release (the database out of reach) and left to their leases, or a part that did not
stop in time."""


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
    cleaner: Annotated[
        bool,
        typer.Option(
            "--cleaner/--no-cleaner",
            help="Run the cleaner's passes (recover dead workers' tasks, re-send lost "
            "wake-ups, prune), one worker at a time; --no-cleaner where `txqueue cleaner` "
            "runs apart.",
        ),
    ] = True,
    cleaner_interval: Annotated[
        str, typer.Option(help="Seconds between the cleaner's passes.")
    ] = f"{DEFAULT_INTERVAL:g}s",
    retain: Annotated[
        str, typer.Option(help="The cleaner's passes keep succeeded and cancelled tasks this long.")
    ] = "24h",
    retain_failed: Annotated[
        str, typer.Option(help="The cleaner's passes keep failed tasks this long.")
    ] = "7d",
    metrics_port: MetricsPort = None,
    metrics_host: MetricsHost = "0.0.0.0",
    log_format: LogFormatOption = LogFormat.text,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at DEBUG level.")] = False,
    database_url: DatabaseUrl = None,
    amqp_url: AmqpUrl = None,
) -> None:
    """Run tasks: woken by RabbitMQ, polling the database when idle.

    Exits 0 once stopped with every task it held finished and recorded (or given back
    unstarted), 1 on an error (configuration, a database or broker refusing it for good,
    a part that kept dying), 3 when it stopped with work not done: tasks still running
    (past --shutdown-timeout, or a second signal), outcomes it could not write (the
    database out of reach) left to the tasks' leases, or a part that did not stop in
    time."""
    task_filter = _logging(verbose, log_format)
    names = [q.strip() for item in queues or [] for q in item.split(",") if q.strip()]
    w = Worker(
        load_registry(app_spec),
        database_url=config.database_url(database_url),
        amqp_url=config.amqp_url(amqp_url),
        queues=names or None,
        concurrency=concurrency,
        poll_interval=poll_interval,
        shutdown_timeout=shutdown_timeout,
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        cleaner=cleaner
        and {
            "interval": config.duration(cleaner_interval, "--cleaner-interval"),
            "retain": config.duration(retain, "--retain"),
            "retain_failed": config.duration(retain_failed, "--retain-failed"),
        },
    )
    task_filter.worker_id = w.worker_id
    # Fail at start-up, in one line, on what retrying cannot fix (a wrong password, no such
    # database, no SQLite file). A database or broker that is down is no reason not to
    # start: a service manager may start workers while the database restarts.
    try:
        with _database(w.database_url):
            pass
    except StoreError as exc:
        if not for_url(w.database_url).is_connection_error(exc):
            raise
        _warn(f"{exc}; starting anyway, claiming once it is reachable")
    # What start-up made (imports, the registry) lives as long as the process: kept out of
    # full collections, which then scan only what the worker has made since, about 1 ms
    # instead of 20-30 ms with every thread stopped (benchmarks/peers, a 20,000-task drain).
    gc.freeze()
    with graceful(w.stop):
        w.run(burst=burst)
    if w.unfinished or w.left_behind or w.late:
        # Handler threads cannot be interrupted and would keep the process alive, as would
        # a part that did not stop in time: exit without them; their tasks were released
        # (or their leases run out) for the cleaner.
        logging.shutdown()
        os._exit(WORKER_UNFINISHED)


@app.command()
@friendly
def status(
    json_output: JsonFlag = False, database_url: DatabaseUrl = None, amqp_url: AmqpUrl = None
) -> None:
    """Task counts by queue and state, the age of the oldest ripe pending task, (with a
    broker) the wake-ups waiting in each RabbitMQ queue, the workers running, the pending
    tasks no running worker has a handler for, and what holds the vacuum horizon back."""
    threshold = config.vacuum_horizon_warn()
    with _database(database_url) as (store, conn):
        rows = store.status(conn)
        try:
            workers, unhandled = store.unhandled(conn)
        except StoreError as exc:
            if store.is_connection_error(exc):
                raise
            _warn(f"{exc}; running workers are not shown (does `txqueue init` need a run?)")
            workers, unhandled = None, []
        try:
            limited = {q.queue: q for q in store.queue_settings(conn)}
        except StoreError as exc:
            if store.is_connection_error(exc):
                raise
            _warn(f"{exc}; paused and limited queues are not shown")
            limited = {}
        try:
            horizon: Horizon | None = estimate(store.vacuum_horizon(conn))
        except StoreError as exc:
            if store.is_connection_error(exc):
                raise
            _warn(f"{exc}; the vacuum horizon is not shown")
            horizon = None
    url = config.amqp_url(amqp_url)
    depths: dict[str, int | None] = {}
    broker_error = None
    if url:
        try:
            depths = broker.check(url, sorted({r[0] for r in rows}))
        except PermanentError:
            raise
        except BrokerError as exc:
            broker_error, url = str(exc), None
    queues: dict[str, dict[str, Any]] = {}
    for queue, state, count, oldest in rows:
        entry = queues.setdefault(queue, {"queue": queue, "oldest_ripe_pending_s": None})
        entry[state] = count
        if oldest is not None:
            entry["oldest_ripe_pending_s"] = round(oldest, 3)
    for name in limited:
        queues.setdefault(name, {"queue": name, "oldest_ripe_pending_s": None})
    queues = dict(sorted(queues.items()))
    states = ("pending", "running", "succeeded", "failed", "cancelled")
    for entry in queues.values():
        for state in states:
            entry.setdefault(state, 0)
        if url:
            entry["messages"] = depths.get(entry["queue"])
        settings = limited.get(entry["queue"], QueueSettings(entry["queue"]))
        entry.update({k: v for k, v in settings.as_dict().items() if k != "queue"})
    if broker_error:
        _warn(f"{broker_error}; wake-ups waiting in RabbitMQ are not shown")
    no_handler = [{"queue": q, "name": n, "pending": c} for q, n, c in unhandled]
    if json_output:
        doc: dict[str, Any] = {
            "queues": list(queues.values()),
            "workers": workers,
            "no_handler": no_handler,
            "vacuum_horizon": None if horizon is None else horizon.as_dict(threshold),
        }
        if broker_error:
            doc["broker_error"] = broker_error
        out.print_json(json.dumps(doc))
        return
    if not queues:
        out.print("no tasks")
    headers = ["queue", *states, "oldest ripe pending", *(["messages"] if url else [])]
    headers += ["flow control"] if limited else []
    table = []
    for entry in queues.values():
        age = entry["oldest_ripe_pending_s"]
        extra = [str(entry["messages"]) if entry["messages"] is not None else "-"] if url else []
        if limited:
            flow = limited.get(entry["queue"])
            extra.append("-" if flow is None else flow.describe())
        counts = (str(entry[s]) for s in states)
        table.append([entry["queue"], *counts, "-" if age is None else f"{age:.1f}s", *extra])
    if table:
        print_table(out, headers, table, whole=range(1, len(states) + 1))
    _print_workers(workers, unhandled)
    _print_horizon(horizon, threshold)


_MISSED_AFTER = timedelta(seconds=5)
"""A slot this far past with no task enqueued was missed (not merely being enqueued)."""


@app.command()
@friendly
def schedule(json_output: JsonFlag = False, database_url: DatabaseUrl = None) -> None:
    """The periodic tasks the workers keep, with their last and next runs (by the
    database's clock). A next run already past means no worker kept the schedule then:
    the next worker to start enqueues it once (or each missed slot, with catch_up)."""
    with _database(database_url) as (store, conn):
        now = store.now(conn)
        kept = store.list_schedules(conn)
    entries = []
    for row in kept:
        cron = Schedule(row.name, row.cron, row.task, row.queue, timezone=row.timezone)
        upcoming = cron.next_after(row.last_slot)
        entries.append((row, upcoming, upcoming < now - _MISSED_AFTER))
    if json_output:
        doc = [
            {
                **{k: v for k, v in asdict(row).items() if k != "last_slot"},
                "last_run": row.last_slot.isoformat(),
                "next_run": upcoming.isoformat(),
                "missed": missed,
            }
            for row, upcoming, missed in entries
        ]
        out.print_json(json.dumps(doc))
        return
    if not entries:
        out.print("no periodic tasks (a worker writes its registry's schedules when it starts)")
        return
    headers = ["name", "task", "queue", "cron", "timezone", "last run", "next run"]
    table = [
        [
            row.name,
            row.task,
            row.queue,
            row.cron,
            row.timezone,
            row.last_slot.isoformat(),
            upcoming.isoformat() + ("  (missed: no worker ran)" if missed else ""),
        ]
        for row, upcoming, missed in entries
    ]
    print_table(out, headers, table, whole=(5, 6))


def _print_workers(workers: int | None, unhandled: list[tuple[str, str, int]]) -> None:
    if workers is None:
        return
    within = f"{WORKER_ALIVE_WITHIN:g}s"
    if workers == 0:
        waiting = sum(c for _, _, c in unhandled)
        line = f"\nno worker running (none seen in the last {within}); {waiting} pending"
    else:
        line = f"\n{workers} worker{'s' if workers != 1 else ''} running"
    out.print(line, highlight=False)
    if workers and unhandled:
        out.print("pending tasks that no running worker has a handler for:")
        rows = [[q, n, str(c)] for q, n, c in unhandled]
        print_table(out, ["queue", "name", "pending"], rows, whole=(2,))


def _print_horizon(horizon: Horizon | None, threshold: float) -> None:
    if horizon is None:
        return
    if horizon.holder is None:
        out.print("\nvacuum horizon: not held back", highlight=False)
        return
    line = f"\nvacuum horizon: held back by {horizon.describe()}"
    past = horizon.past(threshold)
    if past:
        line += f"; past {span(threshold)}: dead rows pile up and claims slow down, {SEE}"
    out.print(
        line, style="bold red" if past else None, markup=False, highlight=False, soft_wrap=True
    )


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
    metrics_port: MetricsPort = None,
    metrics_host: MetricsHost = "0.0.0.0",
    log_format: LogFormatOption = LogFormat.text,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at DEBUG level.")] = False,
    database_url: DatabaseUrl = None,
    amqp_url: AmqpUrl = None,
) -> None:
    """Recover tasks whose worker died, re-send lost wake-ups, prune old tasks.

    Prints a one-line summary (--json for monitoring). Exits 1 only when it could not do
    its work (database unreachable; RabbitMQ unreachable or not confirming wake-ups).
    With --loop, --metrics-port serves the queues' gauges (see `txqueue metrics`).
    """
    _logging(verbose, log_format)
    if metrics_port is not None and not loop:
        raise ConfigError("--metrics-port needs --loop: a cron run is gone before a scrape")
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
        server = None
        if metrics_port is not None:
            from .. import metrics

            registry = metrics.queue_registry(
                for_url(c.database_url), c.database_url, lambda: c.vacuum_horizon.seconds
            )
            server = metrics.Server(registry, c.unhealthy, metrics_host, metrics_port)
        try:
            with graceful(c.stop):
                c.run()
        finally:
            if server is not None:
                server.close()
        return
    report = c.run_once()
    if json_output:
        out.print_json(json.dumps(report.as_dict()))
    else:
        out.print(f"cleaner: {report.summary()}", highlight=False, soft_wrap=True)
    if not report.ok:
        raise typer.Exit(1)


@app.command("metrics")
@friendly
def metrics_once(database_url: DatabaseUrl = None) -> None:
    """Print the queues' gauges once, in Prometheus's text format (for node_exporter's
    textfile collector, or a look by hand); needs the metrics extra."""
    from .. import metrics

    url = config.database_url(database_url)
    text = metrics.text(metrics.queue_registry(for_url(url), url))
    out.print(text, end="", highlight=False, markup=False, soft_wrap=True)
