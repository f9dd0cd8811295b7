"""Enqueueing: the row in the caller's transaction, the wake-up to the background publisher."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .. import broker, config
from ..core.task import Task
from ..errors import ConfigError, InvalidTypeError, StoreError
from ..observability import tracing
from ..store.bound import AfterCommit, AsyncBound, Bound
from ..store.connections import bind, managed
from ..store.plans import Plan, call, run
from ..store.protocols import Enqueue, Notifies
from ..store.records import Inserted
from ..store.roles import Notifying
from . import notes, wakeup

log = logging.getLogger("txqueue")

_UNSET: Any = object()
_amqp_override: str | None = _UNSET
_named_override: bool | None = None
# Connections inside `txqueue.transaction(...)`: wake-ups wait there for the commit, each
# with the Delivery it goes by (None: the module's default, looked up when sent). Each
# entry leaves when its block ends (sqlite3 connections cannot be weakly referenced).
_deferred: dict[Any, list[tuple[Delivery | None, list[tuple[str, bytes]]]]] = {}
_deferred_lock = threading.Lock()


def configure(*, amqp_url: str | None = _UNSET) -> None:
    """Set the broker for this process's wake-ups; None: none (on PostgreSQL the database's
    NOTIFY wakes the workers; on SQLite, workers in other processes poll).

    Without it, TXQUEUE_AMQP_URL is read at each enqueue.

    Example:

    ```python
    txqueue.configure(amqp_url="amqp://guest:guest@127.0.0.1:5672/")  # this process's wake-ups
    txqueue.configure(amqp_url=None)  # none: workers are woken by NOTIFY, or poll
    ```
    """
    global _amqp_override
    if amqp_url is _UNSET:
        _amqp_override = _UNSET
    else:
        _amqp_override = config.amqp_url(amqp_url) if amqp_url else ""


def name_wakeups(named: bool | None) -> None:
    """Whether this process's own wake-ups (the module-level calls') go to the queues of
    their connection's database by the name it holds, as when TXQUEUE_DATABASES is set
    (None: as it says): for the CLI given databases by flag."""
    global _named_override
    _named_override = named


class Notifier:
    """Wake-ups by NOTIFY that txqueue's own processes send once their transaction has
    committed (the steps a worker's outcome readied, the cleaner's wake-ups sent again), on
    a connection of its own, opened when first needed. A failure drops the connection and
    the wake-ups: they are hints, and the poll finds the tasks."""

    def __init__(self, store: Notifying[Any], url: str) -> None:
        self._store, self._url = store, url
        self._conn: Any = None
        self._lock = threading.Lock()

    def send(self, queues: Iterable[str]) -> None:
        notes = sorted(set(queues))
        if not notes:
            return
        with self._lock:
            try:
                if self._conn is None or self._store.is_closed(self._conn):
                    self._conn = self._store.connect(self._url, application_name="txqueue")
                self._store.notify_wakeups(self._conn, notes)
            except StoreError as exc:
                log.warning("wake-ups by NOTIFY not sent (%s): the poll finds their tasks", exc)
                conn, self._conn = self._conn, None
                if conn is not None:
                    conn.close()

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class Delivery:
    """Where one configuration's wake-ups go: RabbitMQ at ``amqp_url``, into queues of
    ``queue_type``, through the publisher in ``publishers`` (None: the process-wide one).
    Without a broker, on PostgreSQL, by NOTIFY: in the caller's transaction where a caller
    wrote the tasks, else through ``notifier`` (a worker's, a cleaner's); on SQLite, to
    this process's workers subscribed to ``local``.

    ``named``: the configuration has several databases (``config.databases``), so a
    caller's wake-ups go to the queues of its connection's database (``wakeup.routed``);
    ``database``: all of them go to that one's (a worker's or a cleaner's there)."""

    def __init__(
        self,
        amqp_url: str | None,
        queue_type: str = config.QUEUE_TYPES[0],
        local: wakeup.LocalDelivery = wakeup.LOCAL,
        publishers: broker.PublisherSlot | None = None,
        *,
        named: bool = False,
    ) -> None:
        self.amqp_url = amqp_url
        self.queue_type = queue_type
        self.local = local
        self.named = named
        self.database: str | None = None
        self.notifier: Notifier | None = None
        self._own = publishers is not None
        self._publishers = broker.SHARED if publishers is None else publishers

    def for_database(self, name: str | None) -> Delivery:
        """This Delivery's broker and publisher, for the wake-ups of the database ``name``
        (None: this one itself); its notifier, if any, is the caller's to set."""
        if name is None:
            return self
        routed = Delivery(self.amqp_url, self.queue_type, self.local, named=True)
        routed._publishers, routed.database = self._publishers, name
        return routed

    def notifies(self, store: object) -> bool:
        """Whether the tasks written through ``store`` are woken by NOTIFY: no broker, and
        a database that carries them."""
        return self.amqp_url is None and getattr(store, "notifies", False)

    def send(self, wakeups: Iterable[tuple[str, bytes]]) -> None:
        """Send (queue, body) wake-ups of a transaction that has committed; never blocks on
        the broker (the publisher has its own thread)."""
        if self.amqp_url is None:
            if self.notifier is not None:
                self.notifier.send(queue for queue, _ in wakeups)
                return
            for queue, body in wakeups:
                self.local.deliver(queue, body)
            return
        pub = self._publishers.get(self.amqp_url, self.queue_type)
        for queue, body in wakeups:
            pub.publish(wakeup.routed(queue, self.database), body)

    def flush(self, timeout: float = 2.0) -> bool:
        """Wait until what was sent is confirmed by RabbitMQ; False on timeout or outage."""
        return self.amqp_url is None or self._publishers.flush(timeout)

    def close(self, timeout: float = 2.0) -> None:
        """Flush and stop its own publisher (the process-wide one is left running), and
        close its notifier's connection."""
        if self._own:
            self._publishers.close(timeout)
        if self.notifier is not None:
            self.notifier.close()


