"""A queue's flow control, on the application's connection: pause and resume it, limit
its rate and concurrency, read its settings.

Like ``enqueue``, each call runs in the caller's transaction and never commits for it.
A change holds from the first claim after its commit, on every worker: each claim reads
the settings (see README, "Flow control").
"""

from __future__ import annotations

from collections.abc import Callable
from types import EllipsisType

from . import wakeup
from .client import wake
from .limits import check_concurrency, parse_rate
from .store.connections import resolve
from .store.records import QueueSettings
from .task import check_queue

_WAKE = 200  # a resumed queue's tasks woken at once; the poll finds the rest


def pause_queue(conn: object, queue: str) -> QueueSettings:
    """Stop starting the queue's tasks: they stay pending, at no cost in attempts, and
    enqueues go on. Tasks already running finish."""
    return _change(conn, queue, lambda s: s._replace(paused=True))


def resume_queue(conn: object, queue: str) -> QueueSettings:
    """Start the queue's tasks again; its ripe tasks' workers are woken after the commit."""
    settings = _change(conn, queue, lambda s: s._replace(paused=False))
    resolved = resolve(conn)
    ripe = resolved.store.ripe_tasks(resolved.conn, queue, _WAKE)
    # One message each, so that they spread over the queue's workers.
    wake(conn, [(queue, wakeup.encode(tid, xid)) for tid, _, xid in ripe])
    return settings


def limit_queue(
    conn: object,
    queue: str,
    *,
    rate_limit: str | EllipsisType | None = ...,
    concurrency: int | EllipsisType | None = ...,
) -> QueueSettings:
    """Limit the queue across every worker: at most ``rate_limit`` task starts per period
    (``"50/s"``, ``"600/min"``, ``"5/10s"``), at most ``concurrency`` tasks running at once.
    None removes a limit; a limit left out stays as it is."""
    rate: tuple[int | None, float | None] | None = None
    if rate_limit is not ...:
        rate = (None, None) if rate_limit is None else parse_rate(rate_limit)
    if concurrency is not ... and concurrency is not None:
        check_concurrency(concurrency)

    def change(settings: QueueSettings) -> QueueSettings:
        if rate is not None:
            settings = settings._replace(rate_limit=rate[0], rate_period=rate[1])
        if concurrency is not ...:
            settings = settings._replace(concurrency=concurrency)
        return settings

    return _change(conn, queue, change)


def get_queue(conn: object, queue: str) -> QueueSettings:
    """The queue's settings (a queue never limited has the defaults: running freely)."""
    check_queue(queue)
    for settings in list_queues(conn):
        if settings.queue == queue:
            return settings
    return QueueSettings(queue)


def list_queues(conn: object) -> list[QueueSettings]:
    """The settings of every queue that is paused or limited, by name."""
    resolved = resolve(conn)
    return resolved.store.queue_settings(resolved.conn)


def _change(
    conn: object, queue: str, change: Callable[[QueueSettings], QueueSettings]
) -> QueueSettings:
    check_queue(queue)
    resolved = resolve(conn)
    store = resolved.store
    with store.transaction(resolved.conn):
        settings = change(store.lock_queue(resolved.conn, queue))
        store.save_queue(resolved.conn, settings)
    return settings
