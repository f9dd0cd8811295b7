"""Fixtures the integration modules share: ``run``, each test once through a worker's
handler threads and once through ``txqueue.testing.run_tasks``; ``woken``, the wake-ups
an application's enqueues send without a broker; ``shards``, several databases of one
fleet, and ``routed_queues``, a queue whose RabbitMQ queues of each are deleted after."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import closing

import pika
import pytest

import txqueue
from tests.conftest import fresh_database
from txqueue import Registry
from txqueue.outbox.wakeup import queue_name, routed
from txqueue.testing import run_tasks

from .kinds import Woken, no_broker

Run = Callable[[Registry, str], None]
NAMES = ("eu", "us", "ap")


def _by_worker(registry: Registry, db_url: str) -> None:
    txqueue.Worker(registry, database_url=db_url, amqp_url=None, concurrency=1).run(burst=True)


def _inline(registry: Registry, db_url: str) -> None:
    run_tasks(registry, db_url)


@pytest.fixture(params=[_by_worker, _inline], ids=["worker", "inline"])
def run(request: pytest.FixtureRequest) -> Run:
    fn: Run = request.param
    return fn


@pytest.fixture
def woken(queue: str, db: tuple[str, str]) -> Iterator[Woken]:
    """The wake-ups this process sends for ``queue`` without a broker, on the test's
    database (``db``: its kind and URL)."""
    with Woken(queue, db[1]) as heard, no_broker():
        yield heard


@pytest.fixture
def shards(services: tuple[str, str], template_db: str) -> Iterator[dict[str, str]]:
    """Three fresh databases of the schema, not named yet; dropped afterwards."""
    with contextlib.ExitStack() as stack:
        yield {n: stack.enter_context(fresh_database(services[0], template_db)) for n in NAMES}


@pytest.fixture
def routed_queues(services: tuple[str, str], queue: str) -> Iterator[str]:
    """``queue``, whose RabbitMQ queues of each database are deleted afterwards."""
    yield queue
    if not services[1].endswith(":1/"):
        params = pika.URLParameters(services[1])
        with closing(pika.BlockingConnection(params)) as conn:
            for name in NAMES:
                conn.channel().queue_delete(queue_name(routed(queue, name)))