def delivery_for(
    amqp_url: str | None,
    queue_type: str,
    delivery: Delivery | None,
    store: Notifying[Any],
    database_url: str,
    database: str | None = None,
) -> Delivery:
    """A worker's or a cleaner's Delivery: ``delivery`` (an App's, its own publisher and
    in-process subscribers), which must agree with their broker; else one on the
    process-wide publisher and subscribers; for the named ``database``, to its queues.
    Without a broker, on PostgreSQL, it notifies on a connection of its own to
    ``database_url``."""
    if delivery is None:
        delivery = Delivery(amqp_url, queue_type)
    elif (delivery.amqp_url, delivery.queue_type) != (amqp_url, queue_type):
        raise ConfigError("delivery: its broker or queue type is not amqp_url's or queue_type's")
    delivery = delivery.for_database(database)
    if delivery.notifies(store) and delivery.notifier is None:
        delivery.notifier = Notifier(store, database_url)
    return delivery


def default_delivery() -> Delivery:
    """The module-level functions' Delivery: ``configure``'s broker, or TXQUEUE_AMQP_URL
    and TXQUEUE_AMQP_QUEUE_TYPE read now."""
    url = config.amqp_url() if _amqp_override is _UNSET else (_amqp_override or None)
    named = _named_override
    if named is None:
        named = bool(os.environ.get(config.DATABASES_ENV, "").strip())
    return Delivery(url, config.queue_type() if url else config.QUEUE_TYPES[0], named=named)


def check_tasks(tasks: Sequence[Any]) -> None:
    for i, task in enumerate(tasks):
        if not isinstance(task, Task):
            kind = type(task).__name__
            raise InvalidTypeError(f"tasks[{i}]", f"must be a txqueue.Task, not {kind}")


def wakeups_for(tasks: Sequence[Task], inserted: Sequence[Inserted]) -> list[tuple[str, bytes]]:
    """One wake-up per queue (per ``wakeup.MAX_IDS`` tasks): the rows of one call share
    their transaction. One whose tasks are all due now says so (``Wakeup.ripe``)."""
    now = time.time()
    ripe = [notes.due_at(t.run_at, t.delay_seconds, now) <= now for t in tasks]
    return wakeups_of([(t.queue, row) for t, row in zip(tasks, inserted, strict=True)], ripe)


def wakeups_of(
    rows: Sequence[tuple[str, Inserted]], ripe: Sequence[bool] | None = None
) -> list[tuple[str, bytes]]:
    """``wakeups_for`` (queue, Inserted) rows of one transaction: those it created, each
    due now where ``ripe`` says so."""
    by_queue: dict[str, list[tuple[Inserted, bool]]] = {}
    for i, (queue, row) in enumerate(rows):
        if row.new:
            by_queue.setdefault(queue, []).append((row, ripe is not None and ripe[i]))
    wakeups = []
    for queue, chunk_of in by_queue.items():
        for start in range(0, len(chunk_of), wakeup.MAX_IDS):
            chunk = chunk_of[start : start + wakeup.MAX_IDS]
            body = wakeup.encode_many(
                [r.id for r, _ in chunk], chunk[0][0].xid, all(due for _, due in chunk)
            )
            wakeups.append((queue, body))
    return wakeups


def notify(bound: Bound[Any] | AsyncBound, delivery: Delivery | None) -> bool:
    """Whether the statements writing tasks on ``bound``'s connection send their wake-ups
    themselves, by NOTIFY in the caller's transaction (``Delivery.notifies``)."""
    return (delivery or default_delivery()).notifies(bound.store)


def wake_by(
    bound: Bound[Any],
    wakeups: list[tuple[str, bytes]],
    delivery: Delivery | None,
    notified: bool = False,
) -> None:
    """Send the wake-ups of rows written on ``bound``'s connection (``waking``)."""
    run(waking(bound, wakeups, delivery, notified), bound)


