"""Quorum queues (TXQUEUE_AMQP_QUEUE_TYPE=quorum) on the local RabbitMQ: declared as such,
carrying wake-ups, never giving one up to a delivery limit, and a queue of the other type
explained once and used as it is."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import closing

import pika
import pika.exceptions
import pytest

import txqueue
from txqueue import Task, broker, config
from txqueue.broker.link import queue_arguments
from txqueue.errors import ConfigError
from txqueue.outbox.wakeup import queue_name

from .helpers import connect, consumers, declared_as, running, wait_until


@pytest.fixture
def channel(amqp_url: str) -> Iterator[pika.adapters.blocking_connection.BlockingChannel]:
    conn = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        yield conn.channel()
    finally:
        conn.close()


@pytest.fixture
def quorum(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(config.QUEUE_TYPE_ENV, "quorum")


def test_quorum_queues_are_declared_quorum_and_wake_a_worker_at_once(
    pg_url: str, amqp_url: str, queue: str, quorum: None
) -> None:
    registry = txqueue.Registry()
    done: list[float] = []
    registry.task("stamp", queue=queue)(lambda payload: done.append(time.monotonic()))
    worker = txqueue.Worker(registry, database_url=pg_url, amqp_url=amqp_url, poll_interval=60)
    with running(worker):
        assert worker.wait_consuming(10)
        with closing(connect(pg_url)) as c, txqueue.transaction(c):
            txqueue.enqueue(c, Task("stamp", {}, queue=queue))
        committed = time.monotonic()
        wait_until(lambda: bool(done), timeout=10)
    assert done[0] - committed < 2.0  # the wake-up, not the 60 s poll
    assert declared_as(amqp_url, queue, {"x-queue-type": "quorum"})
    assert not declared_as(amqp_url, queue, {"x-queue-type": "classic"})


def test_a_wakeup_requeued_more_often_than_rabbitmq4s_default_limit_stays_queued(
    amqp_url: str,
    queue: str,
    quorum: None,
    channel: pika.adapters.blocking_connection.BlockingChannel,
) -> None:
    publisher = broker.publisher(amqp_url)
    publisher.publish(queue, b'{"id": "0190d3a0-0000-7000-8000-000000000000"}')
    assert broker.flush(10)
    name = queue_name(queue)
    for _ in range(25):  # RabbitMQ 4 drops a quorum queue's message after 20, by default
        method, properties, _body = channel.basic_get(name)
        assert method is not None, "the wake-up was dropped"
        channel.basic_reject(method.delivery_tag, requeue=True)
    method, properties, _body = channel.basic_get(name)
    assert method is not None, "the wake-up was dropped"
    assert properties.headers["x-delivery-count"] >= 25
    channel.basic_ack(method.delivery_tag)


def test_a_queue_of_the_other_type_is_explained_once_and_used_as_it_is(
    pg_url: str,
    amqp_url: str,
    queue: str,
    quorum: None,
    channel: pika.adapters.blocking_connection.BlockingChannel,
    caplog: pytest.LogCaptureFixture,
) -> None:
    channel.queue_declare(queue_name(queue), durable=True)  # classic, as txqueue made it before
    registry = txqueue.Registry()
    done: list[int] = []
    registry.task("count", queue=queue)(lambda payload: done.append(payload["i"]))
    worker = txqueue.Worker(registry, database_url=pg_url, amqp_url=amqp_url, poll_interval=60)
    with caplog.at_level(logging.ERROR, "txqueue.broker"), running(worker):
        assert worker.wait_consuming(10)
        for i in range(3):
            with closing(connect(pg_url)) as c, txqueue.transaction(c):
                txqueue.enqueue(c, Task("count", {"i": i}, queue=queue))
        wait_until(lambda: len(done) == 3, timeout=10)
        assert worker.state().broker_outages == 0
        assert declared_as(amqp_url, queue, {})  # still the classic queue it was

        # The way out: delete it, and the running worker declares it anew, as quorum.
        channel.queue_delete(queue_name(queue))
        wait_until(lambda: consumers(amqp_url, queue) > 0, timeout=15)  # a passive look
        assert declared_as(amqp_url, queue, {"x-queue-type": "quorum"})
        with closing(connect(pg_url)) as c, txqueue.transaction(c):
            txqueue.enqueue(c, Task("count", {"i": 3}, queue=queue))
        wait_until(lambda: len(done) == 4, timeout=10)
    explained = [r.getMessage() for r in caplog.records if "exists with another" in r.getMessage()]
    assert len(explained) == 1, explained
    assert f"queue {queue_name(queue)} exists with another x-queue-type" in explained[0]
    assert f"rabbitmqctl delete_queue {queue_name(queue)}" in explained[0]


def test_a_bad_queue_type_is_a_config_error_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(config.QUEUE_TYPE_ENV, "stream")
    with pytest.raises(ConfigError, match="TXQUEUE_AMQP_QUEUE_TYPE must be one of"):
        txqueue.Worker(
            txqueue.Registry(), queues=["q"], database_url="sqlite:///x.db", amqp_url="amqp://h/"
        )


@pytest.mark.parametrize(
    ("version", "limit"), [("3.13.7", None), (b"4.0.5", -1), ("4.2.0", -1), ("", None)]
)
def test_quorum_queues_lift_the_delivery_limit_where_rabbitmq_sets_one(
    version: str | bytes, limit: int | None
) -> None:
    arguments = queue_arguments("quorum", {"version": version})
    assert arguments.get("x-queue-type") == "quorum"
    assert arguments.get("x-delivery-limit") == limit
    assert queue_arguments("classic", {"version": version}) == {}
