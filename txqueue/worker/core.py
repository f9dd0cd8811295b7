"""The worker: its parts put together, run under supervision, and stopped in order."""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any, Unpack

from .. import broker, wiring
from ..cleaner.service import Cleaner, CleanerOptions
from ..errors import ConfigError, WorkerError
from ..observability.horizon import Watch
from ..observability.telemetry import WorkerState
from ..outbox.client import delivery_for, wakeups_of
from ..outbox.wakeup import routed
from ..store import serving
from ..store.records import Claimed
from ..tasks.registry import Registry
from .assembly import UNWOKEN_POLL, Shared, assemble, check_schema, listening
from .atomic import Ready
from .beside import beside
from .board import Board
from .handlers import Handlers, Wiring
from .link import Link, Outage
from .listener import Listener, woken_by
from .processes import Processes, locate
from .settings import PROCESSES, WorkerSettings, settle
from .supervisor import LocalWakeups, Loop, Part, Supervisor, stop_in_order

log = logging.getLogger("txqueue.worker")

JOIN_GRACE = 10.0
"""Seconds a stopping worker waits for a part past its stop deadline before it ends
without it, saying which part and where it is."""

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

    def __init__(self, registry: Registry, **settings: Unpack[WorkerSettings]) -> None:
        """``settings``: where to connect and how to work (``WorkerSettings``, of which
        ``WorkerOptions`` are the worker's own), checked here."""
        s = settle(registry, settings)
        self.registry = registry
        self.pool, self._recycle = s.pool, s.recycle
        self._spec = locate(registry) if s.pool == PROCESSES else None
        self.database_url, self.amqp_url, self.queue_type = s.database_url, s.amqp_url, s.queue_type
        self.database = s.database
        self.queues, self.concurrency, self.prefetch = s.queues, s.concurrency, s.prefetch
        self.shutdown_timeout, self.worker_id = s.shutdown_timeout, s.worker_id
        given = wiring.current()  # an App's store and delivery, when it makes this worker
        self._store = serving(self.database_url, given.store)
        self._delivery = delivery_for(
            self.amqp_url,
            self.queue_type,
            given.delivery,
            self._store,
            self.database_url,
            s.database,
        )
        self.listen_url = listening(self._store, self.database_url, s.listen_url)
        self._default_poll = s.poll_interval is None
        self._horizon = Watch(s.vacuum_horizon_warn)
        self._board = Board(s.concurrency)
        self._stopping = threading.Event()
        self._stop_now = threading.Event()
        self._stopped_at: float | None = None
        self.late: list[str] = []  # parts still running when ``run`` returned, and where
        self._outage = Outage(s.database)
        shared = Shared(
            registry,
            self._store,
            s,
            self._board,
            self._outage,
            self._horizon,
            self._stopping,
            self._stop_now,
        )
        parts = assemble(
            shared,
            bool(self.amqp_url or self.listen_url),
            self._stop_deadline,
            self._readied,
            self._wake,
        )
        self._claimer, self._recorder, self._leases = parts.claimer, parts.recorder, parts.leases
        self._atomic, self._scheduler = parts.atomic, parts.scheduler
        self._cleaner = None if s.cleaner is None else self._cleaner_for(s.cleaner)
        self._consumer: broker.Consumer | None = None
        self._listener: Listener | None = None
        self._supervisor: Supervisor | None = None
        self._handlers: Handlers[Any] | None = None
        self._parts: list[tuple[Part, bool]] = []
        self.metrics_port, self.metrics_host = s.metrics_port, s.metrics_host
        self._metrics: Any = None
        if self.metrics_port is not None:
            self.measured()  # the extra: a one-line error here, at start-up, without it

    def measured(self) -> Any:
        """The Prometheus registry of this worker's metrics, which its parts update from
        now on (the metrics extra); ``metrics_port`` serves it, a ``Fleet`` its workers'."""
        if self._metrics is None:
            from ..observability import metrics

            self._metrics = metrics.WorkerMetrics(self.state)
            self._board.telemetry = self._metrics
        return self._metrics.registry

    def _cleaner_for(self, options: CleanerOptions) -> Cleaner:
        own = wiring.Wiring(self._store, self._delivery, self._horizon, within_worker=True)
        try:
            with wiring.given(own):
                return Cleaner(
                    database_url=self.database_url,
                    amqp_url=self.amqp_url,
                    registry=self.registry,
                    queue_type=self.queue_type,
                    database=self.database,
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
        database out of reach: left to their leases, for other workers to recover."""
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
        async with beside(self.run, self.stop, f"worker {self.worker_id}"):
            yield self

    def run(self, *, burst: bool = False) -> None:
        """Work until ``stop()`` (or a signal, via the CLI).

        ``burst``: claim by polling until nothing may start now and nothing runs, then
        return, with no consumer or listener: a task waiting for its backoff or ``run_at``,
        or held by flow control, is not waited for (``txqueue.testing.run_tasks`` with a
        clock runs those too). Meant for tests and one-off drains.
        """
        server = self._serve_metrics()  # first: a port taken must leave nothing started
        try:
            self._run(burst)
        finally:
            if server is not None:
                server.close()

    def _run(self, burst: bool) -> None:
        check_schema(self._store, self.database_url, self.database)
        supervisor = self._supervisor = Supervisor(lambda: self.stop(now=True))
        claimer = self._claimer
        handlers = self._handlers = self._pool_of_handlers()
        if burst and self._default_poll:
            self._claimer.poll_interval = UNWOKEN_POLL  # no wake-up comes to a burst
        self._parts = parts = self._stop_order(handlers, burst)
        for part, _ in parts:
            part.start(supervisor)
        log.info(
            "worker %s%s on queues %s, concurrency %d (%s), %s",
            self.worker_id,
            "" if self.database is None else f" of database {self.database}",
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
        wiring: Wiring[Any] = {
            "registry": self.registry,
            "worker_id": self.worker_id,
            "board": self._board,
            "heartbeat": self._leases.heartbeat,
            "claimer": self._claimer.inbox,
            "atomic": self._atomic,
            "readied": self._readied,
            "shutdown_timeout": self.shutdown_timeout,
            "stop_now": self._stop_now,
        }
        if self._spec is None:
            return Handlers(self.concurrency, **wiring)
        return Processes(
            self.concurrency,
            spec=self._spec,
            database_url=self.database_url,
            recycle=self._recycle,
            **wiring,
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
                [routed(queue, self.database) for queue in self.queues],
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
            link = Link(
                self._store, self.listen_url, Outage(self.database) if own else self._outage
            )
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
        from ..observability import metrics

        server = metrics.Server(
            self.measured(), self.unhealthy, self.metrics_host, self.metrics_port
        )
        self.metrics_port = server.port  # the one bound, when asked for any (0)
        log.info("metrics on http://%s:%d/metrics", self.metrics_host, server.port)
        return server

    def _wake(self, wakeups: list[tuple[str, bytes]]) -> None:
        """Send wake-ups for tasks this worker enqueued (its periodic tasks)."""
        self._delivery.send(wakeups)

    def _readied(self, ready: Ready, claimed: list[Claimed]) -> list[Claimed]:
        """What an outcome write of this worker's readied: the steps it claimed start here
        (returns those that cannot), the others are woken as any enqueue's tasks."""
        left, woken = self._claimer.readied(ready, claimed)
        self._delivery.send(wakeups_of(woken))
        return left
