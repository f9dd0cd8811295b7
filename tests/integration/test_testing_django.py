"""txqueue.testing in Django's test cases, given Django's connection: in a ``TestCase``
(each test one transaction, rolled back after it) ``captured`` and ``run_tasks`` read and
run in the test's transaction; in a ``TransactionTestCase`` (committed, then emptied)
they work as on any connection.

Each test case runs under unittest inside the pytest test, which then looks at what Django
left in the database."""

from __future__ import annotations

import io
import unittest
from contextlib import closing

import pytest

from txqueue import TaskContext
from txqueue.errors import ConfigError
from txqueue.testing import Clock, captured, run_tasks

from .helpers import connect, rows
from .kinds import open_kind

TABLE = "CREATE TABLE shop_order (id integer PRIMARY KEY, receipt_sent boolean NOT NULL)"


def _shop_tests(base: str, alias: str, db_url: str, queue: str) -> type[unittest.TestCase]:
    """A shop's tests, on Django's database ``alias``: its tasks see the order the test
    made, committed or not."""
    from django import test
    from django.db import connections, transaction
    from django.utils.connection import ConnectionProxy

    from txqueue.contrib.django import Registry, database_url

    connection = ConnectionProxy(connections, alias)  # what django.db.connection is to "default"
    registry = Registry()

    @registry.task(queue=queue, atomic=True, context=True)
    def confirm(ctx: TaskContext, order: int) -> None:
        send_receipt.enqueue(ctx.conn, order=order)  # in the task's transaction

    @registry.task(queue=queue)
    def send_receipt(order: int) -> int:
        with connection.cursor() as cursor:
            cursor.execute("UPDATE shop_order SET receipt_sent = %s WHERE id = %s", [True, order])
            return int(cursor.rowcount)

    def place_order(order: int, fail: bool = False) -> None:  # the code under test
        with transaction.atomic(using=alias):
            with connection.cursor() as cursor:
                cursor.execute("INSERT INTO shop_order VALUES (%s, %s)", [order, False])
            confirm.enqueue(connection, order=order)
            transaction.set_rollback(fail, using=alias)

    class ShopTests(getattr(test, base)):  # type: ignore[misc]
        databases = frozenset({alias})

        def test_an_order_is_confirmed_and_its_receipt_sent(self) -> None:
            with captured(connection) as enqueued:
                place_order(7)
                place_order(8, fail=True)  # rolled back: nothing of it captured
            enqueued.assert_enqueued(confirm, order=7)
            self.assertEqual(len(enqueued), 1)

            ran = run_tasks(registry, connection)
            self.assertEqual(
                [(r.name, r.state, r.result) for r in ran],
                [("confirm", "succeeded", None), ("send_receipt", "succeeded", 1)],
            )
            with connection.cursor() as cursor:
                cursor.execute("SELECT id, receipt_sent FROM shop_order")
                self.assertEqual(cursor.fetchall(), [(7, True)])
            self.assertEqual(run_tasks(registry, connection), [])

        def test_a_delayed_task_runs_on_the_clock_where_time_moves(self) -> None:
            send_receipt.options(delay=60).enqueue(connection, order=9)
            self.assertEqual(run_tasks(registry, connection), [])  # not due yet
            url = database_url(alias)
            clock = Clock(url)
            try:
                if url.startswith("sqlite:"):  # the store's clock, this process's
                    [ran] = run_tasks(registry, connection, clock=clock)
                    self.assertEqual((ran.name, ran.state), ("send_receipt", "succeeded"))
                    return
                # This session's now() is not the clock installed after it began (and in a
                # TestCase it stands still at the transaction's start): refused, not a
                # run that never ends.
                with self.assertRaisesRegex(ConfigError, "time does not move"):
                    run_tasks(registry, connection, clock=clock)
                # A connection of its own sees the clock, and the task once committed.
                ran = run_tasks(registry, url, clock=clock)
                committed = [("send_receipt", "succeeded")] if base != "TestCase" else []
                self.assertEqual([(r.name, r.state) for r in ran], committed)
            finally:
                clock.reset()

    return ShopTests


@pytest.mark.parametrize("base", ["TestCase", "TransactionTestCase"])
def test_captured_and_run_tasks_take_djangos_connection_in_its_test_cases(
    base: str, db_url: str, queue: str
) -> None:
    kind = "django-sqlite" if db_url.startswith("sqlite:") else "django-psycopg"
    with open_kind(kind, db_url) as app:
        with app.conn.cursor() as cursor:
            cursor.execute(TABLE)  # committed: Django's autocommit
        out = io.StringIO()
        case = _shop_tests(base, app.conn.alias, db_url, queue)
        suite = unittest.defaultTestLoader.loadTestsFromTestCase(case)
        result = unittest.TextTestRunner(out, verbosity=2).run(suite)
    assert result.wasSuccessful() and result.testsRun == 2, out.getvalue()
    with closing(connect(db_url)) as c:
        orders = [tuple(r) for r in c.execute("SELECT id, receipt_sent FROM shop_order")]
    if base == "TestCase":  # the tasks, their outcomes and the order rolled back with the test
        assert rows(db_url) == [] and orders == []
    else:
        assert ("confirm", "succeeded") in [(r["name"], r["state"]) for r in rows(db_url)]
        assert orders == [(7, True)]
