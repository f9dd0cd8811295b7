"""Wake-up messages on RabbitMQ: the background publisher and the worker's consumer.

The only module that imports pika. pika is not thread-safe, so each connection lives on
one thread: the publisher's own, or the consumer's; other threads hand work over through
``add_callback_threadsafe``. A wake-up is only a hint: the row is the truth, so a lost
message delays a task until the idle poll or the cleaner finds it, and never loses it.
"""

from __future__ import annotations

import collections
import contextlib
import json
import logging
import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection
from pika.adapters.select_connection import SelectConnection

from .config import redact, scrub
from .errors import BrokerError

log = logging.getLogger("txqueue.notify")
# pika logs every failed connection attempt at ERROR, with stack details; txqueue reports
# each outage once, in one line, itself.
logging.getLogger("pika").setLevel(logging.CRITICAL)

QUEUE_PREFIX = "txqueue."
BUFFER_LIMIT = 100_000
PERSISTENT = pika.BasicProperties(delivery_mode=2, content_type="application/json")
_RECONNECT_MIN, _RECONNECT_MAX = 0.2, 15.0


def queue_name(queue: str) -> str:
    return QUEUE_PREFIX + queue


MAX_IDS = 1000  # per message: a batch's wake-up stays a few tens of kilobytes


def encode(task_id: uuid.UUID, xid: str | None) -> bytes:
    return json.dumps({"id": str(task_id), "xid": xid}, separators=(",", ":")).encode()


