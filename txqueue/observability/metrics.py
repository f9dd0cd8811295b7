"""Prometheus metrics and ``/healthz`` (the ``metrics`` extra).

A worker serves its own: what its handlers did, and its state read at each scrape. The
queues' gauges come from one process only, whichever reads them from the database (the
cleaner's loop, or ``txqueue metrics`` printing them once), not from every worker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic

from ..core.sidebyside import SideBySide
from ..errors import ConfigError, StoreError
from ..store.protocols import Own
from ..store.records import Claimed
from ..store.reports import StatusRow
from ..store.roles import Reading
from ..store.settings import QueueSettings
from .telemetry import Telemetry, WorkerState

try:
    from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
    from prometheus_client import generate_latest as exposition
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector
except ImportError:
    raise ConfigError("metrics need prometheus-client: pip install 'txqueue[metrics]'") from None

log = logging.getLogger("txqueue.metrics")

# Wake-up results, from the worker's statistics of the same meaning.
WAKEUP_RESULTS = {
    "claimed": "woken",
    "waited_for_commit": "waited_for_commit",
    "passed_on": "passed_on",
    "gave_up": "gave_up_waiting",
    "rolled_back": "dropped_rolled_back",
    "gone": "dropped_gone",
    "not_pending": "dropped_not_pending",
    "not_ripe": "dropped_not_ripe",
    "no_handler": "no_handler",
    "held": "held",
}

WORKFLOWS_COUNTED = 10_000
"""The newest workflows the workflows gauge counts: each is read with all its steps."""
DEAD_LETTER_GROUPS = 100
"""The dead-letter groups the gauge shows, the biggest first."""

# From a millisecond noop to the five-minute default lease.
SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class WorkerMetrics(Telemetry):
    """A worker's metrics: instruments its parts update, and its state read at each scrape."""

    def __init__(self, state: Callable[[], WorkerState]) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._finished = Counter(
            "txqueue_tasks_finished",
            "Attempts ended, by outcome: succeeded, failed (for good), retried, cancelled, "
            "released (at shutdown), lease_lost (the task was recovered meanwhile), "
            "unrecorded (left to its lease).",
            ["queue", "name", "outcome"],
            registry=self.registry,
        )
        self._duration = Histogram(
            "txqueue_task_duration_seconds",
            "Handler run time, each attempt.",
            ["queue", "name"],
            buckets=SECONDS,
            registry=self.registry,
        )
        self._delay = Histogram(
            "txqueue_task_start_delay_seconds",
            "From a task's being ripe (enqueued, or its run_at if later) to its handler's start.",
            ["queue"],
            buckets=SECONDS,
            registry=self.registry,
        )
        self.registry.register(_WorkerCollector(state))

        # Each series, kept once found: ``labels()`` costs a task 1.7 µs a call, a dict 0.1.
        self._series: dict[tuple[Any, ...], Any] = {}

    def _labelled(self, family: Any, *labels: str) -> Any:
        key = (family, *labels)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = family.labels(*labels)
        return series

    def started(self, task: Claimed, waited: float) -> None:
        self._labelled(self._delay, task.queue).observe(max(0.0, waited))

    def ran(self, task: Claimed, seconds: float) -> None:
        self._labelled(self._duration, task.queue, task.name).observe(seconds)

    def finished(self, task: Claimed, outcome: str) -> None:
        self._labelled(self._finished, task.queue, task.name, outcome).inc()


class _WorkerCollector(Collector):
    def __init__(self, state: Callable[[], WorkerState]) -> None:
        self._state = state

    def collect(self) -> Iterator[Metric]:
        s = self._state()
        running = GaugeMetricFamily(
            "txqueue_tasks_running",
            "Tasks this worker holds, running or about to.",
            labels=["queue"],
        )
        for queue, n in sorted(s.running.items()):
            running.add_metric([queue], n)
        yield running
        yield GaugeMetricFamily("txqueue_worker_threads", "Handler threads.", value=s.threads)
        wakeups = CounterMetricFamily(
            "txqueue_wakeups", "Wake-ups received, by what became of them.", labels=["result"]
        )
        for result, stat in WAKEUP_RESULTS.items():
            wakeups.add_metric([result], s.stats.get(stat, 0))
        wakeups.add_metric(["malformed"], s.stats.get("malformed", 0))
        yield wakeups
        yield from _connection("database", "the database", s.database_up, s.database_outages)
        if s.broker_up is not None:
            yield from _connection("broker", "RabbitMQ", s.broker_up, s.broker_outages)
        yield _vacuum_horizon(s.vacuum_horizon)


