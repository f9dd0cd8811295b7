"""A worker's settings: the one typed dict the API, an App and the CLI fill in, and the checked
values a worker runs with, the environment's and the defaults filled in."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass
from typing import TypedDict

from .. import config, units
from ..cleaner.service import CleanerOptions
from ..core.fields import check_queue
from ..errors import ConfigError
from ..tasks.registry import Registry
from .child import Recycle

THREADS = "threads"
PROCESSES = "processes"
CLEANER_OPTIONS = ", ".join(CleanerOptions.__annotations__)


class WorkerOptions(TypedDict, total=False):
    """``Worker``'s own settings, every one optional; an App gives it the rest
    (``WorkerSettings``), and ``txqueue worker``'s flags make the same.

    Example:

    ```python
    options: txqueue.WorkerOptions = {"concurrency": 4, "cleaner": {"interval": 30}}
    worker = txqueue.Worker(registry, database_url=url, amqp_url=None, **options)
    print(worker.concurrency)  # 4
    ```
    """

    queues: list[str] | None
    """The queues to work on (default: the registry's)."""
    concurrency: int | None
    """Tasks run at once (default 8 threads; in a process pool, one child process per CPU)."""
    poll_interval: float | None
    """Seconds between idle polls (default 1 where wake-ups reach the worker, else 0.1)."""
    prefetch: int | None
    """RabbitMQ wake-ups held unacknowledged (default ``max(4 * concurrency, 32)``)."""
    commit_wait: float
    """Seconds to wait for the commit of a task whose wake-up came first (default 30)."""
    shutdown_timeout: float
    """Seconds a stopping worker lets running tasks finish (default 30)."""
    worker_id: str | None
    """The worker's name in leases, logs and metrics (default ``host:pid:random``)."""
    metrics_port: int | None
    """Serve ``/metrics`` and ``/healthz`` on this port (0: any free one; default none)."""
    metrics_host: str
    """The address to serve them on (default ``0.0.0.0``)."""
    vacuum_horizon_warn: float | None
    """Seconds the vacuum horizon may be held back before a warning (default
    TXQUEUE_VACUUM_HORIZON_WARN, else 300; 0: never)."""
    cleaner: bool | CleanerOptions
    """Run the cleaner's passes (re-send lost wake-ups, prune old tasks; every worker takes
    back the tasks of workers that died either way), one process at a time of all the
    workers and ``txqueue cleaner --loop`` processes on this database: True (the default)
    with the cleaner's defaults (every 60 s, keeping finished tasks 24 h and failed ones
    7 d), or its options (``{"interval": 30, "retain": 7 * 86400}``); False where a
    ``txqueue cleaner`` runs apart."""
    listen_url: str | None
    """Where to listen for wake-ups by NOTIFY, if not on ``database_url`` (one through a
    transaction pooler cannot carry them); default TXQUEUE_LISTEN_URL."""
    pool: str
    """``"threads"`` (the default), or ``"processes"`` to run each handler in a child
    process, which a time limit or a crash costs only its attempt (docs/how-to/workers.md)."""
    max_tasks_per_child: int | None
    """In a process pool, a child makes way for a fresh one after this many tasks."""
    max_memory_per_child: int | str | None
    """... or once its memory passes this many bytes (or ``"200MB"``), checked after each
    task."""


class WorkerSettings(WorkerOptions, total=False):
    """All of ``Worker``'s settings: its own (``WorkerOptions``) and where it connects.

    Example:

    ```python
    settings: txqueue.WorkerSettings = {"database_url": url, "amqp_url": None}
    settings["queues"] = ["default"]
    worker = txqueue.Worker(registry, **settings)
    print(worker.queues)  # ['default']
    ```
    """

    database_url: str | None
    """The database (default TXQUEUE_DATABASE_URL, else ``sqlite:///txqueue.db``)."""
    database: str | None
    """``database_url``'s name, where it is one of several (``txqueue.Fleet``), as
    ``txqueue init`` recorded it there: the worker is woken through that database's
    RabbitMQ queues, ``txqueue.<queue>@<name>`` (default: none, the only database)."""
    amqp_url: str | None
    """The broker (default TXQUEUE_AMQP_URL; None: no broker, whatever the environment says)."""
    queue_type: str | None
    """The wake-up queues' RabbitMQ type (default TXQUEUE_AMQP_QUEUE_TYPE, else classic)."""


@dataclass(frozen=True, slots=True)
class Settled:
    """A worker's settings checked, with the environment's values and the defaults in."""

    database_url: str
    database: str | None
    amqp_url: str | None
    queue_type: str
    listen_url: str | None  # as given; the worker decides where it listens
    queues: list[str]
    concurrency: int
    pool: str
    recycle: Recycle
    poll_interval: float | None  # None: the worker's default for how it is woken
    prefetch: int
    commit_wait: float
    shutdown_timeout: float
    worker_id: str
    metrics_port: int | None
    metrics_host: str
    vacuum_horizon_warn: float
    cleaner: CleanerOptions | None  # None: no cleaner's passes


def settle(registry: Registry, settings: WorkerSettings) -> Settled:
    """``settings`` checked, each in the order a reader of the signature would expect."""
    unknown = [name for name in settings if name not in WorkerSettings.__annotations__]
    if unknown:  # as Python says it of a keyword a signature does not have
        raise TypeError(f"Worker.__init__() got an unexpected keyword argument {unknown[0]!r}")
    if not isinstance(registry, Registry):
        raise ConfigError("Worker needs a txqueue.Registry")
    s = settings
    pool, recycle = _pool(
        s.get("pool", THREADS), s.get("max_tasks_per_child"), s.get("max_memory_per_child")
    )
    concurrency = _concurrency(s.get("concurrency"), pool)
    database_url, named = config.database_target(s.get("database_url"))
    amqp_url, queue_type = config.broker(s.get("amqp_url", config.FROM_ENV), s.get("queue_type"))
    queues = [check_queue(q, "queues") for q in (s.get("queues") or registry.queues())]
    if not queues:
        raise ConfigError("no queues to work on: register tasks or pass queues")
    metrics_port, metrics_host = config.metrics_address(
        s.get("metrics_port"), s.get("metrics_host", "0.0.0.0")
    )
    return Settled(
        database_url=database_url,
        database=_database(s.get("database"), database_url, named),
        amqp_url=amqp_url,
        queue_type=queue_type,
        listen_url=config.listen_url(s.get("listen_url")),
        queues=queues,
        concurrency=concurrency,
        pool=pool,
        recycle=recycle,
        poll_interval=s.get("poll_interval"),
        prefetch=s.get("prefetch") or max(4 * concurrency, 32),
        commit_wait=s.get("commit_wait", 30.0),
        shutdown_timeout=s.get("shutdown_timeout", 30.0),
        worker_id=s.get("worker_id") or worker_id(),
        metrics_port=metrics_port,
        metrics_host=metrics_host,
        vacuum_horizon_warn=config.vacuum_horizon_warn(s.get("vacuum_horizon_warn")),
        cleaner=_cleaner(s.get("cleaner", True)),
    )


def _database(name: str | None, url: str, named: str | None) -> str | None:
    """The database's name: ``name``, or the one ``database_url`` gave (TXQUEUE_DATABASES's)."""
    if name is not None and named is not None and name != named:
        raise ConfigError(f"database: {name!r}, but database_url names {named!r}")
    return config.database_name(name or named, url)


def worker_id() -> str:
    """A worker's default name: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def _concurrency(concurrency: int | None, pool: str) -> int:
    if concurrency is None:
        return (os.cpu_count() or 1) if pool == PROCESSES else 8
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ConfigError(f"concurrency must be a positive int, got {concurrency!r}")
    return concurrency


def _pool(pool: str, max_tasks: int | None, max_memory: int | str | None) -> tuple[str, Recycle]:
    """The pool's kind and when its children are recycled, checked."""
    if pool not in (THREADS, PROCESSES):
        raise ConfigError(f"pool must be {THREADS!r} or {PROCESSES!r}, got {pool!r}")
    if pool == THREADS and (max_tasks is not None or max_memory is not None):
        raise ConfigError("max_tasks_per_child and max_memory_per_child need pool='processes'")
    if max_tasks is not None and (
        isinstance(max_tasks, bool) or not isinstance(max_tasks, int) or max_tasks < 1
    ):
        raise ConfigError(f"max_tasks_per_child must be a positive int, got {max_tasks!r}")
    memory = None if max_memory is None else units.size(max_memory, "max_memory_per_child")
    return pool, Recycle(max_tasks, memory)


def _cleaner(options: bool | CleanerOptions) -> CleanerOptions | None:
    """The cleaner's options, or None for no cleaner's passes; the Cleaner checks their
    values when the worker makes it."""
    if options is False:
        return None
    if options is True:
        return {}
    if not isinstance(options, dict):
        raise ConfigError(f"cleaner must be True, False or the cleaner's options, got {options!r}")
    unknown = sorted(set(options) - set(CleanerOptions.__annotations__))
    if unknown:
        raise ConfigError(f"cleaner: no option {unknown[0]!r}; it takes {CLEANER_OPTIONS}")
    return options