def encode_many(task_ids: Sequence[uuid.UUID], xid: str | None) -> bytes:
    """One wake-up for tasks written by one transaction (``enqueue_many``): RabbitMQ and
    both ends handle one message instead of one per task."""
    if len(task_ids) == 1:
        return encode(task_ids[0], xid)
    ids = [str(i) for i in task_ids]
    return json.dumps({"ids": ids, "xid": xid}, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class Wakeup:
    """A decoded message's task to claim and the transaction that enqueued it."""

    id: uuid.UUID
    xid: str | None
    tag: int = 0
    generation: int = 0


def _uuid(value: Any) -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise ValueError(f"id {str(value)[:64]!r} is not a UUID") from None


def decode(body: bytes) -> list[Wakeup]:
    """Parse a message body, ``{"id", "xid"}`` or ``{"ids": [...], "xid"}``, into one
    wake-up per task; ValueError says what is wrong with it."""
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise ValueError("not JSON") from None
    if not isinstance(doc, dict) or ("id" in doc) == ("ids" in doc):
        raise ValueError('not an object with an "id" or "ids"')
    xid = doc.get("xid")
    if xid is not None and not (isinstance(xid, str) and xid.isdigit()):
        raise ValueError(f"xid {str(xid)[:32]!r} is not a transaction id")
    if "id" in doc:
        return [Wakeup(_uuid(doc["id"]), xid)]
    ids = doc["ids"]
    if not isinstance(ids, list) or not 0 < len(ids) <= MAX_IDS:
        raise ValueError(f'"ids" is not a list of 1 to {MAX_IDS} ids')
    return [Wakeup(_uuid(i), xid) for i in ids]


def _backoff(failures: int) -> float:
    return float(min(_RECONNECT_MAX, _RECONNECT_MIN * 2**failures) * random.uniform(0.5, 1.0))


def _describe(exc: BaseException, url: str) -> str:
    """The real cause in one line: pika wraps it, often with an empty message of its own
    (AMQPConnectionError around the socket's "Connection refused")."""
    while True:
        inner = exc.args[0] if exc.args else getattr(exc, "exception", None)
        if not isinstance(inner, BaseException):
            break
        exc = inner
    text = str(exc).strip() or type(exc).__name__
    return scrub(text.splitlines()[0], url)


class Publisher:
    """Sends wake-ups from a background thread with publisher confirms, never blocking callers.

    ``publish`` appends to a bounded buffer and returns. The thread keeps a connection
    open, publishes everything buffered, and forgets a message once RabbitMQ confirms it;
    what was in flight when a connection dropped is sent again on the next one.
    """

    def __init__(
        self, url: str, *, limit: int = BUFFER_LIMIT, carry: Sequence[tuple[str, bytes]] = ()
    ) -> None:
        self.url = url
        self.limit = limit
        self.pid = os.getpid()
        self.confirmed = 0
        self.dropped = 0
        self._buffer: collections.deque[tuple[str, bytes]] = collections.deque(carry)
        self._unconfirmed: dict[int, tuple[str, bytes]] = {}
        self._declared: set[str] = set()
        self._lock = threading.Lock()
        self._drain_scheduled = False
        self._conn: SelectConnection | None = None
        self._channel: Any = None
        self._next_tag = 1
        self._failures = 0
        self._warned = False
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="txqueue-publisher", daemon=True)
        self._thread.start()

    # --- any thread -----------------------------------------------------------------

    def publish(self, queue: str, body: bytes) -> None:
        if len(self._buffer) >= self.limit:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 10_000 == 0:
                log.warning(
                    "wake-up buffer full (%d): dropped %d wake-ups; workers' polls will find "
                    "those tasks",
                    self.limit,
                    self.dropped,
                )
            return
        self._buffer.append((queue, body))
        self._schedule_drain()

    @property
    def connected(self) -> bool:
        return self._channel is not None

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() or self._stopped.is_set()

    def unsent(self) -> list[tuple[str, bytes]]:
        """What a dead publisher never had confirmed, oldest first."""
        return [*self._unconfirmed.values(), *self._buffer]

    def idle(self) -> bool:
        return not self._buffer and not self._unconfirmed

    def flush(self, timeout: float = 2.0) -> bool:
        """Wait until everything published so far is confirmed; False on timeout or outage."""
        deadline = time.monotonic() + timeout
        while not self.idle():
            if not self.connected and self._failures > 0:
                return False
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.002)
        return True

    def close(self, timeout: float = 2.0) -> None:
        self.flush(timeout)
        self._stopped.set()
        conn = self._conn
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.ioloop.add_callback_threadsafe(self._close_connection)
        self._thread.join(timeout)

    def _schedule_drain(self) -> None:
        with self._lock:
            if self._drain_scheduled or self._channel is None or self._conn is None:
                return
            self._drain_scheduled = True
            conn = self._conn
        try:
            conn.ioloop.add_callback_threadsafe(self._drain)
        except Exception:
            with self._lock:
                self._drain_scheduled = False

    # --- the publisher thread ---------------------------------------------------------

    def _run(self) -> None:
        try:
            self._connect_loop()
        except BaseException:
            # Replaced at the next publish (``publisher``), which carries over what is left.
            log.exception("the wake-up publisher died")
            raise

    def _connect_loop(self) -> None:
        params = pika.URLParameters(self.url)
        params.heartbeat = 30
        params.connection_attempts = 1
        params.socket_timeout = 5
        while not self._stopped.is_set():
            self._conn = SelectConnection(
                params,
                on_open_callback=self._on_open,
                on_open_error_callback=self._on_failure,
                on_close_callback=self._on_failure,
            )
            try:
                self._conn.ioloop.start()
            finally:
                with self._lock:
                    self._channel = None
                    self._drain_scheduled = False
                self._conn.ioloop.close()
            if self._stopped.wait(_backoff(self._failures)):
                break

    def _on_open(self, conn: SelectConnection) -> None:
        conn.channel(on_open_callback=self._on_channel_open)

    def _on_channel_open(self, channel: Any) -> None:
        channel.add_on_close_callback(self._on_channel_closed)
        channel.confirm_delivery(self._on_confirm)
        if self._warned:
            log.warning("RabbitMQ reachable again at %s: sending wake-ups", redact(self.url))
        self._failures, self._warned = 0, False
        self._next_tag = 1
        self._declared.clear()
        # Messages in flight on the lost connection go out again, before newer ones.
        self._buffer.extendleft(reversed(list(self._unconfirmed.values())))
        self._unconfirmed.clear()
        with self._lock:
            self._channel = channel
            self._drain_scheduled = True
        self._drain()

    def _on_channel_closed(self, channel: Any, reason: BaseException) -> None:
        if self._conn is not None and self._conn.is_open:
            log.warning("RabbitMQ closed the publishing channel: %s", _describe(reason, self.url))
            self._conn.close()

    def _on_failure(self, conn: SelectConnection, reason: BaseException) -> None:
        self._failures += 1
        if not self._stopped.is_set() and not self._warned:
            self._warned = True
            log.warning(
                "RabbitMQ unreachable at %s (%s): enqueue goes on, tasks run when workers poll",
                redact(self.url),
                _describe(reason, self.url),
            )
        conn.ioloop.stop()

    def _drain(self) -> None:
        with self._lock:
            self._drain_scheduled = False
            channel = self._channel
        if channel is None or not channel.is_open:
            return
        while self._buffer:
            queue, body = self._buffer.popleft()
            name = queue_name(queue)
            if name not in self._declared:
                # Declared in order before the publish on the same channel, so the first
                # wake-up for a queue is never dropped as unroutable.
                channel.queue_declare(name, durable=True)
                self._declared.add(name)
            self._unconfirmed[self._next_tag] = (queue, body)
            self._next_tag += 1
            channel.basic_publish("", name, body, PERSISTENT)

    def _on_confirm(self, frame: Any) -> None:
        method = frame.method
        tags = (
            [t for t in self._unconfirmed if t <= method.delivery_tag]
            if method.multiple
            else [method.delivery_tag]
        )
        nacked = isinstance(method, pika.spec.Basic.Nack)
        for tag in tags:
            message = self._unconfirmed.pop(tag, None)
            if message is None:
                continue
            if nacked:
                self._buffer.append(message)
            else:
                self.confirmed += 1
        if nacked:
            self._schedule_drain_soon()

    def _schedule_drain_soon(self) -> None:
        if self._conn is not None:
            self._conn.ioloop.call_later(0.05, self._drain)

    def _close_connection(self) -> None:
        if self._conn is not None and self._conn.is_open:
            self._conn.close()
        elif self._conn is not None:
            self._conn.ioloop.stop()


