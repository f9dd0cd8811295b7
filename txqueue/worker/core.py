"""The worker: its parts put together, run under supervision, and stopped in order."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import os
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from .. import broker, config, wakeup, wiring
from ..cleaner import Cleaner, CleanerOptions
from ..client import delivery_for, wakeups_of
from ..errors import ConfigError, SchemaError, StoreError, WorkerError
from ..fields import check_queue
from ..horizon import Watch
from ..registry import Registry
from ..store import serving
from ..store.records import ClaimDefaults, Inserted
from ..task import DEFAULT_MAX_ATTEMPTS, DEFAULT_TIMEOUT
from ..telemetry import WorkerState
from .atomic import Atomic
from .board import Board
from .child import Recycle
from .claimer import Claimer
from .handlers import Handlers
from .leases import LeaseKeeper
from .link import Link, Outage
from .listener import Listener, woken_by
from .processes import Processes, locate
from .recorder import Recorder
from .scheduler import KeyFor, Scheduler
from .supervisor import LocalWakeups, Loop, Part, Supervisor, stop_in_order

log = logging.getLogger("txqueue.worker")

CLEANER_OPTIONS = ", ".join(CleanerOptions.__annotations__)
WOKEN_POLL = 1.0
"""Seconds between a worker's idle polls by default when wake-ups reach it (RabbitMQ's,
NOTIFY's): the poll only finds what they missed."""
UNWOKEN_POLL = 0.1
"""The same where none can (a burst, SQLite across processes, a pooled URL to listen on)."""
JOIN_GRACE = 10.0
"""Seconds a stopping worker waits for a part past its stop deadline before it ends
without it, saying which part and where it is."""

THREADS = "threads"
PROCESSES = "processes"

STALE = 60.0
"""``/healthz`` fails once the lease keeper's presence write, every ``WORKER_SEEN_EVERY``
seconds, has not come back for this long (a database that hangs rather than fails)."""


