"""Many tasks at once: retried, cancelled or deleted in batches on a connection of
txqueue's own, chosen by a ``TaskFilter``.

A bulk operation commits each batch alone (1,000 tasks by default), so it never holds a
lock for its whole length and workers claim from other queues as it goes; each batch's
tasks change as the same call on one task changes them, with ``by`` in their history.
A cancel skips the rows a worker holds at that moment and takes them in a next pass.
Its asyncio form runs it on a thread: it holds no connection of the caller's.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Mapping
from contextlib import closing
from types import MappingProxyType

from .. import config
from ..core.task import CANCELLED, FAILED, PARKED, PENDING, RUNNING, SUCCEEDED, WAITING, TaskState
from ..errors import ConfigError, InvalidValueError
from ..outbox import wakeup
from ..outbox.client import Delivery, default_delivery, delivery_for, wakeups_of
from ..store import serving
from ..store.records import BulkBatch, BulkOrder
from .filters import TaskFilter
from .search import TaskSearch, check_filter

log = logging.getLogger("txqueue")

BATCH = 1000
PASSES = 3
"""Passes of a bulk cancel: a task a claim held locked when its batch was read is taken by
the next one. A retry or a delete makes one (a task that failed again meanwhile is not
retried twice)."""
BY_LIMIT = 200
"""Characters of ``by`` a history keeps."""

ELIGIBLE: dict[str, tuple[TaskState, ...]] = {
    "retry": (FAILED, CANCELLED),
    "cancel": (PENDING, WAITING, PARKED, RUNNING),
    "delete": (SUCCEEDED, FAILED, CANCELLED),
}
"""The states each operation acts on; a filter narrows them, never widens them."""


class BulkOperations(TaskSearch):
    """Searches and bulk operations through one configuration's store and wake-ups: an
    App's, or the process's defaults (TXQUEUE_DATABASE_URL, ``configure``'s broker)."""

    _delivery: Delivery | None = None
    _database_url: str | None = None
    _databases: Mapping[str, str] = MappingProxyType({})  # an App's, by name

    def retry_tasks(
        self,
        where: TaskFilter,
        *,
        by: str | None = None,
        batch: int = BATCH,
        database_url: str | None = None,
        on_batch: Callable[[int], None] | None = None,
    ) -> int:
        """Retry the failed and cancelled tasks matching ``where``, ``batch`` per transaction
        on a connection of its own (``database_url``, default TXQUEUE_DATABASE_URL); how many
        went back to pending. Their wake-ups leave after each batch's commit; ``on_batch`` is
        told how many each batch changed, as it goes.

        Example:

        ```python
        where = txqueue.TaskFilter(name="charge", error="card declined")
        print(txqueue.retry_tasks(where, by="ops", database_url=url))  # 1
        ```
        """
        return self._bulk("retry", where, by, batch, database_url, on_batch)

    def cancel_tasks(
        self,
        where: TaskFilter,
        *,
        by: str | None = None,
        batch: int = BATCH,
        database_url: str | None = None,
        on_batch: Callable[[int], None] | None = None,
    ) -> int:
        """Cancel the pending, waiting and running tasks matching ``where``, as ``cancel``
        does one (a running one is asked to stop), ``batch`` per transaction; how many.

        Example:

        ```python
        send_receipt.enqueue(conn, order=42)
        conn.commit()
        where = txqueue.TaskFilter(queue="emails", payload={"order": 42})
        print(txqueue.cancel_tasks(where, by="ops", database_url=url))  # 1
        ```
        """
        return self._bulk("cancel", where, by, batch, database_url, on_batch)

    def delete_tasks(
        self,
        where: TaskFilter,
        *,
        by: str | None = None,
        batch: int = BATCH,
        database_url: str | None = None,
        on_batch: Callable[[int], None] | None = None,
    ) -> int:
        """Delete the finished tasks (succeeded, failed, cancelled) matching ``where``, history
        and all, ``batch`` per transaction; how many. Each bulk operation is logged with its
        ``by`` and filter at INFO on the ``txqueue`` logger; a delete leaves nothing else.

        Example:

        ```python
        from datetime import UTC, datetime, timedelta

        week_ago = datetime.now(UTC) - timedelta(days=7)
        where = txqueue.TaskFilter(state="failed", finished_before=week_ago)
        deleted = txqueue.delete_tasks(where, by="ops: clean-up", database_url=url)
        ```
        """
        return self._bulk("delete", where, by, batch, database_url, on_batch)

    async def retry_tasks_async(
        self,
        where: TaskFilter,
        *,
        by: str | None = None,
        batch: int = BATCH,
        database_url: str | None = None,
    ) -> int:
        """``retry_tasks``, awaited (on a thread: it opens its own connection).

        Example:

        ```python
        where = txqueue.TaskFilter(queue="payments")
        retried = await txqueue.retry_tasks_async(where, database_url=url)
        ```
        """
        return await asyncio.to_thread(self._bulk, "retry", where, by, batch, database_url, None)

    async def cancel_tasks_async(
        self,
        where: TaskFilter,
        *,
        by: str | None = None,
        batch: int = BATCH,
        database_url: str | None = None,
    ) -> int:
        """``cancel_tasks``, awaited (on a thread: it opens its own connection).

        Example:

        ```python
        where = txqueue.TaskFilter(queue="emails", state="pending")
        cancelled = await txqueue.cancel_tasks_async(where, database_url=url)
        ```
        """
        return await asyncio.to_thread(self._bulk, "cancel", where, by, batch, database_url, None)

    async def delete_tasks_async(
        self,
        where: TaskFilter,
        *,
        by: str | None = None,
        batch: int = BATCH,
        database_url: str | None = None,
    ) -> int:
        """``delete_tasks``, awaited (on a thread: it opens its own connection).

        Example:

        ```python
        where = txqueue.TaskFilter(state="cancelled")
        deleted = await txqueue.delete_tasks_async(where, database_url=url)
        ```
        """
        return await asyncio.to_thread(self._bulk, "delete", where, by, batch, database_url, None)

    def _bulk(
        self,
        action: str,
        where: TaskFilter,
        by: str | None,
        batch: int,
        database_url: str | None,
        on_batch: Callable[[int], None] | None,
    ) -> int:
        where = check_filter(where, required=True)
        by = check_by(by)
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 10_000:
            raise InvalidValueError("batch", f"must be an int from 1 to 10000, got {batch!r}")
        given = self._delivery or default_delivery()
        if given.named and not database_url:
            raise ConfigError("database_url: of several databases, name the one to act on")
        given_url = self._databases.get(database_url, database_url) if database_url else None
        url = config.database_url(given_url or self._database_url)
        store = serving(url, self._store)
        states = eligible(action, where)
        had_notifier = given.notifier is not None
        delivery = delivery_for(given.amqp_url, given.queue_type, given, store, url)
        total = 0
        order = BulkOrder(action, where, states, _made_by(time.time() + 1.0), batch, by)
        try:
            with closing(store.connect(url, application_name="txqueue bulk")) as conn:
                waker: Delivery | None = delivery
                if given.named and given.amqp_url:
                    # By the name the database holds; none: no fleet reads its queues.
                    name = store.database_name(conn)
                    waker = None if name is None else delivery.for_database(name)
                for _ in range(PASSES if action == "cancel" else 1):
                    picked = 0
                    after = uuid.UUID(int=0)
                    while True:
                        done = store.bulk_batch(conn, order, after)
                        _wake(waker, done)
                        picked += done.picked
                        total += done.changed
                        if on_batch is not None and done.picked:
                            on_batch(done.changed)
                        if done.last is None or done.picked < batch:
                            break
                        after = done.last
                    if not picked:
                        break
        finally:
            if not had_notifier and delivery.notifier is not None:
                delivery.notifier.close()
                delivery.notifier = None
            # Said even when it stopped part way: what the committed batches changed stays.
            log.info(
                "bulk %s by %s: %d tasks matching %s", action, by or "-", total, where.describe()
            )
        return total


def eligible(action: str, where: TaskFilter, field: str = "state") -> tuple[TaskState, ...]:
    """The states of ``where`` that ``action`` acts on; InvalidValueError naming ``field``
    if there are none."""
    states = where.within(ELIGIBLE[action])
    if not states:
        takes = ", ".join(ELIGIBLE[action])
        raise InvalidValueError(field, f"{action} takes tasks that are {takes}")
    return states


def _made_by(moment: float) -> uuid.UUID:
    """Above the id of every task made before ``moment`` (ids are UUIDv7: their first 48
    bits are the Unix time in ms), so that an operation leaves the tasks made after it
    began."""
    return uuid.UUID(int=(int(moment * 1000) << 80) | ((1 << 80) - 1))


def check_by(by: object) -> str | None:
    """``by`` as a history keeps it: who asked, at most ``BY_LIMIT`` characters."""
    if by is not None and (not isinstance(by, str) or not by.strip()):
        raise InvalidValueError("by", f"must be a non-empty str naming who asked, got {by!r}")
    return None if by is None else by[:BY_LIMIT]


def _wake(delivery: Delivery | None, done: BulkBatch) -> None:
    wakeups = [(m.queue, wakeup.encode(m.id, m.xid)) for m in done.moved]
    wakeups += wakeups_of(done.ready)
    if wakeups and delivery is not None:
        delivery.send(wakeups)
