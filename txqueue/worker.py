"""The worker: wake-ups and polls become claims, claims become handler runs, runs outcomes.

Threads, each owning what it touches:
- the claimer (the thread that calls ``run``): claims, the commit check, the idle poll;
- the consumer (with a broker): pika's connection, handing wake-ups to the claimer;
- the handler pool (``concurrency`` threads, plus one event loop for ``async def``);
- the recorder: writes outcomes in batches and extends the leases of running tasks.
Only the claimer and the recorder talk to the database, each on its own connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import os
import queue
import random
import socket
import threading
import time
import traceback
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from . import config, notify
from .errors import ConfigError, StoreError, TaskError, WorkerError
from .registry import FailedTask, Registry, TaskContext, TaskDefinition
from .store import for_url
from .store.base import ClaimDefaults, Claimed, Outcome
from .supervisor import Supervisor
from .task import (
    CANCELLED,
    DEFAULT_BACKOFF,
    DEFAULT_MAX_ATTEMPTS,
    DEFAULT_TIMEOUT,
    FAILED,
    PENDING,
    RUNNING,
    SUCCEEDED,
    backoff_delay,
    check_queue,
    encode_json,
)
from .triage import Verdict, triage

log = logging.getLogger("txqueue.worker")

_FROM_ENV: Any = object()
_COMMIT_RETRY_FIRST = 0.002
_COMMIT_RETRY_MAX = 0.25
_CANCEL_CHECK_EVERY = 1.0
_UNRECORDED = "unrecorded"
_RECONNECT_MAX = 1.0


@dataclass(order=True)
class _Waiting:
    """A wake-up whose task is not visible yet: its transaction has not committed."""

    due: float
    seq: int
    wakeup: notify.Wakeup = field(compare=False)


@dataclass
class _Running:
    task: Claimed
    started: float
    beat_at: float
    cancelled: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True, slots=True)
class _Done:
    """An attempt's outcome on its way to the recorder, with the task it belongs to."""

    outcome: Outcome
    task: Claimed
    reason: str = "attempts exhausted"  # for on_failed, should the outcome be a failure


class _Handlers:
    """``size`` threads running claimed tasks. Lighter than a ThreadPoolExecutor, which
    spends a Future and twice the time per task (about 11 against 5 µs): with short tasks
    that is a good part of a worker's CPU. Only as many tasks as there are free threads are
    ever handed over, so nothing waits here."""

    def __init__(self, size: int, run: Callable[[Claimed, threading.Event], None]) -> None:
        self._jobs: queue.SimpleQueue[tuple[Claimed, threading.Event] | None]
        self._jobs = queue.SimpleQueue()
        self._run = run
        self._closed = False
        self._threads = [
            threading.Thread(target=self._loop, name=f"txqueue-handler_{i}") for i in range(size)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, task: Claimed, cancelled: threading.Event) -> None:
        self._jobs.put((task, cancelled))

    def shutdown(self) -> None:
        """Each thread exits once its current task, if any, is done; a task handed over but
        not started yet is not started (the worker releases it)."""
        self._closed = True
        for _ in self._threads:
            self._jobs.put(None)

    def _loop(self) -> None:
        while (job := self._jobs.get()) is not None and not self._closed:
            try:
                self._run(*job)
            except BaseException:  # a thread lost here would shrink the pool for good
                log.exception("task %s: the worker failed around its handler", job[0].id)


