"""Fixtures the integration modules share: ``run``, each test once through a worker's
handler threads and once through ``txqueue.testing.run_tasks``; ``woken``, the wake-ups
an application's enqueues send without a broker."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

import txqueue
from txqueue import Registry
from txqueue.testing import run_tasks

from .kinds import Woken, no_broker

Run = Callable[[Registry, str], None]


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
