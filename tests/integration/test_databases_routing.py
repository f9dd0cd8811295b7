"""How a task's wake-up finds its database's workers: the enqueue reads the name its
connection's database holds, once, and wakes that database's queue, from every kind of
connection; an unnamed database's tasks are left to the poll; the cleaner re-sends a lost
wake-up to its database's queue."""

from __future__ import annotations

import asyncio
import logging
from contextlib import closing

import pika
import pika.exceptions
import psycopg
import pytest

import txqueue
from tests.partition import RABBITMQ
from txqueue import App, Task, config
from txqueue.outbox import client
from txqueue.outbox.wakeup import queue_name, routed

from .helpers import running, wait_until
from .kinds import ASYNC_KINDS, KINDS, open_async_kind, open_kind
from .test_cli import listeners
from .test_databases import astray, enqueue_in, recording


@RABBITMQ
def test_an_enqueue_on_a_database_not_named_is_written_and_left_to_the_poll(
    shards: dict[str, str], services: tuple[str, str], queue: str, caplog: pytest.LogCaptureFixture
) -> None:
    """No wake-up goes to a queue no fleet consumes: the task waits for a worker's poll."""
    registry, ran = recording(queue)
    client._unnamed.clear()  # said once a process: here, said again
    caplog.set_level(logging.WARNING, logger="txqueue")
    with App(registry, databases={"eu": shards["eu"]}, amqp_url=services[1]) as app:
        enqueue_in(app, shards["eu"], queue, ["eu"])
        assert app.flush(5)
    assert any("has no name" in r.getMessage() for r in caplog.records)
    params = pika.URLParameters(services[1])
    with (
        closing(pika.BlockingConnection(params)) as conn,
        pytest.raises(pika.exceptions.ChannelClosedByBroker),
    ):
        conn.channel().queue_declare(queue_name(queue), passive=True)
    with psycopg.connect(shards["eu"]) as c:
        assert c.execute("SELECT count(*) FROM txqueue_tasks").fetchone() == (1,)
    txqueue.Worker(registry, database_url=shards["eu"], amqp_url=None).run(burst=True)
    assert ran == ["eu"]


@RABBITMQ
def test_the_module_level_enqueue_sync_and_async_wakes_its_databases_fleet(
    shards: dict[str, str],
    services: tuple[str, str],
    routed_queues: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With TXQUEUE_DATABASES set, ``txqueue.enqueue`` and ``enqueue_async`` read their
    connection's database name and wake its fleet (polls a minute apart)."""
    queue = routed_queues
    registry, ran = recording(queue)
    with App(registry, databases=shards, amqp_url=services[1]) as app:
        app.init()
        fleet = app.fleet(poll_interval=60)
    monkeypatch.setenv(config.DATABASES_ENV, " ".join(f"{n}={u}" for n, u in shards.items()))
    txqueue.configure(amqp_url=services[1])
    try:
        with running(fleet):
            with closing(psycopg.connect(shards["eu"])) as c, txqueue.transaction(c):
                txqueue.enqueue(c, Task("rec", "eu", queue=queue))

            async def enqueue_async() -> None:
                async with await psycopg.AsyncConnection.connect(shards["us"]) as c:
                    await txqueue.enqueue_async(c, Task("rec", "us", queue=queue))

            asyncio.run(enqueue_async())
            wait_until(lambda: sorted(ran) == ["eu", "us"], timeout=30)
    finally:
        txqueue.configure()
    assert fleet.stats["woken"] == 2 and astray(fleet) == {}


@RABBITMQ
def test_a_database_named_while_the_application_runs_is_woken_from_then_on(
    shards: dict[str, str],
    services: tuple[str, str],
    routed_queues: str,
) -> None:
    """No name is not kept: the first enqueue is left to the poll, the one after
    ``txqueue init`` named the database is woken, on the same connection."""
    queue = routed_queues
    registry, ran = recording(queue)
    eu = {"eu": shards["eu"]}
    with (
        App(registry, databases=eu, amqp_url=services[1]) as app,
        closing(psycopg.connect(shards["eu"])) as c,
    ):
        with txqueue.transaction(c):
            app.enqueue(c, Task("rec", "first", queue=queue))
        app.init()
        fleet = app.fleet(poll_interval=60)
        with running(fleet):
            # Half the poll interval: a loaded machine took over 10 s once.
            wait_until(lambda: "first" in ran, timeout=30)  # by the start's poll
            # Its listener's first poll (for what committed before it listened) would
            # claim the second before its wake-up came.
            wait_until(lambda: listeners(shards["eu"]) > 0, timeout=30)
            with txqueue.transaction(c):
                app.enqueue(c, Task("rec", "second", queue=queue))
            wait_until(lambda: "second" in ran, timeout=30)
    assert fleet.stats["woken"] == 1  # the second only
    assert app.databases == eu


def waiting_in(amqp_url: str, queue: str) -> int:
    """Messages ready in ``queue``'s RabbitMQ queue."""
    with closing(pika.BlockingConnection(pika.URLParameters(amqp_url))) as conn:
        return int(conn.channel().queue_declare(queue, passive=True).method.message_count)


@RABBITMQ
@pytest.mark.parametrize("kind", KINDS["postgres"])
def test_every_connection_kind_wakes_its_databases_queue(
    kind: str, pg_url: str, services: tuple[str, str], routed_queues: str
) -> None:
    queue = routed_queues
    with App(databases={"eu": pg_url}, amqp_url=services[1]) as app:
        app.init()
        with open_kind(kind, pg_url) as opened, opened.atomic():
            app.enqueue(opened.conn, Task("rec", queue=queue))
        assert app.flush(5)
    assert waiting_in(services[1], queue_name(routed(queue, "eu"))) == 1


@RABBITMQ
@pytest.mark.parametrize("kind", ASYNC_KINDS["postgres"])
def test_every_asyncio_connection_kind_wakes_its_databases_queue(
    kind: str, pg_url: str, services: tuple[str, str], routed_queues: str
) -> None:
    queue = routed_queues

    async def enqueue(app: App) -> None:
        async with open_async_kind(kind, pg_url) as opened, opened.atomic():
            await app.enqueue_async(opened.conn, Task("rec", queue=queue))

    with App(databases={"eu": pg_url}, amqp_url=services[1]) as app:
        app.init()
        asyncio.run(enqueue(app))
        assert app.flush(5)
    assert waiting_in(services[1], queue_name(routed(queue, "eu"))) == 1


@RABBITMQ
def test_the_cleaner_of_a_named_database_sends_a_lost_wake_up_to_its_queue(
    shards: dict[str, str], services: tuple[str, str], routed_queues: str
) -> None:
    queue = routed_queues
    with App(databases={"eu": shards["eu"]}, amqp_url=None) as app:
        app.init()
        enqueue_in(app, shards["eu"], queue, ["lost"])  # by NOTIFY: no message in RabbitMQ
    cleaner = txqueue.Cleaner(
        database_url=shards["eu"], database="eu", amqp_url=services[1], grace=0
    )
    assert cleaner.run_once().renotified == 1
    assert waiting_in(services[1], queue_name(routed(queue, "eu"))) == 1
