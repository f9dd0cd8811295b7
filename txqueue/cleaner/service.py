"""The cleaner: makes sure every committed task runs, takes back what dead workers held,
and keeps the table small. Run it from cron (``run_once``) or as a process (``run``), on
as many hosts as you like: of the processes, one is active at a time.

Each step works in bounded batches of short transactions with ``SKIP LOCKED``, so it never
holds long locks and two cleaners running at once act on each task once.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import closing, suppress
from functools import partial
from typing import TypedDict

from .. import broker, config, redaction, wiring
from ..core.task import CANCELLED, FAILED, SUCCEEDED
from ..errors import BrokerError, ConfigError, StoreError
from ..observability.horizon import Horizon, Watch
from ..outbox import wakeup
from ..outbox.client import delivery_for, wakeups_of
from ..store import serving
from ..store.protocols import Closing
from ..store.records import SLOT_PERIOD
from ..tasks.registry import Registry
from .recovery import recover, wake_due
from .report import CleanupReport

log = logging.getLogger("txqueue.cleaner")

DEFAULT_INTERVAL = 60.0
DEFAULT_RETAIN = 24 * 3600.0
DEFAULT_RETAIN_FAILED = 7 * 24 * 3600.0
DEFAULT_BATCH = 1000
LEADER_ROLE = "cleaner"
RENOTIFY_LIMIT = 10_000
"""Most wake-ups re-sent per run."""


class CleanerOptions(TypedDict, total=False):
    """``Cleaner``'s own settings; an App, or a worker running the cleaner's passes, gives
    it the rest."""

    interval: float
    grace: float | None
    retain: float
    retain_failed: float
    batch_size: int
    vacuum_horizon_warn: float | None


class Cleaner:
    """Re-notifies, recovers and prunes. ``registry`` (optional) is only for ``on_failed``:
    recovery policies travel in the rows, so a cleaner without the application's code
    still honours them.

    Example:

    ```python
    cleaner = txqueue.Cleaner(database_url=url, amqp_url=None, registry=registry)
    report = cleaner.run_once()  # recover, re-notify, prune: what `txqueue cleaner --once` does
    print(report.retried, report.pruned, report.problems)
    ```
    """

    def __init__(
        self,
        *,
        database_url: str | None = None,
        amqp_url: str | None = config.FROM_ENV,
        registry: Registry | None = None,
        interval: float = DEFAULT_INTERVAL,
        grace: float | None = None,
        retain: float = DEFAULT_RETAIN,
        retain_failed: float = DEFAULT_RETAIN_FAILED,
        batch_size: int = DEFAULT_BATCH,
        vacuum_horizon_warn: float | None = None,
        queue_type: str | None = None,
        database: str | None = None,
    ) -> None:
        """``vacuum_horizon_warn``: seconds the vacuum horizon may be held back before a
        warning (default TXQUEUE_VACUUM_HORIZON_WARN, else 300; 0: never). ``queue_type``:
        the wake-up queues' RabbitMQ type (default TXQUEUE_AMQP_QUEUE_TYPE, else classic).
        ``database``: ``database_url``'s name among several (``WorkerSettings.database``);
        the cleaner's leadership, as everything it does, is that database's own."""
        # A worker running the cleaner's passes gives its own horizon watch and reports
        # the horizon and the database's outages itself, once: the cleaner's uneventful
        # passes and failed connections are then only debug lines in its log.
        given = wiring.current()
        within_worker, horizon = given.within_worker, given.horizon
        self.database_url, named = config.database_target(database_url)
        database = config.database_name(database or named, self.database_url)
        self._store = serving(self.database_url, given.store)
        self.amqp_url, self.queue_type = config.broker(amqp_url, queue_type)
        self.database = database
        self._of = "" if database is None else f" of database {database}"
        self._delivery = delivery_for(
            self.amqp_url,
            self.queue_type,
            given.delivery,
            self._store,
            self.database_url,
            database,
        )
        if registry is not None and not isinstance(registry, Registry):
            raise ConfigError("registry must be a txqueue.Registry")
        self.registry = registry
        self.interval = _seconds("interval", interval, minimum=0.01)
        # Two intervals: a task the previous run just missed is not re-sent twice in a row.
        self.grace = 2 * self.interval if grace is None else _seconds("grace", grace)
        self.retain = _seconds("retain", retain)
        self.retain_failed = _seconds("retain_failed", retain_failed)
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(f"batch_size must be a positive int, got {batch_size!r}")
        self.batch_size = batch_size
        self._horizon = horizon or Watch(config.vacuum_horizon_warn(vacuum_horizon_warn))
        self._within_worker = within_worker
        self._quiet = log.debug if within_worker else log.info
        self._outage = log.debug if within_worker else log.warning
        self._stop = threading.Event()
        self._passed = time.monotonic()  # the last pass that did its work (or the start)

    def run_once(self) -> CleanupReport:
        """One pass: recover expired leases, re-notify stale pending tasks, prune history
        (unless the vacuum horizon is held back past its threshold: ``prune_deferred``).

        Raises StoreError when the database cannot be reached; a broker that does not
        confirm the wake-ups is reported in ``problems`` (the rows are safe either way).
        """
        started = time.monotonic()
        report = CleanupReport()
        wakeups: list[tuple[str, bytes]] = []
        conn = self._store.connect(self.database_url, application_name="txqueue-cleaner")
        with closing(conn):
            # A cleaner of another name's database would re-send its wake-ups where no
            # worker of it reads them.
            config.named_as(self._store.database_name(conn), self.database)
            horizon = self._horizon.read(self._store, conn)
            self._store.keep_slots(conn, SLOT_PERIOD)
            self._take_back(conn, report, wakeups)
            self._release_stranded(conn, report, wakeups)
            notifies = self._delivery.notifies(self._store)
            if self.amqp_url or notifies:
                self._renotify(conn, self.amqp_url, report, wakeups)
            # A row deleted while the horizon is held stays on disk, dead, until the hold
            # ends, like a row kept: the delete would cost its writes and leave versions for
            # every later read of the history to step over, and free nothing sooner.
            report.prune_deferred = horizon is not None and horizon.past(self._horizon.threshold)
            if not report.prune_deferred:
                for state, age in (
                    (SUCCEEDED, self.retain),
                    (CANCELLED, self.retain),
                    (FAILED, self.retain_failed),
                ):
                    report.pruned += self._batches(
                        partial(self._store.prune, conn, state, age, self.batch_size)
                    )
                # Not counted as tasks: the log of starts that rate windows no longer hold,
                # the workflows whose steps are all gone, the signals no wait took.
                self._store.prune_starts(conn)
                self._store.prune_signals(conn, max(self.retain, self.retain_failed))
                self._store.prune_workflows(conn, min(self.retain, self.retain_failed))
            if wakeups and notifies:
                self._store.notify_wakeups(conn, sorted({queue for queue, _ in wakeups}))
        if wakeups and self.amqp_url:
            self._delivery.send(wakeups)
            if not self._delivery.flush(timeout=10.0):
                report.problems.append(
                    f"RabbitMQ did not confirm the wake-ups at {redaction.redact(self.amqp_url)}; "
                    "workers' polls will find those tasks"
                )
        report.seconds = time.monotonic() - started
        return report

    def _take_back(
        self, conn: Closing, report: CleanupReport, wakeups: list[tuple[str, bytes]]
    ) -> None:
        """Recover the expired leases, then wake the parked tasks whose time came."""
        alert = self.registry.alert if self.registry is not None else None
        recover(self._store, conn, self.batch_size, alert, report, wakeups, self._going)
        wake_due(self._store, conn, self.batch_size, report, wakeups, self._going)

    def _going(self) -> bool:
        return not self._stop.is_set()

    def _release_stranded(
        self, conn: Closing, report: CleanupReport, wakeups: list[tuple[str, bytes]]
    ) -> None:
        """Move on the workflow steps an ended parent left waiting: a worker of an older
        release ended it without seeing to its children."""
        while True:
            applied = self._store.release_stranded(conn, self.batch_size)
            report.steps_released += len(applied)
            wakeups += wakeups_of(applied.ready)
            if len(applied) == 0:
                return

    def run(self) -> None:
        """Until ``stop()``: ``run_once`` every ``interval`` while this process holds the
        cleaner's lease, or stand by while another one does, and take over when its lease
        lapses (one interval after its last renewal). Failures are logged, not raised, but
        a database of another name than ``database`` (ConfigError): not to lead, nor clean,
        there. The lease lasts one interval and is renewed every half interval between
        passes, so a cleaner that dies is replaced within an interval. It only saves work:
        a pass that outlasts the lease, and a standby's that overlaps it, are as safe as
        two cron runs at once.
        """
        holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        conn: Closing | None = None
        leading: bool | None = None  # not known yet: the first look is logged either way
        due = 0.0
        try:
            while not self._stop.is_set():
                try:
                    if conn is None:
                        conn = self._store.connect(
                            self.database_url, application_name="txqueue-cleaner"
                        )
                        config.named_as(self._store.database_name(conn), self.database)
                    lease = self._store.lead(conn, LEADER_ROLE, holder, self.interval)
                except StoreError as exc:
                    if conn is not None:
                        conn.close()
                        conn = None
                    leading = None
                    say = self._outage if self._store.is_connection_error(exc) else log.warning
                    say("cleaner%s: %s; trying again in %.0fs", self._of, exc, self.interval)
                    self._stop.wait(self.interval)
                    continue
                # A lapsed lease naming this process is the statement's snapshot of a row
                # that another cleaner took meanwhile: not ours.
                ours = lease.holder == holder and lease.left > 0
                if ours is not leading:
                    leading = ours
                    if ours:
                        log.info("cleaner %s%s: active", holder, self._of)
                    else:
                        log.info(
                            "cleaner %s%s: standing by while %s is active",
                            holder,
                            self._of,
                            lease.holder,
                        )
                if not leading:
                    self._passed = time.monotonic()  # standing by is this process's work
                    self._stop.wait(min(self.interval, max(lease.left, 0.0) + 0.05))
                elif time.monotonic() >= due:
                    self._pass()
                    due = time.monotonic() + self.interval
                else:
                    self._stop.wait(min(self.interval / 2, due - time.monotonic()))
        finally:
            if conn is not None:
                with suppress(StoreError):
                    # A cleaner started next (a restart) takes over without waiting.
                    self._store.resign(conn, LEADER_ROLE, holder)
                conn.close()

    def _pass(self) -> None:
        try:
            report = self.run_once()
        except StoreError as exc:
            say = self._outage if self._store.is_connection_error(exc) else log.warning
            say("cleaner%s run failed, trying again in %.0fs: %s", self._of, self.interval, exc)
            return
        except Exception:
            if not self._within_worker:
                raise  # the process exits for its service manager, loudly
            # Raised, it would stop the worker, and then each worker that takes the lease.
            log.exception("cleaner%s pass failed, trying again in %.0fs", self._of, self.interval)
            return
        if report.ok:
            self._passed = time.monotonic()
        # Recoveries mean workers died: worth a warning, as problems are.
        quiet = report.ok and not (report.retried or report.failed or report.cancelled)
        (self._quiet if quiet else log.warning)("cleaner%s: %s", self._of, report.summary())

    @property
    def vacuum_horizon(self) -> Horizon:
        """What held the database's vacuum horizon back at the last pass, and how long."""
        return self._horizon.current

    def unhealthy(self) -> str | None:
        """Why the loop is not keeping up, or None: no pass did its work (or, standing by, no
        look at the active cleaner's lease succeeded) in the last two intervals and a minute:
        the database or RabbitMQ unreachable, or a pass stuck."""
        since = time.monotonic() - self._passed
        if since > 2 * self.interval + 60:
            return f"no cleaner pass has done its work for {since:.0f}s"
        return None

    def stop(self, *, now: bool = False) -> None:
        self._stop.set()

    def _batches(self, step: Callable[[], int], limit: int | None = None) -> int:
        """``step`` until it does less than a batch, ``limit`` is reached, or the loop is
        stopped: a pass cut short is as safe as a killed cron run, and the next one goes on
        (a worker stopping must not wait for a long prune)."""
        done = 0
        while (limit is None or done < limit) and not self._stop.is_set():
            n = step()
            done += n
            if n < self.batch_size:
                break
        return done

    def _renotify(
        self,
        conn: Closing,
        url: str | None,
        report: CleanupReport,
        wakeups: list[tuple[str, bytes]],
    ) -> None:
        """Wake the workers again for tasks ripe longer than the grace: by RabbitMQ (``url``)
        for those of queues it holds no message for, else by NOTIFY."""
        queues = self._store.stale_queues(conn, self.grace)
        if not queues:
            return
        if url is None:  # one notification a queue wakes its workers: no row to mark
            wakeups.extend((queue, b"") for queue in queues)
            report.renotified = len(queues)
            return
        try:
            depths = broker.check(url, [wakeup.routed(q, self.database) for q in queues])
        except BrokerError as exc:
            report.problems.append(f"{exc}; nothing re-notified")
            return
        # Wake-ups still waiting in a queue will wake its workers; more copies would only
        # pile up behind them. An empty queue with stale tasks means messages were lost.
        queues = [q for q in queues if not depths.get(wakeup.routed(q, self.database))]

        def step() -> int:
            stale = self._store.renotify(conn, self.grace, queues, self.batch_size)
            wakeups.extend((queue, wakeup.encode(i, xid)) for i, queue, xid in stale)
            return len(stale)

        report.renotified = self._batches(step, RENOTIFY_LIMIT)


def _seconds(name: str, value: float, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= minimum:
        raise ConfigError(f"{name} must be a number of seconds >= {minimum:g}, got {value!r}")
    return float(value)
