"""The operator's commands: init, search-index, worker."""

from __future__ import annotations

import gc
import logging
import os
from typing import Annotated

import typer

from .. import broker, config, redaction, units
from ..app import initialise
from ..cleaner.service import DEFAULT_INTERVAL
from ..errors import BrokerError, ConfigError, PermanentError, StoreError
from ..signals import graceful
from ..store import PostgresStore, for_url
from ..tasks.registry import Registry
from ..worker import Fleet, Worker, WorkerSettings
from . import worker_flags as flags
from .app import (
    AmqpUrl,
    Databases,
    DatabaseUrl,
    LogFormat,
    LogFormatOption,
    MetricsHost,
    MetricsPort,
    _database,
    _logging,
    _warn,
    app,
    friendly,
    labelled,
    load_registry,
    out,
    targets,
    unreached,
)


@app.command()
@friendly
def init(
    database_url: DatabaseUrl = None, databases: Databases = None, amqp_url: AmqpUrl = None
) -> None:
    """Create or upgrade txqueue's tables (schema.sql, or schema.sqlite.sql, creating the
    SQLite file). Safe to run again. With several databases (--database, or
    TXQUEUE_DATABASES), in each, recording there the name it is given.

    With a broker configured, also checks that RabbitMQ can be reached; it creates nothing
    there (workers and enqueues declare their queues), so an unreachable broker is reported
    and the command still succeeds. A login RabbitMQ refuses fails it: no retry mends that.
    """
    served = targets(database_url, databases)
    failed = False
    for name, db_url in served.items():
        try:
            applied = initialise(for_url(db_url), db_url, name)
        except StoreError as exc:
            if len(served) == 1:
                raise
            unreached(name, exc)
            failed = True
            continue
        out.print(labelled(name, _applied(applied)), highlight=False, soft_wrap=True)
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
                f"RabbitMQ reachable at {redaction.redact(url)}", highlight=False, soft_wrap=True
            )
    if failed:
        raise typer.Exit(1)


def _applied(applied: list[int]) -> str:
    """What ``init`` did, in words."""
    if not applied:
        return "schema already up to date"
    if len(applied) > 2 and applied == list(range(applied[0], applied[-1] + 1)):
        which = f"migrations {applied[0]} to {applied[-1]}"
    else:
        which = f"migration{'s' * (len(applied) > 1)} {', '.join(map(str, applied))}"
    return f"applied {which}: the schema is up to date"


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
    databases: Databases = None,
    amqp_url: AmqpUrl = None,
    listen_url: flags.ListenUrl = None,
) -> None:
    """Run tasks: woken by RabbitMQ, or by PostgreSQL NOTIFY, polling when idle.

    Exits 0 once stopped with every task it held finished and recorded (or given back
    unstarted), 1 on an error (configuration, a database or broker refusing it for good,
    a part that kept dying), 3 when it stopped with work not done: tasks still running
    (past --shutdown-timeout, or a second signal), outcomes it could not write (the
    database out of reach) left to the tasks' leases, or a part that did not stop in
    time. With several databases (--database, or TXQUEUE_DATABASES), it serves each,
    with a worker of --concurrency of its own per database."""
    task_filter = _logging(verbose, log_format)
    names = [q.strip() for item in queues or [] for q in item.split(",") if q.strip()]
    served = targets(database_url, databases)
    settings: WorkerSettings = {
        "amqp_url": config.amqp_url(amqp_url),
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
            "interval": units.duration(cleaner_interval, "--cleaner-interval"),
            "retain": units.duration(retain, "--retain"),
            "retain_failed": units.duration(retain_failed, "--retain-failed"),
        },
    }
    w = _worker_of(load_registry(app_spec), served, listen_url, settings)
    task_filter.worker_id = w.worker_id
    _work(w, burst)


def _worker_of(
    registry: Registry,
    served: dict[str | None, str],
    listen_url: str | None,
    settings: WorkerSettings,
) -> Worker | Fleet:
    """A worker of the one database ``served``, or a fleet of several."""
    if len(served) == 1:
        [(name, url)] = served.items()
        settings["database_url"], settings["database"] = url, name
        settings["listen_url"] = config.listen_url(listen_url)
        return Worker(registry, **settings)
    if listen_url:
        raise ConfigError("--listen-url: each of several databases is listened to at its URL")
    return Fleet(registry, {n: u for n, u in served.items() if n is not None}, **settings)


def _work(w: Worker | Fleet, burst: bool) -> None:
    """Run the worker until it is stopped, exiting 3 if it left work not done."""
    # Fail at start-up, in one line, on what retrying cannot fix (a wrong password, no such
    # database, no SQLite file). A database or broker that is down is no reason not to
    # start: a service manager may start workers while the database restarts.
    # A fleet's workers each find out on their own, side by side: a database whose
    # connection hangs (a partition) holds up no other's start.
    if isinstance(w, Worker):
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
