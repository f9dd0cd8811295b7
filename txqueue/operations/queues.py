"""A queue's flow control, on the application's connection: pause and resume it, limit
its rate and concurrency, read its settings.

Like ``enqueue``, each call runs in the caller's transaction and never commits for it.
A change holds from the first claim after its commit, on every worker: each claim reads
the settings (see docs/how-to/flow-control.md).

``QueueControl`` does the work through one configuration's store and wake-ups: an App's
(it is one), or the process-wide defaults behind the module-level functions.
"""

from __future__ import annotations

from types import EllipsisType
from typing import Any

from ..core.fields import check_queue
from ..core.limits import check_concurrency, parse_rate
from ..errors import InvalidTypeError
from ..outbox import wakeup
from ..outbox.client import Delivery, wake_by
from ..store.connections import bind
from ..store.protocols import Queues
from ..store.roles import InTransaction
from ..store.settings import QueueChange, QueueSettings

_WAKE = 200  # a resumed queue's tasks woken at once; the poll finds the rest


class QueueControl:
    """The flow-control calls, through ``_store`` and ``_delivery`` (None: the process's
    defaults)."""

    _store: InTransaction[Any] | None = None
    _delivery: Delivery | None = None

    def pause_queue(self, conn: object, queue: str) -> QueueSettings:
        """Stop starting the queue's tasks: they stay pending, at no cost in attempts, and
        enqueues go on. Tasks already running finish.

        Example:

        ```python
        txqueue.pause_queue(conn, "emails")  # from the commit, no worker starts its tasks
        ```
        """
        return self._change(conn, queue, QueueChange(frozenset({"paused"}), paused=True))

    def resume_queue(self, conn: object, queue: str) -> QueueSettings:
        """Start the queue's tasks again, and wake workers for its first ripe ones (after the
        commit, where txqueue can see it; else at once, and their wake-ups name this
        transaction, for the worker to wait for its commit).

        Example:

        ```python
        txqueue.pause_queue(conn, "emails")
        txqueue.resume_queue(conn, "emails")  # workers are woken for its ripe tasks
        ```
        """
        settings = self._change(conn, queue, QueueChange(frozenset({"paused"}), paused=False))
        bound = bind(conn, self._store)
        ripe = bound(Queues.ripe_tasks, queue, _WAKE)
        # One message each, so that they spread over the queue's workers.
        wakeups = [(queue, wakeup.encode(tid, xid)) for tid, _, xid in ripe]
        wake_by(bound, wakeups, self._delivery)
        return settings

    def limit_queue(
        self,
        conn: object,
        queue: str,
        *,
        rate_limit: str | EllipsisType | None = ...,
        concurrency: int | EllipsisType | None = ...,
        fair_share: bool | EllipsisType = ...,
    ) -> QueueSettings:
        """Limit the queue across every worker: at most ``rate_limit`` task starts per period
        (``"50/s"``, ``"600/min"``, ``"5/10s"``), at most ``concurrency`` tasks running at once.
        None removes a limit; a limit left out stays as it is. ``fair_share=True``: the keys
        of the queue's tasks (their ``concurrency_key``) take turns, so that one key's backlog
        does not hold back another's tasks; ``False`` ends it.

        Example:

        ```python
        txqueue.limit_queue(conn, "emails", rate_limit="50/s", concurrency=5)
        txqueue.limit_queue(conn, "emails", rate_limit=None)  # None removes it; concurrency stays
        ```
        """
        changing: set[str] = set()
        starts: int | None = None
        period: float | None = None
        if rate_limit is not ...:
            changing.add("rate")
            if rate_limit is not None:
                starts, period = parse_rate(rate_limit)
        at_once: int | None = None
        if concurrency is not ...:
            changing.add("concurrency")
            if concurrency is not None:
                at_once = check_concurrency(concurrency)
        fair: bool | None = None
        if fair_share is not ...:
            if not isinstance(fair_share, bool):
                kind = type(fair_share).__name__
                raise InvalidTypeError("fair_share", f"must be a bool, not {kind}")
            changing.add("fair_share")
            fair = fair_share
        change = QueueChange(frozenset(changing), None, starts, period, at_once, fair)
        return self._change(conn, queue, change)

    def get_queue(self, conn: object, queue: str) -> QueueSettings:
        """The queue's settings (a queue never limited has the defaults: running freely).

        Example:

        ```python
        settings = txqueue.get_queue(conn, "emails")
        print(settings.paused, settings.rate_limit)  # False None: never limited
        ```
        """
        check_queue(queue)
        for settings in self.list_queues(conn):
            if settings.queue == queue:
                return settings
        return QueueSettings(queue)

    def list_queues(self, conn: object) -> list[QueueSettings]:
        """The settings of every queue that is paused, limited or shared fairly, by name.

        Example:

        ```python
        txqueue.pause_queue(conn, "emails")
        for settings in txqueue.list_queues(conn):  # those paused, limited or shared fairly
            print(settings.queue, settings.paused)
        ```
        """
        bound = bind(conn, self._store)
        return bound(Queues.queue_settings)

    def _change(self, conn: object, queue: str, change: QueueChange) -> QueueSettings:
        check_queue(queue)
        bound = bind(conn, self._store)
        return bound(Queues.change_queue, queue, change)
