"""Waiting for a task to finish: ``wait`` and ``wait_async``.

Given a PostgreSQL URL, the waiter listens on a connection of its own for the ids that
outcome writes and cancellations notify when they commit, and reads the task again when
one names it, or each second whatever comes (the cleaner's recoveries notify nothing).
Given the application's connection, a URL through a transaction pooler (``?pgbouncer=true``:
a LISTEN there holds no session), or on SQLite, it reads the task again after a pause that
grows from 5 ms to half a second.

A waiter given a URL outlives its connection: lost (a database restarting, a failover to
a standby), it is opened again, and the wait goes on until the task finishes or the time
is up.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import math
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from .. import config
from ..backoff import reconnect_delay
from ..core.stored import Progress, TaskInfo
from ..core.task import CANCELLED, FAILED, SUCCEEDED
from ..errors import (
    InvalidTypeError,
    InvalidValueError,
    StoreError,
    TaskNotFoundError,
    WaitTimeoutError,
)
from ..store import PostgresStore, serving
from ..store.connections import bind, bind_async
from ..store.postgres import pooled
from ..store.postgres import waiting as pg_waiting
from ..store.postgres.aio import AsyncPostgresStore
from ..store.postgres.aio_conns import PsycopgAsync
from ..store.protocols import AnyStore, Manage, Own
from ..store.roles import Waiting
from .manage import task_id_of

log = logging.getLogger("txqueue.wait")
FINISHED = frozenset({SUCCEEDED, FAILED, CANCELLED})
FALLBACK = 1.0  # seconds between reads while listening
FIRST_PAUSE, MAX_PAUSE = 0.005, 0.5  # between reads while polling
OnProgress = Callable[[Progress], object]
"""``on_progress``: told each new ``Progress`` the wait reads."""


class _Waiter:
    """One wait's clock and verdicts, shared by the sync and async loops."""

    def __init__(
        self, task_id: object, timeout: float | None, on_progress: OnProgress | None = None
    ) -> None:
        if timeout is not None and (
            isinstance(timeout, bool)
            or not isinstance(timeout, int | float)
            or not timeout >= 0  # NaN too
        ):
            raise InvalidValueError(
                "timeout", f"must be None or a number of seconds >= 0, got {timeout!r}"
            )
        self.id = task_id_of(task_id)
        self.timeout = timeout
        self.deadline = math.inf if timeout is None else time.monotonic() + timeout
        self.pause = FIRST_PAUSE
        self.failures = 0  # connections lost or refused since the last read
        self.state = "unknown"  # as last read
        if on_progress is not None and (
            not callable(on_progress) or inspect.iscoroutinefunction(on_progress)
        ):
            raise InvalidTypeError("on_progress", "must be a plain function, given a Progress")
        self.on_progress = on_progress
        self.progress: Progress | None = None  # as last told

    def left(self, info: TaskInfo | None) -> float:
        """0 when ``info`` is finished; otherwise the seconds to wait before the next read
        (raising once the time is up)."""
        if info is None:
            raise TaskNotFoundError(
                f"no task {self.id} (never enqueued, rolled back, not committed yet, or pruned)"
            )
        self.failures, self.state = 0, info.state
        if self.on_progress is not None and info.progress not in (None, self.progress):
            self.progress = info.progress
            self.on_progress(info.progress)
        if info.state in FINISHED:
            return 0.0
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeoutError(
                f"task {self.id} is still {info.state} after {self.timeout:g}s", info.state
            )
        return left

    def next_pause(self, left: float) -> float:
        pause, self.pause = self.pause, min(self.pause * 2, MAX_PAUSE)
        return min(pause, left)

    def reconnect_in(self, exc: StoreError, lost: bool) -> float:
        """The pause before opening a lost connection again; raises ``exc`` if it was not
        lost (the database refused a statement), WaitTimeoutError if the time is up first."""
        if not lost:
            raise exc
        self.failures += 1
        if self.failures == 1:
            log.warning("wait for task %s: %s; reconnecting", self.id, exc)
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise WaitTimeoutError(
                f"task {self.id} was {self.state} when last read; the database was out of "
                f"reach when the {self.timeout:g}s were up ({exc})",
                self.state,
            ) from exc
        return min(reconnect_delay(self.failures, first=0.1, cap=1.0), left)


