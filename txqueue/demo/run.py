"""Running the demo: workers and a cleaner in this process, a producer's phases, the tally."""

from __future__ import annotations

import random
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from contextlib import closing
from statistics import quantiles

from .. import broker, config, redaction
from ..app import DEFAULTS
from ..cleaner.service import Cleaner
from ..core.task import FAILED, PENDING, RUNNING, SUCCEEDED, Task
from ..errors import ConfigError, TxQueueError
from ..outbox import client
from ..store import for_url
from ..store.protocols import Closing
from ..worker import Worker
from .report import DemoReport, Progress
from .tasks import QUEUE, Book, Shop

WORKERS = 2
CONCURRENCY = 8
STEADY_RATE = 100.0  # tasks per second in the latency phase
DEADLINE = 50.0  # seconds: the demo gives up waiting for its tasks after this


class DemoError(TxQueueError):
    """The demo's tasks did not all finish in time."""


class Demo:
    """Runs the demo once. ``database_url`` None: a throwaway SQLite file."""

    def __init__(
        self, *, database_url: str | None, amqp_url: str | None, tasks: int = 2000
    ) -> None:
        if isinstance(tasks, bool) or not isinstance(tasks, int) or not 100 <= tasks <= 100_000:
            raise ConfigError(f"tasks must be an int from 100 to 100000, got {tasks!r}")
        self._tmp = None if database_url else tempfile.mkdtemp(prefix="txqueue-demo-")
        self.database_url = config.database_url(database_url or f"sqlite:///{self._tmp}/demo.db")
        self.amqp_url = config.amqp_url(amqp_url) if amqp_url else None
        self.tasks = tasks
        self._store = for_url(self.database_url)
        self._book = Book()
        self._shop = Shop(self._book)
        self._phase = "starting"
        self._drain_ids: set[uuid.UUID] = set()  # the burst's plain tasks: the drain sample
        self._steady_ids: list[uuid.UUID] = []  # the latency sample
        self._never = uuid.UUID(int=0)  # the rolled-back transaction's task

    def run(self, on_progress: Callable[[Progress], None]) -> DemoReport:
        started = time.monotonic()
        report = DemoReport(
            redaction.redact(self.database_url)
            if self._tmp is None
            else f"SQLite, throwaway file {self.database_url.removeprefix('sqlite:///')}",
            redaction.redact(self.amqp_url)
            if self.amqp_url
            else "PostgreSQL NOTIFY"
            if self._store.notifies
            else None,
            steady_rate=STEADY_RATE,
        )
        conn = self._store.connect(self.database_url, create=True)
        try:
            self._run(conn, report, started, on_progress)
        finally:
            self._tidy(conn)
        report.seconds = time.monotonic() - started
        return report

    def _run(
        self,
        conn: Closing,
        report: DemoReport,
        started: float,
        on_progress: Callable[[Progress], None],
    ) -> None:
        if self._store.apply_schema(conn) and self._tmp is None:
            # Your database: the tables stay (dropping them is no demo's to do), empty.
            report.database += " (txqueue's tables made there, as txqueue init does; they stay)"
        self._store.delete_queue(conn, QUEUE)  # what an interrupted run left
        workers = [
            Worker(
                self._shop.registry,
                database_url=self.database_url,
                amqp_url=self.amqp_url,
                queues=[QUEUE],
                concurrency=CONCURRENCY,
                poll_interval=0.1,
                cleaner=False,  # the demo's cleaner runs apart, every second
            )
            for _ in range(WORKERS)
        ]
        cleaner = Cleaner(database_url=self.database_url, amqp_url=self.amqp_url, interval=1.0)
        threads = [threading.Thread(target=w.run, name="demo-worker") for w in workers]
        threads.append(threading.Thread(target=cleaner.run, name="demo-cleaner"))
        client.configure(amqp_url=self.amqp_url)
        failure: list[BaseException] = []
        try:
            for thread in threads:
                thread.start()
            for w in workers:
                w.wait_consuming(10)
            producer = threading.Thread(
                target=self._produce, args=(report, failure), name="demo-producer"
            )
            producer.start()
            self._watch(conn, report, started, on_progress, producer, failure)
            report.cleaner = cleaner.run_once().summary()
        finally:
            for w in workers:
                w.stop()
            cleaner.stop()
            for thread in threads:
                thread.join(30)
            client.configure()
        self._tally(report, workers, conn)

    def _watch(
        self,
        conn: Closing,
        report: DemoReport,
        started: float,
        on_progress: Callable[[Progress], None],
        producer: threading.Thread,
        failure: list[BaseException],
    ) -> None:
        """Report the counts every 0.1 s until every committed task finished; raise the
        producer's failure, or DemoError past the deadline."""
        deadline = time.monotonic() + DEADLINE
        while True:
            counts = self._counts(conn)
            on_progress(
                Progress(
                    counts[PENDING],
                    counts[RUNNING],
                    counts[SUCCEEDED],
                    counts[FAILED],
                    self._phase,
                    time.monotonic() - started,
                )
            )
            finished = counts[SUCCEEDED] + counts[FAILED]
            if not producer.is_alive() and finished >= report.committed:
                break
            if failure or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        producer.join()
        if failure:
            raise failure[0]
        if time.monotonic() > deadline:
            raise DemoError(
                f"only {finished} of {report.committed} tasks finished in {DEADLINE:.0f}s"
            )

    def _counts(self, conn: Closing) -> dict[str, int]:
        counts: dict[str, int] = dict.fromkeys((PENDING, RUNNING, SUCCEEDED, FAILED), 0)
        for queue, state, n, _ in self._store.status(conn):
            if queue == QUEUE and state in counts:
                counts[state] = n
        return counts

    def _produce(self, report: DemoReport, failure: list[BaseException]) -> None:
        try:
            with closing(self._store.connect(self.database_url)) as conn:
                self._burst(conn, report)
                self._phase = "burst: workers draining the backlog"
                # Latency is measured on idle workers, not behind the burst's backlog.
                deadline = time.monotonic() + DEADLINE / 2
                while self._drain_ids - self._book.finished.keys():
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.01)
                self._rollback(conn, report)
                self._steady(conn, report)
        except BaseException as exc:  # handed to the thread that reports
            failure.append(exc)
        self._phase = "finishing retries and delayed tasks"

    def _commit(self, conn: Closing, tasks: list[Task], report: DemoReport) -> list[uuid.UUID]:
        before = time.time()  # a delayed task's run_at is later than this plus its delay
        with client.transaction(conn):
            ids = DEFAULTS.enqueue_many(conn, tasks)
        now = time.time()
        with self._book.lock:
            for task, task_id in zip(tasks, ids, strict=True):
                self._book.committed[task_id] = now
                if task.delay_seconds is not None:
                    self._book.due[task_id] = before + task.delay_seconds
        report.committed += len(tasks)
        return list(ids)

    def _burst(self, conn: Closing, report: DemoReport) -> None:
        """Most of the tasks, as fast as business transactions of 1 to 20 tasks commit."""
        self._phase = "burst: committing orders as fast as they come"
        steady = min(500, self.tasks // 4)
        n = self.tasks - steady
        flaky, broken, delayed = n // 20, max(3, n // 200), n // 20
        shop = self._shop
        mix = (
            [shop.charge_card.task(order=i) for i in range(flaky)]
            + [shop.sync_crm.task(customer=i) for i in range(broken)]
            + [
                shop.send_email.options(delay=random.uniform(1, 4)).task(to=f"later{i}@example.com")
                for i in range(delayed)
            ]
        )
        emails = [shop.send_email.task(to=f"user{i}@example.com") for i in range(n - len(mix))]
        plain = {id(t) for t in emails}
        tasks = emails + mix
        random.shuffle(tasks)
        report.delayed = delayed
        while tasks:
            size = random.randint(1, 20)
            batch, tasks = tasks[:size], tasks[size:]
            ids = self._commit(conn, batch, report)
            self._drain_ids.update(i for t, i in zip(batch, ids, strict=True) if id(t) in plain)

    def _rollback(self, conn: Closing, report: DemoReport) -> None:
        self._phase = "a transaction that rolls back"
        try:
            with client.transaction(conn):
                self._never = self._shop.never.enqueue(conn)
                raise _RolledBack
        except _RolledBack:
            pass

    def _steady(self, conn: Closing, report: DemoReport) -> None:
        """One task per transaction at STEADY_RATE: the commit-to-start latency sample."""
        self._phase = f"steady: one task per transaction at {STEADY_RATE:.0f}/s"
        n = min(500, self.tasks // 4)
        start = time.monotonic()
        for i in range(n):
            time.sleep(max(0.0, start + i / STEADY_RATE - time.monotonic()))
            task = self._shop.send_email.task(to=f"steady{i}@example.com")
            self._steady_ids += self._commit(conn, [task], report)

    def _tally(self, report: DemoReport, workers: list[Worker], conn: Closing) -> None:
        book = self._book
        counts = self._counts(conn)
        report.succeeded, report.failed = counts[SUCCEEDED], counts[FAILED]
        report.retries = sum(w.stats["retried"] for w in workers)
        report.alerts = book.alerts
        report.ran_twice = sum(1 for n in book.successes.values() if n > 1)
        report.delayed_early = sum(
            1 for i, due in book.due.items() if book.started.get(i, due) < due
        )
        delays = [
            (book.started[i] - book.committed[i]) * 1000
            for i in self._steady_ids
            if i in book.started
        ]
        if len(delays) >= 2:
            cuts = quantiles(delays, n=100, method="inclusive")
            report.latency_ms = (cuts[49], cuts[98])
        drained = [i for i in self._drain_ids if i in book.finished]
        if drained:
            first = min(book.committed[i] for i in drained)
            last = max(book.finished[i] for i in drained)
            report.drain_per_second = len(drained) / max(last - first, 1e-6)
        report.rolled_back_ran = "demo.never" in book.names
        report.rolled_back_row = self._store.get_task(conn, self._never) is not None

    def _tidy(self, conn: Closing) -> None:
        """Delete what the demo made, also after a failure."""
        try:
            self._store.delete_queue(conn, QUEUE)
            if self.amqp_url:
                broker.delete_queue(self.amqp_url, QUEUE)
        finally:
            conn.close()
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)


class _RolledBack(Exception):
    """Raised inside the demo's one failing business transaction."""
