"""One configuration of txqueue as an object: its URLs checked once, its own store (on
SQLite, its own clock), its own wake-up publisher or in-process delivery, and the workers,
cleaners and enqueues that use them. Two Apps in one process share none of it.

The module-level ``txqueue.enqueue``, ``retry``, ``pause_queue``, ``wait``, …, ``configure``,
``Worker`` and ``Cleaner`` remain the default, for a process with one configuration read
from the environment.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from contextlib import closing, contextmanager
from types import TracebackType
from typing import Any, Unpack

from . import broker, config, redaction, wiring
from .cleaner.service import Cleaner, CleanerOptions
from .core.stored import TaskInfo
from .errors import ConfigError
from .operations import waiting
from .operations.manage import Management
from .operations.queues import QueueControl
from .operations.signalling import Signalling
from .outbox import wakeup
from .outbox.calls import Enqueuing
from .outbox.client import Delivery
from .schedules.runtime import ScheduleControl
from .store import PostgresStore, SqliteStore
from .store.protocols import AnyStore
from .store.sqlite import Clock
from .tasks.registry import Registry
from .worker import Fleet, Worker
from .worker.settings import WorkerOptions
from .workflows.flows import WorkflowCalls

OWNED = frozenset({"registry", "database_url", "database", "amqp_url", "queue_type"})
"""What an App passes to its workers and cleaners itself."""


@contextmanager
def _naming(field: str, env: str, from_env: bool) -> Iterator[None]:
    """Prefix a URL's ConfigError with the parameter it came from (or its variable)."""
    try:
        yield
    except ConfigError as exc:
        source = f" (from {env})" if from_env else ""
        raise ConfigError(f"{field}{source}: {exc}") from None


class Calls(Enqueuing, Management, QueueControl, ScheduleControl, Signalling, WorkflowCalls):
    """The calls on an application's connection through one configuration: an App's (an
    App is one), or, made without, the process's defaults (the store of the connection's
    kind, ``configure``'s broker), whose methods the module-level ``txqueue.get_task`` and
    its kin are, as ``random.random`` is a method of the ``random`` module's generator."""

    _store: AnyStore | None = None


