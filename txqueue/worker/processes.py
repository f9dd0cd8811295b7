"""The process pool (``pool="processes"``): each handler thread of ``Handlers`` hands its
tasks to a child process of its own and hands their ends on, so the parent keeps the
claims, leases, heartbeats and outcomes it keeps with threads, and every promise holds as
it does there. A child that crashes, or overruns its time limit, costs that attempt, never
the worker; one that ran its share of tasks or memory makes way for a fresh one."""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import sys
import threading
import time
from typing import Any, Generic, Unpack

from ..errors import ConfigError, PermanentError, TaskError, TimeLimitError, WorkerError
from ..store.protocols import Own
from ..tasks.registry import Registry
from .attempts import Ended
from .board import Running
from .child import Recycle, end_in, ready_in
from .children import START_TIMEOUT, Child, forward_log, how_ended
from .handlers import Handlers, Wiring
from .outcomes import failed
from .supervisor import Supervisor

log = logging.getLogger("txqueue.worker")

KILL_GRACE = 3.0
"""Seconds past its time limit a child has to end its attempt itself (its handler is
interrupted at the limit) before it is killed."""
DEPTH = 32
"""Tasks a child is sent at most: the one it runs, and as many as it is expected to start
within the claims' horizon (``Board.in_turn``: short tasks only), which it starts without
waiting for the round trip to its parent (a few hundred microseconds on a small VM)."""
LOOK_EVERY = 0.2
"""Seconds between a waiting handler thread's looks at its task's cancel flag and time."""


def locate(registry: Registry) -> str:
    """``module:attribute`` where a child finds ``registry``: where ``txqueue worker
    --app`` loaded it from, else a global of an importable module that is it (or an App of
    it). ConfigError if there is none."""
    if registry.loaded_from is not None:
        return registry.loaded_from
    names = {d.fn.__module__ for d in registry}
    for name, module in sorted(sys.modules.items(), key=lambda m: m[0] not in names):
        if name == "__main__" or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if value is registry or _registry_of(value) is registry:
                return f"{name}:{attr}"
    raise ConfigError(
        "pool: a process pool's children import the registry by name: make it a global "
        "of a module they can import (not a local one, nor a script's run as __main__)"
    )


def _registry_of(value: object) -> object:
    """The registry of a txqueue.App (which this layer does not import); None for anything
    else, whose attributes are not looked into (a proxy may raise, pytest.mark makes one)."""
    return getattr(value, "registry", None) if type(value).__module__ == "txqueue.app" else None