_publisher: Publisher | None = None
_publisher_lock = threading.Lock()


def publisher(url: str) -> Publisher:
    """The process-wide publisher for ``url`` (a new one after a fork or a URL change)."""
    global _publisher
    current = _publisher
    if current is not None and current.url == url and current.pid == os.getpid() and current.alive:
        return current
    with _publisher_lock:
        current = _publisher
        if current is None or current.url != url or current.pid != os.getpid():
            if current is not None and current.pid == os.getpid():
                current.close(timeout=0.5)
            current = Publisher(url)
        elif not current.alive:
            log.error("the wake-up publisher had died: replaced, its unsent wake-ups kept")
            current = Publisher(url, carry=current.unsent())
        _publisher = current
        return current


def flush(timeout: float = 2.0) -> bool:
    """Wait for this process's wake-ups to be confirmed (before a short-lived process exits)."""
    current = _publisher
    if current is None or current.pid != os.getpid():
        return True
    return current.flush(timeout)


class Consumer:
    """Consumes ``txqueue.<queue>`` for each queue on one thread, reconnecting on failure.

    Decoded wake-ups go to ``on_wakeup``, one call per task (on the consumer thread: it
    must not block); malformed messages are logged, acked and dropped here. ``ack`` may be
    called from any thread; a message is acked once all of its tasks are. A wake-up carries
    its connection's generation: an ack for an older connection is skipped, since RabbitMQ
    already requeued that message.
    """

    def __init__(
        self,
        url: str,
        queues: Sequence[str],
        *,
        prefetch: int,
        on_wakeup: Callable[[Wakeup], None],
    ) -> None:
        self.url = url
        self.queues = list(queues)
        self.prefetch = prefetch
        self.on_wakeup = on_wakeup
        self.generation = 0
        self.malformed = 0
        self._failures = 0  # connection attempts failed in a row
        self._conn: BlockingConnection | None = None
        self._channel: BlockingChannel | None = None
        # Delivery tag -> its wake-ups not decided yet; on the consumer thread only.
        self._unacked: dict[int, int] = {}
        self._stopped = threading.Event()
        self._ready = threading.Event()

    def ack(self, wakeups: Sequence[Wakeup]) -> None:
        """Acknowledge decided wake-ups; a message goes once all of its tasks are decided."""
        conn, channel, generation = self._conn, self._channel, self.generation
        decided = [w.tag for w in wakeups if w.generation == generation]
        if not decided or conn is None or channel is None:
            return

        def send() -> None:
            if not channel.is_open or generation != self.generation:
                return
            unacked = self._unacked
            done = []
            for tag in decided:
                left = unacked.get(tag, 0) - 1
                if left > 0:
                    unacked[tag] = left
                elif tag in unacked:
                    del unacked[tag]
                    done.append(tag)
            if not done:
                return
            done.sort()
            # One frame acks every tag up to the first delivery still being decided (a
            # wake-up waiting for its commit); only those above it go one by one.
            oldest = min(unacked, default=done[-1] + 1)
            below = [t for t in done if t < oldest]
            if below:
                channel.basic_ack(below[-1], multiple=True)
            for tag in done[len(below) :]:
                channel.basic_ack(tag)

        with contextlib.suppress(Exception):
            conn.add_callback_threadsafe(send)

    def wait_ready(self, timeout: float) -> bool:
        """Wait until the queues are declared and consumed (tests, benchmarks)."""
        return self._ready.wait(timeout)

    def stop(self) -> None:
        self._stopped.set()

    def run(self) -> None:
        """Consume until ``stop``; reconnect with backoff and jitter, logging once per outage."""
        while not self._stopped.is_set():
            try:
                self._consume()
            except (pika.exceptions.AMQPError, OSError) as exc:
                if self._failures == 0:
                    log.warning(
                        "RabbitMQ connection lost or refused at %s (%s): polling the database "
                        "and reconnecting",
                        redact(self.url),
                        _describe(exc, self.url),
                    )
                self._failures += 1
            finally:
                self._ready.clear()
                self._close()
            if not self._stopped.is_set():
                self._stopped.wait(_backoff(self._failures))

    def _consume(self) -> None:
        params = pika.URLParameters(self.url)
        params.heartbeat = 30
        params.connection_attempts = 1
        params.socket_timeout = 5
        conn = BlockingConnection(params)
        channel = conn.channel()
        channel.basic_qos(prefetch_count=self.prefetch)
        self._unacked.clear()
        self.generation += 1
        self._conn, self._channel = conn, channel
        for queue in self.queues:
            name = queue_name(queue)
            channel.queue_declare(name, durable=True)
            channel.basic_consume(name, self._on_message)
        self._ready.set()
        if self._failures:
            log.warning("RabbitMQ reachable again at %s", redact(self.url))
            self._failures = 0  # the next loss is a new outage, reported again
        log.info("consuming %s", ", ".join(queue_name(q) for q in self.queues))
        while not self._stopped.is_set():
            conn.process_data_events(time_limit=0.1)
        conn.process_data_events(time_limit=0)  # send acks queued by other threads

    def _on_message(
        self, channel: BlockingChannel, method: Any, properties: Any, body: bytes
    ) -> None:
        try:
            wakeups = decode(body)
        except ValueError as exc:
            self.malformed += 1
            log.warning(
                "dropped a malformed message on %s: %s (body %r)",
                method.routing_key,
                exc,
                body[:200],
            )
            channel.basic_ack(method.delivery_tag)
            return
        tag = method.delivery_tag
        self._unacked[tag] = len(wakeups)
        for w in wakeups:
            self.on_wakeup(Wakeup(w.id, w.xid, tag, self.generation))

    def _close(self) -> None:
        conn, self._conn, self._channel = self._conn, None, None
        if conn is not None and conn.is_open:
            with contextlib.suppress(pika.exceptions.AMQPError, OSError):
                conn.close()


