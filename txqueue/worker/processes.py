"""The process pool (``pool="processes"``): each handler thread of ``Handlers`` hands its
task to a child process of its own and waits for its end, so the parent keeps the claims,
leases, heartbeats and outcomes it keeps with threads, and every promise holds as it does
there. A child that crashes, or overruns its time limit, costs that attempt, never the
worker; one that ran its share of tasks or memory makes way for a fresh one."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Connection, wait
from typing import Any, Generic

from ..errors import ConfigError, TaskError, TimeLimitError, WorkerError
from ..registry import Registry
from ..store.protocols import Own
from ..store.records import Claimed
from .atomic import Atomic
from .attempts import Ended, Settled
from .board import Board, Freed, Inbox, Running
from .child import Recycle
from .handlers import Handlers
from .outcomes import failed
from .supervisor import Supervisor

log = logging.getLogger("txqueue.worker")

KILL_GRACE = 3.0
"""Seconds past its time limit a child has to end its attempt itself (its handler is
interrupted at the limit) before it is killed."""
START_TIMEOUT = 60.0
"""Seconds a child has to import the registry and say it is ready."""
_RUN = "from txqueue.worker.child import run; run()"
LOOK_EVERY = 0.2
"""Seconds between a waiting handler thread's looks at its task's cancel flag and time."""


def locate(registry: Registry) -> str:
    """``module:attribute`` where a child finds ``registry``: a global of an importable
    module that is it (or an App of it). ConfigError if there is none."""
    names = {d.fn.__module__ for d in registry}
    for name, module in sorted(sys.modules.items(), key=lambda m: m[0] not in names):
        if name == "__main__" or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if value is registry or getattr(value, "registry", None) is registry:
                return f"{name}:{attr}"
    raise ConfigError(
        "pool: a process pool's children import the registry by name: make it a global "
        "of a module they can import (not a local one, nor a script's run as __main__)"
    )


class _Child:
    """A child process, and the parent's end of the socket pair to it."""

    def __init__(self, process: subprocess.Popen[bytes], conn: Connection) -> None:
        self.process, self.conn, self.pid = process, conn, process.pid
        self.tasks = 0
        try:  # readable once the child has ended (Linux): waited on with its messages
            self.sentinel: int | None = os.pidfd_open(process.pid)
        except (AttributeError, OSError):
            self.sentinel = None

    def waitables(self) -> list[Any]:
        return [self.conn] if self.sentinel is None else [self.conn, self.sentinel]

    def ended(self) -> bool:
        return self.process.poll() is not None

    def reap(self, timeout: float = 5.0) -> int | None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout)
        return self.process.returncode

    def close(self) -> None:
        self.conn.close()
        if self.sentinel is not None:
            os.close(self.sentinel)
            self.sentinel = None


