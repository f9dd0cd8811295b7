"""Short administrative calls on RabbitMQ: queue depths for ``status`` and the cleaner,
and deleting a queue."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import pika.exceptions
from pika.adapters.blocking_connection import BlockingConnection

from ..config import redact
from ..errors import BrokerError
from ..wakeup import queue_name
from .link import describe, parameters


@contextlib.contextmanager
def _admin(url: str) -> Iterator[BlockingConnection]:
    """One short blocking connection, failing fast with a BrokerError."""
    try:
        conn = BlockingConnection(parameters(url, heartbeat=False))
        try:
            yield conn
        finally:
            if conn.is_open:
                conn.close()
    except (pika.exceptions.AMQPError, OSError) as exc:
        raise BrokerError(
            f"cannot connect to RabbitMQ at {redact(url)}: {describe(exc, url)}"
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