def waking(
    bound: Bound[Any] | AsyncBound,
    wakeups: list[tuple[str, bytes]],
    delivery: Delivery | None,
    notified: bool = False,
) -> Plan[None]:
    """The wake-ups of rows written on ``bound``'s connection: by NOTIFY in its
    transaction (unless the statement that wrote them did: ``notified``), else as
    ``deliver``."""
    chosen = delivery or default_delivery()
    if chosen.notifies(bound.store):
        if wakeups and not notified:
            yield call(Notifies.notify_wakeups, sorted({q for q, _ in wakeups}))
        return
    if wakeups and chosen.named:
        name = yield from _database_of(bound)
        if name is None:
            return  # no fleet consumes an unnamed database's queues: its workers poll
        delivery = chosen.for_database(name)
    deliver(bound.after_commit, bound.key, wakeups, delivery)


# The name of each connection's database among several (``Delivery.named``), read once:
# a connection stays on one database.
_names: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_unnamed = threading.Event()


def _database_of(bound: Bound[Any] | AsyncBound) -> Plan[str | None]:
    """The name of ``bound``'s database, asked of it the first time only (until it has
    one: ``txqueue init`` may name it while the application runs)."""
    # An asyncpg pool hands out a new proxy at each acquire; the connection is the same.
    key = getattr(bound.key, "_con", bound.key)
    try:
        return _names[key]
    except (KeyError, TypeError):  # not asked yet, or a connection that cannot be weakly held
        pass
    name: str | None = yield call(Enqueue.database_name)
    if name is None:
        if not _unnamed.is_set():  # said once: asked again at every enqueue, until named
            _unnamed.set()
            log.warning(
                "enqueue: the connection's database has no name (run `txqueue init` with "
                "the databases named): its tasks are not woken, they wait for a worker's poll"
            )
        return None
    with contextlib.suppress(TypeError):
        _names[key] = name
    return name


def deliver(
    after_commit: AfterCommit | None,
    key: Any,
    wakeups: list[tuple[str, bytes]],
    delivery: Delivery | None = None,
) -> None:
    """``wake``, for a connection already bound (``key``: its driver connection), by
    ``delivery`` (None: the module's default, looked up when they are sent)."""
    if not wakeups:
        return
    if after_commit is not None:
        after_commit(lambda: (delivery or default_delivery()).send(wakeups))
        return
    with _deferred_lock:
        pending = _deferred.get(key)
        if pending is not None:
            pending.append((delivery, wakeups))
            return
    (delivery or default_delivery()).send(wakeups)


@contextmanager
def deferring(key: Any) -> Iterator[Callable[[], None]]:
    """Hold the wake-ups sent for ``key``'s rows until the block ends; the function it
    yields sends them (called once the transaction has committed). Nested, the outermost
    block holds them."""
    with _deferred_lock:
        outermost = key not in _deferred
        if outermost:
            _deferred[key] = []

    def send() -> None:
        if outermost:
            with _deferred_lock:
                held = _deferred.pop(key, [])
            default: Delivery | None = None
            for delivery, wakeups in held:
                if delivery is None:
                    default = delivery = default or default_delivery()
                delivery.send(wakeups)

    try:
        yield send
    finally:
        if outermost:
            with _deferred_lock:
                _deferred.pop(key, None)


def inserting(
    bound: Bound[Any] | AsyncBound,
    tasks: Sequence[Task],
    delivery: Delivery | None,
    one: bool,
) -> Plan[list[uuid.UUID]]:
    """Insert ``tasks`` in the caller's transaction (``one``: the single one, by its own
    statement), then send their wake-ups; their ids, in order."""
    by_notify = notify(bound, delivery)
    inserted: list[Inserted]
    with tracing.sending(tasks) as trace:
        if one:
            inserted = [(yield call(Enqueue.insert_task, tasks[0], trace, by_notify))]
        else:
            inserted = yield call(Enqueue.insert_tasks, tasks, trace, by_notify)
    yield from waking(bound, wakeups_for(tasks, inserted), delivery, by_notify)
    return [row.id for row in inserted]


@contextmanager
def transaction(conn: object) -> Iterator[Any]:
    """A transaction on a psycopg or sqlite3 connection that sends wake-ups only after it
    commits (psycopg's ``conn.transaction()``; on SQLite outside a transaction ``BEGIN
    IMMEDIATE``, which takes the write lock first, so a read then a write inside is not
    refused when a worker wrote between them).

    Nested inside another ``txqueue.transaction`` it is a savepoint, and the wake-ups wait
    for the outermost commit.

    Example:

    ```python
    with txqueue.transaction(conn):  # commits at the end, or rolls back on an exception
        conn.execute("CREATE TABLE orders (id int PRIMARY KEY)")
        conn.execute("INSERT INTO orders VALUES (42)")
        send_receipt.enqueue(conn, order=42)  # its wake-up leaves once the block commits
    ```
    """
    bound = bind(conn)
    if bound.managed:  # its block would commit alone, whatever the framework's does
        raise managed("transaction")
    with deferring(bound.key) as send:
        with bound(Enqueue.transaction) as tx:
            yield tx
        send()
