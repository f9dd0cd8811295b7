"""Short administrative calls on RabbitMQ: queue depths for ``status`` and the cleaner,
and deleting a queue."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

import pika.exceptions
from pika.adapters.blocking_connection import BlockingConnection

from ..config import amqp_nodes
from ..errors import BrokerError
from ..outbox.wakeup import queue_name
from ..redaction import redact
from .link import describe, parameters, refused_login


@contextlib.contextmanager
def _admin(url: str) -> Iterator[BlockingConnection]:
    """One short blocking connection, to the first node of the URL that answers; failing
    fast with a BrokerError naming the last one tried."""
    nodes = amqp_nodes(url)
    for tried, node in enumerate(nodes, 1):
        try:
            conn = BlockingConnection(parameters(node, heartbeat=False))
            break
        except (pika.exceptions.AMQPError, OSError) as exc:
            refused = refused_login(exc, node)
            if refused is not None:  # a cluster's nodes share their users
                raise refused from None
            if tried == len(nodes):
                raise BrokerError(
                    f"cannot connect to RabbitMQ at {redact(node)}: {describe(exc, node)}"
                ) from None
    try:
        yield conn
    except (pika.exceptions.AMQPError, OSError) as exc:
        raise BrokerError(f"lost RabbitMQ at {redact(node)}: {describe(exc, node)}") from None
    finally:
        if conn.is_open:
            conn.close()


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
