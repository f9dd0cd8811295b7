"""A process pool's child: it imports the registry, then runs the tasks its parent sends,
one at a time, through the same ``run_attempt`` as a handler thread, and sends back each
attempt's end. The parent keeps the claims, leases and outcomes (``processes``).

Messages are tuples on one socket pair. From the parent: ``("start", options)``, then
``("run", (task, waited))`` (a second may come while the first runs: it waits here),
``("beat", (number, alive))`` (the answer to a heartbeat), ``("cancel", task_id)``,
``("exit", None)``. To the parent: ``("ready", None)``, ``("beat", (number, task_id))``,
``("progress",
(task_id, text))``, ``("log", record)``, ``("done", (task_id, ended, retire))``, and
``("failed", why)`` when it cannot start. A child that retires leaves the tasks it was
sent and did not start to the parent, which sends them to the next child.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import functools
import importlib
import logging
import os
import queue
import resource
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from multiprocessing.connection import Connection
from types import FrameType
from typing import Any

from ..errors import TimeLimitError
from ..observability import reporting
from ..observability.logs import TaskLogFilter
from ..store import for_url
from ..store.records import Claimed, Inserted, Outcome
from ..tasks.registry import Registry
from .atomic import Atomic
from .attempts import Ended, Settled, run_attempt
from .link import Outage
from .outcomes import context

PROGRESS_EVERY = 0.25
"""Seconds between the progress reports a child passes on: the parent keeps the last, and
writes it at most once a second; a handler reporting in a tight loop costs no more."""
SETUP_ENV = "TXQUEUE_POOL_SETUP"
"""``module:function`` a child calls before it imports the registry (``manage.py txqueue``
sets ``django:setup``)."""
BEAT_WAIT = 60.0
"""Seconds ``ctx.heartbeat()`` in a child waits for its parent's answer (False after)."""
ORPHANED = 70
"""A child's exit status when its parent went away: its task's lease is no longer kept."""


@dataclass(frozen=True, slots=True)
class Recycle:
    """When a child makes way for a fresh one: after ``max_tasks`` tasks, or once its
    resident memory passes ``max_memory`` bytes (checked after each task)."""

    max_tasks: int | None = None
    max_memory: int | None = None

    def why(self, tasks: int) -> str | None:
        if self.max_tasks is not None and tasks >= self.max_tasks:
            return f"it ran {tasks} tasks (max tasks per child)"
        if self.max_memory is not None:
            rss = resident()
            if rss > self.max_memory:
                return f"its memory is {rss / 2**20:.0f} MiB (max memory per child)"
        return None


_CLAIMED = [f.name for f in fields(Claimed)][1:]  # after the id
_OUTCOME = [f.name for f in fields(Outcome)][1:]


def task_out(task: Claimed, waited: float) -> tuple[Any, ...]:
    """A task as it crosses to a child: plain values, which pickle ten times faster than
    the dataclass (a no-op task's round trip spent 100 µs pickling them)."""
    return (task.id.bytes, *[getattr(task, name) for name in _CLAIMED], waited)


def task_in(wire: tuple[Any, ...]) -> tuple[Claimed, float]:
    *values, waited = wire
    return Claimed(uuid.UUID(bytes=values[0]), *values[1:]), waited


def end_out(ended: Ended | Settled) -> tuple[Any, ...]:
    """An attempt's end as it crosses back (``task_out``'s reason)."""
    o = ended.outcome
    flat = None
    if o is not None:
        flat = (
            o.id.bytes,
            o.attempt,
            o.worker_id,
            str(o.state),
            *[getattr(o, n) for n in _OUTCOME[3:]],
        )
    if isinstance(ended, Ended):
        return (flat, ended.reason)
    return (flat, None, ready_out(ended.ready))


def end_in(wire: tuple[Any, ...]) -> Ended | Settled:
    flat = wire[0]
    outcome = None if flat is None else Outcome(uuid.UUID(bytes=flat[0]), *flat[1:])
    if len(wire) == 3:
        return Settled(outcome, tuple(ready_in(wire[2])))
    assert outcome is not None
    return Ended(outcome, wire[1])


def ready_out(ready: Sequence[tuple[str, Inserted]]) -> list[tuple[str, bytes, str | None]]:
    """Tasks to wake, (queue, row) each, as they cross back to the parent."""
    return [(queue, row.id.bytes, row.xid) for queue, row in ready]


