"""txqueue.testing on each store: the inline runner, the capture of what a block enqueued,
the clock, and the pytest plugin's fixtures in a pytest of their own."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from contextlib import closing
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest

import txqueue
from txqueue import Registry, Task, TaskContext
from txqueue.testing import Clock, TooManyTasksError, captured, run_tasks

from .helpers import connect, rows


@dataclass(frozen=True)
class Order:
    id: int
    total: Decimal


class Shop:
    """A registry whose tasks enqueue tasks, fail and retry, and say what they saw."""

    def __init__(self, queue: str) -> None:
        self.registry = registry = Registry()
        self.receipts: list[int] = []
        self.failures: list[txqueue.FailedTask] = []
        self.calls = 0
        registry.on_failed(self.failures.append)

        @registry.task(queue=queue, atomic=True, context=True)
        def place_order(ctx: TaskContext, order: Order) -> int:
            send_receipt.enqueue(ctx.conn, order_id=order.id)  # in the task's transaction
            return order.id

        @registry.task(queue=queue, max_attempts=3, backoff=60)
        def send_receipt(order_id: int) -> str:
            self.calls += 1
            if self.calls < 3:
                raise ConnectionError("the mail server is down")
            self.receipts.append(order_id)
            return f"receipt {order_id}"

        @registry.task(queue=queue, atomic=True, context=True)
        def again(ctx: TaskContext) -> None:
            self.again.enqueue(ctx.conn)

        self.place_order, self.send_receipt, self.again = place_order, send_receipt, again


def _enqueue(db_url: str, task: Task) -> None:
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        txqueue.enqueue(c, task)


def test_a_chain_of_tasks_runs_inline_with_its_retries_on_the_moved_clock(
    db_url: str, queue: str, clock: Clock
) -> None:
    shop = Shop(queue)
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        shop.place_order.enqueue(c, Order(7, Decimal("9.90")))
    start, began = clock.now(), time.monotonic()
    ran = run_tasks(shop.registry, db_url, clock=clock)
    assert [(r.name, r.attempt, r.state) for r in ran] == [
        ("place_order", 1, "succeeded"),
        ("send_receipt", 1, "pending"),  # a retry to come, after its backoff
        ("send_receipt", 2, "pending"),
        ("send_receipt", 3, "succeeded"),
    ]
    assert [r.result for r in ran] == [7, None, None, "receipt 7"]
    assert ran[1].error is not None and ran[1].error["message"] == "the mail server is down"
    assert shop.receipts == [7]
    # Backoff of 60 s, then 120 s, each jittered by at most half: the clock moved past
    # them, and the run took no such time.
    assert (clock.now() - start).total_seconds() >= 30 + 60
    assert time.monotonic() - began < 10
    assert run_tasks(shop.registry, db_url, clock=clock) == []  # nothing left


def test_without_a_clock_a_retry_waits_for_its_time(db_url: str, queue: str) -> None:
    shop = Shop(queue)
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        shop.send_receipt.enqueue(c, 5)
    ran = run_tasks(shop.registry, db_url)
    assert [(r.name, r.state) for r in ran] == [("send_receipt", "pending")]
    assert run_tasks(shop.registry, db_url) == []  # not ripe for another 30 s at least
    with closing(connect(db_url)) as c:
        assert txqueue.get_task(c, ran[0].id).state == "pending"


def test_the_clock_is_not_moved_for_tasks_the_registry_would_not_run(
    db_url: str, queue: str, clock: Clock
) -> None:
    shop = Shop(queue)
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        shop.send_receipt.options(queue="elsewhere", delay=60).enqueue(c, order_id=1)
        txqueue.enqueue(c, Task("unknown", {}, queue=queue, delay=60))
    start = clock.now()
    assert run_tasks(shop.registry, db_url, clock=clock) == []
    assert (clock.now() - start).total_seconds() < 30


def test_a_task_that_enqueues_itself_stops_at_the_limit(db_url: str, queue: str) -> None:
    shop = Shop(queue)
    with closing(connect(db_url)) as c, txqueue.transaction(c):
        shop.again.enqueue(c)
    with pytest.raises(TooManyTasksError, match="ran 5 attempts"):
        run_tasks(shop.registry, db_url, limit=5)


def test_arguments_that_do_not_fit_fail_for_good_at_once(db_url: str, queue: str) -> None:
    shop = Shop(queue)
    _enqueue(db_url, Task("send_receipt", {"order_id": "seven"}, queue=queue))
    [ran] = run_tasks(shop.registry, db_url)
    assert ran.state == "failed" and ran.attempt == 1
    assert ran.error is not None and "order_id" in ran.error["message"]
    assert [(f.name, f.reason) for f in shop.failures] == [
        ("send_receipt", "its arguments do not fit the handler")
    ]


def test_captured_sees_what_was_committed_and_nothing_rolled_back(db_url: str, queue: str) -> None:
    shop = Shop(queue)
    with captured(db_url) as enqueued, closing(connect(db_url)) as c, txqueue.transaction(c):
        shop.send_receipt.options(delay=60, priority=2).enqueue(c, order_id=7)
        shop.place_order.enqueue(c, order=Order(1, Decimal("1.50")))
    info = enqueued.assert_enqueued(shop.send_receipt, order_id=7)
    assert (info.queue, info.priority, info.payload) == (queue, 2, {"order_id": 7})
    assert (info.run_at - info.created_at).total_seconds() == pytest.approx(60, abs=1)
    enqueued.assert_enqueued(shop.place_order, Order(1, Decimal("1.50")))
    assert [t.name for t in enqueued] == ["send_receipt", "place_order"]
    with pytest.raises(AssertionError, match=r"found 0; enqueued: \[\('send_receipt'"):
        enqueued.assert_enqueued(shop.send_receipt, order_id=8)
    with pytest.raises(AssertionError, match="expected nothing enqueued"):
        enqueued.assert_nothing()

    with captured(db_url) as nothing, closing(connect(db_url)) as c:
        shop.send_receipt.enqueue(c, order_id=8)
        c.rollback()
    nothing.assert_nothing()


def test_given_a_connection_they_work_in_its_transaction(
    conn: Any, db_url: str, queue: str
) -> None:
    shop = Shop(queue)
    with captured(conn) as enqueued:
        shop.place_order.enqueue(conn, Order(3, Decimal("4.50")))
    enqueued.assert_enqueued(shop.place_order, Order(3, Decimal("4.50")))
    assert rows(db_url) == []  # not committed: no other connection sees it

    ran = run_tasks(shop.registry, conn)
    assert [(r.name, r.state) for r in ran] == [
        ("place_order", "succeeded"),
        ("send_receipt", "pending"),  # a retry to come
    ]
    conn.rollback()
    assert rows(db_url) == []  # the tasks and their outcomes went with the transaction


PLUGIN_TESTS = """
import sqlite3
from contextlib import closing

