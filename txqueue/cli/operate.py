"""The operator's commands: init, worker, cleaner, metrics."""

from __future__ import annotations

import gc
import logging
import os
from typing import Annotated

import typer

from .. import broker, config
from ..cleaner.service import DEFAULT_BATCH, DEFAULT_INTERVAL, Cleaner
from ..errors import BrokerError, ConfigError, PermanentError, StoreError
from ..signals import graceful
from ..store import PostgresStore, for_url
from ..worker import Worker, WorkerSettings
from . import worker_flags as flags
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
from .output import print_json


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
        if len(applied) > 2 and applied == list(range(applied[0], applied[-1] + 1)):
            which = f"migrations {applied[0]} to {applied[-1]}"
        else:
            which = f"migration{'s' * (len(applied) > 1)} {', '.join(map(str, applied))}"
        out.print(f"applied {which}: the schema is up to date")
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


@app.command("search-index")
@friendly
def search_index(
    drop: Annotated[bool, typer.Option("--drop", help="Drop the index instead.")] = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Make the index that answers searches by payload (txqueue find --payload, TaskFilter
    payload=) on PostgreSQL, without holding up enqueues or claims while it is built. It
    costs every enqueue and claim (see the Performance page), so it is yours to choose.
    Safe to run again; it finishes what an interrupted run left."""
    with _database(database_url) as (store, conn):
        if not isinstance(store, PostgresStore):
            raise ConfigError(
                "search-index: the payload index is PostgreSQL's; on SQLite a search reads "
                "the table"
            )
        store.payload_index(conn, drop=drop)
    out.print("payload index dropped" if drop else "payload index ready: txqueue_tasks_payload")


WORKER_UNFINISHED = 3
"""`txqueue worker`'s exit code when it stopped with work not done: tasks still running
(past --shutdown-timeout, or a second signal), outcomes and tasks it could not write or
release (the database out of reach) and left to their leases, or a part that did not
stop in time."""


@app.command()
@friendly
def worker(
    app_spec: flags.App,
    queues: flags.Queues = None,
    concurrency: flags.Concurrency = None,
    pool: flags.PoolKind = flags.Pool.threads,
    max_tasks_per_child: flags.MaxTasksPerChild = None,
    max_memory_per_child: flags.MaxMemoryPerChild = None,
    poll_interval: flags.PollInterval = None,
    shutdown_timeout: flags.ShutdownTimeout = 30.0,
    burst: flags.Burst = False,
    cleaner: flags.RunCleaner = True,
    cleaner_interval: flags.CleanerInterval = f"{DEFAULT_INTERVAL:g}s",
    retain: flags.Retain = "24h",
    retain_failed: flags.RetainFailed = "7d",
    metrics_port: MetricsPort = None,
    metrics_host: MetricsHost = "0.0.0.0",
    log_format: LogFormatOption = LogFormat.text,
    verbose: flags.Verbose = False,
    database_url: DatabaseUrl = None,
    amqp_url: AmqpUrl = None,
    listen_url: flags.ListenUrl = None,
) -> None:
    """Run tasks: woken by RabbitMQ, or by PostgreSQL NOTIFY, polling when idle.

    Exits 0 once stopped with every task it held finished and recorded (or given back
    unstarted), 1 on an error (configuration, a database or broker refusing it for good,
    a part that kept dying), 3 when it stopped with work not done: tasks still running
    (past --shutdown-timeout, or a second signal), outcomes it could not write (the
    database out of reach) left to the tasks' leases, or a part that did not stop in
    time."""
    task_filter = _logging(verbose, log_format)
    names = [q.strip() for item in queues or [] for q in item.split(",") if q.strip()]
    settings: WorkerSettings = {
        "database_url": config.database_url(database_url),
        "amqp_url": config.amqp_url(amqp_url),
        "listen_url": config.listen_url(listen_url),
        "queues": names or None,
        "concurrency": concurrency,
        "pool": pool.value,
        "max_tasks_per_child": max_tasks_per_child,
        "max_memory_per_child": max_memory_per_child,
        "poll_interval": poll_interval,
        "shutdown_timeout": shutdown_timeout,
        "metrics_port": metrics_port,
        "metrics_host": metrics_host,
        "cleaner": cleaner
        and {
            "interval": config.duration(cleaner_interval, "--cleaner-interval"),
            "retain": config.duration(retain, "--retain"),
            "retain_failed": config.duration(retain_failed, "--retain-failed"),
        },
    }
    w = Worker(load_registry(app_spec), **settings)
    task_filter.worker_id = w.worker_id
    _work(w, burst)


def _work(w: Worker, burst: bool) -> None:
    """Run the worker until it is stopped, exiting 3 if it left work not done."""
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
    verbose: flags.Verbose = False,
    database_url: DatabaseUrl = None,
    amqp_url: AmqpUrl = None,
) -> None:
    """Recover tasks whose worker died, re-send lost wake-ups, prune old tasks.

    Prints a one-line summary (--json for monitoring). Exits 1 only when it could not do
    its work (database unreachable; RabbitMQ unreachable or not confirming wake-ups).
    With --loop, --metrics-port serves the queues' gauges (see `txqueue metrics`)."""
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
        _loop(c, metrics_host, metrics_port)
        return
    report = c.run_once()
    if json_output:
        print_json(out, report.as_dict())
    else:
        out.print(f"cleaner: {report.summary()}", highlight=False, soft_wrap=True)
    if not report.ok:
        raise typer.Exit(1)


def _loop(c: Cleaner, metrics_host: str, metrics_port: int | None) -> None:
    """The cleaner's loop until a signal stops it, serving the queues' gauges if asked."""
    server = None
    if metrics_port is not None:
        from ..observability import metrics

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


@app.command("metrics")
@friendly
def metrics_once(database_url: DatabaseUrl = None) -> None:
    """Print the queues' gauges once, in Prometheus's text format (for node_exporter's
    textfile collector, or a look by hand); needs the metrics extra."""
    from ..observability import metrics

    url = config.database_url(database_url)
    text = metrics.text(metrics.queue_registry(for_url(url), url))
    out.print(text, end="", highlight=False, markup=False, soft_wrap=True)