def ready_in(wire: Sequence[tuple[str, bytes, str | None]]) -> list[tuple[str, Inserted]]:
    return [(queue, Inserted(uuid.UUID(bytes=i), True, xid)) for queue, i, xid in wire]


def resident() -> int:
    """This process's resident memory in bytes (its peak where /proc is not to be had)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return int(peak if sys.platform == "darwin" else peak * 1024)


def load(spec: str) -> Registry:
    """The registry at ``module:attribute`` (or an App's there)."""
    module_name, _, attr = spec.partition(":")
    found = getattr(importlib.import_module(module_name), attr)
    registry = found if isinstance(found, Registry) else getattr(found, "registry", None)
    if not isinstance(registry, Registry):
        raise TypeError(f"{spec} is not a txqueue.Registry")
    return registry


def run() -> None:
    """A child's entry point (``python -c``): its end of the pipe is the descriptor given
    as its argument, and the first message on it says the rest."""
    conn = Connection(int(sys.argv[1]))
    _, options = conn.recv()
    main(conn, **options)


def main(
    conn: Connection,
    spec: str,
    names: list[str],
    worker_id: str,
    database_url: str,
    parent: int,
    recycle: Recycle,
    log_level: int,
) -> None:
    """The child's whole life; it ends the process itself (``os._exit``)."""
    # Ctrl-C and a service manager's SIGTERM reach every process of the worker: the parent
    # decides what its children do (and they die with it).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _die_with(parent)
    channel = Channel(conn)
    logging.basicConfig(level=log_level, handlers=[_Forward(channel, worker_id)], force=True)
    registry = _imported(channel, spec, names)
    signal.signal(signal.SIGALRM, channel.time_limit)
    channel.start()
    channel.send(("ready", None))
    loop = asyncio.new_event_loop()
    atomic = Atomic(for_url(database_url), database_url, Outage(), 1)
    done = 0
    while (job := channel.next()) is not None:
        task, waited = job
        journal = atomic.journal(0, task, worker_id, channel.wake)
        ctx = context(
            task, worker_id, channel.heartbeat, channel.cancelled, channel.report, journal
        )
        ended = run_attempt(
            registry.get(task.name),
            task,
            ctx,
            atomic=functools.partial(atomic.run, 0),
            run_async=loop.run_until_complete,
            waited=waited,
            guard=functools.partial(channel.limited, task.time_limit),
        )
        done += 1
        # A handler interrupted by its time limit may have left anything half done.
        retire = "its time limit went off" if channel.went_off else recycle.why(done)
        channel.send(("done", (task.id.bytes, end_out(ended), retire)))
        if retire:
            break
    atomic.close()
    reporting.flush()
    os._exit(0)


def _imported(channel: Channel, spec: str, names: list[str]) -> Registry:
    """The application's registry, imported here as the parent did; the process ends,
    having said why, if it fails to import or lacks one of the worker's tasks."""
    try:
        setup = os.environ.get(SETUP_ENV)
        if setup:  # what the application needs before its modules import (django.setup)
            module_name, _, function = setup.partition(":")
            getattr(importlib.import_module(module_name), function)()
        registry = load(spec)
    except BaseException as exc:
        channel.send(("failed", f"importing {spec}: {type(exc).__name__}: {exc}"))
        os._exit(1)
    missing = sorted(set(names) - {d.name for d in registry})
    if missing:
        channel.send(
            (
                "failed",
                f"{spec}, imported, registers no task {', '.join(map(repr, missing))}: the "
                "worker's registry had them (import their modules where the registry is)",
            )
        )
        os._exit(1)
    return registry


def _die_with(parent: int) -> None:
    """Be killed when the parent thread that started this process ends (Linux), and
    leave now if it already has: an orphan would run a task whose lease nobody renews."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(ORPHANED)


class Channel:
    """This child's end of the pipe: a reader thread takes the parent's messages (and
    passes progress on), the main thread runs the tasks."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._send_lock = threading.Lock()
        self._lock = threading.Lock()  # the task running, and the cancels come for others
        self._jobs: queue.SimpleQueue[tuple[Claimed, float] | None] = queue.SimpleQueue()
        self._beats: queue.SimpleQueue[tuple[int, bool]] = queue.SimpleQueue()
        self._beat_lock = threading.Lock()
        self._current: uuid.UUID | None = None
        self.cancelled = threading.Event()
        self._cancels: set[uuid.UUID] = set()  # of the tasks sent and not started yet
        self._progress: tuple[uuid.UUID | None, str] | None = None
        self._beat = 0  # each heartbeat's number: a late answer is not taken for the next's
        self._armed: float | None = None  # the time limit of the handler's call in progress
        self._sending = False
        self._deferred = False
        self.went_off = False

    def start(self) -> None:
        threading.Thread(target=self._read, name="txqueue-child-reader", daemon=True).start()

    def send(self, message: tuple[str, Any]) -> None:
        main = threading.current_thread() is threading.main_thread()
        with self._send_lock:
            self._sending = main
            try:
                self._conn.send(message)
            finally:
                self._sending = False
        if main and self._deferred:  # the time limit went off mid-message: raised now
            self._deferred = False
            if self._armed is not None:
                raise self._limit_error(self._armed)

    def next(self) -> tuple[Claimed, float] | None:
        self._current = None
        job = self._jobs.get()
        cancelled = threading.Event()
        self.went_off = False
        with self._lock:
            if job is not None and job[0].id in self._cancels:
                self._cancels.discard(job[0].id)
                cancelled.set()
            self.cancelled = cancelled
            self._current = None if job is None else job[0].id
        return job

    def _read(self) -> None:
        try:
            while True:
                if self._conn.poll(PROGRESS_EVERY):
                    kind, value = self._conn.recv()
                    if kind == "run":
                        self._jobs.put(task_in(value))
                    elif kind == "beat":
                        self._beats.put(value)  # (its number, whether the lease holds)
                    elif kind == "cancel":
                        self._cancel(value)
                    elif kind == "exit":
                        self._jobs.put(None)
                self._pass_progress()
        except (EOFError, OSError):
            os._exit(ORPHANED)  # the parent is gone, and with it the task's lease

    def _cancel(self, task_id: uuid.UUID) -> None:
        with self._lock:
            if task_id == self._current:
                self.cancelled.set()
            else:
                self._cancels.add(task_id)

    def wake(self, ready: list[tuple[str, Inserted]]) -> None:
        """Have the parent wake the children a step started (committed)."""
        self.send(("wake", ready_out(ready)))

    def heartbeat(self) -> bool:
        """``ctx.heartbeat()``: the parent extends the lease and says if it still holds."""
        with self._beat_lock:
            self._beat += 1
            self.send(("beat", (self._beat, self._current)))
            deadline = time.monotonic() + BEAT_WAIT
            while (left := deadline - time.monotonic()) > 0:
                try:
                    number, holds = self._beats.get(timeout=left)
                except queue.Empty:
                    break
                if number == self._beat:
                    return bool(holds)
            return False

    def report(self, text: str) -> None:
        self._progress = (self._current, text)

    def _pass_progress(self) -> None:
        reported, self._progress = self._progress, None
        if reported is not None:
            self.send(("progress", reported))

    @contextlib.contextmanager
    def limited(self, seconds: float | None) -> Iterator[None]:
        """The handler's call, interrupted by TimeLimitError once it has run ``seconds``."""
        if seconds is None:
            yield
            return
        self._armed = seconds
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            yield
        finally:
            self._armed = None  # first: a signal from here on comes too late to count
            signal.setitimer(signal.ITIMER_REAL, 0)

    def time_limit(self, signum: int, frame: FrameType | None) -> None:
        seconds = self._armed
        if seconds is None:
            return
        self.went_off = True
        if self._sending:  # not between a message's header and its body
            self._deferred = True
            return
        raise self._limit_error(seconds)

    @staticmethod
    def _limit_error(seconds: float) -> TimeLimitError:
        return TimeLimitError(f"time limit exceeded: interrupted at its time_limit of {seconds:g}s")


class _Forward(logging.Handler):
    """The child's log records, to the parent's logging (its format, its handlers), with
    the running task's fields set here."""

    def __init__(self, channel: Channel, worker_id: str) -> None:
        super().__init__()
        self._channel = channel
        self.addFilter(TaskLogFilter(worker_id))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields = dict(record.__dict__)
            fields["msg"], fields["args"] = record.getMessage(), None
            if record.exc_info:  # a traceback does not cross a pipe: its text does
                fields["exc_text"] = logging.Formatter().formatException(record.exc_info)
            fields["exc_info"] = None
            self._channel.send(("log", fields))
        except TimeLimitError:
            raise  # the handler's, not the log's
        except Exception:
            self.handleError(record)