def _vacuum_horizon(seconds: float) -> Metric:
    return GaugeMetricFamily(
        "txqueue_vacuum_horizon_age_seconds",
        "How long the oldest transaction, slot or standby holding back vacuum in the "
        "database has held it, read once a minute (0: nothing holds it).",
        value=seconds,
    )


def _connection(service: str, what: str, up: bool, outages: int) -> Iterator[Metric]:
    yield GaugeMetricFamily(f"txqueue_{service}_up", f"1 while {what} is reachable.", value=int(up))
    yield CounterMetricFamily(
        f"txqueue_{service}_outages", f"Times {what} became unreachable.", value=outages
    )


class QueueCollector(Collector, Generic[Own]):
    """The queues' gauges, read from the database at each scrape."""

    def __init__(self, store: Reading[Own], database_url: str) -> None:
        self._store = store
        self._url = database_url
        self._conn: Own | None = None
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            conn = self._conn
            if conn is None or self._store.is_closed(conn):
                conn = self._conn = self._store.connect(
                    self._url, application_name="txqueue-metrics"
                )
            rows = self._store.status(conn)
            settings = self._store.queue_settings(conn)
            flows = self._store.workflow_counts(conn, WORKFLOWS_COUNTED)
            dead = self._store.dead_letters(conn, None, DEAD_LETTER_GROUPS)
        yield from _tasks(rows)
        yield from _settings(settings)
        workflows = GaugeMetricFamily(
            "txqueue_workflows",
            f"The newest {WORKFLOWS_COUNTED:,} workflows kept, by state: running (a step "
            "has not ended), succeeded, failed (a step failed), cancelled.",
            labels=["state"],
        )
        for state, count in flows.items():
            workflows.add_metric([state], count)
        yield workflows
        letters = GaugeMetricFamily(
            "txqueue_dead_letters",
            f"Tasks failed for good and kept, by name and the type of their last error (the "
            f"{DEAD_LETTER_GROUPS} biggest groups).",
            labels=["name", "error"],
        )
        for group in dead:
            letters.add_metric([group.name, group.error], group.count)
        yield letters


def _tasks(rows: Sequence[StatusRow]) -> Iterator[Metric]:
    """The tasks of each queue by state, and how long its oldest ripe one has waited."""
    tasks = GaugeMetricFamily(
        "txqueue_queue_tasks",
        "Tasks in the table, by queue and state.",
        labels=["queue", "state"],
    )
    oldest = GaugeMetricFamily(
        "txqueue_queue_oldest_ripe_age_seconds",
        "How long the oldest ripe pending task of a queue has waited (0: none waits).",
        labels=["queue"],
    )
    ages: dict[str, float] = {}
    for queue, state, count, age in rows:
        tasks.add_metric([queue, state], count)
        ages[queue] = max(ages.get(queue, 0.0), age or 0.0)
    for queue, age in sorted(ages.items()):
        oldest.add_metric([queue], age)
    yield tasks
    yield oldest


def _settings(settings: Sequence[QueueSettings]) -> Iterator[Metric]:
    """Each queue's flow-control settings."""
    paused = GaugeMetricFamily(
        "txqueue_queue_paused",
        "1 for a paused queue (txqueue queue pause): its tasks wait, none starts.",
        labels=["queue"],
    )
    rate = GaugeMetricFamily(
        "txqueue_queue_rate_limit_per_second",
        "A queue's rate limit, in task starts per second.",
        labels=["queue"],
    )
    concurrency = GaugeMetricFamily(
        "txqueue_queue_concurrency_limit",
        "A queue's concurrency limit: at most this many of its tasks run at once.",
        labels=["queue"],
    )
    fair = GaugeMetricFamily(
        "txqueue_queue_fair_share",
        "1 for a queue whose tasks' keys take turns (txqueue queue set --fair-share).",
        labels=["queue"],
    )
    for q in settings:
        paused.add_metric([q.queue], int(q.paused))
        fair.add_metric([q.queue], int(q.fair_share))
        if q.rate_limit is not None and q.rate_period is not None:
            rate.add_metric([q.queue], q.rate_limit / q.rate_period)
        if q.concurrency is not None:
            concurrency.add_metric([q.queue], q.concurrency)
    yield paused
    yield rate
    yield concurrency
    yield fair


