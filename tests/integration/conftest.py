"""Fixtures the integration modules share: ``run``, each test once through a worker's
handler threads and once through ``txqueue.testing.run_tasks``."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import txqueue
from txqueue import Registry
from txqueue.testing import run_tasks

Run = Callable[[Registry, str], None]


def _by_worker(registry: Registry, db_url: str) -> None:
    txqueue.Worker(registry, database_url=db_url, amqp_url=None, concurrency=1).run(burst=True)


def _inline(registry: Registry, db_url: str) -> None:
    run_tasks(registry, db_url)


@pytest.fixture(params=[_by_worker, _inline], ids=["worker", "inline"])
def run(request: pytest.FixtureRequest) -> Run:
    fn: Run = request.param
    return fn