class _Outage:
    """One warning when the database goes away and one when it is back, although the
    claimer and the recorder each notice on their own connection.

    Each outage ends a period; a failure on a connection opened in an earlier period is
    the tail of an outage already reported.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._down = False
        self.period = 0

    def lost(self, exc: StoreError, opened_in: int) -> None:
        with self._lock:
            if self._down or opened_in < self.period:
                return
            self._down = True
        log.warning(
            "database unreachable (%s): reconnecting; running tasks go on and their outcomes "
            "are written once it is back",
            exc,
        )

    def back(self) -> int:
        """Called on each new connection; returns the period it was opened in."""
        with self._lock:
            if self._down:
                self._down = False
                self.period += 1
                log.warning("database reachable again")
            return self.period


class _Escaped(Exception):
    """SystemExit or KeyboardInterrupt from an async handler, carried out of the event loop
    as an ordinary exception: raised as it is, it would stop the loop every other async
    handler runs on."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__()
        self.exc = exc


async def _contained(coro: Coroutine[Any, Any, Any]) -> Any:
    try:
        return await coro
    except (SystemExit, KeyboardInterrupt) as exc:
        raise _Escaped(exc) from None


def _retry_delay(failures: int) -> float:
    """Backoff between database reconnects, capped at a second: once the server is back,
    work resumes within a second, and a server still down sees one attempt a second."""
    return float(min(_RECONNECT_MAX, 0.05 * 2**failures) * random.uniform(0.5, 1))


def _storable(text: str) -> str:
    """Text any store can hold: NUL and lone surrogates shown escaped instead."""
    text = text.replace("\x00", "\\x00")
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _text(exc: BaseException) -> str:
    try:
        return _storable(str(exc))
    except Exception:  # a broken __str__ must not cost the task its outcome
        return f"<str() of the {type(exc).__name__} failed>"


def _traceback(exc: BaseException) -> str | None:
    try:
        return _storable("".join(traceback.format_exception(exc)))
    except Exception:
        return None


def _error(
    worker_id: str, attempt: int, kind: type, message: str, tb: str | None = None
) -> dict[str, Any]:
    """One entry of a task's error history."""
    return {
        "at": datetime.now(UTC).isoformat(),
        "attempt": attempt,
        "worker_id": worker_id,
        "type": f"{kind.__module__}.{kind.__qualname__}",
        "message": message,
        "traceback": tb,
    }