import psycopg

import txqueue
from txqueue.testing import run_tasks

registry = txqueue.Registry()


@registry.task()
def double(n: int) -> int:
    return 2 * n


def enqueue(url, n, delay):
    if url.startswith("sqlite:"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
    else:
        conn = psycopg.connect(url)
    with closing(conn), txqueue.transaction(conn):
        double.options(delay=delay).enqueue(conn, n=n)


def test_sqlite(txqueue_sqlite, txqueue_clock):
    enqueue(txqueue_sqlite, 21, delay=3600)
    assert run_tasks(registry, txqueue_sqlite) == []
    txqueue_clock.advance(3600)
    [ran] = run_tasks(registry, txqueue_sqlite)
    assert ran.result == 42


def test_postgres(txqueue_postgres, txqueue_clock):
    with open("database", "w") as f:
        f.write(txqueue_postgres.rsplit("/", 1)[1])
    enqueue(txqueue_postgres, 4, delay=3600)
    assert run_tasks(registry, txqueue_postgres) == []
    txqueue_clock.advance(3600)
    [ran] = run_tasks(registry, txqueue_postgres)
    assert ran.result == 8
"""


ROOT = Path(__file__).resolve().parents[2]


def _pytest(where: Path, server: str | None, ini: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TXQUEUE_TEST_DATABASE_URL"}
    if server:
        env["TXQUEUE_TEST_DATABASE_URL"] = server
    (where / "pytest.ini").write_text(f"[pytest]\n{ini}\n")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=where,
        env=env,
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )


def _exists(server: str, database: str) -> bool:
    with psycopg.connect(server) as c:
        found = c.execute("SELECT FROM pg_database WHERE datname = %s", (database,)).fetchone()
    return found is not None


def test_the_pytest_plugin_gives_scratch_databases_and_their_clock(
    tmp_path: Path, services: tuple[str, str]
) -> None:
    server = services[0]
    (tmp_path / "test_user.py").write_text(textwrap.dedent(PLUGIN_TESTS))

    run = _pytest(tmp_path, server)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "2 passed" in run.stdout
    assert not _exists(server, (tmp_path / "database").read_text())  # dropped after

    run = _pytest(tmp_path, None, ini=f"txqueue_postgres_url = {server}")
    assert run.returncode == 0, run.stdout + run.stderr

    run = _pytest(tmp_path, None)  # no server named: one clear line, no traceback
    assert run.returncode == 1
    assert "1 passed, 1 error" in run.stdout
    assert "txqueue_postgres needs a PostgreSQL server: set TXQUEUE_TEST_DATABASE_URL" in (
        run.stdout
    )
    assert "Traceback" not in run.stdout and "txqueue/testing/plugin.py" not in run.stdout