class _HorizonCollector(Collector):
    def __init__(self, seconds: Callable[[], float]) -> None:
        self._seconds = seconds

    def collect(self) -> Iterator[Metric]:
        yield _vacuum_horizon(self._seconds())


def queue_registry(
    store: Reading[Own], database_url: str, horizon: Callable[[], float] | None = None
) -> CollectorRegistry:
    """The queues' gauges; ``horizon``: the vacuum horizon's age as a process that reads
    it over time (the cleaner's loop) last saw it."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(store, database_url))
    if horizon is not None:
        registry.register(_HorizonCollector(horizon))
    return registry


SCRAPE_WAIT = 5.0
"""Seconds a scrape waits for each database's gauges, read side by side."""


class ByDatabase(Collector):
    """The metrics of each database's collector (a worker's, or the queues' gauges), one
    family per name, each sample with a ``database`` label. Read side by side: a database
    whose gauges cannot be read now, or not within ``SCRAPE_WAIT`` (a partition leaves a
    connection hanging), is left out of this scrape and said in the log, and the others'
    are served."""

    def __init__(self, collectors: Mapping[str, Collector]) -> None:
        self._reads = {name: _reader(each) for name, each in collectors.items()}
        self._side = SideBySide[list[Metric]]("txqueue-metrics")

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        for database, found in self._side.read(self._reads, SCRAPE_WAIT).items():
            if isinstance(found, (StoreError, TimeoutError)):
                log.warning("metrics of database %s not read: %s", database, found)
                continue
            if isinstance(found, Exception):
                raise found
            for family in found:
                merged = families.get(family.name)
                if merged is None:
                    merged = Metric(family.name, family.documentation, family.type, family.unit)
                    families[family.name] = merged
                for sample in family.samples:
                    labels = {**sample.labels, "database": database}
                    merged.add_sample(sample.name, labels, sample.value, sample.timestamp)
        yield from families.values()


def _reader(collector: Collector) -> Callable[[], list[Metric]]:
    return lambda: list(collector.collect())


def registry_of(registries: Mapping[str | None, CollectorRegistry]) -> CollectorRegistry:
    """One registry serving each database's, labelled by database (``ByDatabase``); the
    only database's (named None) as it is."""
    if list(registries) == [None]:
        return registries[None]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ByDatabase({str(name): r for name, r in registries.items()}))
    return registry


def text(registry: CollectorRegistry) -> str:
    """The registry's metrics in Prometheus's text format."""
    return exposition(registry).decode()


class Server:
    """``/metrics`` and ``/healthz`` on a port, from threads of its own."""

    def __init__(
        self,
        registry: CollectorRegistry,
        unhealthy: Callable[[], str | None],
        host: str,
        port: int,
    ) -> None:
        handler = _handler(registry, unhealthy)
        try:
            self._http = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            raise ConfigError(f"metrics port {host}:{port}: {exc.strerror or exc}") from None
        self._http.daemon_threads = True
        self.port = self._http.server_address[1]
        self._thread = threading.Thread(
            target=self._http.serve_forever, name="txqueue-metrics", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._http.shutdown()
        self._http.server_close()


def _handler(
    registry: CollectorRegistry, unhealthy: Callable[[], str | None]
) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                try:
                    self._send(200, exposition(registry), CONTENT_TYPE_LATEST)
                except Exception as exc:  # a failed scrape says why, and serving goes on
                    log.warning("metrics scrape failed: %s", exc)
                    self._send(500, f"scrape failed: {exc}\n".encode(), "text/plain")
            elif path == "/healthz":
                reason = unhealthy()
                status, body = (200, "ok\n") if reason is None else (503, reason + "\n")
                self._send(status, body.encode(), "text/plain; charset=utf-8")
            else:
                self._send(404, b"/metrics or /healthz\n", "text/plain")

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a request every few seconds from each scraper and probe: not news

    return Handler
