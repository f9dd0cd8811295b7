"""The worker's consumer: wake-ups from RabbitMQ handed to the claimer, acked once decided.

Its connection lives on the consumer's thread (pika is not thread-safe); ``ack`` from any
other thread goes through ``add_callback_threadsafe``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection

from .. import config
from ..outbox.wakeup import Wakeup, decode, queue_name
from ..redaction import redact
from .link import Nodes, describe, foreign_queue, queue_arguments, refused_login

log = logging.getLogger("txqueue.broker")

ACK_DELAY = 0.002


class Consumer:
    """Consumes ``txqueue.<queue>`` for each queue on one thread, reconnecting on failure.

    A message's decoded wake-ups go to ``on_wakeups`` in one call, on the consumer thread
    (which it holds up meanwhile); malformed messages are logged, acked and dropped here.
    ``ack`` may be called from any thread; a message is acked once all of its tasks are.
    A wake-up carries its connection's generation: an ack for an older connection is
    skipped, since RabbitMQ already requeued that message.
    """

    def __init__(
        self,
        url: str,
        queues: Sequence[str],
        *,
        prefetch: int,
        on_wakeups: Callable[[list[Wakeup]], None],
        queue_type: str | None = None,
    ) -> None:
        self.url = url
        self.queues = list(queues)
        self.prefetch = prefetch
        self.on_wakeups = on_wakeups
        self.queue_type = config.queue_type(queue_type)
        self._nodes = Nodes(url)
        self.node = self._nodes.urls[0]  # the one connected to, or last tried
        self.generation = 0
        self.malformed = 0
        self.outages = 0  # connections lost or refused, counted once per outage
        self._failures = 0  # connection attempts failed in a row
        self._conn: BlockingConnection | None = None
        self._channel: BlockingChannel | None = None
        # Delivery tag -> its wake-ups not decided yet; on the consumer thread only.
        self._unacked: dict[int, int] = {}
        self._stopped = threading.Event()
        self._ready = threading.Event()
        self._thread = 0  # the consumer thread's ident, once it runs

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

        if threading.get_ident() == self._thread:
            # A claim made on this thread (``on_wakeups``): acked a moment later, so that
            # the tasks it started get the interpreter first.
            conn.call_later(ACK_DELAY, send)
            return
        try:
            conn.add_callback_threadsafe(send)
        except Exception as exc:  # the connection is gone: RabbitMQ redelivers these
            log.debug("acks not sent, the connection closed: %s", exc)

    @property
    def up(self) -> bool:
        """Connected and consuming."""
        return self._ready.is_set()

    def wait_ready(self, timeout: float) -> bool:
        """Wait until the queues are declared and consumed (tests, benchmarks)."""
        return self._ready.wait(timeout)

    def stop(self) -> None:
        self._stopped.set()

    def run(self) -> None:
        """Consume until ``stop``; reconnect with backoff and jitter, logging once per outage."""
        self._thread = threading.get_ident()
        while not self._stopped.is_set():
            try:
                self._consume()
            except (pika.exceptions.AMQPError, OSError) as exc:
                refused = refused_login(exc, self.node)
                if refused is not None:  # no reconnect mends it: the worker gives up
                    raise refused from None
                if self._failures == 0:
                    self.outages += 1
                    log.warning(
                        "RabbitMQ connection lost or refused at %s (%s): polling the database "
                        "and reconnecting",
                        redact(self.node),
                        describe(exc, self.node),
                    )
                self._failures += 1
            finally:
                self._ready.clear()
                self._close()
            if not self._stopped.is_set():
                self._stopped.wait(self._nodes.delay(self._failures))

    def _consume(self) -> None:
        self.node, params = self._nodes.next()
        conn = BlockingConnection(params)
        self._conn = conn
        for queue in self.queues:
            self._declare(conn, queue_name(queue))
        channel = conn.channel()
        channel.basic_qos(prefetch_count=self.prefetch)
        self._unacked.clear()
        self.generation += 1
        self._channel = channel
        for queue in self.queues:
            channel.basic_consume(queue_name(queue), self._on_message)
        cancelled: list[str] = []
        channel.add_on_cancel_callback(lambda frame: cancelled.append(frame.method.consumer_tag))
        self._ready.set()
        if self._failures:
            log.warning("RabbitMQ reachable again at %s", redact(self.node))
            self._failures = 0  # the next loss is a new outage, reported again
        log.info("consuming %s", ", ".join(queue_name(q) for q in self.queues))
        while not self._stopped.is_set() and not cancelled:
            conn.process_data_events(time_limit=0.1)
        if cancelled:
            # A queue was deleted (to change its type, say): a new connection declares it.
            log.warning("RabbitMQ cancelled a consumer (its queue deleted?): consuming anew")
            return
        # Send the acks other threads queued, and those of this one's delayed by ACK_DELAY.
        conn.process_data_events(time_limit=2 * ACK_DELAY)

    def _declare(self, conn: BlockingConnection, name: str) -> None:
        """Declare on a channel of its own, which RabbitMQ closes if the queue exists with
        other arguments: that is explained, and the queue consumed as it is."""
        channel = conn.channel()
        arguments = queue_arguments(self.queue_type, conn._impl.server_properties)
        try:
            channel.queue_declare(name, durable=True, arguments=arguments)
        except pika.exceptions.ChannelClosedByBroker as exc:
            if foreign_queue(exc, self.queue_type) != name:
                raise
        else:
            channel.close()

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
        self.on_wakeups([Wakeup(w.id, w.xid, tag, self.generation, w.ripe) for w in wakeups])

    def _close(self) -> None:
        conn, self._conn, self._channel = self._conn, None, None
        if conn is not None and conn.is_open:
            try:
                conn.close()
            except (pika.exceptions.AMQPError, OSError) as exc:
                log.debug("closing the consumer's connection: %s", exc)
