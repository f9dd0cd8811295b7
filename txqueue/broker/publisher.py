"""The wake-up publisher: one per owner (the process-wide default, each ``txqueue.App``), on
its own thread, never blocking enqueue.

pika is not thread-safe, so its connection lives on the publisher's thread; other threads
hand work over through ``add_callback_threadsafe``.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

import pika
import pika.exceptions
from pika.adapters.select_connection import SelectConnection

from .. import config
from ..backoff import reconnect_delay
from ..outbox.wakeup import queue_name
from ..redaction import redact
from .link import Nodes, describe, foreign_queue, queue_arguments, refused_login

log = logging.getLogger("txqueue.broker")

BUFFER_LIMIT = 100_000
CONFIRM_TIMEOUT = 3.0
"""Seconds RabbitMQ may leave every wake-up in flight unconfirmed before the publisher takes
its connection for stuck and reconnects (to the next node of a cluster), sending them again.
A refusal (nack) reconnects at once: a channel that published to a quorum queue as the node
of its leader died refuses all it is sent until that node is back (RabbitMQ 3.10), where a
new connection publishes at once. A refused wake-up may have been queued all the same; a
duplicate costs a worker one lookup."""
PERSISTENT = pika.BasicProperties(delivery_mode=2, content_type="application/json")


class Publisher:
    """Sends wake-ups from a background thread with publisher confirms, never blocking callers.

    ``publish`` appends to a bounded buffer and returns. The thread keeps a connection
    open, publishes everything buffered, and forgets a message once RabbitMQ confirms it;
    what was in flight when a connection dropped is sent again on the next one.
    """

    def __init__(
        self,
        url: str,
        *,
        queue_type: str | None = None,
        limit: int = BUFFER_LIMIT,
        carry: Sequence[tuple[str, bytes]] = (),
    ) -> None:
        self.url = url
        self.limit = limit
        self.pid = os.getpid()
        self.confirmed = 0
        self.dropped = 0
        self._buffer: collections.deque[tuple[str, bytes]] = collections.deque(carry)
        self._unconfirmed: dict[int, tuple[str, bytes]] = {}
        self.queue_type = config.queue_type(queue_type)
        self._declared: set[str] = set()
        self._arguments: dict[str, Any] = {}
        # Queues that exist with other arguments than ours: published to, never declared.
        self._foreign: set[str] = set()
        self._lock = threading.Lock()
        self._drain_scheduled = False
        self._conn: SelectConnection | None = None
        self._channel: Any = None
        self._next_tag = 1
        self._progress = time.monotonic()  # the last ack, or the first publish since
        # Refused (nacked) by RabbitMQ: sent again on the next connection.
        self._refused: list[tuple[str, bytes]] = []
        self._renewing = False  # closing a working connection to open another
        self._renewals = 0  # connections renewed in a row, none lasting CONFIRM_TIMEOUT
        self._opened_at = 0.0  # when the current channel opened
        self._watched = 0  # the connection whose stall watch runs
        self._connections = 0
        self._failures = 0
        self._warned = False
        self._node = url  # the node connected to, or last tried
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="txqueue-publisher", daemon=True)
        self._thread.start()

    # --- any thread -----------------------------------------------------------------

    def serves(self, url: str, kind: str) -> bool:
        """Whether this publisher is the one for ``url`` and queue type ``kind`` here."""
        return self.url == url and self.queue_type == kind and self.pid == os.getpid()

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
        return [*self._unconfirmed.values(), *self._refused, *self._buffer]

    def idle(self) -> bool:
        return not self._buffer and not self._unconfirmed and not self._refused

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
            try:
                conn.ioloop.add_callback_threadsafe(self._close_connection)
            except Exception as exc:  # its loop already ended: nothing left to close
                log.debug("publisher already closed: %s", exc)
        self._thread.join(timeout)

    def _schedule_drain(self) -> None:
        with self._lock:
            if self._drain_scheduled or self._channel is None or self._conn is None:
                return
            self._drain_scheduled = True
            conn = self._conn
        try:
            conn.ioloop.add_callback_threadsafe(self._drain)
        except Exception as exc:  # the connection is going: the next one drains the buffer
            log.debug("drain not scheduled: %s", exc)
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
        nodes = Nodes(self.url)
        while not self._stopped.is_set():
            self._node, params = nodes.next()
            self._connections += 1
            self._conn = SelectConnection(
                params,
                on_open_callback=self._on_open,
                on_open_error_callback=self._on_failure,
                on_close_callback=self._on_failure,
            )
            try:
                self._conn.ioloop.start()
            except AssertionError as exc:
                if not self._stopped.is_set():
                    raise
                # pika 1.4 reports an attempt aborted in its AMQP handshake (our close) with
                # the exception's class, and then fails its own assertion: the end we asked for.
                log.debug("publisher closed while connecting: %s", exc)
            finally:
                with self._lock:
                    self._channel = None
                    self._drain_scheduled = False
                self._conn.ioloop.close()
            wait = nodes.delay(self._failures) if self._failures else 0.0
            if self._renewals:  # a pause that grows while every node refuses
                wait = max(wait, reconnect_delay(self._renewals, first=0.05, cap=15.0))
            if self._stopped.wait(wait):
                break

    def _on_open(self, conn: SelectConnection) -> None:
        self._arguments = queue_arguments(self.queue_type, conn.server_properties)
        conn.channel(on_open_callback=self._on_channel_open)

    def _on_channel_open(self, channel: Any) -> None:
        channel.add_on_close_callback(self._on_channel_closed)
        channel.confirm_delivery(self._on_confirm)
        if self._warned:
            log.warning("RabbitMQ reachable again at %s: sending wake-ups", redact(self._node))
        self._failures, self._warned = 0, False
        self._next_tag = 1
        self._declared = set(self._foreign)
        # Messages in flight on the lost connection go out again, before newer ones.
        self._buffer.extendleft(reversed([*self._unconfirmed.values(), *self._refused]))
        self._unconfirmed.clear()
        self._refused.clear()
        with self._lock:
            self._channel = channel
            self._drain_scheduled = True
        self._drain()
        self._opened_at = time.monotonic()
        if self._watched != self._connections:  # not again for a channel reopened
            self._watched = self._connections
            self._watch(self._connections)

    def _watch(self, number: int) -> None:
        """Every second while connection ``number`` is open: reconnect if RabbitMQ has
        accepted no wake-up in flight for CONFIRM_TIMEOUT; forget past renewals once a
        connection has lasted that long."""
        conn = self._conn
        if conn is None or number != self._connections or not conn.is_open:
            return
        if time.monotonic() - self._opened_at > CONFIRM_TIMEOUT:
            self._renewals = 0
        stalled = time.monotonic() - self._progress
        if self._unconfirmed and stalled > CONFIRM_TIMEOUT:
            self._renew(f"confirmed none of {len(self._unconfirmed)} wake-ups in {stalled:.0f}s")
            return
        conn.ioloop.call_later(1.0, lambda: self._watch(number))

    def _renew(self, why: str) -> None:
        """Close this working connection for another, sending what is in flight again."""
        if self._renewing or self._conn is None or not self._conn.is_open:
            return
        self._renewing = True
        if not self._renewals:
            log.warning("RabbitMQ at %s %s: reconnecting", redact(self._node), why)
        self._renewals += 1
        self._conn.close()

    def _on_channel_closed(self, channel: Any, reason: BaseException) -> None:
        if self._conn is None or not self._conn.is_open:
            return
        foreign = foreign_queue(reason, self.queue_type)
        if foreign is not None:
            self._foreign.add(foreign)
            # A new channel resends what was in flight on this one, that queue undeclared.
            self._conn.channel(on_open_callback=self._on_channel_open)
            return
        log.warning("RabbitMQ closed the publishing channel: %s", describe(reason, self._node))
        self._conn.close()  # a new connection resends what was in flight

    def _on_failure(self, conn: SelectConnection, reason: BaseException) -> None:
        if self._renewing:  # said so already; no outage (``flush`` waits on)
            self._renewing = False
            conn.ioloop.stop()
            return
        self._failures += 1
        if not self._stopped.is_set() and not self._warned:
            self._warned = True
            refused = refused_login(reason, self._node)
            if refused is not None:  # said once, as an outage is: an enqueue never fails on it
                log.error("%s; enqueue goes on, tasks run when workers poll", refused)
            else:
                log.warning(
                    "RabbitMQ unreachable at %s (%s): enqueue goes on, tasks run when workers poll",
                    redact(self._node),
                    describe(reason, self._node),
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
                channel.queue_declare(name, durable=True, arguments=self._arguments)
                self._declared.add(name)
            if not self._unconfirmed:  # busy from now
                self._progress = time.monotonic()
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
                self._refused.append(message)
            else:
                self.confirmed += 1
        if nacked:
            self._renew(f"refused {len(self._refused)} wake-ups")
        else:
            self._progress = time.monotonic()

    def _close_connection(self) -> None:
        conn = self._conn
        if conn is None or conn.is_closing:
            return  # its close ends in _on_failure, which stops the loop
        if not conn.is_closed:
            # Opening too: close() aborts the attempt, and pika closes its socket before
            # _on_failure stops the loop; stopping the loop here would leave that socket
            # to the garbage collector.
            conn.close()
        else:
            conn.ioloop.stop()