class Processes(Handlers[Own], Generic[Own]):
    """``Handlers`` whose threads each run their tasks in a child process."""

    def __init__(
        self,
        size: int,
        registry: Registry,
        worker_id: str,
        board: Board,
        *,
        heartbeat: Callable[[Claimed], bool],
        claimer: Inbox[Freed],
        atomic: Atomic[Own],
        shutdown_timeout: float,
        stop_now: threading.Event,
        spec: str,
        database_url: str,
        recycle: Recycle,
    ) -> None:
        super().__init__(
            size,
            registry,
            worker_id,
            board,
            heartbeat=heartbeat,
            claimer=claimer,
            atomic=atomic,
            shutdown_timeout=shutdown_timeout,
            stop_now=stop_now,
        )
        self.name = "txqueue-processes"
        self._spec = spec
        self._overruns = None  # a child stops at its time limit, or is killed
        self._database_url = database_url
        self._recycle = recycle
        self._children: list[_Child | None] = [None] * size
        self._started = [threading.Event() for _ in range(size)]
        self._killing = False  # stopping with tasks still running: they are released

    def pids(self) -> list[int]:
        """The children's process ids, as they are now."""
        return [c.pid for c in self._children if c is not None]

    def stop(self) -> None:
        super().stop()
        if self._board.busy():  # the shutdown timeout, or a stop now: the recorder
            self._killing = True  # releases those tasks, so nothing may go on running them
            for c in self._children:
                if c is not None:
                    _kill(c)

    def start(self, supervisor: Supervisor) -> None:
        """Start the children (each from its handler thread), and wait for them: a task
        claimed before would wait for its child to import the application."""
        super().start(supervisor)
        deadline = time.monotonic() + START_TIMEOUT
        for started in self._started:
            started.wait(max(0.0, deadline - time.monotonic()))

    def _work(self, i: int) -> None:
        try:
            self._start_child(i)  # ready before its first task comes
        finally:
            self._started[i].set()
        try:
            super()._work(i)
        finally:
            self._retire(i, "the worker stopped")

    def _execute(self, thread: int, job: Running, waited: float) -> None:
        super()._execute(thread, job, waited)
        if self._children[thread] is None and not self._stopped:
            self._start_child(thread)  # the one that ended or left, replaced at once

    def _attempt(self, thread: int, job: Running, waited: float) -> Ended | Settled | None:
        task = job.task
        c = self._children[thread] or self._start_child(thread)
        self._board.telemetry.started(task, waited)
        try:
            c.conn.send(("run", (task, waited)))
            return self._await(thread, c, job)
        except (EOFError, OSError):
            return self._lost(thread, c, job)

    def _await(self, thread: int, c: _Child, job: Running) -> Ended | Settled | None:
        """Serve the child while it runs ``job``: its heartbeats, progress and logs; tell it
        of a cancel; kill it past its time limit and the grace. How the attempt ended."""
        task, began = job.task, time.monotonic()
        told_cancel = False
        while True:
            if wait(c.waitables(), LOOK_EVERY) and c.conn.poll():
                kind, value = c.conn.recv()  # EOFError once it has ended
                if kind == "done":
                    ended, retire = value
                    c.tasks += 1
                    if retire:
                        self._retire(thread, retire)
                    return ended  # type: ignore[no-any-return]
                self._serve(c, job, kind, value)
                continue
            if c.ended():
                return self._lost(thread, c, job)
            if job.cancelled.is_set() and not told_cancel:
                c.conn.send(("cancel", task.id))
                told_cancel = True
            limit = task.time_limit
            if limit is not None and time.monotonic() - began > limit + KILL_GRACE:
                _kill(c)
                self._children[thread] = None
                return self._failed(
                    job,
                    TimeLimitError(
                        f"time limit exceeded: still running {KILL_GRACE:g}s past its "
                        f"time_limit of {limit:g}s: its process was killed"
                    ),
                )

    def _serve(self, c: _Child, job: Running, kind: str, value: Any) -> None:
        if kind == "beat":
            c.conn.send(("beat", self._heartbeat(job.task)))
        elif kind == "progress":
            job.report(value)
        elif kind == "log":
            _log(value)

    def _lost(self, thread: int, c: _Child, job: Running) -> Ended | None:
        """The child died mid-attempt: the attempt fails with how (and a fresh child comes
        for the next task); at shutdown, the task is left for the recorder to release."""
        how = _how(c.reap())
        c.close()
        self._children[thread] = None
        if self._killing:
            return None
        log.warning("task %s %s: the process running it %s", job.task.name, job.task.id, how)
        return self._failed(job, TaskError(f"the process running it {how}"))

    def _failed(self, job: Running, exc: BaseException) -> Ended:
        task = job.task
        outcome = failed(task, self._worker_id, self._registry.get(task.name), exc, False)
        if job.progress is not None:
            outcome = replace(outcome, progress=job.progress)
        return Ended(outcome)

    def _start_child(self, i: int) -> _Child:
        """A new child for handler thread ``i``, started from this thread: a child dies
        with the thread that started it (PR_SET_PDEATHSIG), and this one lives as long as
        the pool. WorkerError if it cannot import the registry."""
        ours, theirs = socket.socketpair()
        with ours, theirs:
            process = subprocess.Popen(
                [sys.executable, "-c", _RUN, str(theirs.fileno())],
                pass_fds=[theirs.fileno()],
                stdin=subprocess.DEVNULL,
            )
            c = self._children[i] = _Child(process, Connection(ours.detach()))
        options = {
            "sys_path": sys.path,
            "spec": self._spec,
            "worker_id": self._worker_id,
            "database_url": self._database_url,
            "parent": os.getpid(),
            "recycle": self._recycle,
            "log_level": logging.getLogger().getEffectiveLevel(),
        }
        try:
            c.conn.send(("start", options))
            deadline = time.monotonic() + START_TIMEOUT
            while wait(c.waitables(), max(0.0, deadline - time.monotonic())):
                kind, value = c.conn.recv()
                if kind == "ready":
                    return c
                if kind == "failed":
                    failure = f"could not start: {value}"
                    break
                _log(value)
            else:
                failure = f"did not start within {START_TIMEOUT:g}s"
        except (EOFError, OSError):
            failure = f"{_how(c.reap())} as it started"
        self._children[i] = None
        _kill(c)
        c.close()
        raise WorkerError(f"a pool process {failure}")

    def _retire(self, i: int, why: str) -> None:
        """Let child ``i`` leave (killed if it does not within a few seconds)."""
        c, self._children[i] = self._children[i], None
        if c is None:
            return
        log.debug("pool process %s leaves: %s", c.pid, why)
        with contextlib.suppress(OSError):
            c.conn.send(("exit", None))
        if c.reap() is None:
            _kill(c)
        c.close()


def _log(record: dict[str, Any]) -> None:
    """A child's log record, to this process's logging."""
    rebuilt = logging.makeLogRecord(record)
    logging.getLogger(rebuilt.name).handle(rebuilt)


def _kill(c: _Child) -> None:
    with contextlib.suppress(ProcessLookupError):
        c.process.kill()
    c.reap()


def _how(code: int | None) -> str:
    """How a child ended, for the attempt's error."""
    if code is None:
        return "stopped answering"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}" + (" (out of memory?)" if -code == signal.SIGKILL else "")
    return f"exited with status {code}"