class Worker:
    """Runs the registry's tasks from the given queues (default: the registry's queues).

    Example:

    ```python
    send_receipt.enqueue(conn, order=42)
    conn.commit()
    worker = txqueue.Worker(registry, database_url=url, amqp_url=None, concurrency=4)
    worker.run(burst=True)  # until nothing is ripe; without burst, until stop() or a signal
    print(worker.stats["succeeded"])  # 1
    ```
    """

    def __init__(
        self,
        registry: Registry,
        *,
        database_url: str | None = None,
        amqp_url: str | None = config.FROM_ENV,
        queues: list[str] | None = None,
        concurrency: int | None = None,
        poll_interval: float | None = None,
        prefetch: int | None = None,
        commit_wait: float = 30.0,
        shutdown_timeout: float = 30.0,
        worker_id: str | None = None,
        metrics_port: int | None = None,
        metrics_host: str = "0.0.0.0",
        vacuum_horizon_warn: float | None = None,
        queue_type: str | None = None,
        cleaner: bool | CleanerOptions = True,
        listen_url: str | None = None,
        pool: str = "threads",
        max_tasks_per_child: int | None = None,
        max_memory_per_child: int | str | None = None,
    ) -> None:
        """``concurrency``: tasks run at once (default 8 threads; in a process pool, one
        child process per CPU). ``pool``: ``"threads"``, or ``"processes"`` to run each
        handler in a child process, which a time limit or a crash costs only its attempt;
        a child makes way for a fresh one after ``max_tasks_per_child`` tasks or once its
        memory passes ``max_memory_per_child`` (bytes, or ``"200MB"``)
        (docs/how-to/workers.md).
        ``cleaner``: run the cleaner's passes (recover the tasks of workers that died,
        re-send lost wake-ups, prune old tasks), one process at a time of all the workers
        and ``txqueue cleaner --loop`` processes on this database; True with the cleaner's
        defaults (every 60 s, keeping finished tasks 24 h and failed ones 7 d), or its
        options (``{"interval": 30, "retain": 7 * 86400}``); False where a ``txqueue
        cleaner`` runs apart.
        ``vacuum_horizon_warn``: seconds the vacuum horizon may be held back before a
        warning (default TXQUEUE_VACUUM_HORIZON_WARN, else 300; 0: never). ``queue_type``:
        the wake-up queues' RabbitMQ type (default TXQUEUE_AMQP_QUEUE_TYPE, else classic).
        ``listen_url`` (default TXQUEUE_LISTEN_URL): where to listen for wake-ups by
        NOTIFY, if not on ``database_url`` (one through a transaction pooler cannot carry
        them)."""
        if not isinstance(registry, Registry):
            raise ConfigError("Worker needs a txqueue.Registry")
        self.pool, self._recycle = _pool(pool, max_tasks_per_child, max_memory_per_child)
        if concurrency is None:
            concurrency = (os.cpu_count() or 1) if self.pool == PROCESSES else 8
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigError(f"concurrency must be a positive int, got {concurrency!r}")
        self._spec = locate(registry) if self.pool == PROCESSES else None
        self.registry = registry
        self.database_url = config.database_url(database_url)
        self.amqp_url, self.queue_type = config.broker(amqp_url, queue_type)
        self.queues = [check_queue(q, "queues") for q in (queues or registry.queues())]
        if not self.queues:
            raise ConfigError("no queues to work on: register tasks or pass queues")
        self.concurrency = concurrency
        self.prefetch = prefetch or max(4 * concurrency, 32)
        self.shutdown_timeout = shutdown_timeout
        self.worker_id = worker_id or (
            f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        )
        given = wiring.current()  # an App's store and delivery, when it makes this worker
        store = self._store = serving(self.database_url, given.store)
        self._delivery = delivery_for(
            self.amqp_url, self.queue_type, given.delivery, store, self.database_url
        )
        self.listen_url = self._listening(config.listen_url(listen_url))
        self._default_poll = poll_interval is None
        self._horizon = Watch(config.vacuum_horizon_warn(vacuum_horizon_warn))
        self._board = Board(concurrency)
        self._stopping = threading.Event()
        self._stop_now = threading.Event()
        self._stopped_at: float | None = None
        self.late: list[str] = []  # parts still running when ``run`` returned, and where
        outage = Outage()
        defaults = ClaimDefaults(registry.claim_defaults(), DEFAULT_TIMEOUT, DEFAULT_MAX_ATTEMPTS)
        self._claimer = Claimer(
            store,
            self.worker_id,
            self.queues,
            defaults,
            self._board,
            Link(store, self.database_url, outage),
            self._stopping,
            poll_interval=poll_interval
            if poll_interval is not None
            else (WOKEN_POLL if self.amqp_url or self.listen_url else UNWOKEN_POLL),
            commit_wait=commit_wait,
        )
        self._recorder = Recorder(
            store,
            self.worker_id,
            registry,
            self._board,
            Link(store, self.database_url, outage),
            self._stop_now,
            self._stop_deadline,
            self._claimer.inbox,
            self._readied,
        )
        self._leases = LeaseKeeper(
            store,
            self.worker_id,
            self.queues,
            sorted(d.name for d in registry),
            self._board,
            Link(store, self.database_url, outage),
            self._stop_now,
            self._horizon,
        )
        self._atomic = Atomic(store, self.database_url, outage, concurrency)
        # Every worker keeps its queues' schedules made at run time, as well as its own.
        self._scheduler = Scheduler(
            store,
            [s for s in registry.schedules() if s.queue in self.queues],
            self.queues,
            Link(store, self.database_url, outage),
            self._stopping,
            self._wake,
            _key_for(registry),
        )
        self._cleaner = self._cleaner_for(cleaner)
        self._consumer: broker.Consumer | None = None
        self._listener: Listener | None = None
        self._outage = outage
        self._supervisor: Supervisor | None = None
        self._handlers: Handlers[Any] | None = None
        self._parts: list[tuple[Part, bool]] = []
        self.metrics_port, self.metrics_host = config.metrics_address(metrics_port, metrics_host)
        if self.metrics_port is not None:
            from .. import metrics  # the extra: a one-line error here, at start-up, without it

            self._metrics: Any = metrics.WorkerMetrics(self.state)
            self._board.telemetry = self._metrics

    def _listening(self, listen_url: str | None) -> str | None:
        """Where the listener listens for wake-ups by NOTIFY: None where the database sends
        none (SQLite), or only through a transaction pooler (said at start)."""
        if not self._store.notifies:
            if listen_url is not None:
                raise ConfigError("listen_url: a SQLite database sends no wake-ups to listen for")
            return None
        from ..store.postgres import pooled

        if listen_url is not None and pooled(listen_url):
            raise ConfigError(
                "listen_url: goes through a transaction pooler (?pgbouncer=true), which cannot "
                "carry LISTEN: give a direct URL"
            )
        url = listen_url or self.database_url
        return None if pooled(url) else url

    def _cleaner_for(self, options: bool | CleanerOptions) -> Cleaner | None:
        if options is False:
            return None
        if options is True:
            options = {}
        if not isinstance(options, dict):
            raise ConfigError(
                f"cleaner must be True, False or the cleaner's options, got {options!r}"
            )
        unknown = sorted(set(options) - set(CleanerOptions.__annotations__))
        if unknown:
            raise ConfigError(f"cleaner: no option {unknown[0]!r}; it takes {CLEANER_OPTIONS}")
        own = wiring.Wiring(self._store, self._delivery, self._horizon, within_worker=True)
        try:
            with wiring.given(own):
                return Cleaner(
                    database_url=self.database_url,
                    amqp_url=self.amqp_url,
                    registry=self.registry,
                    queue_type=self.queue_type,
                    **options,
                )
        except ConfigError as exc:
            raise ConfigError(f"cleaner: {exc}") from None

    @property
    def stats(self) -> dict[str, int]:
        """Counts since start: claimed, succeeded, retried, failed, dropped wake-ups, …"""
        return self._board.counts.read()

    @property
    def poll_interval(self) -> float:
        return self._claimer.poll_interval

    @property
    def unfinished(self) -> int:
        """Handlers still running when ``run`` returned (stopped now, or shutdown timeout),
        or past their time limit on a thread."""
        return self._board.busy() + self._board.over

    @property
    def left_behind(self) -> int:
        """Outcomes not written and tasks not released when ``run`` returned, the
        database out of reach: left to their leases, for the cleaner to recover."""
        return self._recorder.left_behind

    def state(self) -> WorkerState:
        """This worker now: its held tasks, statistics, connections and dead parts."""
        running = Counter(dict.fromkeys(self.queues, 0))  # every queue, 0 included
        running.update(self._board.running_queues())
        stats = self._board.counts.read()
        consumer, supervisor = self._consumer, self._supervisor
        dead = supervisor.restarting() if supervisor else []
        if supervisor and supervisor.failure:
            dead.append(supervisor.failure)
        for part, _ in self._parts:
            dead += part.dead()
        heard = [p for p in (consumer, self._listener) if p is not None]
        if heard:  # messages, and notifications, that were not wake-ups
            stats["malformed"] = sum(p.malformed for p in heard)
        return WorkerState(
            threads=self.concurrency,
            running=running,
            stats=stats,
            database_up=not self._outage.down,
            database_seen=time.monotonic() - self._outage.reached,
            database_outages=self._outage.period + self._outage.down,
            broker_up=None if consumer is None else consumer.up,
            broker_outages=0 if consumer is None else consumer.outages,
            vacuum_horizon=self._horizon.current.seconds,
            dead=dead,
        )

    def unhealthy(self) -> str | None:
        """Why ``/healthz`` fails now, or None while the worker is healthy."""
        if self._supervisor is None:
            return "not running"
        return self.state().unhealthy(STALE)

    def stop(self, *, now: bool = False) -> None:
        """Stop claiming; let running tasks finish (``now``: do not wait for them)."""
        if self._stopped_at is None:
            self._stopped_at = time.monotonic()
        self._stopping.set()
        if now:
            self._stop_now.set()
        self._claimer.wake()

    def _stop_deadline(self) -> float:
        """When a stopping worker must be done, whatever is down: ``shutdown_timeout``
        after ``stop()`` (or after now, for a burst that ran out of work)."""
        return (self._stopped_at or time.monotonic()) + self.shutdown_timeout

    def wait_consuming(self, timeout: float = 10.0) -> bool:
        """True once the consumer is declared and consuming (no broker: at once)."""
        deadline = time.monotonic() + timeout
        while self._consumer is None:
            if self.amqp_url is None:
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return self._consumer.wait_ready(max(0.0, deadline - time.monotonic()))

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[Worker]:
        """Run this worker beside an asyncio application (FastAPI's lifespan, say) while
        the block runs: on threads of its own, so it never blocks the event loop. On exit
        it stops as on SIGTERM (running tasks finish, up to ``shutdown_timeout``), waited
        for off the loop; a ``WorkerError`` it stopped with is raised there."""
        failure: list[BaseException] = []

        def run() -> None:
            try:
                self.run()
            except BaseException as exc:  # raised to the application at the block's end
                log.error("worker %s stopped under a running application: %s", self.worker_id, exc)
                failure.append(exc)

        thread = threading.Thread(target=run, name="txqueue-worker", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.stop()
            await asyncio.to_thread(thread.join)
        if failure:
            raise failure[0]

    def run(self, *, burst: bool = False) -> None:
        """Work until ``stop()`` (or a signal, via the CLI).

        ``burst``: claim by polling until nothing ripe is left and nothing runs, then
        return; no consumer is started. Meant for tests and one-off drains.
        """
        server = self._serve_metrics()  # first: a port taken must leave nothing started
        try:
            self._run(burst)
        finally:
            if server is not None:
                server.close()

    def _check_schema(self) -> None:
        """Raise SchemaError at once if the tables are missing, rather than start every
        part to find it out; a database not reachable yet is left to the parts, which wait
        for it."""
        try:
            with contextlib.closing(self._store.connect(self.database_url)) as conn:
                self._store.get_task(conn, uuid.UUID(int=0))
        except SchemaError as exc:
            raise SchemaError(f"worker: {str(exc).split(': ', 1)[-1]}") from None
        except StoreError:
            pass

    def _run(self, burst: bool) -> None:
        self._check_schema()
        supervisor = self._supervisor = Supervisor(lambda: self.stop(now=True))
        claimer = self._claimer
        handlers = self._handlers = self._pool_of_handlers()
        if burst and self._default_poll:
            self._claimer.poll_interval = UNWOKEN_POLL  # no wake-up comes to a burst
        self._parts = parts = self._stop_order(handlers, burst)
        for part, _ in parts:
            part.start(supervisor)
        log.info(
            "worker %s on queues %s, concurrency %d (%s), %s",
            self.worker_id,
            ", ".join(self.queues),
            self.concurrency,
            self.pool,
            self.wakeups(burst),
        )
        try:
            supervisor.run("txqueue-claimer", lambda: claimer.run(handlers, burst))
        finally:
            late = self.late = stop_in_order(parts, self._stop_deadline() + JOIN_GRACE)
            claimer.close()
            if self._delivery.notifier is not None:
                self._delivery.notifier.close()
            self._supervisor = None
            if late:
                log.warning(
                    "worker %s stopped, leaving parts running past their stop: %s; %s",
                    self.worker_id,
                    "; ".join(late),
                    self.stats,
                )
            else:
                log.info("worker %s stopped: %s", self.worker_id, self.stats)
        stopped = f"worker {self.worker_id} stopped: {supervisor.failure}"
        if supervisor.refusal is not None:  # its own kind, for a caller to tell apart
            refusal = copy.copy(supervisor.refusal)
            refusal.args = (stopped,)
            raise refusal from supervisor.refusal
        if supervisor.failure:
            raise WorkerError(stopped)

    def _pool_of_handlers(self) -> Handlers[Any]:
        options: dict[str, Any] = {
            "heartbeat": self._leases.heartbeat,
            "claimer": self._claimer.inbox,
            "atomic": self._atomic,
            "shutdown_timeout": self.shutdown_timeout,
            "stop_now": self._stop_now,
        }
        if self._spec is None:
            return Handlers(self.concurrency, self.registry, self.worker_id, self._board, **options)
        return Processes(
            self.concurrency,
            self.registry,
            self.worker_id,
            self._board,
            **options,
            spec=self._spec,
            database_url=self.database_url,
            recycle=self._recycle,
        )

    def wakeups(self, burst: bool = False) -> str:
        """How this worker learns of new tasks, as its start line says."""
        if burst:
            return "polling until no task is left"
        return woken_by(self.amqp_url, self.listen_url, self._store.notifies, self.poll_interval)

    def _stop_order(self, handlers: Handlers[Any], burst: bool) -> list[tuple[Part, bool]]:
        """The parts besides the claimer, in the order they stop once it has, each with
        whether the next waits for it to end (the others are waited for last)."""
        recorder, leases = self._recorder, self._leases
        parts: list[tuple[Part, bool]] = []
        if self.amqp_url and not burst:
            consumer = self._consumer = broker.Consumer(
                self.amqp_url,
                self.queues,
                prefetch=self.prefetch,
                on_wakeups=self._claimer.offer,
                queue_type=self.queue_type,
            )
            self._claimer.ack = consumer.ack
            parts.append((Loop("txqueue-consumer", consumer.run, consumer.stop), False))
        if self.listen_url and not burst:
            # On a URL of its own, an outage of its own: that URL out of reach says nothing
            # of the database URL's (and /healthz reads the latter's).
            own = self.listen_url != self.database_url
            link = Link(self._store, self.listen_url, Outage() if own else self._outage)
            listener = self._listener = Listener(
                self._store, link, self.queues, self._claimer, self._stopping
            )
            parts.append((Loop("txqueue-listener", listener.run), False))
        elif not burst and not self.amqp_url:
            local = LocalWakeups(self._delivery.local, self.queues, self._claimer.inbox.put)
            parts.append((local, False))
        if self._cleaner is not None and not burst:
            # A daemon: a pass cut off by the process's exit is as safe as a killed cron run.
            cleaning = Loop("txqueue-cleaner", self._cleaner.run, self._cleaner.stop, daemon=True)
            parts.append((cleaning, False))
        # Tasks not started go back, running ones finish (up to the shutdown timeout) ...
        parts.append((handlers, True))
        # ... their outcomes are written, what is left released ...
        parts.append((Loop("txqueue-recorder", recorder.run, recorder.close), True))
        if not burst:
            parts.append((Loop("txqueue-scheduler", self._scheduler.run), False))
        # ... and only then the leases go: what is released no longer needs one.
        parts.append((Loop("txqueue-leases", leases.run, leases.close, ended=leases.stopped), True))
        alerts = Loop("txqueue-alerts", recorder.alert_loop, recorder.close_alerts, daemon=True)
        parts.append((alerts, True))
        return parts

    def _serve_metrics(self) -> Any:
        if self.metrics_port is None:
            return None
        from .. import metrics

        server = metrics.Server(
            self._metrics.registry, self.unhealthy, self.metrics_host, self.metrics_port
        )
        self.metrics_port = server.port  # the one bound, when asked for any (0)
        log.info("metrics on http://%s:%d/metrics", self.metrics_host, server.port)
        return server

    def _wake(self, wakeups: list[tuple[str, bytes]]) -> None:
        """Send wake-ups for tasks this worker enqueued (its periodic tasks)."""
        self._delivery.send(wakeups)

    def _readied(self, ready: list[tuple[str, Inserted]]) -> None:
        """Wake the workflow steps an outcome of this worker's readied: by the broker (or
        this process's subscribers) as any enqueue, and those of its own queues at once
        through its own claimer too, first, which spares a chain's hop the broker's round
        trip (the broker's copy then finds the step claimed, and is dropped)."""
        for queue, row in ready:
            if queue in self.queues:
                self._claimer.inbox.put(wakeup.Wakeup(row.id, row.xid))
        self._delivery.send(wakeups_of(ready))


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
    memory = None if max_memory is None else config.size(max_memory, "max_memory_per_child")
    return pool, Recycle(max_tasks, memory)


def _key_for(registry: Registry) -> KeyFor:
    """A run-time schedule's tasks' concurrency key, as their registration makes it."""

    def key(task: str, payload: Any) -> str | None:
        definition = registry.get(task)
        return None if definition is None else definition.concurrency_key(payload)

    return key