_local: dict[str, list[Callable[[Wakeup], None]]] = {}
_local_lock = threading.Lock()


def subscribe_local(queues: Sequence[str], on_wakeup: Callable[[Wakeup], None]) -> None:
    """Without a broker, hand this process's own wake-ups for ``queues`` to ``on_wakeup``:
    a worker in the enqueuing process starts a task at once instead of at its next poll."""
    with _local_lock:
        for queue in queues:
            _local.setdefault(queue, []).append(on_wakeup)


def unsubscribe_local(on_wakeup: Callable[[Wakeup], None]) -> None:
    with _local_lock:
        for callbacks in _local.values():
            while on_wakeup in callbacks:
                callbacks.remove(on_wakeup)


def deliver_local(queue: str, body: bytes) -> None:
    """Pass a wake-up to one of this process's subscribed workers, if any (round robin)."""
    with _local_lock:
        callbacks = _local.get(queue)
        if not callbacks:
            return
        callbacks.append(callbacks.pop(0))
        callback = callbacks[-1]
    for wakeup in decode(body):
        callback(wakeup)


@contextlib.contextmanager
def _admin(url: str) -> Iterator[BlockingConnection]:
    """One short blocking connection, failing fast with a BrokerError."""
    params = pika.URLParameters(url)
    params.connection_attempts = 1
    params.socket_timeout = 5
    try:
        conn = BlockingConnection(params)
        try:
            yield conn
        finally:
            if conn.is_open:
                conn.close()
    except (pika.exceptions.AMQPError, OSError) as exc:
        raise BrokerError(
            f"cannot connect to RabbitMQ at {redact(url)}: {_describe(exc, url)}"
        ) from None


def check(url: str, queues: Sequence[str] = ()) -> dict[str, int | None]:
    """Connect once: the ready messages of each queue (None: not declared yet).

    Raises BrokerError with a clear message if RabbitMQ is unreachable.
    """
    depths: dict[str, int | None] = {}
    with _admin(url) as conn:
        for queue in queues:
            channel = conn.channel()
            try:
                ok = channel.queue_declare(queue_name(queue), passive=True)
                depths[queue] = int(ok.method.message_count)
                channel.close()
            except pika.exceptions.ChannelClosedByBroker:
                depths[queue] = None
    return depths


def delete_queue(url: str, queue: str) -> None:
    """Delete a queue's RabbitMQ queue (the demo's, when it is done)."""
    with _admin(url) as conn:
        conn.channel().queue_delete(queue_name(queue))