class Processes(Handlers[Own], Generic[Own]):
    """``Handlers`` whose threads each run their tasks in a child process. A thread sends
    its child the next tasks while the current one runs, when there are some (tasks
    claimed ahead: short ones), so that a child does not wait for the round trip to its
    parent between them."""

    def __init__(
        self,
        size: int,
        *,
        spec: str,
        database_url: str,
        recycle: Recycle,
        **wiring: Unpack[Wiring[Own]],
    ) -> None:
        super().__init__(size, **wiring)
        self.name = "txqueue-processes"
        self._spec = spec
        self._database_url = database_url
        self._recycle = recycle
        self._children: list[Child | None] = [None] * size
        self._started = [threading.Event() for _ in range(size)]
        self._killing = False  # stopping with tasks still running: they are released

    def start(self, supervisor: Supervisor) -> None:
        """Start the children (each from its handler thread), and wait for them: a task
        claimed before would wait for its child to import the application."""
        super().start(supervisor)
        deadline = time.monotonic() + START_TIMEOUT
        for started in self._started:
            started.wait(max(0.0, deadline - time.monotonic()))

    def stop(self) -> None:
        super().stop()
        if self._board.busy():  # the shutdown timeout, or a stop now: the recorder
            self._killing = True  # releases those tasks, so nothing may go on running them
            for c in self._children:
                if c is not None:
                    c.kill()

    def _work(self, i: int) -> None:
        try:
            self._start_child(i)  # ready before its first task comes
        finally:
            self._started[i].set()
        try:
            self._serve(i)
        finally:
            self._retire(i, "the worker stopped")

    def _serve(self, i: int) -> None:
        """Hand tasks to child ``i`` and their ends on, until the pool stops."""
        closing = False
        while True:
            c = self._children[i]
            if closing and (c is None or not c.sent):
                return
            if c is None or (not c.sent and c.ended()):  # none, or it died idle: no cost
                if c is not None:
                    self._retire(i, how_ended(c.reap()))
                c = self._start_child(i)
            try:
                if not c.sent:
                    job = self._jobs.get()
                    if job is None:
                        return
                    self._hand(c, job)
                while len(c.sent) < min(DEPTH, 1 + self._board.in_turn()) and not closing:
                    try:
                        job = self._jobs.get_nowait()
                    except queue.Empty:
                        break
                    if job is None:
                        closing = True
                    else:
                        self._hand(c, job)
                self._board.busy_since[i] = c.began  # claims ahead read it
                self._await(i, c)
                if not c.sent:
                    self._board.busy_since[i] = 0.0
            except Exception as exc:  # a task left in hand would keep its lease forever
                log.exception("pool process %s: the worker failed around it", c.pid)
                self._abandon(i, c, exc)

    def _hand(self, c: Child, job: Running) -> None:
        took = time.monotonic()
        waited = job.task.waited + took - job.started
        if not job.task.expired:  # the child fails it without starting it
            self._board.telemetry.started(job.task, waited)
        try:
            c.send(job, waited)
        except OSError:
            c.sent.append((job, waited))  # its end is seen next: the attempt fails with it

    def _await(self, i: int, c: Child) -> None:
        """Serve child ``i`` until the task it runs ends (its heartbeats, progress and
        logs; a cancel; its time limit), and hand that end on."""
        job, _ = c.sent[0]
        task = job.task
        while True:
            try:
                if c.ready(LOOK_EVERY):
                    kind, value = c.conn.recv()
                    if kind == "done":
                        return self._done(i, c, *value)
                    self._answer(c, kind, value)
                elif c.ended():
                    return self._lost(i, c)
            except (EOFError, OSError):
                return self._lost(i, c)
            # Looked at after every message too: a child that logs without a pause must
            # not escape its cancel or its time limit.
            for waiting, _ in c.sent:
                if waiting.cancelled.is_set() and waiting.task.id not in c.told_cancel:
                    c.told_cancel.add(waiting.task.id)
                    c.conn.send(("cancel", waiting.task.id))
            limit = task.time_limit
            if limit is not None and time.monotonic() - c.began > limit + KILL_GRACE:
                c.kill()
                return self._lost(
                    i,
                    c,
                    TimeLimitError(
                        f"time limit exceeded: still running {KILL_GRACE:g}s past its "
                        f"time_limit of {limit:g}s: its process was killed"
                    ),
                )

    def _done(
        self, i: int, c: Child, task_id: bytes, wire: tuple[Any, ...], retire: str | None
    ) -> None:
        job, _ = c.sent.popleft()
        assert job.task.id.bytes == task_id, "a child ends its tasks in the order it was sent"
        ended = end_in(wire)
        c.told_cancel.discard(task_id)
        self._ran(job, c.began)
        c.began = time.monotonic()  # the next one, if it was sent, starts now
        self._record(job, ended)
        if retire:
            self._retire(i, retire)  # what it was sent and did not start goes to the next

    def _answer(self, c: Child, kind: str, value: Any) -> None:
        jobs = {job.task.id: job for job, _ in c.sent}
        if kind == "beat":
            number, task_id = value
            running = jobs.get(task_id)
            alive = running is not None and self._heartbeat(running.task)
            c.conn.send(("beat", (number, alive)))
        elif kind == "progress" and value[0] in jobs:
            jobs[value[0]].report(value[1])
        elif kind == "log":
            forward_log(value)
        elif kind == "wake":
            self._readied(ready_in(value), [])

    def _lost(self, i: int, c: Child, exc: BaseException | None = None) -> None:
        """Child ``i`` died (or was killed: ``exc``) running its first task: that attempt
        fails with how; those it had not started go to the next child. At shutdown the
        one it ran is left for the recorder to release."""
        how = how_ended(c.reap())
        job, _ = c.sent.popleft()
        self._retire(i, how)
        if self._killing:
            return
        if exc is None:
            log.warning("task %s %s: the process running it %s", job.task.name, job.task.id, how)
            exc = TaskError(f"the process running it {how}")
        self._ran(job, c.began)
        self._record(job, self._failed(job, exc))

    def _abandon(self, i: int, c: Child, exc: Exception) -> None:
        """The worker failed around child ``i`` (not its handler): the attempt it ran
        fails with the reason, and the child is replaced."""
        c.kill()
        if c.sent:
            job, _ = c.sent.popleft()
            self._ran(job, c.began)
            self._record(job, self._failed(job, TaskError(f"the worker failed: {exc!r:.200}")))
        self._retire(i, "the worker failed around it")

    def _ran(self, job: Running, began: float) -> None:
        seconds = time.monotonic() - began
        self._board.telemetry.ran(job.task, seconds)
        self._board.ran(seconds)

    def _failed(self, job: Running, exc: BaseException) -> Ended:
        task = job.task
        definition = self._registry.get(task.name)
        return Ended(failed(task, self._worker_id, definition, exc, False, job.progress))

    def _start_child(self, i: int) -> Child:
        """A new child for handler thread ``i``, started from this thread: a child dies
        with the thread that started it, and this one lives as long as the pool.
        PermanentError if it cannot import the registry, WorkerError if it fails to start
        otherwise."""
        c = self._children[i] = Child.start()
        options = {
            "spec": self._spec,
            "names": sorted(d.name for d in self._registry),
            "worker_id": self._worker_id,
            "database_url": self._database_url,
            "parent": os.getpid(),
            "recycle": self._recycle,
            "log_level": logging.getLogger().getEffectiveLevel(),
        }
        try:
            c.handshake(options)
        except (PermanentError, WorkerError):
            self._children[i] = None
            c.kill()
            c.close()
            raise
        return c

    def _retire(self, i: int, why: str) -> None:
        """Let child ``i`` leave (killed if it does not within a few seconds). The tasks
        it was sent and did not start go to a fresh child, or back to pending when the
        pool is stopping."""
        c, self._children[i] = self._children[i], None
        if c is None:
            return
        log.debug("pool process %s leaves: %s", c.pid, why)
        with contextlib.suppress(OSError):
            c.conn.send(("exit", None))
        if c.reap() is None:
            c.kill()
        c.close()
        if not c.sent:
            return
        if self._stopped or self._killing:
            self._board.give_back([job.task for job, _ in c.sent])
            return
        try:
            fresh = self._start_child(i)
        except WorkerError:
            self._board.give_back([job.task for job, _ in c.sent])
            raise
        for job, waited in c.sent:
            fresh.send(job, waited)
