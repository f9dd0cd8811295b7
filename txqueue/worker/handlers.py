"""The handler pool: ``size`` threads running claimed tasks, one event loop for
``async def`` handlers, and an outcome for every run, whatever the handler does."""

from __future__ import annotations

import asyncio
import functools
import logging
import queue
import threading
import time
from collections.abc import Callable, Coroutine
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Generic, TypedDict, Unpack

from ..core.task import SUCCEEDED
from ..store.protocols import Own
from ..store.records import Claimed
from ..tasks.registry import Registry
from .atomic import Atomic, Ready
from .attempts import Ended, Settled, run_attempt
from .board import Board, Running
from .messages import Done, Freed, Inbox, drain
from .outcomes import context
from .overruns import Overruns
from .supervisor import Supervisor

log = logging.getLogger("txqueue.worker")


class _Escaped(Exception):
    """SystemExit or KeyboardInterrupt from an async handler, carried out of the event loop
    as an ordinary exception: raised as it is, it would stop the loop every other async
    handler runs on."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__()
        self.exc = exc


async def _contained(coro: Coroutine[Any, Any, Any]) -> Any:
    # Runs in a copy of the handler thread's context (``call_soon_threadsafe`` takes one),
    # so the attempt's span and log fields are current in the coroutine too.
    try:
        return await coro
    except (SystemExit, KeyboardInterrupt) as exc:
        raise _Escaped(exc) from None


class Wiring(TypedDict, Generic[Own]):
    """What a handler pool is wired to, whichever pool it is: the registry it runs, the
    worker it runs for and its board, the lease keeper's heartbeat, the claimer's inbox,
    the atomic tasks' connections and where the steps their successes ready are woken,
    and how it stops."""

    registry: Registry
    worker_id: str
    board: Board
    heartbeat: Callable[[Claimed], bool]
    claimer: Inbox[Freed]
    atomic: Atomic[Own]
    readied: Callable[[Ready, list[Claimed]], object]
    shutdown_timeout: float
    stop_now: threading.Event


class Handlers(Generic[Own]):
    """Runs what the claimer hands over on ``size`` supervised threads, in the order it
    came; tasks claimed ahead of the free threads wait here for the next one. A worker
    part: stopping it gives back the tasks not started and lets the running ones finish,
    for up to ``shutdown_timeout`` seconds (not at all once ``stop_now`` is set).

    Lighter than a ThreadPoolExecutor, which spends a Future and twice the time per task
    (about 11 against 5 µs): with short tasks that is a good part of a worker's CPU.
    """

    def __init__(self, size: int, **wiring: Unpack[Wiring[Own]]) -> None:
        self.name = "txqueue-handlers"
        registry, worker_id, board = wiring["registry"], wiring["worker_id"], wiring["board"]
        self._size = size
        self._stopped = False
        self._shutdown_timeout = wiring["shutdown_timeout"]
        self._stop_now = wiring["stop_now"]
        self._registry = registry
        atomic = self._atomic = wiring["atomic"]
        self._atomic_runs = [functools.partial(atomic.run, i) for i in range(size)]
        self._worker_id = worker_id
        self._board = board
        self._heartbeat = wiring["heartbeat"]
        self._readied = wiring["readied"]
        self._claimer = wiring["claimer"]  # told of each free thread, and when a retry is due
        self._jobs: queue.SimpleQueue[Running | None] = queue.SimpleQueue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._loop_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._overruns = Overruns(board, registry, worker_id)

    def start(self, supervisor: Supervisor) -> None:
        self._threads = [
            supervisor.thread(f"txqueue-handler_{i}", functools.partial(self._work, i))
            for i in range(self._size)
        ]

    def stop(self) -> None:
        """Give back what was handed over and not started (the claimer has stopped), wait
        for the running tasks, then end each thread once its current task is done."""
        self._stopped = True
        self._board.give_back(self._withdraw())
        deadline = time.monotonic() + self._shutdown_timeout
        while self._board.busy() and not self._stop_now.is_set():
            if time.monotonic() > deadline:
                log.warning("shutdown timeout: %d tasks still running", self._board.busy())
                break
            time.sleep(0.01)
        for _ in self._threads:
            self._jobs.put(None)

    def join(self, timeout: float) -> str | None:
        """The threads still running a task keep it (a shutdown timeout): they are not
        waited for, and their atomic connections stay open until they finish."""
        self._close_event_loop()
        if not self._board.busy():
            self._atomic.close()
        return None

    def dead(self) -> list[str]:
        """Handler threads given up on by the supervisor."""
        lost = sum(1 for t in self._threads if not t.is_alive())
        return [f"{lost} handler threads"] if lost and not self._stopped else []

    def submit(self, running: Running) -> None:
        self._jobs.put(running)

    def _withdraw(self) -> list[Claimed]:
        """Take back the tasks handed over and not started yet."""
        return [job.task for job in drain(self._jobs)]

    def _close_event_loop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None or self._loop_thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        self._loop_thread.join(timeout=10)
        if not loop.is_running():
            loop.close()

    def _work(self, i: int) -> None:
        busy_since, telemetry = self._board.busy_since, self._board.telemetry
        while (job := self._jobs.get()) is not None:
            busy_since[i] = took = time.monotonic()
            task = job.task
            try:
                self._execute(i, job, task.waited + took - job.started)
                telemetry.ran(task, time.monotonic() - took)
            except BaseException:  # a thread lost here would shrink the pool for good
                log.exception("task %s: the worker failed around its handler", task.id)
            busy_since[i] = 0.0
            self._board.ran(time.monotonic() - took)

    def _execute(self, thread: int, job: Running, waited: float) -> None:
        task = job.task
        ended = self._attempt(thread, job, waited)
        if self._overruns.ended(job):
            log.warning(
                "task %s %s: its handler ended after its time limit; what it returned is "
                "dropped (the attempt was failed at the limit)",
                task.name,
                task.id,
            )
            self._board.overrun(-1)
            self._claimer.put(Freed())
            return
        self._record(job, ended)

    def _record(self, job: Running, ended: Ended | Settled) -> None:
        """Hand ``job``'s end on: to the recorder (or counted, when its handler wrote it),
        and tell the claimer that a slot is free."""
        task = job.task
        if isinstance(ended, Settled):
            self._board.settle(task, SUCCEEDED if ended.outcome else "fenced_out")
            if ended.ready:
                self._readied(list(ended.ready), [])
        else:
            self._board.finish(Done(ended.outcome, task, ended.reason))
        self._claimer.put(Freed())

    def _woken(self, ready: Ready) -> None:
        """Wake the children a handler's step started (committed)."""
        self._readied(ready, [])

    def _attempt(self, thread: int, job: Running, waited: float) -> Ended | Settled:
        """Run ``job``'s attempt on this handler thread; how it ended."""
        task = job.task
        ctx = context(
            task,
            self._worker_id,
            lambda: self._heartbeat(task),
            job.cancelled,
            report=job.report,
            journal=self._atomic.journal(thread, task, self._worker_id, self._woken),
        )
        run_async = self._run_async
        guard: Callable[[], AbstractContextManager[object]] = nullcontext
        if task.time_limit is not None:
            self._overruns.watch(job)
            run_async = functools.partial(self._run_async, job=job)
            guard = functools.partial(self._overruns.checked, job)
        return run_attempt(
            self._registry.get(task.name),
            task,
            ctx,
            atomic=self._atomic_runs[thread],
            run_async=run_async,
            started=self._board.telemetry.started,
            waited=waited,
            guard=guard,
        )

    def _run_async(self, coro: Coroutine[Any, Any, Any], job: Running | None = None) -> Any:
        """On the event loop all async handlers share, from this handler thread; ``job``'s,
        if given, may be cancelled at its time limit."""
        future = asyncio.run_coroutine_threadsafe(_contained(coro), self._event_loop())
        if job is not None:
            job.halt = future.cancel
        try:
            return future.result()
        except _Escaped as escaped:
            raise escaped.exc from None

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        with self._loop_lock:
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