class Worker:
    """Runs the registry's tasks from the given queues (default: the registry's queues)."""

    def __init__(
        self,
        registry: Registry,
        *,
        database_url: str | None = None,
        amqp_url: str | None = _FROM_ENV,
        queues: list[str] | None = None,
        concurrency: int = 8,
        poll_interval: float | None = None,
        prefetch: int | None = None,
        commit_wait: float = 30.0,
        shutdown_timeout: float = 30.0,
        worker_id: str | None = None,
    ) -> None:
        if not isinstance(registry, Registry):
            raise ConfigError("Worker needs a txqueue.Registry")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ConfigError(f"concurrency must be a positive int, got {concurrency!r}")
        self.registry = registry
        self.database_url = config.database_url(database_url)
        if amqp_url is _FROM_ENV:
            self.amqp_url = config.amqp_url()
        else:
            self.amqp_url = config.amqp_url(amqp_url) if amqp_url else None
        self.queues = [check_queue(q, "queues") for q in (queues or registry.queues())]
        if not self.queues:
            raise ConfigError("no queues to work on: register tasks or pass queues")
        self.concurrency = concurrency
        default_poll = 1.0 if self.amqp_url else 0.1
        self.poll_interval = default_poll if poll_interval is None else float(poll_interval)
        self.prefetch = prefetch or max(4 * concurrency, 32)
        self.commit_wait = commit_wait
        self.shutdown_timeout = shutdown_timeout
        self.worker_id = worker_id or (
            f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        )
        self.stats = {
            "claimed": 0,
            "succeeded": 0,
            "retried": 0,
            "failed": 0,
            "cancelled": 0,
            "released": 0,
            "fenced_out": 0,
            _UNRECORDED: 0,
            "dropped_rolled_back": 0,
            "dropped_gone": 0,
            "dropped_not_pending": 0,
            "dropped_not_ripe": 0,
            "gave_up_waiting": 0,
            "passed_on": 0,
            "no_handler": 0,
        }
        self._store = for_url(self.database_url)
        self._defaults = ClaimDefaults(
            registry.claim_defaults(), DEFAULT_TIMEOUT, DEFAULT_MAX_ATTEMPTS
        )
        self._inbox: queue.SimpleQueue[notify.Wakeup | None] = queue.SimpleQueue()
        self._outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._buffered: list[notify.Wakeup] = []
        self._waiting: list[_Waiting] = []
        self._waiting_since: dict[uuid.UUID, tuple[float, float]] = {}
        self._unrecorded = 0
        self._seq = itertools.count()
        self._running: dict[uuid.UUID, _Running] = {}
        self._running_lock = threading.Lock()
        self._stopping = threading.Event()
        self._stop_now = threading.Event()
        self._recorder_done = threading.Event()
        self._recording: list[_Done] = []  # taken from the outbox, not written yet
        self._conn: Any = None  # the claimer's; it connects, and rides out outages
        self._next_poll = 0.0
        self._consumer: notify.Consumer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._outage = _Outage()
        self._known = frozenset(d.name for d in registry)
        self._skipped_names: set[str] = set()
        self._alerts: queue.SimpleQueue[FailedTask | None] = queue.SimpleQueue()

    # --- control ----------------------------------------------------------------------

    def stop(self, *, now: bool = False) -> None:
        """Stop claiming; let running tasks finish (``now``: do not wait for them)."""
        self._stopping.set()
        if now:
            self._stop_now.set()
        self._inbox.put(None)

    @property
    def unfinished(self) -> int:
        """Handlers still running when ``run`` returned (stopped now, or shutdown timeout)."""
        return len(self._running)

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

    def run(self, *, burst: bool = False) -> None:
        """Work until ``stop()`` (or a signal, via the CLI).

        ``burst``: claim by polling until nothing ripe is left and nothing runs, then
        return; no consumer is started. Meant for tests and one-off drains.
        """
        supervisor = Supervisor(lambda: self.stop(now=True))
        pool = _Handlers(self.concurrency, self._execute)
        threads = [supervisor.thread("txqueue-recorder", self._record_loop)]
        # A slow on_failed hook must hold up neither outcomes nor handlers.
        alerts = supervisor.thread("txqueue-alerts", self._alert_loop, daemon=True)
        if self.amqp_url and not burst:
            self._consumer = notify.Consumer(
                self.amqp_url, self.queues, prefetch=self.prefetch, on_wakeup=self._inbox.put
            )
            threads.append(supervisor.thread("txqueue-consumer", self._consumer.run))
        elif not burst:
            notify.subscribe_local(self.queues, self._inbox.put)
        log.info(
            "worker %s on queues %s, concurrency %d, %s",
            self.worker_id,
            ", ".join(self.queues),
            self.concurrency,
            "woken by RabbitMQ"
            if self._consumer
            else f"polling every {self.poll_interval}s, woken at once by this process's enqueues",
        )
        try:
            supervisor.run("txqueue-claimer", lambda: self._claim_loop(pool, burst))
        finally:
            if self._consumer is not None:
                self._consumer.stop()
            notify.unsubscribe_local(self._inbox.put)
            self._wait_for_handlers()
            pool.shutdown()
            self._outbox.put(None)  # the recorder writes what is done, releases the rest
            for thread in threads:
                thread.join(timeout=10)
            self._alerts.put(None)
            alerts.join(timeout=10)
            self._close_event_loop()
            if self._conn is not None:
                self._conn.close()
            log.info("worker %s stopped: %s", self.worker_id, self.stats)
        if supervisor.failure:
            raise WorkerError(f"worker {self.worker_id} stopped: {supervisor.failure}")

    def _wait_for_handlers(self) -> None:
        deadline = time.monotonic() + self.shutdown_timeout
        while self._running and not self._stop_now.is_set():
            if time.monotonic() > deadline:
                log.warning("shutdown timeout: %d tasks still running", len(self._running))
                return
            time.sleep(0.01)

    def _release(self, conn: Any, pending: list[_Done]) -> None:
        """Give up the tasks this worker will not finish now, rather than at lease expiry.

        Runs on the recorder after every outcome queued before it was written, so a task
        is either recorded or released, never neither. Handlers still running keep their
        threads (the CLI exits; an embedded worker's caller carries on) and any outcome
        they reach is fenced out.
        """
        with self._running_lock:  # a handler leaves _running and queues its outcome under it
            held = [(r.task.id, r.task.attempts) for r in self._running.values()]
            while True:
                try:
                    entry = self._outbox.get_nowait()
                except queue.Empty:
                    break
                if isinstance(entry, _Done):
                    pending.append(entry)  # kept by the caller if writing fails
                elif entry:
                    entry[1].set_result(set())  # a heartbeat: the lease is being given up
        self._write(conn, pending)
        pending.clear()
        if not held:
            return
        released = self._store.release(conn, self.worker_id, held)
        self.stats["released"] += len(released)
        states = Counter(released.values())
        log.warning(
            "released %d unfinished tasks: %d to run again, %d left to the cleaner's "
            "lease policy, %d cancelled",
            len(released),
            states[PENDING],
            states[RUNNING],
            states[CANCELLED],
        )

    # --- the claimer ------------------------------------------------------------------

    def _free(self) -> int:
        return self.concurrency - len(self._running)

    def _claim_loop(self, pool: _Handlers, burst: bool) -> None:
        failures = 0
        opened_in = self._outage.period
        while not self._stopping.is_set():
            try:
                if self._conn is None or self._store.is_closed(self._conn):
                    self._conn = self._store.connect(
                        self.database_url, application_name="txqueue-worker"
                    )
                    opened_in = self._outage.back()
                    # The backoff counts failed attempts in a row: a connection that then
                    # breaks at once (a restarted server, a killed backend) starts it over.
                    failures = 0
                idle = self._claim_round(self._conn, pool)
                failures = 0
            except StoreError as exc:
                if not self._store.is_connection_error(exc):
                    raise
                self._outage.lost(exc, opened_in)
                failures += 1
                self._stopping.wait(_retry_delay(failures))
                continue
            if burst and idle and not self._waiting:
                break
            self._wait_for_work()

    def _wait_for_work(self) -> None:
        now = time.monotonic()
        due = self._next_poll if self._free() > 0 else now + 1.0
        if self._waiting:
            due = min(due, self._waiting[0].due)
        if self._buffered and self._free() > 0:
            due = now
        try:
            item = self._inbox.get(timeout=max(0.0, due - now))
        except queue.Empty:
            return
        if item is not None:
            self._buffered.append(item)

    def _claim_round(self, conn: Any, pool: _Handlers) -> bool:
        """One pass: take in wake-ups, claim what fits, poll if idle. True if nothing was found."""
        while True:
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                self._buffered.append(item)
        now = time.monotonic()
        while self._waiting and self._waiting[0].due <= now:
            self._buffered.append(heapq.heappop(self._waiting).wakeup)
        with self._running_lock:
            settled = not self._running and self._unrecorded == 0
        free = self._free()
        if self._buffered:
            batch, overflow = self._buffered[:free], self._buffered[free:]
            self._buffered = []
            if batch:
                with self._kept(batch + overflow):
                    self._claim_wakeups(conn, pool, batch)
            if overflow:
                # Not held: held, each would wait for the tasks ahead of it, unacked (RabbitMQ
                # takes back a delivery left so past its consumer_timeout) and out of idle
                # workers' reach. One whose row is committed and pending is acked now, and
                # the poll claims that row as soon as a thread is free.
                with self._kept(overflow):
                    self._ack(self._triage(conn, overflow, passed_on=True))
            return False
        if free > 0 and now >= self._next_poll:
            claimed: list[Claimed] = []
            for name in self.queues:
                claimed += self._store.claim_ripe(
                    conn, name, free - len(claimed), self.worker_id, self._defaults
                )
                if len(claimed) == free:
                    break
            self._start(pool, claimed)
            # A full batch means more may be ripe: poll again as soon as there is room.
            self._next_poll = now if len(claimed) == free else now + self.poll_interval
            return settled and not claimed
        return False

    @contextlib.contextmanager
    def _kept(self, wakeups: list[notify.Wakeup]) -> Iterator[None]:
        """On a database error, keep ``wakeups`` to ask about again once it is back, so each
        is acked in the end."""
        try:
            yield
        except StoreError:
            self._buffered[:0] = wakeups
            raise

    def _claim_wakeups(self, conn: Any, pool: _Handlers, batch: list[notify.Wakeup]) -> None:
        ids = list(dict.fromkeys(w.id for w in batch))
        claimed = self._store.claim_ids(conn, ids, self.worker_id, self._defaults)
        got = {c.id for c in claimed}
        self._start(pool, claimed)
        # Acked right after the claim commits, never after the task: a delivery left unacked
        # for the length of a long task would trip RabbitMQ's consumer_timeout.
        done = [w for w in batch if w.id in got]
        missed = [w for w in batch if w.id not in got]
        if missed:
            done.extend(self._triage(conn, missed, passed_on=False))
        self._ack(done)

    def _ack(self, wakeups: list[notify.Wakeup]) -> None:
        if self._consumer is not None:
            self._consumer.ack(wakeups)

    def _triage(
        self, conn: Any, missed: list[notify.Wakeup], *, passed_on: bool
    ) -> list[notify.Wakeup]:
        """Ask why each wake-up was not claimed (or, ``passed_on``, could not be: no free
        thread) and decide it; returns those to ack now."""
        why = self._store.why_unclaimed(conn, [(w.id, w.xid) for w in missed])
        now = time.monotonic()
        ack = []
        for wakeup in missed:
            w = why[wakeup.id]
            verdict = triage(
                w, has_xid=wakeup.xid is not None, passed_on=passed_on, known=self._known
            )
            if verdict is Verdict.WAIT:
                if self._wait_for_commit(wakeup, now):
                    continue
                self.stats["gave_up_waiting"] += 1
                log.info(
                    "task %s: not claimable after %.0fs (its transaction still open, or its "
                    "row locked); leaving it to the poll and the cleaner",
                    wakeup.id,
                    self.commit_wait,
                )
            else:
                self.stats[verdict.value] += 1
            if verdict is Verdict.PASS_ON:
                self._next_poll = min(self._next_poll, now)
            elif verdict is Verdict.NO_HANDLER and w.name is not None:
                self._skipped(w.name)
            elif verdict is Verdict.NOT_RIPE and w.run_at is not None:
                wait = (w.run_at - datetime.now(UTC)).total_seconds()
                self._next_poll = min(self._next_poll, now + max(0.0, wait))
            log.debug("task %s: %s", wakeup.id, verdict.value)
            self._waiting_since.pop(wakeup.id, None)
            ack.append(wakeup)
        return ack

    def _skipped(self, name: str) -> None:
        """Log once per name a task this worker leaves to a worker that has its handler."""
        if name not in self._skipped_names:
            self._skipped_names.add(name)
            log.warning(
                "tasks named %r have no handler in this worker's registry: left pending "
                "(no attempt spent) for a worker that has one; `txqueue status` lists them",
                name,
            )

    def _wait_for_commit(self, wakeup: notify.Wakeup, now: float) -> bool:
        previous = self._waiting_since.pop(wakeup.id, None)
        since, delay = previous if previous else (now, _COMMIT_RETRY_FIRST)
        if now - since > self.commit_wait:
            return False
        self._waiting_since[wakeup.id] = (since, min(delay * 2, _COMMIT_RETRY_MAX))
        heapq.heappush(self._waiting, _Waiting(now + delay, next(self._seq), wakeup))
        return True

    # --- running handlers -------------------------------------------------------------

    def _start(self, pool: _Handlers, claimed: list[Claimed]) -> None:
        now = time.monotonic()
        for task in claimed:
            self.stats["claimed"] += 1
            self._waiting_since.pop(task.id, None)
            running = _Running(task, now, now)
            with self._running_lock:
                self._running[task.id] = running
            pool.submit(task, running.cancelled)

    def _execute(self, task: Claimed, cancelled: threading.Event) -> None:
        definition = self.registry.get(task.name)
        ctx = TaskContext(
            id=task.id,
            name=task.name,
            queue=task.queue,
            attempt=task.attempts,
            max_attempts=task.max_attempts,
            worker_id=self.worker_id,
            _heartbeat=lambda: self._heartbeat(task),
            _cancelled=cancelled,
        )
        try:
            try:
                result = self._call(definition, task, ctx)
                text = None if result is None else encode_json(result, "result")
                outcome = Outcome(task.id, task.attempts, self.worker_id, SUCCEEDED, text)
            except BaseException as exc:
                outcome = self._failure(task, definition, exc, cancelled.is_set())
        except BaseException as exc:  # building the failure failed: the task still gets one
            log.exception("task %s: could not describe its failure", task.id)
            error = _error(self.worker_id, task.attempts, TaskError, f"unreportable: {exc!r:.200}")
            state = FAILED if task.attempts >= task.max_attempts else PENDING
            outcome = Outcome(task.id, task.attempts, self.worker_id, state, error=error)
        with self._running_lock:
            self._unrecorded += 1
            self._running.pop(task.id, None)
            self._outbox.put(_Done(outcome, task))
        self._inbox.put(None)  # a free slot: wake the claimer

    def _call(self, definition: TaskDefinition | None, task: Claimed, ctx: TaskContext) -> Any:
        if definition is None:
            raise TaskError(
                f"no handler for task {task.name!r} in this worker's registry; it is retried, "
                "so a worker that knows it (a newer deploy) can run it"
            )
        args = (task.payload, ctx) if definition.wants_context else (task.payload,)
        if not definition.is_async:
            return definition.fn(*args)
        coro = _contained(definition.fn(*args))
        try:
            return asyncio.run_coroutine_threadsafe(coro, self._event_loop()).result()
        except _Escaped as escaped:
            raise escaped.exc from None

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._running_lock:
            if self._loop is not None and not (self._loop_thread and self._loop_thread.is_alive()):
                log.error("the event loop of async handlers stopped: starting a new one")
                self._loop = None
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._loop_thread = threading.Thread(
                    target=self._loop.run_forever, name="txqueue-async", daemon=True
                )
                self._loop_thread.start()
            return self._loop

    def _close_event_loop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None or self._loop_thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        self._loop_thread.join(timeout=10)
        if not loop.is_running():
            loop.close()

    def _failure(
        self,
        task: Claimed,
        definition: TaskDefinition | None,
        exc: BaseException,
        cancelled: bool,
    ) -> Outcome:
        max_attempts = task.max_attempts
        error = _error(self.worker_id, task.attempts, type(exc), _text(exc), _traceback(exc))
        kind, message = type(exc), error["message"]
        if cancelled:
            log.info("task %s %s stopped on cancellation: %s", task.name, task.id, message)
            return Outcome(task.id, task.attempts, self.worker_id, CANCELLED, error=error)
        if task.attempts >= max_attempts:
            log.error(
                "task %s %s failed for good, attempt %d/%d: %s: %s",
                task.name,
                task.id,
                task.attempts,
                max_attempts,
                kind.__name__,
                message,
            )
            return Outcome(task.id, task.attempts, self.worker_id, FAILED, error=error)
        delay = backoff_delay(definition.backoff if definition else DEFAULT_BACKOFF, task.attempts)
        log.warning(
            "task %s %s failed, attempt %d/%d, retry in %.1fs: %s: %s",
            task.name,
            task.id,
            task.attempts,
            max_attempts,
            delay,
            kind.__name__,
            message,
        )
        self._next_poll = min(self._next_poll, time.monotonic() + delay)
        return Outcome(task.id, task.attempts, self.worker_id, PENDING, error=error, retry_in=delay)

    # --- the recorder -----------------------------------------------------------------

    def _heartbeat(self, task: Claimed) -> bool:
        """``ctx.heartbeat()``: False once the recorder is gone or cannot answer in time,
        as the lease is then as good as lost."""
        if self._recorder_done.is_set():
            return False
        answer: Future[set[uuid.UUID]] = Future()
        self._outbox.put(([(task.id, task.attempts, task.timeout)], answer))
        try:
            return task.id in answer.result(timeout=task.timeout / 3)
        except FutureTimeout:
            return False

    def _record_loop(self) -> None:
        held: list[Any] = []  # its connection, closed also when the loop dies
        try:
            self._record(held)
        finally:
            for conn in held:
                conn.close()

    def _record(self, held: list[Any]) -> None:
        conn: Any = None
        pending = self._recording  # kept across a restart of this loop
        failures = 0
        closing = False
        opened_in = self._outage.period
        next_cancel_check = time.monotonic() + _CANCEL_CHECK_EVERY
        while True:
            wait = min(next_cancel_check, self._next_beat()) - time.monotonic()
            try:
                item = self._outbox.get(timeout=max(0.0, wait))
            except queue.Empty:
                item = ()
            batch = [item]
            while True:
                try:
                    batch.append(self._outbox.get_nowait())
                except queue.Empty:
                    break
            beats: list[tuple[list[tuple[uuid.UUID, int, float]], Future[set[uuid.UUID]]]] = []
            for entry in batch:
                if entry is None:
                    closing = True
                elif isinstance(entry, _Done):
                    pending.append(entry)
                elif entry:
                    beats.append(entry)
            try:
                if conn is None or self._store.is_closed(conn):
                    conn = self._store.connect(self.database_url, application_name="txqueue-worker")
                    held[:] = [conn]
                    opened_in = self._outage.back()
                    failures = 0
                self._write(conn, pending)
                for leases, answer in beats:
                    answer.set_result(self._store.extend_leases(conn, self.worker_id, leases))
                if closing:
                    self._release(conn, pending)
                    break
                self._beat_due(conn)
                if time.monotonic() >= next_cancel_check:
                    self._check_cancellations(conn)
                    next_cancel_check = time.monotonic() + _CANCEL_CHECK_EVERY
                failures = 0
            except StoreError as exc:
                for _, answer in beats:
                    if not answer.done():
                        answer.set_result(set())
                if self._store.is_connection_error(exc):
                    self._outage.lost(exc, opened_in)
                elif failures == 0:
                    log.warning("cannot record outcomes (%s): retrying until written", exc)
                failures += 1
                if self._stop_now.is_set():
                    break
                time.sleep(_retry_delay(failures))
        self._recorder_done.set()
        while True:  # heartbeats asked for meanwhile get their answer: not extended
            try:
                entry = self._outbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(entry, tuple) and entry:
                entry[1].set_result(set())

    def _write(self, conn: Any, done: list[_Done]) -> None:
        """Write ``done`` and empty it; on a lost connection what is left stays in it."""
        if not done:
            return
        written = self._try_record(conn, [d.outcome for d in done])
        if isinstance(written, StoreError):
            # One outcome the database refuses must not hold up the others: each alone.
            while done:
                d, written_one = self._write_one(conn, done[0])
                done.pop(0)
                self._reported(written_one, [d])
            return
        self._reported(written, done)
        done.clear()

    def _try_record(self, conn: Any, outcomes: list[Outcome]) -> dict[uuid.UUID, str] | StoreError:
        """``record_outcomes``, or the database's refusal; a lost connection still raises."""
        try:
            return self._store.record_outcomes(conn, outcomes)
        except StoreError as exc:
            if self._store.is_connection_error(exc):
                raise
            return exc

    def _write_one(self, conn: Any, d: _Done) -> tuple[_Done, dict[uuid.UUID, str]]:
        """Write one outcome; one the database still refuses ends the task ``failed`` with
        the reason, and one that cannot even be failed is left to its lease."""
        written = self._try_record(conn, [d.outcome])
        if not isinstance(written, StoreError):
            return d, written
        o = d.outcome
        reason = _storable(f"the outcome could not be stored: {written}")
        log.error("task %s attempt %d: %s; failing the task", o.id, o.attempt, reason)
        error = _error(o.worker_id, o.attempt, TaskError, reason)
        failed = _Done(
            Outcome(o.id, o.attempt, o.worker_id, FAILED, error=error), d.task, "unstorable outcome"
        )
        written = self._try_record(conn, [failed.outcome])
        if not isinstance(written, StoreError):
            return failed, written
        log.error(
            "task %s: cannot record even its failure (%s); its lease will expire and the "
            "cleaner recover it",
            o.id,
            written,
        )
        return d, {o.id: _UNRECORDED}

    def _reported(self, written: dict[uuid.UUID, str], done: list[_Done]) -> None:
        with self._running_lock:
            self._unrecorded -= len(done)
        for d in done:
            outcome = d.outcome
            state = written.get(outcome.id)
            if state == _UNRECORDED:
                self.stats[_UNRECORDED] += 1
                continue
            if state is None:
                self.stats["fenced_out"] += 1
                log.warning(
                    "task %s attempt %d: outcome dropped, this worker no longer holds the task "
                    "(its lease expired and it was recovered)",
                    outcome.id,
                    outcome.attempt,
                )
                continue
            self.stats["retried" if state == PENDING else state] += 1
            if state == FAILED:
                failure = FailedTask(
                    d.task.id,
                    d.task.name,
                    d.task.queue,
                    d.task.payload,
                    d.task.attempts,
                    d.reason,
                    outcome.error,
                )
                self._alerts.put(failure)

    def _alert_loop(self) -> None:
        while (failure := self._alerts.get()) is not None:
            self.registry.alert(failure)

    def _next_beat(self) -> float:
        """When the first running lease has used a third of its length (monotonic)."""
        with self._running_lock:
            return min(
                (r.beat_at + r.task.timeout / 3 for r in self._running.values()),
                default=float("inf"),
            )

    def _beat_due(self, conn: Any) -> None:
        """Extend, in one statement, the leases that have used a third of their length."""
        now = time.monotonic()
        with self._running_lock:
            due = [r for r in self._running.values() if now - r.beat_at >= r.task.timeout / 3]
        if not due:
            return
        self._store.extend_leases(
            conn, self.worker_id, [(r.task.id, r.task.attempts, r.task.timeout) for r in due]
        )
        for r in due:
            r.beat_at = now

    def _check_cancellations(self, conn: Any) -> None:
        """Flag ``ctx.cancelled`` on running tasks someone cancelled (those over a second old:
        shorter ones finish before anyone could ask)."""
        now = time.monotonic()
        with self._running_lock:
            old = {
                r.task.id: r
                for r in self._running.values()
                if now - r.started >= _CANCEL_CHECK_EVERY and not r.cancelled.is_set()
            }
        if not old:
            return
        for task_id in self._store.cancel_requested(conn, self.worker_id, list(old)):
            log.info("task %s: cancellation requested", task_id)
            old[task_id].cancelled.set()