def wait(
    conn_or_url: Any,
    task_id: uuid.UUID | str,
    timeout: float | None = None,
    *,
    on_progress: OnProgress | None = None,
) -> TaskInfo:
    """Block until the task is succeeded, failed or cancelled, and return it as stored.

    ``conn_or_url``: a database URL (on PostgreSQL, the prompt way: a connection of its
    own listens for the outcome) or any connection ``enqueue`` takes, whose transaction
    the reads join (so under REPEATABLE READ they would never see the outcome). Raises
    WaitTimeoutError (a TimeoutError) after ``timeout`` seconds, TaskNotFoundError if
    there is no such task. ``on_progress`` is called with the task's ``Progress`` each
    time a read finds a new one (the worker writes it at most once a second; the wait
    reads the task at least that often), on the waiting thread, its exceptions raised.

    Example:

    ```python
    info = txqueue.wait(url, task_id, timeout=30)  # the task as stored, once it has ended
    print(info.state, info.result, info.errors[-1]["message"])  # failed None card declined
    ```
    """
    return wait_by(conn_or_url, task_id, timeout, on_progress=on_progress)


def wait_by(
    conn_or_url: Any,
    task_id: uuid.UUID | str,
    timeout: float | None = None,
    store: AnyStore | None = None,
    *,
    on_progress: OnProgress | None = None,
) -> TaskInfo:
    """``wait`` through a configuration's own store (None: the default of its kind)."""
    waiter = _Waiter(task_id, timeout, on_progress)
    if not isinstance(conn_or_url, str):
        bound = bind(conn_or_url, store)
        return _poll(waiter, lambda: bound(Manage.get_task, waiter.id))
    url = config.database_url(conn_or_url)
    store = serving(url, store)
    while True:
        try:
            return _wait_on(waiter, store, url)
        except StoreError as exc:
            time.sleep(waiter.reconnect_in(exc, store.is_connection_error(exc)))


def _wait_on(waiter: _Waiter, store: Waiting[Own], url: str) -> TaskInfo:
    """Wait on one connection of the waiter's own, until it is lost."""
    conn = store.connect(url, application_name="txqueue-wait")
    try:
        # Behind a transaction pooler a LISTEN holds no session: no notification comes.
        listens = not pooled(url)
        wait_finished = store.listen_finished(conn) if listens else None
        if wait_finished is None:
            return _poll(waiter, lambda: store.get_task(conn, waiter.id))
        while left := waiter.left(info := store.get_task(conn, waiter.id)):
            wait_finished(waiter.id, min(left, FALLBACK))
        assert info is not None
        return info
    finally:
        conn.close()


def _poll(waiter: _Waiter, read: Callable[[], TaskInfo | None]) -> TaskInfo:
    while left := waiter.left(info := read()):
        time.sleep(waiter.next_pause(left))
    assert info is not None
    return info


async def wait_async(
    conn_or_url: Any,
    task_id: uuid.UUID | str,
    timeout: float | None = None,
    *,
    on_progress: OnProgress | None = None,
) -> TaskInfo:
    """``wait`` for asyncio: a URL, or any connection ``enqueue_async`` takes.
    ``on_progress`` is called on the event loop's thread, or, polling SQLite or a pooled
    URL, on the thread that polls.

    Example:

    ```python
    info = await txqueue.wait_async(url, task_id, timeout=30)
    ```
    """
    return await wait_async_by(conn_or_url, task_id, timeout, on_progress=on_progress)


async def wait_async_by(
    conn_or_url: Any,
    task_id: uuid.UUID | str,
    timeout: float | None = None,
    store: AnyStore | None = None,
    *,
    on_progress: OnProgress | None = None,
) -> TaskInfo:
    """``wait_async`` through a configuration's own store (None: the default of its kind)."""
    waiter = _Waiter(task_id, timeout, on_progress)
    if not isinstance(conn_or_url, str):
        bound = await bind_async(conn_or_url, store)
        return await _poll_async(waiter, lambda: bound(Manage.get_task, waiter.id))
    url = config.database_url(conn_or_url)
    store = serving(url, store)
    if not isinstance(store, PostgresStore) or pooled(url):  # polling, on a thread
        return await asyncio.to_thread(
            functools.partial(wait_by, on_progress=on_progress), url, waiter.id, timeout, store
        )
    while True:
        try:
            return await _wait_on_async(waiter, url)
        except StoreError as exc:
            await asyncio.sleep(waiter.reconnect_in(exc, store.is_connection_error(exc)))


async def _wait_on_async(waiter: _Waiter, url: str) -> TaskInfo:
    conn = await pg_waiting.connect_async(url)
    try:
        await pg_waiting.listen_finished_async(conn)
        caller, store = PsycopgAsync(conn), AsyncPostgresStore()
        while left := waiter.left(info := await store.get_task(caller, waiter.id)):
            await pg_waiting.wait_finished_async(conn, waiter.id, min(left, FALLBACK))
        assert info is not None
        return info
    finally:
        await conn.close()


async def _poll_async(waiter: _Waiter, read: Callable[[], Awaitable[TaskInfo | None]]) -> TaskInfo:
    while left := waiter.left(info := await read()):
        await asyncio.sleep(waiter.next_pause(left))
    assert info is not None
    return info