class App(Calls):
    """txqueue configured once: ``database_url`` (default TXQUEUE_DATABASE_URL, else
    ``sqlite:///txqueue.db``), ``amqp_url`` (default TXQUEUE_AMQP_URL; None: no broker, the
    wake-ups go to this App's workers in this process) and ``queue_type`` (with a broker,
    default TXQUEUE_AMQP_QUEUE_TYPE, else ``classic``), read and checked when it is made and
    never again. ``registry`` is what its workers run; ``registry.bind(app)`` makes its
    typed tasks enqueue through this App too.

    ``databases`` (default TXQUEUE_DATABASES, unless ``database_url`` is given) names
    several PostgreSQL databases instead, ``{"eu": url, "us": url}``: each task is
    enqueued on the connection of whichever the caller writes to, ``init()`` migrates and
    names each, ``fleet()`` serves them all (docs/how-to/databases.md).

    Every module-level call that touches tasks has its method here, through this App's
    store, clock and wake-ups: ``enqueue``…, ``retry``, ``retry_failed``, ``cancel``,
    ``get_task``, ``list_tasks``, ``history``, ``find_tasks``, ``count_tasks``,
    ``retry_tasks``, ``cancel_tasks``, ``delete_tasks`` (and their ``_async`` forms),
    ``pause_queue``, ``resume_queue``, ``limit_queue``, ``get_queue``, ``list_queues``,
    ``create_schedule``, ``change_schedule``, ``pause_schedule``, ``resume_schedule``,
    ``delete_schedule``, ``get_schedule``, ``list_schedules`` (which check a schedule's
    payload against ``registry``'s handler), ``dead_letters``, ``enqueue_workflow``,
    ``get_workflow``, ``list_workflows``, ``wait_workflow``, ``cancel_workflow``, ``wait``
    and ``wait_async``.
    A connection given to one must be on this App's kind of database;
    ``txqueue.transaction(conn)`` holds the wake-ups for the commit, as for the module's.

    Make each App once and keep it: with a broker it holds a connection and a thread from
    its first wake-up on, until ``close()`` (or the end of ``with App(...) as app:``) waits
    for its wake-ups to be confirmed and stops its publisher.

    Example:

    ```python
    app = txqueue.App(registry, database_url=url, amqp_url=None)
    registry.bind(app)  # send_receipt.enqueue now goes through app
    task_id = send_receipt.enqueue(conn, order=42)
    conn.commit()
    app.worker().run(burst=True)
    print(app.get_task(conn, task_id).state)  # succeeded
    app.close()
    ```
    """

    def __init__(
        self,
        registry: Registry | None = None,
        *,
        database_url: str | None = None,
        databases: Mapping[str, str] | None = None,
        amqp_url: str | None = config.FROM_ENV,
        queue_type: str | None = None,
    ) -> None:
        if registry is not None and not isinstance(registry, Registry):
            raise ConfigError(f"registry must be a txqueue.Registry, not {type(registry).__name__}")
        self._registry = registry
        if database_url and databases:
            raise ConfigError("databases: give database_url or databases, not both")
        self._databases = {} if database_url else config.databases(databases)
        self._database_url: str | None = None
        if not self._databases:
            with _naming("database_url", config.DATABASE_ENV, not database_url):
                self._database_url = config.database_url(database_url)
        with _naming("amqp_url", config.AMQP_ENV, amqp_url is config.FROM_ENV):
            url = config.broker_url(amqp_url)
        self._amqp_url, self._queue_type = config.broker(url, queue_type)
        self._clock: Clock | None = None
        self._store: AnyStore
        if self._database_url is not None and self._database_url.startswith("sqlite:"):
            self._clock = Clock()
            self._store = SqliteStore(self._clock)
        else:
            self._store = PostgresStore()
        publishers = broker.PublisherSlot() if self._amqp_url else None
        self._delivery: Delivery = Delivery(
            self._amqp_url,
            self._queue_type,
            wakeup.LocalDelivery(),
            publishers,
            named=bool(self._databases),
        )

    @property
    def registry(self) -> Registry | None:
        return self._registry

    @property
    def database_url(self) -> str:
        """In txqueue's form (``postgresql://…`` or ``sqlite:///…``); print ``redact``'s.
        ConfigError for an App of several databases (``databases``)."""
        return self._target(None)[0]

    @property
    def databases(self) -> dict[str, str]:
        """The named databases this App serves (``config.databases``); {} for one."""
        return dict(self._databases)

    def _target(self, database: str | None) -> tuple[str, str | None]:
        """The URL of this App's database, or of the named ``database`` of several."""
        if self._database_url is not None:
            if database is not None:
                raise ConfigError(f"database: {database!r}, but this App has one, unnamed")
            return self._database_url, None
        if database is None:
            raise ConfigError(f"database: name one of {', '.join(self._databases)}")
        if database not in self._databases:
            raise ConfigError(f"database: {database!r} is not one of {', '.join(self._databases)}")
        return self._databases[database], database

    @property
    def amqp_url(self) -> str | None:
        return self._amqp_url

    @property
    def queue_type(self) -> str:
        return self._queue_type

    @property
    def store(self) -> AnyStore:
        """This App's store: its workers, cleaners and enqueues use this one."""
        return self._store

    @property
    def delivery(self) -> Delivery:
        """Where its wake-ups go: its own publisher, or (no broker) ``delivery.local``,
        which its workers subscribe to."""
        return self._delivery

    @property
    def clock(self) -> Clock | None:
        """On SQLite, the time of this App's store (tests move it with ``skew``); None on
        PostgreSQL, whose clock is the server's ``now()``."""
        return self._clock

    def __repr__(self) -> str:
        amqp = redaction.redact(self._amqp_url) if self._amqp_url else None
        if self._database_url is not None:
            where = f"database_url={redaction.redact(self._database_url)!r}"
        else:
            where = f"databases={ {n: redaction.redact(u) for n, u in self._databases.items()}!r}"
        return f"txqueue.App({where}, amqp_url={amqp!r}, queue_type={self._queue_type!r})"

    def init(self) -> list[int]:
        """Create or upgrade txqueue's tables in this App's database (creating a SQLite
        file), or in each of its ``databases``, recording its name there, as ``txqueue
        init`` does: the migrations applied (in any), none if the schema was up to date.
        Safe to run again, from an application's start-up or a test's fixture."""
        if self._database_url is not None:
            return initialise(self._store, self._database_url, None)
        applied: set[int] = set()
        for name, url in self._databases.items():
            applied.update(initialise(self._store, url, name))
        return sorted(applied)

    def wait(
        self,
        task_id: uuid.UUID | str,
        timeout: float | None = None,
        *,
        conn: object = None,
        on_progress: waiting.OnProgress | None = None,
        database: str | None = None,
    ) -> TaskInfo:
        """``txqueue.wait`` on this App's database (of several, the named ``database``'s):
        on a connection of its own (which listens, on PostgreSQL), or reading on ``conn``
        when given, in its transaction."""
        target = self._target(database)[0] if conn is None else conn
        return waiting.wait_by(target, task_id, timeout, self._store, on_progress=on_progress)

    async def wait_async(
        self,
        task_id: uuid.UUID | str,
        timeout: float | None = None,
        *,
        conn: object = None,
        on_progress: waiting.OnProgress | None = None,
        database: str | None = None,
    ) -> TaskInfo:
        """``txqueue.wait_async`` on this App's database (of several, the named
        ``database``'s), or on ``conn``, an asyncio one."""
        target = self._target(database)[0] if conn is None else conn
        return await waiting.wait_async_by(
            target, task_id, timeout, self._store, on_progress=on_progress
        )

    def worker(self, database: str | None = None, **options: Unpack[WorkerOptions]) -> Worker:
        """A ``Worker`` of this App's registry, database (of several, the named
        ``database``'s), broker and in-process wake-ups; ``options`` are the Worker's own
        (queues, concurrency, …)."""
        url, name = self._target(database)
        registry = self._needs_registry("worker")
        _not_owned(options)
        with wiring.given(wiring.Wiring(self._store, self._delivery)):
            return Worker(
                registry,
                database_url=url,
                database=name,
                amqp_url=self._amqp_url,
                queue_type=self._queue_type,
                **options,
            )

    def fleet(self, **options: Unpack[WorkerOptions]) -> Fleet:
        """A ``Fleet``: a worker for each of this App's ``databases``, with ``options``."""
        if not self._databases:
            raise ConfigError("databases: this App has one database; app.worker() serves it")
        registry = self._needs_registry("fleet")
        _not_owned(options)
        with wiring.given(wiring.Wiring(self._store, self._delivery)):
            return Fleet(
                registry,
                self._databases,
                amqp_url=self._amqp_url,
                queue_type=self._queue_type,
                **options,
            )

    def _needs_registry(self, what: str) -> Registry:
        if self._registry is None:
            raise ConfigError(f"registry: App.{what} needs one; make it txqueue.App(registry)")
        return self._registry

    def cleaner(self, database: str | None = None, **options: Unpack[CleanerOptions]) -> Cleaner:
        """A ``Cleaner`` of this App's database (of several, the named ``database``'s) and
        broker (and registry, for ``on_failed``); ``options`` are the Cleaner's own
        (interval, grace, retain, …)."""
        url, name = self._target(database)
        _not_owned(options)
        with wiring.given(wiring.Wiring(self._store, self._delivery)):
            return Cleaner(
                database_url=url,
                database=name,
                amqp_url=self._amqp_url,
                registry=self._registry,
                queue_type=self._queue_type,
                **options,
            )

    def flush(self, timeout: float = 2.0) -> bool:
        """Wait for this App's wake-ups to be confirmed; False on timeout or outage."""
        return self._delivery.flush(timeout)

    def close(self, timeout: float = 2.0) -> None:
        """Flush and stop this App's publisher (a later enqueue starts another)."""
        self._delivery.close(timeout)

    def __enter__(self) -> App:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def initialise(store: AnyStore, url: str, name: str | None) -> list[int]:
    """Apply the migrations to the database at ``url`` and record its ``name``, if any."""
    with closing(store.connect(url, create=True)) as conn:
        applied = store.apply_schema(conn)
        if name is not None:
            config.named_as(store.name_database(conn, name), name)
    return applied


def _not_owned(options: Any) -> None:
    # mypy refuses these already; this is for callers it does not check.
    taken = sorted(OWNED & set(options))
    if taken:
        raise ConfigError(f"{taken[0]}: set by the App; make another App for another one")


DEFAULTS = Calls()
"""The process's defaults: the module-level calls are its methods."""
